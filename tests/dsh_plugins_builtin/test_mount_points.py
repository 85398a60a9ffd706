"""The empty mount points bwrap makes over missing protected paths are removed off the command's
path (`_MountPoints`): never while a command holds one, before a file tool or a judge by
existence (a mounted server's command line) looks, and at the latest when the process exits."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_plugins_builtin._sandbox import _bwrap, _locks, _mountpoints
from dsh_plugins_builtin._sandbox._confine import confine_argv, probe_backends
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy
from dsh_plugins_builtin._sandbox._mountpoints import MountPointBusy, _MountPoints
from tests.dsh_plugins_builtin.test_escapes_process import bash, escape_host

Work = Callable[[], None]


@pytest.fixture
def owed_globally(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Work]]:
    """The process's `MOUNT_POINTS` hands its removals to this list until the test runs them;
    the ones still owed when it ends are run then, so that no later test finds a removal
    marked under way that no worker will ever run (its file tools would wait on it)."""
    owed: list[Work] = []
    monkeypatch.setattr(_mountpoints.MOUNT_POINTS, "_start", owed.append)
    yield owed
    while owed:
        owed.pop()()
    assert _mountpoints.MOUNT_POINTS.settle(timeout=0)


def held(linger: float = 0.0) -> tuple[_MountPoints, list[Work]]:
    """Mount points whose removals wait until the test runs them."""
    owed: list[Work] = []
    return _MountPoints(start=owed.append, linger=linger), owed


def test_the_removal_is_not_on_the_commands_path(tmp_path: Path) -> None:
    points, owed = held()
    path = tmp_path / ".git"
    taken = points.take([path])
    assert taken.over == {path}
    path.mkdir()  # what bwrap makes
    points.give_back(taken)
    assert path.is_dir()  # the result goes back first
    assert points.settle(timeout=0) is False
    [work] = owed
    work()
    assert not path.exists()
    assert points.settle(timeout=0) is True


def test_a_mount_point_taken_again_before_its_removal_is_kept_while_in_use(
    tmp_path: Path,
) -> None:
    """Removing a directory another command mounted over would take its mount away (the kernel
    detaches mounts on a removed directory in every namespace): the protection would be gone."""
    points, owed = held()
    path = tmp_path / ".claude"
    first = points.take([path])
    path.mkdir()  # what bwrap makes
    points.give_back(first)
    again = points.take([path])
    assert again.over == {path}  # still ours: mounted over again, not bound as the user's
    owed.pop()()
    assert path.is_dir()  # in use: kept
    points.give_back(again)
    owed.pop()()
    assert not path.exists()


def test_a_removal_owed_twice_is_done_once(tmp_path: Path) -> None:
    points, owed = held()
    path = tmp_path / "dsh.toml"
    taken = points.take([path])
    path.mkdir()
    points.give_back(taken)
    points.give_back(points.take([path]))  # the worker of the first is still owed: no second

    assert len(owed) == 1
    owed.pop()()
    assert not path.exists()
    assert points.take([path]).over == {path}  # missing again: mounted over again


def test_settle_waits_for_the_worker_thread(tmp_path: Path) -> None:
    points = _MountPoints()
    paths = [tmp_path / name for name in (".git", ".dsh", "sub/deeper")]
    taken = points.take(paths)
    assert taken.over == set(paths)
    for path in paths:
        path.mkdir(parents=True)
    points.give_back(taken)
    assert points.settle(timeout=30)
    assert os.listdir(tmp_path) == []


def settling_runs(monkeypatch: pytest.MonkeyPatch, owed: list[Work]) -> list[int]:
    """(*owed*: the `owed_globally` fixture's list.)"""
    """`MOUNT_POINTS.settle` runs the removals owed first; how often it was called."""
    points = _mountpoints.MOUNT_POINTS
    real = points.settle
    calls: list[int] = []

    def settle(timeout: float | None = None) -> bool:
        calls.append(1)
        while owed:
            owed.pop()()
        return real(timeout)

    monkeypatch.setattr(points, "settle", settle)
    return calls


async def test_a_file_tool_never_sees_a_finished_commands_mount_points(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, owed_globally: list[Work]
) -> None:
    owed = owed_globally
    settling_runs(monkeypatch, owed)
    if probe_backends()["bwrap"] is not None:
        pytest.skip(f"bwrap unusable here: {probe_backends()['bwrap']}")
    host = escape_host(make_host, ws, "bwrap", protected=[".git", ".claude"])
    await bash(host, "test -d .git && echo ok > control")
    assert (ws / ".git").is_dir()  # owed a removal, which has not run yet
    listed = await host.call("list_dir", {"path": "."})
    assert not listed.is_error, listed.text
    assert ".git" not in listed.text
    assert ".claude" not in listed.text
    assert sorted(os.listdir(ws)) == ["control"]


async def test_a_removal_owed_while_a_command_runs_on_it_leaves_its_mount(
    make_host: Any, ws: Path, owed_globally: list[Work]
) -> None:
    """Through real bwrap: the removal owed by one command runs while the next one is mounted
    on the same mount points. Removed, the kernel would detach the next command's mounts, and it
    could create ``.git/x`` and ``dsh.toml``; it cannot."""
    if probe_backends()["bwrap"] is not None:
        pytest.skip(f"bwrap unusable here: {probe_backends()['bwrap']}")
    owed = owed_globally
    host = escape_host(make_host, ws, "bwrap")
    await bash(host, "true")
    assert (ws / ".git").is_dir()  # owed a removal, not removed yet
    os.mkfifo(ws / "ready")
    outputs: list[str] = []

    async def next_command() -> None:
        result = await bash(
            host,
            "echo > ready; until [ -e go ]; do :; done; "
            "mkdir .git/x 2>/dev/null && echo created || echo refused; "
            "(echo x > dsh.toml) 2>/dev/null && echo created || echo refused",
        )
        outputs.append(result.text)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(next_command)
        await trio.to_thread.run_sync((ws / "ready").read_text)  # it runs, mounted
        while owed:
            owed.pop()()
        assert (ws / ".git").is_dir()  # kept: the running command is mounted on it
        (ws / "go").touch()
    assert outputs == ["refused\nrefused"]
    assert not (ws / ".git" / "x").exists()
    assert not (ws / "dsh.toml").is_file()


@pytest.mark.parametrize("running", [True, False], ids=["in use", "owed a removal"])
def test_a_mount_point_a_server_mounts_over_is_never_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, running: bool
) -> None:
    """A mounted server's command line (no `take`, no `give_back`) while a command's mount point
    is there: the server mounts over it too, and it is never removed while this process lives.
    Bound as the user's own directory and removed when the command ends, the kernel would take
    the server's mount away with it: the server could then create ``.git``."""
    ws = tmp_path / "ws"
    ws.mkdir()
    points, owed = held()
    monkeypatch.setattr(_bwrap, "MOUNT_POINTS", points)
    path = ws / ".git"
    taken = points.take([path])
    path.mkdir()  # what bwrap makes
    if not running:
        points.give_back(taken)
    policy = SandboxPolicy("workspace-write", ws, writable_roots=(ws,), protected=(".git",))
    argv = confine_argv(["true"], policy, "bwrap")
    assert argv[argv.index(str(path)) - 1] == "--tmpfs"  # an empty read-only tmpfs over it
    if running:
        points.give_back(taken)  # the command ends
    while owed:
        owed.pop()()
    assert path.is_dir()  # kept: the server's mount is on it


@pytest.mark.parametrize("how", ["command", "server"])
def test_another_processs_command_on_our_mount_point_keeps_it(tmp_path: Path, how: str) -> None:
    """Another host (another process: its own `_MountPoints`) binds our mount point as an existing
    directory; removed when our command ends, the kernel would take its mount away and its
    command could create ``.git``. It holds a shared lock while it is bound; we remove under an
    exclusive one, so it stays."""
    ours, owed = held()
    theirs, _ = held()
    path = tmp_path / ".git"
    taken = ours.take([path])
    path.mkdir()  # what our bwrap makes
    if how == "command":
        bound = theirs.take([path])
        assert bound.over == frozenset()  # theirs binds it as it is
        assert len(bound.locks) == 1
    else:
        assert theirs.hold([path]) == frozenset()
    ours.give_back(taken)
    owed.pop()()
    assert path.is_dir()  # kept: their mount is on it (left behind: neither removes it now)
    if how == "command":
        theirs.give_back(bound)
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(bound.locks[0].fd)  # let go
        assert not _lock_file(path).exists()  # and its file removed: no one else held it


def _lock_file(directory: Path) -> Path:
    info = os.stat(directory)
    return _locks.lock_dir() / f"dir-{info.st_dev:x}-{info.st_ino:x}.lock"


def test_a_protected_directory_another_host_locks_fails_closed_and_takes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock another dsh host holds for good must not stop the host for long: after a short
    wait the command is refused, and nothing it counted stays counted."""
    monkeypatch.setattr(_mountpoints, "_LOCK_WAIT", 0.0)
    points, _ = held()
    missing, locked = tmp_path / ".claude", tmp_path / ".git"
    locked.mkdir()
    info = os.stat(locked)
    holder = _locks.lock_key("dir", info.st_dev, info.st_ino, fcntl.LOCK_EX)
    try:
        with pytest.raises(MountPointBusy, match="is locked by another dsh process"):
            points.take([missing, locked])
        with pytest.raises(MountPointBusy):
            points.hold([locked])
    finally:
        _locks.release(holder, remove=False)
    taken = points.take([missing, locked])  # control: free again
    assert taken.over == {missing}
    assert points._users[missing][0] == 1  # counted afresh: the refused take left nothing
    assert len(taken.locks) == 1
    points.give_back(taken)


@pytest.mark.parametrize("how", [fcntl.LOCK_EX, fcntl.LOCK_SH], ids=["exclusive", "shared"])
def test_a_process_that_locks_the_protected_directory_itself_stops_nothing(
    tmp_path: Path, how: int
) -> None:
    """Anything a command runs can open ``.git`` and ``flock -x`` it (in the background, or a
    confined server for its whole life): the lock dsh takes is never that directory's, so the
    next command still runs and a mount point is still removed (before: every later command
    of every host refused, ``MountPointBusy``, after 0.1 s)."""
    points, owed = held()
    existing, ours = tmp_path / ".git", tmp_path / ".claude"
    existing.mkdir()
    taken = points.take([ours])
    ours.mkdir()  # what bwrap makes
    holders = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (existing, ours)]
    try:
        for fd in holders:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        points.give_back(taken)
        owed.pop()()
        assert not ours.exists()  # removed all the same
        again = points.take([existing])
        assert again.over == frozenset()
        assert len(again.locks) == 1
        points.give_back(again)
    finally:
        for fd in holders:
            os.close(fd)


def test_the_lock_directory_is_this_users_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock files live in a ``0700`` directory this user owns; one another user made first is
    refused (they could hold our locks), and a file planted under a lock's name is replaced."""
    directory = tmp_path / "locks"
    monkeypatch.setattr(_locks, "lock_dir", lambda: directory)
    monkeypatch.setattr(_locks, "_opened", {})
    path = tmp_path / ".git"
    path.mkdir()
    info = os.stat(path)
    name = f"dir-{info.st_dev:x}-{info.st_ino:x}.lock"
    directory.mkdir(mode=0o755)
    (directory / name).symlink_to(tmp_path / "elsewhere")
    lock = _locks.lock_key("dir", info.st_dev, info.st_ino, fcntl.LOCK_SH)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    held_file = os.fstat(lock.fd)
    assert stat.S_ISREG(held_file.st_mode)
    assert stat.S_IMODE(held_file.st_mode) == 0o600
    assert not (tmp_path / "elsewhere").exists()
    _locks.release(lock)
    assert os.listdir(directory) == []  # no one else held it: removed
    if os.geteuid() != 0:
        return
    os.chown(directory, 65534, 65534)  # another user's
    monkeypatch.setattr(_locks, "_opened", {})  # (as a host that starts now finds it)
    with pytest.raises(_locks.LockDirUnsafe, match="belongs to user 65534"):
        _locks._open_dir(directory)
    with pytest.raises(MountPointBusy, match="belongs to user 65534"):
        _mountpoints._MountPoints().take([path])


def test_lock_files_nobody_holds_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "locks"
    monkeypatch.setattr(_locks, "lock_dir", lambda: directory)
    monkeypatch.setattr(_locks, "_opened", {})
    live = _locks.lock_key("dir", 1, 2, fcntl.LOCK_SH)
    stale = _locks.lock_key("dir", 1, 3, fcntl.LOCK_SH)
    os.close(stale.fd)  # a host killed outright: its file stays
    assert sorted(os.listdir(directory)) == ["dir-1-2.lock", "dir-1-3.lock"]
    assert _locks.sweep() == 1
    assert os.listdir(directory) == ["dir-1-2.lock"]
    _locks.release(live)
    assert os.listdir(directory) == []


EXITING = """
import atexit, pathlib, sys, threading
from dsh_plugins_builtin._sandbox import _bwrap, _locks, _mountpoints
exiting = threading.Event()
remove = _mountpoints._remove_empty
def late(directory):
    exiting.wait()  # the removal is still owed when the interpreter starts to exit
    return remove(directory)
_mountpoints._remove_empty = late
atexit.register(exiting.set)  # registered last: runs first, before the module's settle
path = pathlib.Path(sys.argv[1])
taken = _mountpoints.MOUNT_POINTS.take([path])
path.mkdir()
_mountpoints.MOUNT_POINTS.give_back(taken)
"""


def test_an_exiting_process_removes_the_mount_points_it_owes(tmp_path: Path) -> None:
    path = tmp_path / ".git"
    subprocess.run([sys.executable, "-c", EXITING, str(path)], check=True, timeout=60)
    assert not path.exists()


def test_a_removal_that_fails_does_not_stop_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in one removal is logged; the worker thread still runs the next, so
    a file tool's wait (`settle`) never hangs on a removal no thread will run."""
    points = _MountPoints()
    path = tmp_path / ".git"
    real = _mountpoints._remove_empty
    failures = [True]

    def remove_empty(directory: Path) -> bool:
        if failures:
            raise RuntimeError("unexpected")
        return real(directory)

    monkeypatch.setattr(_mountpoints, "_remove_empty", remove_empty)
    taken = points.take([path])
    path.mkdir()
    points.give_back(taken)
    assert points.settle(timeout=30)
    assert path.is_dir()  # that removal failed
    failures.clear()
    other = tmp_path / ".claude"
    taken = points.take([other])
    other.mkdir()
    points.give_back(taken)
    assert points.settle(timeout=30)  # hung without the fix: the worker thread had died
    assert not other.exists()


def test_mount_points_linger_while_commands_follow_closely(tmp_path: Path) -> None:
    """A command that follows within the lingering time finds its mount points there (no
    ``mkdir``, no ``rmdir`` between the two, no removal beside it); `settle` lingers no more."""
    points = _MountPoints(linger=3600.0)
    path = tmp_path / ".git"
    first = points.take([path])
    path.mkdir()  # what bwrap makes
    points.give_back(first)
    assert path.is_dir()
    again = points.take([path])
    assert again.over == {path}  # still ours, not the user's: mounted over again
    points.give_back(again)
    assert path.is_dir()
    started = time.monotonic()
    assert points.settle(timeout=60)
    assert time.monotonic() - started < 30  # it did not wait the hour out
    assert not path.exists()


def test_the_process_mount_points_linger() -> None:
    assert _mountpoints.MOUNT_POINTS._linger == _mountpoints.LINGER > 0


def test_the_removal_waits_until_none_was_taken_for_the_lingering_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker removes them only once no command has taken any for `linger` seconds: a take
    while it waits starts the wait again (from that take)."""
    now = [1000.0]
    monkeypatch.setattr(_mountpoints.time, "monotonic", lambda: now[0])
    points, owed = held(linger=5.0)
    path = tmp_path / ".git"
    taken = points.take([path])
    path.mkdir()  # what bwrap makes
    points.give_back(taken)
    waited: list[float] = []

    def wait(timeout: float) -> bool:  # what passes while the worker waits (its lock held)
        waited.append(timeout)
        now[0] += timeout
        if len(waited) == 1:
            points._taken_at = now[0] - 2.0  # a command took one 2 s before this wait ended
        assert path.is_dir()
        return False

    monkeypatch.setattr(points._done, "wait", wait)
    owed.pop()()
    assert waited == [5.0, 3.0]
    assert not path.exists()
