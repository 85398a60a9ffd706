"""The empty directories bwrap makes as mount points over missing protected paths."""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import attrs

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow
from dsh_plugins_builtin._sandbox._locks import FileLock, LockDirUnsafe, lock_key, release

__all__ = ["LINGER", "MOUNT_POINTS", "MountPointBusy", "Taken"]

_LOCK_WAIT = 0.1  # seconds: at most this long for another process's lock on a protected path

logger = logging.getLogger("dsh_plugins_builtin.sandbox")


class MountPointBusy(OSError):
    """A protected directory stays locked by another process (`_lock_dir`): nothing ran."""

    def __init__(self, path: Path, why: str = "") -> None:
        super().__init__(
            errno.EBUSY,
            why
            or f'the protected path "{path}" is locked by another dsh process (removing its '
            "mount point); try again",
        )


@attrs.frozen
class Taken:
    """What `_MountPoints.take` gave one command.

    Attributes:
        over: The protected paths to mount an empty read-only tmpfs over.
        locks: Shared locks (`dsh_plugins_builtin._sandbox._locks`) on the existing protected
            directories it binds (let go by `_MountPoints.give_back`).
    """

    over: frozenset[Path]
    locks: tuple[FileLock, ...] = ()


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
    milliseconds when the disk is busy). The worker first lets them linger until no command
    has taken any for *linger* seconds (`LINGER`): commands that follow each other closely (a
    batch, an agent's burst) find them there, with no ``mkdir`` and no ``rmdir`` each, and no
    removal running beside them. The worker removes a path only while no command holds
    it, under the lock `take` counts uses under: a command that takes a path still waiting for
    its removal keeps it (and mounts over it, with no ``mkdir``); its own `give_back` queues it
    again. `settle` waits until every removal owed is done, lingering no more: the host's file
    tools do (so they never see a finished command's mount points), and so does the process at
    exit. A command nothing gives back (a mounted server's) `hold`\\s the ones it mounts over
    for good.
    """

    def __init__(
        self, start: Callable[[Callable[[], None]], None] | None = None, linger: float = 0.0
    ) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._users: dict[Path, tuple[int, tuple[Path, ...]]] = {}  # uses, parents bwrap makes
        self._owed: list[Path] = []  # given back by their last user: to remove
        self._working = False
        self._linger = linger
        self._taken_at = 0.0  # when a command last took any (`time.monotonic`)
        self._hurry = False  # `settle` waits: no more lingering
        self._held: list[FileLock] = []  # `hold`'s locks: kept while the process lives
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
            self._taken_at = time.monotonic()
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

    def _count(self, paths: Iterable[Path], *, register: bool) -> tuple[list[Path], list[FileLock]]:
        """`take` and `hold`, under the lock: all of them, or (an error) none."""
        over: list[Path] = []
        locks: list[FileLock] = []
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
            for lock in locks:
                release(lock)
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
        for lock in taken.locks:
            release(lock)
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
        self._working = self._hurry = False
        if self._worker is not None:
            self._worker.forget_thread()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every removal owed is done; whether it is (``False``: timed out)."""
        if not self._working:  # the usual case, no lock (a `give_back` before this set it)
            return True
        with self._done:
            self._hurry = True
            self._done.notify_all()
            return self._done.wait_for(lambda: not self._working, timeout)

    def _remove_owed(self) -> None:
        idle = False
        try:
            self._lingering()
            while not idle:
                idle = self._remove_one()
        finally:
            if not idle:  # an error: the next `give_back` starts again
                with self._lock:
                    self._idle()

    def _lingering(self) -> None:
        """Wait until no command has taken a path for `_linger` seconds, or `settle` waits."""
        with self._done:
            while not self._hurry:
                left = self._taken_at + self._linger - time.monotonic()
                if left <= 0:
                    return
                self._done.wait(left)

    def _idle(self) -> None:
        self._working = False
        self._hurry = False
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


def _exists_locked(path: Path, locks: list[FileLock]) -> bool:
    """Whether *path* exists (to bind as it is); a directory is locked shared first, so no other
    process removes it while it is bound (one removed while we waited: missing).

    The lock is never waited for long (`_LOCK_WAIT`): a remover holds it for one ``rmdir``.
    It is a file only dsh hosts reach (`dsh_plugins_builtin._sandbox._locks`), never the
    directory itself: a command that locks ``.git`` stops nothing.

    Raises:
        MountPointBusy: Still locked by another process.
    """
    if not os.path.lexists(path):
        return False
    deadline = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            lock = _lock_dir(path, fcntl.LOCK_SH | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise MountPointBusy(path) from None
            time.sleep(_LOCK_WAIT / 50)
    if lock is None:  # not a directory (never removed), removed meanwhile, or not ours to open
        return os.path.lexists(path)
    locks.append(lock)
    return True


def _lock_dir(path: Path, how: int, *, rmdir: bool = False) -> FileLock | None:
    """The lock (``flock`` *how*) that stands for the directory *path* (reached from ``/``
    through no symlink), taken while it is still that directory; ``None``: not a directory,
    gone (or replaced) meanwhile, or another user's (its owner's host removes it without our
    lock: see docs/plugins/sandbox.md). Raises ``BlockingIOError`` when it is locked otherwise
    (with ``LOCK_NB``).

    The lock is what keeps two processes off each other's mount points: a command binds an
    existing protected directory under a shared lock, and an empty mount point is removed only
    under an exclusive one, so never while another process's command is mounted on it. With
    *rmdir*, the directory is removed right after the check, through the same parent.

    Raises:
        OSError: The ``rmdir`` failed (not empty).
        LockDirUnsafe: The lock directory is not this user's alone (as `MountPointBusy`).
    """
    try:
        parent = open_dir_nofollow(str(path.parent))
    except OSError:
        return None
    try:
        seen = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.geteuid():
            return None
        try:
            lock = lock_key("dir", seen.st_dev, seen.st_ino, how)
        except LockDirUnsafe as exc:
            raise MountPointBusy(path, str(exc.strerror)) from None
        try:
            now = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
                release(lock, remove=False)
                return None
            if rmdir:
                os.rmdir(path.name, dir_fd=parent)
        except BaseException:
            release(lock)
            raise
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)
    return lock


def _remove_empty(directory: Path) -> bool:
    """``rmdir`` the canonical *directory*, reached from ``/`` through no symlink (a command may
    have swapped a parent for one, to aim the removal elsewhere), under an exclusive lock
    (`_lock_dir`); whether it was removed."""
    try:
        lock = _lock_dir(directory, fcntl.LOCK_EX | fcntl.LOCK_NB, rmdir=True)
    except OSError:
        return False  # another process's command is mounted on it (left to whoever comes
        # last), or not empty
    if lock is None:
        return False  # gone, not a directory, swapped since it was looked at
    release(lock)
    return True


LINGER: Final = 0.05
"""Seconds without a command taking them before the empty mount points are removed."""

MOUNT_POINTS = _MountPoints(linger=LINGER)
atexit.register(MOUNT_POINTS.settle, 30.0)
os.register_at_fork(after_in_child=MOUNT_POINTS.after_fork)
