"""Locks only dsh hosts can reach: files in a directory of this user's that no command sees.

A lock taken on something a command can open (a protected ``.git``, the private tmp) can be
taken by the command too: ``flock -x .git sleep 1000`` in the background then made every later
command of every host on that workspace refuse (`MountPointBusy`). So a lock is never taken on
the object itself: it is a file named after the object's device and inode, in `lock_dir`
(``/dev/shm/dsh-locks-UID``; ``tempfile.gettempdir()`` instead where there is no
``/dev/shm``), a ``0700`` directory this user owns (checked: another user's is refused). Both
backends replace ``/dev/shm`` (bwrap mounts a fresh ``/dev``, Landlock's mount namespace a
fresh tmpfs on ``/dev/shm``), and a configured root that would show the directory gets an
empty read-only tmpfs over it (`dsh_plugins_builtin._sandbox._layout.Layout.locks_now`).

A lock file is removed by whoever can take it exclusively once done (`release`), and one left
by a host killed outright by the next host's `sweep`; whoever locks one checks it is still
the file at that name, and starts again if it was removed meanwhile (`lock_key`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import threading
from pathlib import Path

import attrs

__all__ = ["FileLock", "LockDirUnsafe", "lock_dir", "lock_key", "release", "sweep"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SUFFIX = ".lock"


class LockDirUnsafe(OSError):
    """`lock_dir` is not a directory of this user's alone: no lock is taken there."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            errno.EPERM,
            f'dsh\'s lock directory "{path}" {why}; remove it (another user may have made it '
            "to block dsh) and try again",
        )


@attrs.frozen
class FileLock:
    """A held lock: its descriptor, and its file's name in `lock_dir` (``dir_fd``)."""

    fd: int
    name: str
    dir_fd: int


def lock_dir() -> Path:
    """Where this user's dsh hosts keep their lock files."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return Path(base, f"dsh-locks-{os.geteuid()}")


_guard = threading.Lock()
_opened: dict[Path, int] = {}  # never closed: another thread may be using one


def _dir_fd() -> int:
    """A descriptor of `lock_dir`, made if missing and checked; kept while it is linked."""
    path = lock_dir()
    with _guard:
        fd = _opened.get(path)
        if fd is not None and os.fstat(fd).st_nlink > 0:
            return fd
        fd = _open_dir(path)
        _opened[path] = fd
        return fd


def _open_dir(path: Path) -> int:
    """Open (making it ``0700`` first if missing) *path*, which must be this user's directory.

    Raises:
        LockDirUnsafe: It is another user's, or not a directory.
    """
    base = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, 0o700, dir_fd=base)
        try:
            fd = os.open(path.name, _DIR_FLAGS, dir_fd=base)
        except OSError:
            raise LockDirUnsafe(path, "is not a directory") from None
    finally:
        os.close(base)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise LockDirUnsafe(path, f"belongs to user {info.st_uid}")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.fchmod(fd, 0o700)  # ours: only we may enter it
    return fd


def _open_file(dir_fd: int, name: str) -> int:
    """Open (creating it ``0600``) the lock file *name*; anything else planted under that name
    (a link, a FIFO: a root that shows `lock_dir` to the file tools) is removed first."""
    for _ in range(3):
        try:
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
        else:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                return fd
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
    raise LockDirUnsafe(lock_dir(), f"holds {name}, which is not a file of this user's")


def _linked(lock: FileLock) -> bool:
    """Whether *lock*'s file is still the one at its name (not removed after it was opened)."""
    try:
        now = os.stat(lock.name, dir_fd=lock.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(lock.fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def lock_key(kind: str, dev: int, ino: int, how: int) -> FileLock:
    """Lock (``flock`` *how*) the file that stands for the object (*kind*, *dev*, *ino*).

    Raises:
        BlockingIOError: Held otherwise (with ``LOCK_NB``).
        LockDirUnsafe: `lock_dir` is not this user's alone.
    """
    return _lock_name(f"{kind}-{dev:x}-{ino:x}{_SUFFIX}", how)


def _lock_name(name: str, how: int) -> FileLock:
    dir_fd = _dir_fd()
    while True:
        lock = FileLock(_open_file(dir_fd, name), name, dir_fd)
        try:
            fcntl.flock(lock.fd, how)
            if _linked(lock):
                return lock
        except BaseException:
            os.close(lock.fd)
            raise
        os.close(lock.fd)  # removed by its last holder meanwhile: a new one


def release(lock: FileLock, *, remove: bool = True) -> None:
    """Let *lock* go; with *remove*, its file is removed first if no one else holds it (so lock
    files do not pile up: one for every ``.git`` dsh ever bound)."""
    try:
        if remove:
            try:
                fcntl.flock(lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            if _linked(lock):
                os.unlink(lock.name, dir_fd=lock.dir_fd)
    finally:
        os.close(lock.fd)


def sweep() -> int:
    """Remove the lock files no one holds (left by hosts killed outright); how many."""
    try:
        dir_fd = _dir_fd()
        names = os.listdir(dir_fd)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        try:
            lock = _lock_name(name, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue
        os.unlink(name, dir_fd=dir_fd)
        os.close(lock.fd)
        removed += 1
    return removed
