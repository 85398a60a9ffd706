"""The Landlock fork server: commands start from a small interpreter, not from the host.

What is checked: the command really comes from the server (its supervisor is no child of ours);
the server's failures (never started, killed between commands, too large a request) fall back
to forking the host, and a launcher that was killed outright leaves no descendant behind; the
host that gives up before it holds the launcher leaves nothing running; working directory and
``exec`` failures raise as a spawn does.
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_plugins_builtin._sandbox import _confine, _forkclient, _forkserver, _landlock
from dsh_plugins_builtin._sandbox._confine import probe_backends, run_confined, scrub_env
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy
from tests.dsh_plugins_builtin.conftest import processes_with, tools_host, wait_gone


@pytest.fixture
def policy(ws: Path) -> SandboxPolicy:
    if probe_backends()["landlock-net"] is not None:
        pytest.skip("landlock unusable here")
    # The workspace its only writable root: with the host's /tmp writable too, a checkout there
    # (a CI clone in /tmp) would not be trusted to start the fork server from, rightly.
    return SandboxPolicy("workspace-write", ws, protected=(), writable_roots=(ws,))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_forkclient.ForkServer]:
    """A fork server of the test's own (the process's shared one is left alone)."""
    fresh = _forkclient.ForkServer()
    monkeypatch.setattr(_forkclient, "_shared", fresh)
    try:
        yield fresh
    finally:
        fresh.close()


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    raise AssertionError(f"no PPid for {pid}")


async def _supervisor_of_a_command(ws: Path, policy: SandboxPolicy) -> tuple[int, int]:
    """Run a command and find, from the host, its parent (the supervisor) and that parent's
    parent (the command is PID 1 of its own namespace: it cannot see them itself)."""
    marker = f"{2000 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    fifo = ws / f"started-{marker}"
    os.mkfifo(fifo)
    found: list[int] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            result = await run_confined(
                f"echo go > {fifo}; sleep {marker}",
                cwd=ws,
                policy=policy,
                backend="landlock",
                timeout=30,
            )
            assert found, result.output  # it ran until it was found, then was cancelled

        nursery.start_soon(run)
        with trio.fail_after(30):
            await trio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)
        left: list[int] = []
        with trio.fail_after(10):  # /proc may miss a process mid-fork: look again
            while not (left := processes_with(marker)):
                await trio.sleep(0.01)
        (command,) = [pid for pid in left if _parent_of(pid) not in left]
        supervisor = _parent_of(command)
        found += [supervisor, _parent_of(supervisor)]
        nursery.cancel_scope.cancel()
    fifo.unlink()
    return found[0], found[1]


async def test_commands_come_from_the_fork_server(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    supervisor, grandparent = await _supervisor_of_a_command(ws, policy)
    assert server.broken is None
    assert server._proc is not None
    assert grandparent == server._proc.pid != os.getpid()
    assert supervisor != os.getpid()


async def test_without_the_server_the_host_forks(
    ws: Path,
    policy: SandboxPolicy,
    server: _forkclient.ForkServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_forkclient.sys, "executable", "")
    _supervisor, grandparent = await _supervisor_of_a_command(ws, policy)
    assert server._proc is None  # no interpreter known, none trusted: never started
    assert grandparent == os.getpid()  # the supervisor is the host's own child
    touched = await run_confined(
        "touch /etc/dsh-must-not-exist 2>&1; echo $?",
        cwd=ws,
        policy=policy,
        backend="landlock",
        timeout=30,
    )
    assert touched.output.splitlines()[-1] == "1"  # still confined


async def test_no_server_is_started_from_an_interpreter_a_command_could_write(
    ws: Path,
    policy: SandboxPolicy,
    server: _forkclient.ForkServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server runs on the host, unconfined: one started from an interpreter in a writable
    root (a command could have replaced it) would run the command's code. The host forks
    instead (the server used to be started from it at the first command)."""
    marker = ws.parent / "interpreter-ran"
    fake = ws / "python"
    fake.write_text(f'#!/bin/sh\necho ran > "{marker}"\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(_forkclient.sys, "executable", str(fake))
    _supervisor, grandparent = await _supervisor_of_a_command(ws, policy)
    assert not marker.exists()
    assert server._proc is None
    assert grandparent == os.getpid()  # the supervisor is the host's own child


async def test_a_server_killed_between_commands_is_not_started_again(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """The host forks instead: a new server would import the package again, from files that
    may have changed since the host started."""
    await _supervisor_of_a_command(ws, policy)
    assert server._proc is not None
    server._proc.kill()
    server._proc.wait()
    for _ in range(2):  # the first call finds out, and forks the host
        _, grandparent = await _supervisor_of_a_command(ws, policy)
        assert grandparent == os.getpid()
    assert server.broken is not None
    assert "has exited" in server.broken


async def test_a_request_too_large_for_one_message_forks_the_host(
    ws: Path,
    policy: SandboxPolicy,
    server: _forkclient.ForkServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSH_TEST_BULK", "x" * (_forkserver.MAX_REQUEST + 1))
    monkeypatch.setattr(_confine, "command_env", lambda environ, *a, **kw: dict(environ))
    _, grandparent = await _supervisor_of_a_command(ws, policy)
    assert grandparent == os.getpid()
    assert server.broken is None
    monkeypatch.delenv("DSH_TEST_BULK")
    _, grandparent = await _supervisor_of_a_command(ws, policy)
    assert server._proc is not None
    assert grandparent == server._proc.pid


async def test_a_launcher_killed_outright_leaves_no_descendant(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """SIGKILL of the supervisor: the command dies with it, and its setsid'd children, orphaned
    to the server (a subreaper), are killed by the server."""
    marker = f"{2000 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    fifo = ws / "ppid"
    os.mkfifo(fifo)
    command = (
        f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & "
        f"while [ $(pgrep -f -c '^sleep {marker}') -lt 1 ]; do :; done; "
        f"echo go > {fifo}; exec sleep {marker}"
    )

    def read_fifo() -> int:
        fifo.read_text()
        left = processes_with(marker)
        (main,) = [pid for pid in left if _parent_of(pid) not in left]
        return _parent_of(main)  # the supervisor (the command is PID 1 of its own namespace)

    result = None
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            nonlocal result
            result = await run_confined(
                command, cwd=ws, policy=policy, backend="landlock", timeout=60
            )

        nursery.start_soon(run)
        supervisor = await trio.to_thread.run_sync(read_fifo)
        left = processes_with(marker)
        assert len(left) == 2
        os.kill(supervisor, signal.SIGKILL)
    try:
        await wait_gone(left, within=20)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
    assert result is not None
    assert result.signal == signal.SIGKILL


def _request(ws: Path, command: str, prepared: _landlock.Prepared) -> bytes:
    return json.dumps(
        {
            "argv": ["bash", "-c", command],
            "env": scrub_env(os.environ),
            "cwd": str(ws),
            "program": prepared.program_hex,
            "abi": prepared.abi,
        }
    ).encode()


@contextlib.contextmanager
def _raw_request(
    server: _forkclient.ForkServer, body: bytes, prepared: _landlock.Prepared
) -> Iterator[tuple[socket.socket, int]]:
    """Send the server one request by hand; yield the launcher's socket and the read end of
    the command's output (its write end is the server's and the launcher's only)."""
    assert server.start()
    assert server._ctl is not None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read_fd, write_fd = os.pipe()
    try:
        fds = array.array("i", (theirs.fileno(), write_fd, prepared.ruleset_fd))
        try:
            server._ctl.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        finally:
            theirs.close()
            os.close(write_fd)
        yield ours, read_fd
    finally:
        ours.close()
        os.close(read_fd)


async def test_a_host_that_gives_up_before_go_leaves_nothing_running(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    prepared = _confine._landlock_prepared((str(ws),), not policy.network)
    with _raw_request(server, _request(ws, "touch ran", prepared), prepared) as (ours, _):
        data, ancillary, _, _ = ours.recvmsg(_forkserver.RECORD.size, socket.CMSG_SPACE(4))
        assert _forkserver.RECORD.unpack(data)[0] == _forkserver.HELLO
        pidfd = array.array("i", ancillary[0][2])[0]
        # Gave up (no GO). Only the write side is shut, so a launcher that went on regardless
        # would run the command to its end and report it, not die on a broken socket.
        ours.shutdown(socket.SHUT_WR)
        await trio.lowlevel.wait_readable(pidfd)  # the launcher has exited
        os.close(pidfd)
    assert not (ws / "ran").exists()
    assert server.broken is None


async def test_a_missing_working_directory_raises_as_a_spawn_does(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    gone = ws / "gone"
    with pytest.raises(FileNotFoundError) as served:
        await run_confined("true", cwd=gone, policy=policy, backend="landlock", timeout=30)
    assert server._proc is not None
    assert server.broken is None
    _forkclient.ENABLED = False
    try:
        with pytest.raises(FileNotFoundError) as forked:
            await run_confined("true", cwd=gone, policy=policy, backend="landlock", timeout=30)
    finally:
        _forkclient.ENABLED = True
    assert served.value.errno == forked.value.errno == errno.ENOENT


async def test_a_program_that_cannot_be_executed_raises(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    prepared = _confine._landlock_prepared((str(ws),), not policy.network)
    read_fd, write_fd = os.pipe()
    try:
        with pytest.raises(FileNotFoundError):
            await server.spawn(
                [str(ws / "no-such-program")],
                env=scrub_env(os.environ),
                cwd=str(ws),
                prepared=prepared,
                stdout=write_fd,
            )
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert server.broken is None


async def test_the_server_exits_when_the_host_closes_it(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    await _supervisor_of_a_command(ws, policy)
    proc = server._proc
    assert proc is not None
    server.close()
    assert proc.returncode == 0


async def test_concurrent_commands_each_get_their_own_output_and_status(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    results: dict[int, _confine.ProcessResult] = {}

    async def one(i: int) -> None:
        results[i] = await run_confined(
            f"echo {i}; exit {i % 7}", cwd=ws, policy=policy, backend="landlock", timeout=60
        )

    async with trio.open_nursery() as nursery:
        for i in range(24):
            nursery.start_soon(one, i)
    assert {i: (r.output, r.exit_code) for i, r in results.items()} == {
        i: (f"{i}\n", i % 7) for i in range(24)
    }
    assert server.broken is None


async def test_the_server_is_started_with_the_sandbox_plugin(
    make_host: Any, ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """Landlock chosen at start: the server starts then, so no command waits for an interpreter."""
    assert server._proc is None
    tools_host(make_host, ws, backend="landlock", writable_roots=["."])
    assert server._proc is not None
    assert server.broken is None


@pytest.mark.parametrize(
    "command",
    ["echo a\x00b", "echo \ud800", "echo \udcff | od -An -tx1", 'printf %s "$ODD" | od -An -tx1'],
    ids=["nul", "lone-surrogate", "undecodable-byte", "undecodable-env"],
)
async def test_hostile_text_ends_as_it_does_when_the_host_forks(
    ws: Path,
    policy: SandboxPolicy,
    server: _forkclient.ForkServer,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """What a spawn refuses (NUL, a surrogate no encoding takes) is refused before the server
    sees it, with the spawn's own exception; undecodable bytes arrive as the bytes they were."""
    monkeypatch.setenv("ODD", "a\udcffb")
    outcomes = []
    for fork_server in (True, False):
        monkeypatch.setattr(_forkclient, "ENABLED", fork_server)
        try:
            result = await run_confined(
                command, cwd=ws, policy=policy, backend="landlock", timeout=30
            )
        except (ValueError, OSError) as exc:
            outcomes.append((type(exc), str(exc)))
        else:
            outcomes.append((result.output, result.exit_code))
    assert outcomes[0] == outcomes[1]
    assert server.broken is None


async def test_nothing_beside_the_package_shadows_the_standard_library(
    tmp_path: Path, ws: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``json.py`` planted next to the package (a virtual environment inside the workspace,
    say) is not what the unconfined server imports."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "dsh_plugins_builtin").symlink_to(Path(_forkserver.__file__).resolve().parents[1])
    marker = tmp_path / "planted-module-ran"
    for name in ("json", "socket", "select", "array", "ctypes", "signal"):
        (root / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    planted = _forkclient.ForkServer(root)
    monkeypatch.setattr(_forkclient, "_shared", planted)
    try:
        _, grandparent = await _supervisor_of_a_command(ws, policy)
        assert planted._proc is not None
        assert grandparent == planted._proc.pid
    finally:
        planted.close()
    assert not marker.exists()


async def test_a_launcher_that_cannot_set_up_says_so_and_runs_nothing(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """A request the launcher cannot use (here, not JSON) ends in FAILED_SETUP (after the
    server's HELLO for a spare launcher, before any GO): nothing was forked, so the host may
    fork the command itself."""
    prepared = _confine._landlock_prepared((str(ws),), not policy.network)
    with _raw_request(server, b"{not json", prepared) as (ours, read_fd):
        kinds = []
        while True:
            data, ancillary, _, _ = ours.recvmsg(_forkserver.RECORD.size, socket.CMSG_SPACE(4))
            for _level, _kind, fds in ancillary:  # HELLO's pidfd
                os.close(array.array("i", fds)[0])
            if not data:
                break
            kinds.append(_forkserver.RECORD.unpack(data)[0])
        assert kinds in ([_forkserver.FAILED_SETUP], [_forkserver.HELLO, _forkserver.FAILED_SETUP])
        assert os.read(read_fd, 64) == b""  # it wrote nothing where the command's output goes
    assert server.broken is None


@pytest.mark.parametrize("says", ["FAILED_SETUP", "nothing"])
async def test_a_launcher_that_ends_before_go_is_a_fork_not_a_failed_call(
    server: _forkclient.ForkServer, says: str
) -> None:
    """A spare launcher the server announced (HELLO) may fail its setup and exit before the
    host's GO reaches it: the GO then meets a closed socket (EPIPE). Nothing ran, so the call
    forks the command itself, instead of failing with ``BrokenPipeError`` (seen once in CI,
    a workspace in /dev/shm under Landlock, as nobody)."""
    stand_in = subprocess.Popen(["sleep", "60"])  # the launcher HELLO names (it is killed)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pidfd = os.pidfd_open(stand_in.pid)
    try:
        hello = _forkserver.RECORD.pack(_forkserver.HELLO, stand_in.pid)
        theirs.sendmsg([hello], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))])
        if says == "FAILED_SETUP":
            theirs.sendall(_forkserver.RECORD.pack(_forkserver.FAILED_SETUP, 0))
        theirs.close()  # gone before GO
        sock = trio.socket.from_stdlib_socket(ours)
        assert await server._handshake(sock, ["true"], "/") is None
        assert stand_in.wait(timeout=10) == -signal.SIGKILL
    finally:
        os.close(pidfd)
        ours.close()
        if stand_in.poll() is None:
            stand_in.kill()
            stand_in.wait()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
        return [int(child) for child in handle.read().split()]


async def test_the_launcher_is_forked_before_its_request(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """The server forks the next launcher ahead (its fork is then off the command's path): the
    launcher that answers a request is a child the server had before the request was sent, a
    new one is forked behind it, and none outlives the server."""
    assert server.start()
    assert server._proc is not None
    with trio.fail_after(30):  # the interpreter starts, then forks the spare
        while not (spares := _children(server._proc.pid)):
            await trio.sleep(0.01)
    prepared = _confine._landlock_prepared((str(ws),), not policy.network)
    with _raw_request(server, _request(ws, "true", prepared), prepared) as (ours, _):
        data, ancillary, _, _ = ours.recvmsg(_forkserver.RECORD.size, socket.CMSG_SPACE(4))
        kind, launcher = _forkserver.RECORD.unpack(data)
        assert (kind, [launcher]) == (_forkserver.HELLO, spares)
        os.close(array.array("i", ancillary[0][2])[0])
        ours.sendall(_forkserver.GO)
        records = [_forkserver.RECORD.unpack(ours.recv(_forkserver.RECORD.size)) for _ in "ab"]
        assert records == [(_forkserver.STARTED, 0), (_forkserver.STATUS, 0)]
    with trio.fail_after(30):
        while not (after := [pid for pid in _children(server._proc.pid) if pid != launcher]):
            await trio.sleep(0.01)
    server.close()
    await wait_gone(after)


def _status(pid: int, field: str) -> list[str]:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(line.split()[1:] for line in handle if line.startswith(f"{field}:"))


async def test_the_command_process_is_forked_ahead_in_its_own_namespaces(
    ws: Path, policy: SandboxPolicy, server: _forkclient.ForkServer
) -> None:
    """The spare launcher forks the command's process ahead too, already PID 1 of its own
    namespace; handed the request before HELLO, it confines itself while the host answers, runs
    the command only after the host's GO, and is gone with it."""
    assert server.start()
    assert server._proc is not None
    with trio.fail_after(30):
        while not (spares := _children(server._proc.pid)):
            await trio.sleep(0.01)
        while not (ahead := _children(spares[0])):
            await trio.sleep(0.01)
    (command,) = ahead
    assert _status(command, "NSpid") == [str(command), "1"]
    assert _status(command, "Seccomp") == ["0"]  # nothing known of the command yet
    prepared = _confine._landlock_prepared((str(ws),), not policy.network)
    body = _request(ws, "echo $$ > ran", prepared)
    with _raw_request(server, body, prepared) as (ours, _):
        data, ancillary, _, _ = ours.recvmsg(_forkserver.RECORD.size, socket.CMSG_SPACE(4))
        assert _forkserver.RECORD.unpack(data) == (_forkserver.HELLO, spares[0])
        os.close(array.array("i", ancillary[0][2])[0])
        with trio.fail_after(30):  # it confines itself meanwhile (seccomp last), and waits
            while _status(command, "Seccomp") != ["2"]:
                await trio.sleep(0.01)
        assert _status(command, "NoNewPrivs") == ["1"]
        assert not (ws / "ran").exists()
        ours.sendall(_forkserver.GO)
        records = [_forkserver.RECORD.unpack(ours.recv(_forkserver.RECORD.size)) for _ in "ab"]
        assert records == [(_forkserver.STARTED, 0), (_forkserver.STATUS, 0)]
    assert (ws / "ran").read_text() == "1\n"
    await wait_gone([command])
