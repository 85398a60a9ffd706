"""Process confinement: every escape is denied, proven by checking the host afterwards.

Each escape test runs once per backend ("bwrap", "landlock"). A backend the probe finds unusable
is skipped, except when ``CI=true``: then it fails loudly, so a CI image without bubblewrap (or
without Landlock) cannot pass silently.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dsh_plugins_builtin._sandbox import _backends, _confine, _forkclient, _landlock
from dsh_plugins_builtin._sandbox._confine import (
    SandboxUnavailable,
    confine_argv,
    probe_backends,
    run_confined,
    scrub_env,
    select_backend,
)
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy, writable_roots
from tests.dsh_plugins_builtin.conftest import processes_with, tools_host

CAP = 64_000


@pytest.fixture
def policy(ws: Path) -> SandboxPolicy:
    # No protected paths: Landlock refuses a policy with some (see test_escapes_process.py).
    return SandboxPolicy("workspace-write", ws, protected=())


@pytest.fixture
def outside_dir(policy: SandboxPolicy) -> Iterator[Path]:
    """A real host directory outside every default writable root (not under /tmp)."""
    for base in ("/var/tmp", str(Path.home())):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            path = Path(tempfile.mkdtemp(prefix="dsh-confine-", dir=base)).resolve()
            break
    else:
        pytest.skip("no writable directory outside /tmp for the $HOME test")
    try:
        roots = writable_roots(policy)
        if any(path == r or r in path.parents for r in roots):
            pytest.skip(f"{path} is inside a writable root {roots}")
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _marker() -> str:
    """A unique, valid ``sleep`` duration used to find our processes in /proc."""
    return f"{60 + int(uuid.uuid4().int % 10**6) / 10**7:.7f}"


async def _assert_gone(marker: str) -> None:
    """Bounded poll (a real process may need a moment to be reaped by its parent)."""
    deadline = trio.current_time() + 2.0
    while processes_with(marker) and trio.current_time() < deadline:
        await trio.sleep(0.02)
    assert processes_with(marker) == []


def _pending_connection(sock: trio.socket.SocketType) -> bool:
    """Whether a TCP connection is waiting in the listener's backlog (non-blocking, exact)."""
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        raw.setblocking(False)
        conn, _ = raw.accept()
    except BlockingIOError:
        return False
    finally:
        raw.close()
    conn.close()
    return True


def _pending_datagram(sock: trio.socket.SocketType) -> bool:
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        raw.setblocking(False)
        raw.recv(65536)
    except BlockingIOError:
        return False
    finally:
        raw.close()
    return True


async def _tcp_listener() -> trio.socket.SocketType:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


# --- escapes, per backend -------------------------------------------------------------------


async def test_write_to_etc_denied(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    target = Path(f"/etc/dsh-escape-{uuid.uuid4().hex}")
    result = await run_confined(
        f"echo pwned > {target}", cwd=ws, policy=policy, backend=backend, timeout=30
    )
    assert result.backend == backend
    assert result.exit_code not in (0, None)
    assert not target.exists()


async def test_write_to_home_denied(
    backend: str,
    ws: Path,
    policy: SandboxPolicy,
    outside_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(outside_dir))
    result = await run_confined(
        'echo pwned > "$HOME/escape.txt"; mkdir "$HOME/escape.d"',
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
    )
    assert result.exit_code not in (0, None)
    assert list(outside_dir.iterdir()) == []


async def test_write_to_dev_shm_denied(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    target = Path(f"/dev/shm/dsh-escape-{uuid.uuid4().hex}")
    await run_confined(f"echo pwned > {target}", cwd=ws, policy=policy, backend=backend, timeout=30)
    assert not target.exists()  # bwrap: a private /dev; Landlock: only /dev/null is writable


async def test_workspace_write_lands_inside(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    result = await run_confined(
        "echo ok > in.txt && mkdir -p a/b && echo deep > a/b/c.txt && cat in.txt",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
    )
    assert (result.exit_code, result.output) == (0, "ok\n")
    assert (ws / "in.txt").read_text() == "ok\n"
    assert (ws / "a/b/c.txt").read_text() == "deep\n"


async def test_read_only_mode_denies_workspace_writes(backend: str, ws: Path) -> None:
    (ws / "existing.txt").write_text("original")
    policy = SandboxPolicy("read-only", ws)
    result = await run_confined(
        "echo pwned > new.txt; echo pwned > existing.txt; mkdir newdir; cat existing.txt",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
    )
    assert "original" in result.output  # the tree stays readable
    assert sorted(p.name for p in ws.iterdir()) == ["existing.txt"]
    assert (ws / "existing.txt").read_text() == "original"


async def test_loopback_tcp_unreachable(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    listener = await _tcp_listener()
    with listener:
        port = listener.getsockname()[1]
        result = await run_confined(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED",
            cwd=ws,
            policy=policy,
            backend=backend,
            timeout=30,
        )
        assert "CONNECTED" not in result.output
        assert result.exit_code != 0
        assert not _pending_connection(listener)


async def test_loopback_udp_unreachable(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    receiver = trio.socket.socket(type=socket.SOCK_DGRAM)
    with receiver:
        await receiver.bind(("127.0.0.1", 0))
        port = receiver.getsockname()[1]
        await run_confined(
            f"echo leak > /dev/udp/127.0.0.1/{port}",
            cwd=ws,
            policy=policy,
            backend=backend,
            timeout=30,
        )
        assert not _pending_datagram(receiver)


async def test_network_true_reaches_loopback(backend: str, ws: Path) -> None:
    """The positive control: the listener check does detect a connection that happens."""
    policy = SandboxPolicy("workspace-write", ws, network=True, protected=())
    listener = await _tcp_listener()
    with listener:
        port = listener.getsockname()[1]
        result = await run_confined(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED",
            cwd=ws,
            policy=policy,
            backend=backend,
            timeout=30,
        )
        assert "CONNECTED" in result.output
        assert _pending_connection(listener)


async def test_env_secrets_scrubbed(
    backend: str, ws: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-secret-value-1")
    monkeypatch.setenv("github_token", "ghp-secret-value-2")
    monkeypatch.setenv("DSH_INTERNAL", "dsh-secret-value-3")
    monkeypatch.setenv("DB_PASSWORD", "secret-value-4")
    monkeypatch.setenv("KEEP_THIS_KEY", "allowed-value-5")
    result = await run_confined(
        "env; cat /proc/self/environ | tr '\\0' '\\n'",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
        env_allow=["KEEP_THIS_KEY"],
    )
    for secret in ("sk-secret-value-1", "ghp-secret-value-2", "dsh-secret-value-3"):
        assert secret not in result.output
    assert "secret-value-4" not in result.output
    assert "KEEP_THIS_KEY=allowed-value-5" in result.output
    for pair in ("NO_COLOR=1", "TERM=dumb", "PAGER=cat"):
        assert pair in result.output.splitlines()


async def test_background_process_does_not_outlive_the_call(
    backend: str, ws: Path, policy: SandboxPolicy
) -> None:
    marker = _marker()
    started = trio.current_time()
    result = await run_confined(
        f"(touch alive; sleep {marker}; touch late) & "
        "while [ ! -e alive ]; do :; done; echo started",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
    )
    assert trio.current_time() - started < 10  # did not wait for the sleeper
    assert (result.exit_code, result.output) == (0, "started\n")
    assert (ws / "alive").exists()  # the background child really ran
    await _assert_gone(marker)
    assert not (ws / "late").exists()


async def test_output_is_capped(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    result = await run_confined(
        "head -c 50000000 /dev/zero | tr '\\0' a",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=60,
        max_output_bytes=CAP,
    )
    assert result.exit_code == 0
    assert result.truncated
    assert result.total_bytes == 50_000_000
    assert len(result.output) <= CAP + 200
    assert result.output.startswith("a" * 1000)
    assert result.output.endswith("a" * 1000)
    assert "49936000 of 50000000 bytes omitted" in result.output


async def test_timeout_kills_the_group(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    marker = _marker()
    started = trio.current_time()
    result = await run_confined(
        f"sleep {marker} & sleep {marker}; touch late",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=0.5,
    )
    assert trio.current_time() - started < 10
    assert result.timed_out
    assert result.exit_code is None
    assert result.signal == 9
    await _assert_gone(marker)
    assert not (ws / "late").exists()


async def test_cancellation_kills_the_group(backend: str, ws: Path, policy: SandboxPolicy) -> None:
    marker = _marker()
    started = trio.current_time()
    with trio.move_on_after(0.5) as scope:
        await run_confined(
            f"sleep {marker} & sleep {marker}", cwd=ws, policy=policy, backend=backend, timeout=None
        )
    assert scope.cancelled_caught
    assert trio.current_time() - started < 10  # killed, not waited for
    await _assert_gone(marker)


async def test_stdin_is_dev_null_and_streams_interleave(
    backend: str, ws: Path, policy: SandboxPolicy
) -> None:
    result = await run_confined(
        "cat; echo out; echo err >&2; echo out2; exit 7",
        cwd=ws,
        policy=policy,
        backend=backend,
        timeout=30,
    )
    assert (result.exit_code, result.output) == (7, "out\nerr\nout2\n")
    assert not result.truncated
    assert result.total_bytes == len(result.output)


# --- unconfined and unavailable ---------------------------------------------------------------


async def test_danger_full_access_runs_unconfined(ws: Path, outside_dir: Path) -> None:
    policy = SandboxPolicy("danger-full-access", ws)
    listener = await _tcp_listener()
    with listener:
        port = listener.getsockname()[1]
        result = await run_confined(
            f"echo free > {outside_dir}/f.txt && exec 3<>/dev/tcp/127.0.0.1/{port} && echo ok",
            cwd=ws,
            policy=policy,
            timeout=30,
        )
        assert result.backend == "none"
        assert result.output == "ok\n"
        assert (outside_dir / "f.txt").read_text() == "free\n"
        assert _pending_connection(listener)


async def test_backend_none_refuses_confined_modes(ws: Path, policy: SandboxPolicy) -> None:
    with pytest.raises(SandboxUnavailable, match="refusing to run the command unconfined"):
        await run_confined("touch ran", cwd=ws, policy=policy, backend="none", timeout=30)
    assert not (ws / "ran").exists()


async def test_no_usable_backend_never_runs_unconfined(
    ws: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        _confine,
        "probe_backends",
        lambda bwrap=None: {
            "bwrap": "not installed",
            "landlock": "ENOSYS",
            "landlock-net": "ENOSYS",
        },
    )
    with pytest.raises(SandboxUnavailable) as info:
        await run_confined("touch ran", cwd=ws, policy=policy, timeout=30)
    assert info.value.mode == "workspace-write"
    assert info.value.reason == "bwrap: not installed; landlock: ENOSYS"
    assert not (ws / "ran").exists()


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "forking-the-host"])
async def test_setup_failure_in_the_child_raises(
    ws: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch, fork_server: bool
) -> None:
    """A child that cannot confine itself exits 125 with the prefix before the command runs."""
    if probe_backends()["landlock-net"] is not None:
        pytest.skip("landlock unusable here")
    monkeypatch.setattr(_forkclient, "ENABLED", fork_server)
    prepared = _confine._landlock_prepared((str(ws),), True)
    not_a_ruleset = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    broken = _landlock.Prepared(not_a_ruleset, prepared.program, prepared.abi)
    monkeypatch.setattr(_confine, "_landlock_prepared", lambda roots, net, plan=(): broken)
    try:
        with pytest.raises(
            SandboxUnavailable, match="landlock failed to confine: landlock-run: landlock_restrict"
        ):
            await run_confined("touch ran", cwd=ws, policy=policy, backend="landlock", timeout=30)
    finally:
        os.close(not_a_ruleset)
    assert not (ws / "ran").exists()
    # A command's own exit 125 without the prefix is an ordinary result.
    assert _confine._runner_failure("boom\n", 125, "landlock") is None
    assert _confine._runner_failure("bwrap: Can't chdir\n", 1, "bwrap") == "bwrap: Can't chdir"
    monkeypatch.undo()
    result = await run_confined("echo boom; exit 125", cwd=ws, policy=policy, timeout=30)
    assert result.exit_code == 125


# --- units --------------------------------------------------------------------------------------


def test_select_backend() -> None:
    ws = Path("/nonexistent-ws")
    strict = SandboxPolicy("workspace-write", ws, protected=())
    networked = SandboxPolicy("workspace-write", ws, network=True, protected=())
    all_ok = {"bwrap": None, "landlock": None, "landlock-net": None}
    old_abi = {"bwrap": "missing", "landlock": None, "landlock-net": "Landlock ABI 3"}
    assert select_backend(strict, "auto", all_ok) == "bwrap"
    assert select_backend(strict, "landlock", all_ok) == "landlock"
    assert select_backend(networked, "auto", old_abi) == "landlock"
    with pytest.raises(SandboxUnavailable, match="landlock: Landlock ABI 3"):
        select_backend(strict, "auto", old_abi)
    danger = SandboxPolicy("danger-full-access", ws)
    assert select_backend(danger, "auto", {}) == "none"
    assert select_backend(danger, "none", {}) == "none"
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        select_backend(strict, "chroot", all_ok)


def _at(argv: list[str], part: list[str]) -> int:
    return next(i for i in range(len(argv)) if argv[i : i + len(part)] == part)


def _follows(argv: list[str], first: list[str], then: list[str]) -> bool:
    """*first* and *then* both occur in *argv*, *then* after *first* (a mount over a mask)."""
    return _at(argv, first) < _at(argv, then)


def test_confine_argv_bwrap_shape(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    argv = confine_argv(
        ["bash", "-c", "cmd"], SandboxPolicy("workspace-write", ws), "bwrap", cwd=ws
    )
    assert argv[:6] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    shown = list(itertools.pairwise(argv))
    assert ("--tmpfs", "/dev/shm") in shown
    assert argv[argv.index("--proc") : argv.index("--proc") + 5] == [
        *("--proc", "/proc", "--ro-bind-try", "/proc/sys", "/proc/sys")  # the machine's settings
    ]
    assert ("--remount-ro", "/dev") in shown
    assert argv[-4:] == ["--", "bash", "-c", "cmd"]
    pairs = list(itertools.pairwise(argv))
    assert ("--tmpfs", "/tmp") not in pairs  # /tmp is a writable root here, not masked
    assert ("--tmpfs", "/run") in pairs  # host sockets in /run are out of view
    assert ("--bind", "/tmp") in pairs
    for flag in ("--unshare-all", "--unshare-user-try", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in argv
    assert "--seccomp" not in argv
    # A missing protected path gets a read-only tmpfs; an existing one a read-only bind.
    i = argv.index(str(ws / ".git"))
    assert argv[i - 1 : i + 3] == ["--tmpfs", str(ws / ".git"), "--remount-ro", str(ws / ".git")]
    assert argv[argv.index("--chdir") + 1] == str(ws)

    (ws / ".claude").mkdir()
    argv = confine_argv(["true"], SandboxPolicy("workspace-write", ws), "bwrap", seccomp_fd=7)
    i = argv.index(str(ws / ".claude")) - 1
    assert argv[i : i + 3] == ["--ro-bind", str(ws / ".claude"), str(ws / ".claude")]
    assert argv[argv.index("--seccomp") + 1] == "7"

    read_only = confine_argv(["true"], SandboxPolicy("read-only", ws), "bwrap", cwd=ws)
    assert "--bind" not in read_only
    assert _follows(read_only, ["--tmpfs", "/tmp"], ["--ro-bind", str(ws), str(ws)])

    ws_only = confine_argv(
        ["true"], SandboxPolicy("workspace-write", ws, writable_roots=(ws,), network=True), "bwrap"
    )
    assert "--share-net" in ws_only
    assert _follows(ws_only, ["--tmpfs", "/tmp"], ["--bind", str(ws), str(ws)])


def test_confine_argv_landlock_has_no_wrapper(tmp_path: Path) -> None:
    """Landlock confines in the child before exec: no runner, no interpreter per command."""
    policy = SandboxPolicy("workspace-write", tmp_path, protected=())
    assert confine_argv(["bash", "-c", "cmd"], policy, "landlock") == ["bash", "-c", "cmd"]


def test_confine_argv_danger_and_none(tmp_path: Path) -> None:
    danger = SandboxPolicy("danger-full-access", tmp_path)
    assert confine_argv(["bash", "-c", "x"], danger, "bwrap") == ["bash", "-c", "x"]
    with pytest.raises(SandboxUnavailable):
        confine_argv(["true"], SandboxPolicy("read-only", tmp_path), "none")


def test_scrub_env() -> None:
    env = scrub_env(
        {
            "PATH": "/bin",
            "HOME": "/home/u",
            "OPENAI_API_KEY": "x",
            "gh_token": "x",
            "Client_Secret": "x",
            "PGPASSWORD": "x",
            "dsh_session": "x",
            "DSH_HOME": "x",
            "KEYBOARD": "x",  # the heuristic is by name: this goes too
            "PASSPHRASE": "kept",  # ... and this one stays (a documented gap)
            "TERM": "xterm-256color",
            "AWS_ACCESS_KEY_ID": "allowed",
        },
        allow=["AWS_ACCESS_KEY_ID"],
    )
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "PASSPHRASE": "kept",
        "AWS_ACCESS_KEY_ID": "allowed",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
    }


def test_probe_reports_every_backend_and_is_cached() -> None:
    first = probe_backends()
    assert set(first) == {"bwrap", "landlock", "landlock-net"}
    assert all(v is None or isinstance(v, str) for v in first.values())

    def no_second_probe(*args: object, **kwargs: object) -> None:
        raise AssertionError("probed twice")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_backends, "_probe_run", no_second_probe)
        assert probe_backends() == first


def test_landlock_below_abi_3_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TRUNCATE right below ABI 3, no TCP rules below 4: refused, never a partial sandbox."""
    monkeypatch.setattr(_landlock, "landlock_abi", lambda: 2)
    with pytest.raises(_landlock.LandlockUnavailable, match="cannot stop truncating"):
        _landlock.prepare(["/tmp"], block_network=False)
    monkeypatch.setattr(_landlock, "landlock_abi", lambda: 3)
    with pytest.raises(_landlock.LandlockUnavailable, match="cannot restrict the network"):
        _landlock.prepare(["/tmp"], block_network=True)


def test_protected_paths_outside_the_writable_roots_are_not_bound(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = SandboxPolicy("workspace-write", ws, writable_roots=(ws,), protected=("/etc", ".git"))
    argv = confine_argv(["true"], policy, "bwrap")
    assert "/etc" not in argv  # read-only already: no mount point is made for it
    assert str(ws / ".git") in argv


async def test_landlock_is_prepared_once_at_start(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if probe_backends()["landlock-net"] is not None:
        pytest.skip("landlock unusable here")
    calls: list[tuple[str, ...]] = []
    real = _landlock.prepare

    def counting(writable: Any, *, block_network: bool, plan: Any = ()) -> _landlock.Prepared:
        calls.append(tuple(writable))
        return real(writable, block_network=block_network, plan=plan)

    monkeypatch.setattr(_landlock, "prepare", counting)
    _confine._landlock_prepared.cache_clear()
    host = tools_host(make_host, ws, backend="landlock", writable_roots=["."])
    assert len(calls) == 1  # built by dsh_host_started, before any command
    assert calls[0] == (str(ws),)
    for _ in range(2):
        result = await host.call("bash", {"command": "echo ok > f"})
        assert not result.is_error
    assert len(calls) == 1


async def test_a_probed_machine_costs_no_thread_hop_per_command(
    backend: str, ws: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run_confined("true", cwd=ws, policy=policy, backend=backend, timeout=30)
    real = trio.to_thread.run_sync

    async def no_probe_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
        assert function is not _confine.probe_backends, "a thread for a probe already made"
        return await real(function, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", no_probe_thread)
    result = await run_confined("echo ok", cwd=ws, policy=policy, backend=backend, timeout=30)
    assert result.output == "ok\n"


def test_mount_points_are_removed_through_no_symlink(tmp_path: Path) -> None:
    """A command swapped a parent of a mount point for a symlink: the removal after it must not
    follow it to an empty directory of the same name elsewhere."""
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deeper" / "thing").mkdir(parents=True)  # what the swap aims at
    points = _confine._MountPoints()
    path = ws / "sub" / "deeper" / "thing"
    taken = points.take([path])
    assert taken.over == {path}
    path.mkdir(parents=True)  # what bwrap makes
    (ws / "sub").rename(ws / "moved")  # the command's swap
    (ws / "sub").symlink_to(elsewhere)
    points.give_back(taken)
    assert points.settle(timeout=30)
    assert (elsewhere / "deeper" / "thing").is_dir()  # not followed
    assert (ws / "moved" / "deeper" / "thing").is_dir()  # left as it is: cannot be reached
    control = ws / "sub2" / "thing"
    taken = points.take([control])
    assert taken.over == {control}
    control.mkdir(parents=True)
    points.give_back(taken)
    assert points.settle(timeout=30)
    assert sorted(os.listdir(ws)) == ["moved", "sub"]  # sub2 and sub2/thing removed


async def test_a_namespace_still_alive_after_the_grace_is_said_not_hidden(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 22 row 5: "killed" only when verified. A PID namespace whose init outlives the
    grace is reported as possibly still running, never as killed."""
    from dsh_plugins_builtin._sandbox import _pidns, _run

    alive = subprocess.Popen(["sleep", "600"])
    namespace = _pidns.Namespace()
    try:
        namespace.known.set()
        namespace.pidfd = os.pidfd_open(alive.pid)
        assert await namespace.wait_gone() is False
    finally:
        namespace.close()
        alive.kill()
        alive.wait()
    out = _run.Output(100)
    out.feed(b"partial\n")
    out.notes.append("[sandbox: some of its processes may still be running]")
    assert out.text() == "partial\n[sandbox: some of its processes may still be running]\n"


async def test_a_namespace_whose_limits_cannot_be_set_never_goes_on() -> None:
    """bwrap's first process waits on ``--block-fd`` for its limits; when the host cannot set
    them (bwrap named no process), it is stopped, told nothing, and the output says why."""
    import resource

    from dsh_plugins_builtin._sandbox import _pidns, _run

    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    os.write(info_w, b'{"no-child-pid": 1}')
    os.close(info_w)
    stopped = []

    async def stop() -> None:
        stopped.append(True)

    out = _run.Output(100)
    namespace = _pidns.Namespace((block_w, ((resource.RLIMIT_AS, 1 << 30),)))
    try:
        await namespace.watch(info_r, stop, out)
        assert stopped == [True]
        assert "the command was not run: its limits were not set" in out.text()
        assert os.read(block_r, 1) == b""  # closed, never written: the command never ran
    finally:
        namespace.close()
        os.close(block_r)


@pytest.mark.parametrize("mode", ["workspace-write", "danger-full-access"])
async def test_a_command_starts_without_a_thread_hop(
    backend: str, ws: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: a bwrap or unconfined command is spawned on the event loop's thread (``vfork``
    returns at ``exec``), a Landlock one through the fork server; only the fallback that forks
    the host with a preexec hook goes to a worker thread. (The workspace its only writable
    root: with the host's /tmp writable, a checkout there would not be trusted to start the
    fork server from.)"""
    policy = SandboxPolicy(mode, ws, protected=(), writable_roots=(ws,))
    await run_confined("true", cwd=ws, policy=policy, backend=backend, timeout=30)  # probed
    forking_host = (
        backend == "landlock" and not _forkclient.ENABLED and mode != "danger-full-access"
    )
    hops: list[Any] = []
    real = trio.to_thread.run_sync

    async def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(function)
        return await real(function, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    result = await run_confined("echo ok", cwd=ws, policy=policy, backend=backend, timeout=30)
    assert result.output == "ok\n"
    assert bool(hops) == forking_host, hops


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)
async def test_the_view_is_computed_once_per_policy_what_exists_at_each_command(
    backend: str, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: the mount layout (hidden directories, binds, protected and denied paths) is
    path arithmetic done at a policy's first command, not at every one; whether a
    ``deny_read`` entry exists is still looked at per command, so one made later is hidden."""
    from dsh_plugins_builtin._sandbox import _layout

    secret = ws / "keys"
    policy = SandboxPolicy("workspace-write", ws, protected=(), deny_read=(secret,))
    computed: list[SandboxPolicy] = []
    real = _layout.masked_dirs

    def counting(policy: SandboxPolicy) -> Any:
        computed.append(policy)
        return real(policy)

    monkeypatch.setattr(_layout, "masked_dirs", counting)
    await run_confined("true", cwd=ws, policy=policy, backend=backend, timeout=30)
    secret.mkdir()
    (secret / "id").write_text("SECRET-KEY")
    result = await run_confined(
        "cat keys/id; echo", cwd=ws, policy=policy, backend=backend, timeout=30
    )
    assert "SECRET-KEY" not in result.output
    assert computed == [policy]


def test_the_environment_filter_runs_again_only_when_something_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 27: the same table over the same environment gives the answer it gave, without
    matching every name again; a changed variable, table or TMPDIR is filtered anew."""
    from dsh_plugins_builtin._sandbox import _env

    filtered: list[str] = []
    real = _env._inherited

    def counting(name: str, *args: Any) -> bool:
        filtered.append(name)
        return bool(real(name, *args))

    monkeypatch.setattr(_env, "_inherited", counting)
    config = _env.EnvConfig(include=("MEMO_TEST_*",))
    environ = {"PATH": "/bin", "MEMO_TEST_A": "1"}
    first = _env.command_env(environ, config, tmpdir="/tmp")
    filtered.clear()
    again = _env.command_env(environ, config, tmpdir="/tmp")
    assert again == first
    assert again is not first
    assert filtered == []
    again["PATH"] = "changed by a caller"  # a copy: the next answer is not affected
    environ["MEMO_TEST_B"] = "2"
    changed = _env.command_env(environ, config, tmpdir="/tmp")
    assert changed["PATH"] == "/bin"
    assert changed["MEMO_TEST_B"] == "2"
    assert filtered
    filtered.clear()
    assert _env.command_env(environ, config, tmpdir=None).get("TMPDIR") is None
    assert filtered
    filtered.clear()
    _env.scrub_env(environ)  # the probes' table: one table, so memoised as well
    filtered.clear()
    assert _env.scrub_env(environ) == _env.scrub_env(environ)
    assert filtered == []


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)
async def test_a_socket_directory_made_after_the_first_command_is_hidden_from_the_next(
    backend: str, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 row 1 with the view computed once (issue 27): ``$XDG_RUNTIME_DIR`` did not exist
    at the policy's first command; once it does, the next command does not see into it."""
    base = Path(tempfile.mkdtemp(prefix="dsh-xdg-", dir=Path.home())).resolve()
    try:
        runtime = base / "run-user"
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        policy = SandboxPolicy("workspace-write", ws, protected=())
        first = await run_confined(
            f"ls {runtime} || echo missing", cwd=ws, policy=policy, backend=backend, timeout=30
        )
        assert "missing" in first.output
        runtime.mkdir()
        (runtime / "agent.sock").write_text("HOST-SOCKET")
        result = await run_confined(
            f"cat {runtime}/agent.sock; echo", cwd=ws, policy=policy, backend=backend, timeout=30
        )
        assert "HOST-SOCKET" not in result.output
    finally:
        shutil.rmtree(base, ignore_errors=True)
