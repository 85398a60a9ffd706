"""What the fork server keeps off a command's path, and what that must not change.

A command's end is its launcher's report, not the launcher's own exit (its interpreter's
teardown is no part of the command's), and a launcher that ends without one is still waited for.
The processes forked ahead read the last request while they wait (`_ahead.warm`), which uses,
closes and keeps no descriptor, and survives a request it cannot read.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from dsh_plugins_builtin._sandbox import _ahead, _forkclient, _forkserver, _viewtable
from dsh_plugins_builtin._sandbox._confine import probe_backends, run_confined
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing for a launcher: alive until its standard input is closed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()


def _launched(proc: subprocess.Popen[bytes]) -> tuple[_forkclient.Launched, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    launched = _forkclient.Launched(
        proc.pid, os.pidfd_open(proc.pid), trio.socket.from_stdlib_socket(ours)
    )
    return launched, theirs


async def test_a_command_has_ended_once_its_launcher_reports(
    launcher: subprocess.Popen[bytes], autojump_clock: trio.testing.MockClock
) -> None:
    """The launcher reports only once every descendant is killed and reaped: the host goes on
    then, while the launcher itself is still exiting."""
    launched, theirs = _launched(launcher)
    with theirs:
        theirs.sendall(_forkserver.RECORD.pack(_forkserver.STATUS, 3))
        with trio.fail_after(30):
            await launched.exited()
        assert launched.returncode == 3
        assert launcher.poll() is None  # the launcher was not waited for
        assert await launched.wait() == 3
    launched.close()


async def test_a_report_read_in_pieces_across_a_cancellation_is_whole(
    launcher: subprocess.Popen[bytes], autojump_clock: trio.testing.MockClock
) -> None:
    """A read cancelled halfway (a timeout while the report comes) keeps what came: the next
    wait reads the rest, not a record shifted by the part lost."""
    launched, theirs = _launched(launcher)
    record = _forkserver.RECORD.pack(_forkserver.STATUS, -signal.SIGTERM)
    with theirs:
        theirs.sendall(record[:3])
        with trio.move_on_after(1) as scope:  # the mock clock's second: no real wait
            await launched.wait()
        assert scope.cancelled_caught
        theirs.sendall(record[3:])
        with trio.fail_after(30):
            assert await launched.wait() == -signal.SIGTERM
    launched.close()


async def test_a_launcher_gone_without_a_report_is_waited_for(
    launcher: subprocess.Popen[bytes],
) -> None:
    """No report (the launcher was killed outright): the command is taken for killed only once
    the launcher has exited, as before."""
    launched, theirs = _launched(launcher)
    theirs.close()  # its end of the socket gone, the launcher still alive
    async with trio.open_nursery() as nursery:
        nursery.start_soon(launched.exited)
        await trio.testing.wait_all_tasks_blocked()
        assert launched.returncode is None  # still waiting for the launcher's exit
        assert launcher.stdin is not None
        launcher.stdin.close()
    assert launched.returncode == -signal.SIGKILL
    launched.close()


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.mark.parametrize(
    "last",
    [
        json.dumps(
            {
                "argv": ["bash", "-c", "true"],
                "env": {"PATH": "/usr/bin"},
                "cwd": "/",
                "program": (b"\x06\x00\x00\x00\x00\x00\xff\x7f").hex(),
                "abi": 4,
                "plan": [["proc"], ["devpts"], ["seal", "/nowhere/.git"]],
                "limits": [[4, 0]],
            }
        ).encode(),
        b"{not json",
        b'{"argv": 1}',
    ],
    ids=["a request", "torn", "malformed"],
)
def test_warming_reads_the_last_request_and_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch, last: bytes
) -> None:
    """`warm` parses the server's last request as the next will be, early steps split off too,
    and drops it: no descriptor is opened, used or closed, nothing is raised."""
    monkeypatch.setattr(_ahead, "LAST", [last])
    before = _open_fds()
    _ahead.warm((("proc",), ("devpts",)))
    _ahead.warm()
    assert _open_fds() == before


@pytest.mark.parametrize("moved", [True, False], ids=["moved", "as checked"])
def test_a_view_request_no_spare_takes_is_checked_against_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: bool
) -> None:
    """In a view, a request that comes while no spare launcher is ready (within moments of the
    last) is checked against the view's mount table too, before a launcher is forked: moved,
    the host is told STALE and nothing is forked."""
    table = tmp_path / "mountinfo"
    table.write_bytes(b"21 1 0:40 / /home/secret ro - tmpfs tmpfs rw\n")
    ctl, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = _forkserver._Server(server_end, _viewtable.digest(table.read_bytes()))
    server.mounts_fd = os.open(table, os.O_RDONLY)
    if moved:  # the host renamed the masked directory away
        table.write_bytes(b"21 1 0:40 / /home/moved ro - tmpfs tmpfs rw\n")
    forked: list[bytes] = []
    monkeypatch.setattr(server, "launch", lambda data, fds: forked.append(data))
    host, launcher = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    try:
        fds = array.array("i", (launcher.fileno(), out_w, out_w))
        ctl.sendmsg([b'{"cwd": "/"}'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        assert server.accept()
        launcher.close()
        if moved:
            assert _forkserver.RECORD.unpack(host.recv(8)) == (_forkserver.STALE, 0)
            assert forked == []
        else:
            assert host.recv(8) == b""  # nothing said: the launcher (not forked here) would
            assert forked == [b'{"cwd": "/"}']
    finally:
        for each in (ctl, server_end, host):
            each.close()
        for fd in (out_r, out_w, server.mounts_fd):
            os.close(fd)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
        return [int(child) for child in handle.read().split()]


def _mount_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can mount on the host")
async def test_a_host_mount_made_while_a_command_waits_ahead_is_seen(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a view, the command forked ahead copies the host's mount namespace (and makes
    its /dev) while it waits. A mount the host makes after that copy (here, a tmpfs over a
    directory it hides) is not in it: that command then runs nothing, and the command starts
    another way, seeing the host as it is."""
    if probe_backends()["landlock-net"] is not None:
        pytest.skip("landlock unusable here")
    server = _forkclient.ForkServer()
    monkeypatch.setattr(_forkclient, "_shared", server)
    policy = SandboxPolicy("workspace-write", ws, protected=(), writable_roots=(ws,))
    base = Path(tempfile.mkdtemp(prefix="dsh-ahead-", dir="/var/lib"))
    place = base / "place"
    place.mkdir()
    (place / "key").write_text("UNDER\n")
    try:
        read = f"cat {place}/key 2>&1; echo done"
        first = await run_confined(read, cwd=ws, policy=policy, backend="landlock", timeout=30)
        assert "UNDER" in first.output  # (the control: the host shows it)
        assert server._proc is not None
        serving = _mount_namespace(server._proc.pid)
        with trio.fail_after(30):  # the next command forked ahead, in a copy of the host's
            while not any(
                _mount_namespace(ahead) != serving
                for spare in _children(server._proc.pid)
                for ahead in _children(spare)
            ):
                await trio.sleep(0.01)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(place)], check=True)
        try:
            second = await run_confined(read, cwd=ws, policy=policy, backend="landlock", timeout=30)
            assert "UNDER" not in second.output
            assert "done" in second.output
        finally:
            subprocess.run(["umount", "-l", str(place)], check=True)
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)


_PR_SET_CHILD_SUBREAPER = 36


def test_a_command_forked_ahead_dies_with_its_launcher_before_its_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command forked ahead is killed when its launcher ends, from the moment it told it
    READY: in a view its orphan would go to the view's first process, not to the server, and
    run a request it already holds with nothing to stop it. Here the launcher ends at once
    after READY; the command (an orphan that comes to this process, made a subreaper) must
    end by SIGKILL, not wait for a request on a socket still open."""
    if probe_backends()["landlock-net"] is not None:
        pytest.skip("landlock unusable here")
    monkeypatch.setattr(_ahead, "LAST", [])
    monkeypatch.setattr(_ahead, "EARLY", [])
    libc = ctypes.CDLL(None, use_errno=True)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        launcher = os.fork()
        if launcher == 0:  # the launcher: forks the command ahead, hands on its socket, ends
            try:
                ahead = _ahead.Ahead.fork(os.dup(0))
                assert ahead is not None
                fds = array.array("i", (ahead.sock.fileno(),))
                theirs.sendmsg(
                    [str(ahead.pid).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                )
            finally:
                os._exit(0)
        theirs.close()
        data, fds = _ahead.receive(ours, 1)  # the command's socket, kept open: no EOF for it
        os.waitpid(launcher, 0)
        command = int(data)
        pidfd = os.pidfd_open(command)
        ended = select.select([pidfd], [], [], 30)[0]  # a ceiling: it ends at once, or never
        os.close(pidfd)
        if not ended:
            os.kill(command, signal.SIGKILL)
        _, status = os.waitpid(command, 0)  # orphaned to us
        for fd in fds:
            os.close(fd)
        assert ended
        assert os.WIFSIGNALED(status)
        assert os.WTERMSIG(status) == signal.SIGKILL
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        ours.close()
