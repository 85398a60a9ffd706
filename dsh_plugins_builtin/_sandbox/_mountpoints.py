"""The empty directories bwrap makes as mount points over missing protected paths."""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow

__all__ = ["MOUNT_POINTS", "MountPointBusy", "Taken"]

_LOCK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_WAIT = 0.1  # seconds: at most this long for another process's lock on a protected path

logger = logging.getLogger("dsh_plugins_builtin.sandbox")


class MountPointBusy(OSError):
    """A protected directory stays locked by another process (`_lock_dir`): nothing ran."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            errno.EBUSY,
            f'the protected path "{path}" is locked by another process (another dsh removing '
            "its mount point, or a command holding a lock on it); try again",
        )


@attrs.frozen
class Taken:
    """What `_MountPoints.take` gave one command.

    Attributes:
        over: The protected paths to mount an empty read-only tmpfs over.
        locks: Shared locks on the existing protected directories it binds (closed by
            `_MountPoints.give_back`).
    """

    over: frozenset[Path]
    locks: tuple[int, ...] = ()


class _Worker:
    """One thread, started at its first job, that runs each job it is handed (a thread started
    per job would cost the command its start, a fifth of a millisecond)."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._job: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    def __call__(self, job: Callable[[], None]) -> None:
        with self._wake:
            self._job = job
            self._wake.notify()
            if self._thread is None:
                # A daemon, so it never holds the interpreter up; exiting settles first
                # (`atexit` below), so no removal owed is dropped.
                self._thread = threading.Thread(
                    target=self._serve, name="dsh-mount-points", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._job is not None)
                job, self._job = self._job, None
            assert job is not None
            try:
                job()
            except Exception:  # the job marked itself idle first; the next one must still run
                logger.exception("dsh sandbox: removing the empty mount points failed")

    def forget_thread(self) -> None:
        """In a forked child: the thread stayed with the parent."""
        self._wake = threading.Condition()
        self._job = None
        self._thread = None


class _MountPoints:
    """The empty directories bwrap makes where it mounts a tmpfs over a missing protected path.

    Without this, every command would leave ``.git``, ``.claude``, ``.dsh`` and ``dsh.toml``
    behind as empty directories in each writable root (``/tmp`` included), where a person or a
    tool later trips over them. A path is *ours* from the first command that finds it missing
    until the last command that mounted over it has ended and its directory is removed (if it
    is still empty: ``rmdir``, never a file, a link or anything with contents). A command that
    starts meanwhile mounts over it too, rather than bind it as an existing path that may
    vanish before bwrap gets to it. Another process (another host on the same workspace) sees
    one as an existing directory, which it binds under a shared ``flock``; the removal takes an
    exclusive one without waiting, and leaves the directory to whoever comes last otherwise.

    The removal is off the command's path: `give_back` hands it to a worker thread, so the
    result does not wait for the ``rmdir``\\s (a few tenths of a millisecond each, several
    milliseconds when the disk is busy). The worker removes a path only while no command holds
    it, under the lock `take` counts uses under: a command that takes a path still waiting for
    its removal keeps it (and mounts over it, with no ``mkdir``); its own `give_back` queues it
    again. `settle` waits until every removal owed is done: the host's file tools do (so they
    never see a finished command's mount points), and so does the process at exit. A command
    nothing gives back (a mounted server's) `hold`\\s the ones it mounts over for good.
    """

    def __init__(self, start: Callable[[Callable[[], None]], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._users: dict[Path, tuple[int, tuple[Path, ...]]] = {}  # uses, parents bwrap makes
        self._owed: list[Path] = []  # given back by their last user: to remove
        self._working = False
        self._held: list[int] = []  # `hold`'s locks: kept while the process lives
        worker = _Worker()  # tests hand the jobs to themselves (`start`) instead
        self._worker = worker if start is None else None
        self._start = start if start is not None else worker

    def take(self, paths: Iterable[Path]) -> Taken:
        """Of *paths*, the ones to mount over (missing now, or ours), each counted in use, and
        a shared lock on each existing directory among the others (see `_lock_dir`).

        Raises:
            MountPointBusy: One is locked by another process (nothing is taken).
        """
        with self._lock:
            over, locks = self._count(paths, register=True)
        return Taken(frozenset(over), tuple(locks))

    def hold(self, paths: Iterable[Path]) -> frozenset[Path]:
        """For a command nothing gives back (a mounted server's): of *paths*, the ones to mount
        over (missing now, or ours). The ones that are ours are counted in use, and existing
        directories locked (shared), for as long as this process lives: removing one from
        under the command's mount would take that mount away (the kernel detaches mounts on a
        removed directory in every namespace), and with it the protection. (A missing one
        bwrap makes is left, as it always was.)

        Raises:
            MountPointBusy: One is locked by another process (nothing is held).
        """
        with self._lock:
            over, locks = self._count(paths, register=False)
            self._held += locks
        return frozenset(over)

    def _count(self, paths: Iterable[Path], *, register: bool) -> tuple[list[Path], list[int]]:
        """`take` and `hold`, under the lock: all of them, or (an error) none."""
        over: list[Path] = []
        locks: list[int] = []
        counted: list[tuple[Path, tuple[int, tuple[Path, ...]] | None]] = []  # as they were
        try:
            for path in paths:
                if path in self._users:  # in use, or not removed yet: ours either way
                    uses, parents = self._users[path]
                    counted.append((path, (uses, parents)))
                    self._users[path] = (uses + 1, parents)
                elif _exists_locked(path, locks):
                    continue
                elif register:
                    counted.append((path, None))
                    self._users[path] = (1, _missing_parents(path))
                over.append(path)
        except BaseException:
            for fd in locks:
                os.close(fd)
            for path, was in counted:
                if was is None:
                    del self._users[path]
                else:
                    self._users[path] = was
            raise
        return over, locks

    def give_back(self, taken: Taken) -> None:
        """The command that took *taken* has ended: its locks are let go, and the paths no
        command uses now are removed (by the worker, after this returns)."""
        for fd in taken.locks:
            os.close(fd)
        with self._lock:
            for path in taken.over:
                uses, parents = self._users[path]
                self._users[path] = (uses - 1, parents)
                if uses == 1:
                    self._owed.append(path)
            if not self._owed or self._working:
                return
            self._working = True
        try:
            self._start(self._remove_owed)
        except BaseException as exc:  # no new thread (the interpreter is exiting): remove here
            self._remove_owed()
            if not isinstance(exc, RuntimeError):
                raise

    def after_fork(self) -> None:
        """In a forked child: no worker thread there (the next `give_back` starts one)."""
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._working = False
        if self._worker is not None:
            self._worker.forget_thread()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every removal owed is done; whether it is (``False``: timed out)."""
        if not self._working:  # the usual case, no lock (a `give_back` before this set it)
            return True
        with self._done:
            return self._done.wait_for(lambda: not self._working, timeout)

    def _remove_owed(self) -> None:
        idle = False
        try:
            while not idle:
                idle = self._remove_one()
        finally:
            if not idle:  # an error: the next `give_back` starts again
                with self._lock:
                    self._idle()

    def _idle(self) -> None:
        self._working = False
        self._done.notify_all()

    def _remove_one(self) -> bool:
        """Remove the next path owed (if no command took it again); whether none was left (then
        the worker is marked done, under the same lock as the check)."""
        with self._lock:  # one path at a time: `take` waits for one removal at most
            if not self._owed:
                self._idle()
                return True
            path = self._owed.pop(0)
            entry = self._users.get(path)
            if entry is None or entry[0] > 0:
                return False  # removed already, or taken again: its last user queues it again
            del self._users[path]
            for directory in (path, *entry[1]):  # the deepest first
                if not _remove_empty(directory):
                    break  # not empty, gone, not a directory: keep it (and above)
        return False


def _missing_parents(path: Path) -> tuple[Path, ...]:
    """The parents of *path* that do not exist: bwrap makes them too (``mkdir -p``), and they
    are removed after the path, the deepest first."""
    missing = []
    parent = path.parent
    while parent != parent.parent and not os.path.lexists(parent):
        missing.append(parent)
        parent = parent.parent
    return tuple(missing)


def _exists_locked(path: Path, locks: list[int]) -> bool:
    """Whether *path* exists (to bind as it is); a directory is locked shared first, so no other
    process removes it while it is bound (one removed while we waited: missing).

    The lock is never waited for long (`_LOCK_WAIT`): a remover holds it for one ``rmdir``, and
    anyone else (a command that locked ``.git``) must not stop the host.

    Raises:
        MountPointBusy: Still locked by another process.
    """
    if not os.path.lexists(path):
        return False
    deadline = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            fd = _lock_dir(path, fcntl.LOCK_SH | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise MountPointBusy(path) from None
            time.sleep(_LOCK_WAIT / 50)
    if fd is None:
        return os.path.lexists(path)  # not a directory (never removed), or not ours to open
    if os.fstat(fd).st_nlink == 0:  # removed by its owner while we waited for the lock
        os.close(fd)
        return os.path.lexists(path)
    locks.append(fd)
    return True


def _lock_dir(path: Path, how: int) -> int | None:
    """A descriptor of the directory *path*, reached from ``/`` through no symlink, locked
    (``flock``) *how*; ``None``: not a directory, or gone. Raises ``BlockingIOError`` when it
    is locked otherwise (with ``LOCK_NB``).

    The lock is what keeps two processes off each other's mount points: a command binds an
    existing protected directory under a shared lock, and an empty mount point is removed only
    under an exclusive one, so never while another process's command is mounted on it.
    """
    try:
        parent = open_dir_nofollow(str(path.parent))
    except OSError:
        return None
    try:
        fd = os.open(path.name, _LOCK_FLAGS, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_empty(directory: Path) -> bool:
    """``rmdir`` the canonical *directory*, reached from ``/`` through no symlink (a command may
    have swapped a parent for one, to aim the removal elsewhere), under an exclusive lock
    (`_lock_dir`); whether it was removed."""
    try:
        fd = _lock_dir(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # another process's command is mounted on it: left (to whoever comes last)
    if fd is None:
        return False  # gone, not a directory
    try:
        parent = open_dir_nofollow(str(directory.parent))
    except OSError:
        os.close(fd)
        return False
    try:
        now = os.stat(directory.name, dir_fd=parent, follow_symlinks=False)
        locked = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (locked.st_dev, locked.st_ino):
            return False  # swapped since it was locked: not the one we hold
        os.rmdir(directory.name, dir_fd=parent)
    except OSError:
        return False
    finally:
        os.close(parent)
        os.close(fd)
    return True


MOUNT_POINTS = _MountPoints()
atexit.register(MOUNT_POINTS.settle, 30.0)
os.register_at_fork(after_in_child=MOUNT_POINTS.after_fork)
