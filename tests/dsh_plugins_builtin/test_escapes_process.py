"""Escapes from a ``bash`` call, one test per row of issue 8's table that is about processes.

Every test goes through the whole pipeline (``host.call("bash", ...)``), once per backend
(``bwrap`` and ``landlock``; with ``CI=true`` a backend that does not work fails instead of
skipping), and checks on the host that nothing was written or reached; each has its control (the
same command, aimed inside the workspace or run unconfined, does its thing, so the check can
fail). Tests touch only what they created: directories under ``tmp_path``, a pseudo-terminal
they opened, a process they started. `test_escapes_unprivileged.py` runs this module again as an
unprivileged user.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import tty
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dsh_host import ConfigError, Host, find_config
from dsh_plugins_builtin._sandbox import _starting
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import patch_probes, processes_with

ZERO_CAPS = "0000000000000000"


def escape_host(make_host: Any, ws: Path, backend: str, **sandbox: Any) -> Host:
    """Only the workspace is writable; Landlock gets no protected paths (it refuses them)."""
    sandbox.setdefault("writable_roots", ["."])
    if backend == "landlock":
        sandbox.setdefault("protected", [])
        sandbox.setdefault("protect_config", False)
    table = {"backend": backend, **sandbox}
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": table}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    return host


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory the test owns, outside every writable root of `escape_host`."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


async def bash(host: Host, command: str) -> Any:
    result = await host.call("bash", {"command": command, "timeout_ms": 60_000})
    assert not result.is_error, result.text
    return result


# -- row 1: remount / writable, then write anywhere ----------------------------------------------


@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
async def test_row1_remount_root_rw(
    make_host: Any, ws: Path, backend: str, outside: Path, mode: str
) -> None:
    host = escape_host(make_host, ws, backend, mode=mode)
    result = await bash(
        host,
        f"grep CapEff /proc/self/status; mount -o remount,rw,bind / ; mount -o remount,rw / ; "
        f"mount -t tmpfs none {outside} ; echo pwned > {outside}/x ; echo ok > control",
    )
    assert f"CapEff:\t{ZERO_CAPS}" in result.text
    assert not (outside / "x").exists()
    assert (ws / "control").exists() == (mode == "workspace-write")  # the control


@pytest.fixture
def ws_outside_tmp(tmp_path: Path) -> Iterator[Path]:
    """A workspace outside ``/tmp`` where one can be made (``/var/lib``), else in *tmp_path*:
    a kept view is made for a workspace outside the ``/tmp`` commands see privately."""
    base = Path("/var/lib") if os.access("/var/lib", os.W_OK) else tmp_path
    path = Path(tempfile.mkdtemp(prefix="dsh-escapes-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_row1_no_capability_in_any_set(
    make_host: Any, ws_outside_tmp: Path, backend: str
) -> None:
    """Every capability set of the command is empty, the bounding set too, whichever way it was
    started (a command forked ahead empties its bounding set before its request comes): none
    can be used, nor gained by an ``exec``. Run twice, so that the second command is one forked
    ahead, in a kept view too. (An ordinary user's bounding set cannot shrink outside a user
    namespace of its own, and needs not: no capability can be gained with no_new_privs.)"""
    host = escape_host(make_host, ws_outside_tmp, backend)
    for _ in range(2):
        text = (await bash(host, "grep ^Cap /proc/self/status")).text
        sets = dict(line.split(":\t") for line in text.splitlines() if line.startswith("Cap"))
        assert sets.keys() == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, text
        for name, value in sets.items():
            if name != "CapBnd" or os.geteuid() == 0:
                assert value.strip() == ZERO_CAPS, text


# -- row 2: unmount /proc, enter the host's namespaces, read a host process's environment -------


@pytest.fixture
def host_process() -> Iterator[tuple[int, str]]:
    """A process of ours outside the sandbox, with a secret in its environment."""
    secret = f"row2-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, "ROW2_SECRET_VALUE": secret},
    )
    try:
        yield proc.pid, secret
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()


async def test_row2_proc_unmount_and_nsenter(
    make_host: Any, ws: Path, backend: str, host_process: tuple[int, str]
) -> None:
    pid, secret = host_process
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    host = escape_host(make_host, ws, backend)
    result = await bash(
        host,
        f"umount -l /proc; umount /proc; cat /proc/{pid}/environ; "
        f"nsenter --net=/proc/{pid}/ns/net --mount=/proc/{pid}/ns/mnt true && echo entered; "
        f"nsenter -t {pid} -n true && echo entered; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected; ls /proc/{pid}/ >/dev/null",
    )
    assert secret not in result.text
    assert "entered" not in result.text
    assert "connected" not in result.text
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing connected
    listener.close()
    # Control: unconfined, the same read finds the secret.
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert secret.encode() in environ


# -- row 3: mknod a block device in the workspace ------------------------------------------------


async def test_row3_mknod_device(make_host: Any, ws: Path, backend: str) -> None:
    host = escape_host(make_host, ws, backend)
    result = await bash(
        host, "mknod blk b 7 0; mknod chr c 1 3; mkfifo fifo && echo fifo-made; echo ok > control"
    )
    assert not (ws / "blk").exists()
    assert not (ws / "chr").exists()
    assert "fifo-made" in result.text
    assert stat.S_ISFIFO((ws / "fifo").stat().st_mode)
    assert (ws / "control").exists()


# -- row 4: TIOCSTI into a terminal --------------------------------------------------------------

_INJECT = (
    "import fcntl, os, sys, termios; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NOCTTY); "
    "[fcntl.ioctl(fd, termios.TIOCSTI, c) for c in (b'i', b'd', b'\\n')]; print('injected')"
)


def _pending(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 100)
    except BlockingIOError:
        return b""


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int, str]]:
    """A pseudo-terminal the test opened (never a real terminal), raw so reads need no newline."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        yield master, slave, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


async def test_row4_tiocsti(
    make_host: Any, ws: Path, backend: str, pty_pair: tuple[int, int, str]
) -> None:
    _, slave, path = pty_pair
    host = escape_host(make_host, ws, backend)
    result = await bash(host, f"python3 -c {_quote(_INJECT)} {path}; echo ok > control")
    assert "injected" not in result.text
    assert _pending(slave) == b""
    assert (ws / "control").exists()
    if os.geteuid() == 0:  # Control: root unconfined can inject, so the check can see it.
        done = subprocess.run(
            [sys.executable, "-c", _INJECT, path], capture_output=True, check=False
        )
        if done.returncode == 0:
            assert _pending(slave) == b"id\n"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- row 8: a bwrap planted in a PATH directory inside the workspace -----------------------------


def _plant(ws: Path) -> tuple[Path, Path]:
    bindir = ws / ".venv" / "bin"
    bindir.mkdir(parents=True)
    marker = ws.parent / "planted-ran"
    fake = bindir / "bwrap"
    fake.write_text(
        f'#!/bin/sh\necho planted > "{marker}"\nwhile [ "$1" != -- ]; do shift; done\n'
        'shift\nexec "$@"\n'
    )
    fake.chmod(0o755)
    return fake, marker


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)  # row 8 is about bwrap only
async def test_row8_planted_bwrap(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, marker = _plant(ws)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    host = escape_host(make_host, ws, backend)
    result = await bash(host, f"touch {ws.parent}/outside-write; echo ok > control")
    assert not marker.exists()
    assert not (ws.parent / "outside-write").exists()
    assert (result.meta["backend"], result.meta["confined"]) == ("bwrap", True)
    plugin = host.pm.get_plugin("sandbox")
    assert isinstance(plugin, SandboxPlugin)
    assert plugin.bwrap[0] is not None
    assert not plugin.bwrap[0].startswith(str(ws))
    assert "skipped" in plugin.bwrap[1]
    assert str(fake) in plugin.bwrap[1]
    # Control: the planted file does run when executed, so the marker check can fail.
    subprocess.run([str(fake), "--", "true"], check=True)
    assert marker.exists()
    # Configuring it explicitly is refused at start, naming the key.
    with pytest.raises(ConfigError, match=r"key 'bwrap'.*lies in a writable root"):
        escape_host(make_host, ws, backend, bwrap=str(fake))


# -- row 9: the sandboxed side rewrites what the host runs per call ------------------------------


async def test_row9_nothing_from_a_writable_root_is_executed(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch, outside: Path
) -> None:
    """Landlock used to exec a Python runner per call; now no interpreter is started at all:
    a planted ``sys.executable`` in the workspace is never run, and confinement still holds."""
    marker = ws.parent / "interpreter-ran"
    fake = ws / "python"
    fake.write_text(f'#!/bin/sh\necho ran > "{marker}"\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    host = escape_host(make_host, ws, backend)
    result = await bash(host, f"echo pwned > {outside}/x; echo ok > control")
    assert not marker.exists()
    assert not (outside / "x").exists()
    assert (ws / "control").exists()
    assert result.meta["confined"] is True
    subprocess.run([str(fake), "true"], check=True)  # control: the plant works when run
    assert marker.exists()


# -- row 14: SysV shared memory and the kernel keyring -------------------------------------------

_SHM = (
    "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "i = libc.shmget(int(sys.argv[1]), 1 << 20, 0o1600); print('shm', i, ctypes.get_errno())"
)
_KEY = (
    "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "r = libc.syscall(int(sys.argv[1]), b'user', b'row14', b'v', 1, -2); "
    "print('add_key', r, ctypes.get_errno())"
)


def _shm_keys() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


def _remove_shm(key: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(key, 0, 0)
    if shmid >= 0:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


def _add_key_nr() -> int:
    import pyseccomp  # type: ignore[import-untyped]

    return int(pyseccomp.resolve_syscall(pyseccomp.system_arch(), "add_key"))


async def test_row14_sysv_shm_and_keyring(make_host: Any, ws: Path, backend: str) -> None:
    key = 0x64000000 + uuid.uuid4().int % 0xFFFFFF
    host = escape_host(make_host, ws, backend)
    try:
        result = await bash(
            host,
            f"python3 -c {_quote(_SHM)} {key}; python3 -c {_quote(_KEY)} {_add_key_nr()}",
        )
        assert "shm " in result.text  # the segment may be made, inside a private namespace
        assert key not in _shm_keys()  # ... and is gone with it
        assert "add_key -1 1" in result.text  # EPERM: no keyring
        # Control: unconfined, the same command leaves the segment on the host.
        danger = make_host(
            ToolsPlugin(),
            SandboxPlugin(),
            config={
                "host": {"workspace": str(ws)},
                "plugin": {"sandbox": {"mode": "danger-full-access"}},
            },
        )
        await bash(danger, f"python3 -c {_quote(_SHM)} {key}")
        assert key in _shm_keys()
    finally:
        _remove_shm(key)


# -- row 15: setsid / setpgid children outlive the call ------------------------------------------


async def test_row15_setsid_and_setpgid_children_are_killed(
    make_host: Any, ws: Path, backend: str
) -> None:
    marker = f"{1000 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    host = escape_host(make_host, ws, backend)
    result = await bash(
        host,
        f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & "
        f'python3 -c \'import os, time; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "{marker}"])\' '
        "</dev/null >/dev/null 2>&1 & "
        f"setsid sh -c 'sleep {marker}' </dev/null >/dev/null 2>&1 & "
        f"while [ $(pgrep -f -c '^sleep {marker}') -lt 3 ]; do :; done; echo started",
    )
    left = processes_with(marker)
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert result.text == "started"  # all three had left the group before the command ended
    assert left == []


# -- item 3: protected paths stay read-only to commands, even when they do not exist yet ---------


async def test_protected_paths_are_read_only_to_bash(
    make_host: Any, ws: Path, backend: str
) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    config = ws / "dsh.toml"
    config.write_text(f'[host]\nworkspace = "{ws}"\n[plugin.sandbox]\nbackend = "{backend}"\n')
    if backend == "landlock":
        with pytest.raises(ConfigError, match=r"key 'protected'.*Landlock cannot keep"):
            make_host(ToolsPlugin(), SandboxPlugin(), config=str(config))
        return
    host = make_host(ToolsPlugin(), SandboxPlugin(), config=str(config))
    await bash(
        host,
        "echo '[core] fsmonitor = evil' >> .git/config; mkdir -p .claude/hooks; "
        "echo x > .claude/hooks/x; echo x > .dsh; echo 'mode = \"danger-full-access\"' >> dsh.toml;"
        " echo ok > control",
    )
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".claude" / "hooks").exists()
    assert not (ws / ".dsh").is_file()
    assert "danger" not in config.read_text()
    assert (ws / "control").read_text() == "ok\n"


async def test_a_command_cannot_plant_the_config_of_the_next_run(
    make_host: Any, ws: Path, backend: str
) -> None:
    """No config file in use: a dsh.toml a tool created would be the one the next run in the
    workspace finds. It is protected by default, so neither bash nor write_file can create it."""
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": {"backend": backend}}}
    if backend == "landlock":
        with pytest.raises(ConfigError, match=r"key 'protected'.*Landlock cannot keep"):
            make_host(ToolsPlugin(), SandboxPlugin(), config=config)
        return
    host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    await bash(
        host,
        "echo '[plugin.sandbox]' > dsh.toml; echo 'mode = \"danger-full-access\"' >> dsh.toml; "
        "echo ok > control",
    )
    written = await host.call("write_file", {"path": "dsh.toml", "content": "[plugin]\n"})
    assert written.code == "SANDBOX_DENIED"
    assert "protected" in written.text
    assert not (ws / "dsh.toml").exists()  # neither a file nor an empty mount point
    assert find_config(ws, environ={}) is None
    assert (ws / "control").read_text() == "ok\n"  # control: the command ran


async def test_no_empty_protected_directories_are_left_behind(
    make_host: Any, ws: Path, backend: str, tmp_path: Path
) -> None:
    """bwrap mounts on an empty directory it makes where a protected path is missing; it is
    removed after the command. A protected directory that was there before is kept."""
    other = tmp_path / "other"  # a second writable root: protected paths are under each
    other.mkdir()
    (ws / ".git").mkdir()  # the user's own, empty: not ours to remove
    sandbox: dict[str, Any] = {"writable_roots": [".", str(other)]}
    if backend == "bwrap":  # and one whose parents are missing too (bwrap makes them)
        sandbox["protected"] = [".git", ".claude", ".dsh", "dsh.toml", "sub/deeper/thing"]
    host = escape_host(make_host, ws, backend, **sandbox)
    # A missing protected path whose parents are missing too: its first missing parent is
    # the empty read-only mount point (renaming a parent made on the way would take the mount
    # point with it), so the path can be made no more than before.
    await bash(
        host,
        "test -e .claude && test -e dsh.toml && test -d sub && ! mkdir -p sub/deeper/thing "
        "2>/dev/null && ! test -e sub/deeper/thing && echo mounted > control",
    )
    assert MOUNT_POINTS.settle(timeout=60)  # removed off the call's path, right after it
    assert sorted(os.listdir(ws)) == [".git", "control"] if backend == "bwrap" else [".git"]
    assert os.listdir(other) == []


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)  # Landlock refuses protected paths
async def test_a_mount_point_stays_while_another_command_mounts_on_it(
    make_host: Any, ws: Path, backend: str
) -> None:
    """Two commands at once: the first to end leaves the mount point to the other, which still
    cannot create the protected path; the last to end removes it."""
    host = escape_host(make_host, ws, backend)
    outputs: list[str] = []

    async def waiting() -> None:
        result = await bash(
            host,
            "until [ -e go ]; do :; done; "
            "(echo x > dsh.toml) 2>/dev/null && echo created || echo refused",
        )
        outputs.append(result.text)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting)
        await trio.testing.wait_all_tasks_blocked()  # the first command is running
        await bash(host, "true")  # a second one, started and ended meanwhile
        assert (ws / "dsh.toml").is_dir()  # still mounted on by the first
        (ws / "go").touch()
    assert outputs == ["refused"]
    assert MOUNT_POINTS.settle(timeout=60)
    assert not (ws / "dsh.toml").exists()


async def test_a_command_cannot_change_the_code_the_next_run_executes(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dsh installed in a virtual environment inside the workspace (an editable install keeps
    its source there too): a .pth file or an edited plugin there would run, unconfined, at the
    next start. Both stay read-only to bash and to write_file."""
    venv, source = ws / ".venv", ws / "src" / "dsh_plugin"
    (venv / "lib" / "site-packages").mkdir(parents=True)
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("ALLOW = False\n")
    monkeypatch.setattr(_starting, "install_paths", lambda modules: (venv, source))
    if backend == "landlock":
        with pytest.raises(ConfigError, match=r"key 'protected'.*protect_install = false"):
            escape_host(make_host, ws, backend)
        escape_host(make_host, ws, backend, protect_install=False)  # control: it was that
        return
    host = escape_host(make_host, ws, backend)
    command = (
        "echo 'import os' > .venv/lib/site-packages/evil.pth; "
        "echo 'ALLOW = True' > src/dsh_plugin/__init__.py; echo ok > control"
    )
    await bash(host, command)
    for path, content in ((".venv/bin/dsh", "#!/bin/sh\n"), ("src/dsh_plugin/x.py", "")):
        written = await host.call("write_file", {"path": path, "content": content})
        assert written.code == "SANDBOX_DENIED"
        assert "holds code the next dsh run executes" in written.text
    assert not (venv / "lib" / "site-packages" / "evil.pth").exists()
    assert (source / "__init__.py").read_text() == "ALLOW = False\n"
    assert sorted(os.listdir(source)) == ["__init__.py"]
    assert (ws / "control").read_text() == "ok\n"
    exposed = escape_host(make_host, ws, backend, protect_install=False)  # control
    await bash(exposed, command)
    assert (venv / "lib" / "site-packages" / "evil.pth").exists()


# -- item 5: a root replaced after start ---------------------------------------------------------


async def test_replaced_root_fails_closed(
    make_host: Any, ws: Path, backend: str, outside: Path
) -> None:
    host = escape_host(make_host, ws, backend)
    await bash(host, "echo ok > control")  # control
    assert (ws / "control").exists()
    ws.rename(ws.parent / "ws-away")
    ws.symlink_to(outside)
    result = await host.call("bash", {"command": "echo pwned > x"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert str(ws) in result.text
    assert not (outside / "x").exists()


# -- start-up: what the machine cannot enforce is an error naming the key ------------------------


def test_unenforceable_network_false_is_an_error_at_start(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No bwrap binary: Landlock may confine, so the machine is probed at start."""
    probes = {"bwrap": "not installed", "landlock": None, "landlock-net": "Landlock ABI 3"}
    patch_probes(monkeypatch, lambda bwrap=None: probes)
    monkeypatch.setenv("PATH", str(ws.parent / "no-bwrap-here"))
    with pytest.raises(ConfigError, match=r"key 'network'.*network = false cannot be enforced"):
        escape_host(make_host, ws, "auto", protected=[], protect_config=False)
    escape_host(make_host, ws, "auto", protected=[], protect_config=False, network=True)


async def test_unenforceable_network_false_refuses_the_first_command(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bwrap binary that fails its probe: the host starts (the probe waits for the first
    command), and every command is refused with the key to change; nothing runs."""
    probes = {"bwrap": "the probe exited 1", "landlock": None, "landlock-net": "Landlock ABI 3"}
    patch_probes(monkeypatch, lambda bwrap=None: probes)
    host = escape_host(make_host, ws, "auto", protected=[], protect_config=False)
    for _ in range(2):
        result = await host.call("bash", {"command": "echo ran > ran"})
        assert result.code == "SANDBOX_UNAVAILABLE"
        assert "key 'network'" in result.text
        assert "network = false cannot be enforced" in result.text
    assert not (ws / "ran").exists()


async def test_root_swapped_right_after_the_check_binds_nothing_else(
    make_host: Any, ws: Path, backend: str, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap lands between the pin check and the spawn: bwrap binds the descriptor it
    opened and checked, Landlock's rules hold the directories opened at start."""
    from dsh_plugins_builtin._sandbox import _confine

    host = escape_host(make_host, ws, backend)
    real_check = _confine.check_pinned

    def check_then_swap(policy: Any) -> None:
        real_check(policy)
        if ws.is_dir() and not ws.is_symlink():
            ws.rename(ws.parent / "ws-away")
            ws.symlink_to(outside)

    monkeypatch.setattr(_confine, "check_pinned", check_then_swap)
    result = await host.call("bash", {"command": f"echo pwned > {ws}/x; echo pwned > x"})
    assert not (outside / "x").exists()
    if backend == "bwrap":
        assert result.code == "SANDBOX_UNAVAILABLE"
        assert str(ws) in result.text
