"""Open a path beneath a directory descriptor without ever following a symlink.

The file fence decides *which* real path a call may touch; this module makes sure the file
that is then opened is that path, even when a hostile process swaps a directory for a
symlink while the call runs. Two ways, chosen once at import:

* Linux >= 5.6: ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS``. The kernel refuses any symlink, any ``..`` that climbs out and any
  ``/proc`` magic link at every component (``ELOOP`` / ``EXDEV``), atomically.
* elsewhere (or when ``openat2`` is filtered, e.g. by a seccomp profile that predates it): a
  walk from the directory descriptor, one component at a time, each opened
  ``O_PATH | O_DIRECTORY | O_NOFOLLOW``, the last with ``O_NOFOLLOW``.

Hand-written because no maintained PyPI distribution binds ``openat2`` (checked December
2026); ``os`` has no binding either. It is a single ``syscall(2)`` through ``ctypes``.

The paths handed in here are already canonical (the fence resolved every symlink the model
spelled, so symlinks *inside* a root that stay inside keep working); what is refused here is
only a symlink that appeared after that resolution.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
from typing import Any, Final

__all__ = [
    "HAVE_OPENAT2",
    "makedirs_nofollow",
    "mkdir_beneath",
    "open_absolute",
    "open_beneath",
    "open_dir_nofollow",
    "open_normal",
]

_O_PATH: Final[int] = getattr(os, "O_PATH", os.O_RDONLY)
DIR_FLAGS: Final[int] = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS

# openat2 is 437 on every architecture of the unified syscall table (x86, arm, arm64, riscv,
# powerpc, s390, ...); alpha, mips and ia64 differ and use the walk.
_SYS_OPENAT2 = 437


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _load_openat2() -> Any:
    """``syscall(SYS_openat2, ...)`` as a typed ctypes function, or ``None`` off Linux."""
    if platform.system() != "Linux" or platform.machine().startswith(("alpha", "mips", "ia64")):
        return None  # those number their syscalls differently: walk instead
    try:
        # The process's own symbols (libc among them), as `_ruleset` loads them:
        # ctypes.util.find_library("c") would run ldconfig at every start (issue 27).
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prototype = ctypes.CFUNCTYPE(
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(_OpenHow),
        ctypes.c_size_t,
        use_errno=True,
    )
    return prototype(("syscall", libc))


_syscall = _load_openat2()
_HOW_SIZE = ctypes.sizeof(_OpenHow)


_HOWS: dict[tuple[int, int], _OpenHow] = {}  # read-only once made: safe to share across threads


def _openat2(dirfd: int, path: str, flags: int, mode: int) -> int:
    mode = mode if flags & os.O_CREAT else 0
    how = _HOWS.get((flags, mode))
    if how is None:
        how = _HOWS[flags, mode] = _OpenHow(flags, mode, _RESOLVE)
    fd: int = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), how, _HOW_SIZE)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _probe() -> bool:
    if _syscall is None:
        return False
    root = os.open("/", DIR_FLAGS)
    try:
        fd = _openat2(root, ".", DIR_FLAGS, 0)
    except OSError:
        return False  # ENOSYS (old kernel) or EPERM (a seccomp filter): walk instead
    finally:
        os.close(root)
    os.close(fd)
    return True


HAVE_OPENAT2: Final[bool] = _probe()
"""Whether ``openat2`` works here (else `open_beneath` walks component by component)."""


def _split(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        # Canonical paths never hold "..": refuse rather than climb.
        raise OSError(errno.EXDEV, "path climbs out of its root", rel)
    return parts


def _open_nofollow(name: str, flags: int, mode: int, dirfd: int) -> int:
    """``openat`` with ``O_NOFOLLOW``; a symlink met is ``ELOOP`` whatever the flags say."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dirfd)
    except NotADirectoryError:
        # O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: tell a symlink from a file.
        if _is_link(name, dirfd):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def _is_link(rel: str, dirfd: int) -> bool:
    """Whether ``rel`` is a symlink now (only to classify an error; never to decide access)."""
    try:
        return stat.S_ISLNK(os.stat(rel, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _walk(dirfd: int, parts: list[str]) -> int:
    """Open the directory ``parts`` beneath ``dirfd`` one component at a time (a new fd)."""
    fd = os.dup(dirfd)
    try:
        for name in parts:
            child = _open_nofollow(name, DIR_FLAGS, 0, fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0o666, *, walk: bool = False) -> int:
    """Open ``rel`` beneath ``dirfd``, following no symlink and never leaving ``dirfd``.

    Args:
        dirfd: A directory descriptor (``O_PATH`` is enough).
        rel: A path relative to it, with no symlinks and no ``..`` (``""`` or ``"."``: the
            directory itself).
        flags: ``os.open`` flags; ``O_NOFOLLOW`` and ``O_CLOEXEC`` are added.
        mode: The mode of a file ``O_CREAT`` makes.
        walk: Walk component by component even where ``openat2`` works (tests use it).

    Returns:
        A new descriptor.

    Raises:
        OSError: ``ELOOP`` (a symlink on the way), ``EXDEV`` (an escape), or as ``open`` would.
    """
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    parts = _split(rel)
    if HAVE_OPENAT2 and not walk:
        joined = "/".join(parts) or "."
        try:
            return _openat2(dirfd, joined, flags, mode)
        except NotADirectoryError:
            # O_DIRECTORY | O_NOFOLLOW on a final symlink says ENOTDIR: tell it from a file.
            if _is_link(joined, dirfd):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), joined) from None
            raise
    if not parts:
        return os.open(".", flags & ~os.O_NOFOLLOW, mode, dir_fd=dirfd)
    parent = _walk(dirfd, parts[:-1])
    try:
        return _open_nofollow(parts[-1], flags, mode, parent)
    finally:
        os.close(parent)


def mkdir_beneath(dirfd: int, rel: str, mode: int = 0o777, *, walk: bool = False) -> int:
    """Open the directory ``rel`` beneath ``dirfd``, creating missing levels; a new ``O_PATH`` fd.

    Each level is created with ``mkdirat`` in its held parent and opened ``O_NOFOLLOW``, so a
    symlink raced in at any level fails (``ELOOP`` / ``ENOTDIR``) instead of being followed.
    """
    for attempt in range(_RETRIES):
        try:
            return _mkdir_walk(dirfd, rel, mode, walk)
        except FileNotFoundError:  # a level held was removed meanwhile: walk again from the top
            if attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")


_RETRIES: Final = 3
"""Walks `mkdir_beneath` makes when a level it holds is removed meanwhile (an empty mount point
the sandbox made and removes after a command, where the host makes its spill directory)."""


def _mkdir_walk(dirfd: int, rel: str, mode: int, walk: bool) -> int:
    fd = os.dup(dirfd)
    try:
        for name in _split(rel):
            try:
                child = open_beneath(fd, name, DIR_FLAGS, walk=walk)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                child = open_beneath(fd, name, DIR_FLAGS, walk=walk)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


_SLASH_FD: Final[int] = os.open("/", DIR_FLAGS)  # "/" itself is never a symlink


def _slash() -> int:
    """A descriptor of ``/``, opened once at import (one less open per call)."""
    return _SLASH_FD


def open_absolute(path: str, flags: int, *, walk: bool = False) -> int:
    """Open the absolute, canonical ``path`` from ``/``, following no symlink at any component.

    One ``openat2`` where it works (else the walk, one ``openat`` per component).
    """
    return open_beneath(_slash(), path.lstrip("/"), flags, walk=walk)


def open_normal(path: str, flags: int) -> int:
    """`open_absolute` for a *path* already normal (absolute, no empty, ``.`` or ``..``
    component: the caller made it so), where ``openat2`` works: one ``openat2`` from ``/``, the
    path not split again. The kernel still refuses any symlink, and any climb out of ``/``."""
    rel = path[1:] or "."
    try:
        return _openat2(_SLASH_FD, rel, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0)
    except NotADirectoryError:
        # O_DIRECTORY | O_NOFOLLOW on a final symlink says ENOTDIR: tell it from a file.
        if _is_link(rel, _SLASH_FD):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel) from None
        raise


def open_dir_nofollow(path: str, *, walk: bool = False) -> int:
    """Open the absolute, canonical directory ``path`` from ``/`` following no symlink."""
    return open_beneath(_slash(), path.lstrip("/"), DIR_FLAGS | os.O_DIRECTORY, walk=walk)


def makedirs_nofollow(path: str, mode: int = 0o700, *, walk: bool = False) -> int:
    """Open the absolute, canonical directory ``path``, creating missing levels with ``mode``.

    Nothing on the way may be a symlink (``ELOOP``): for host-side files (spill files) whose
    directory an agent might swap for a link while the host runs.
    """
    return mkdir_beneath(_slash(), path.lstrip("/"), mode, walk=walk)
