"""The Landlock ruleset of a policy, built in the host once (`dsh_plugins_builtin._sandbox._landlock`)."""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from collections.abc import Sequence

from dsh_plugins_builtin._sandbox._devnodes import nodes

__all__ = ["LandlockUnavailable", "build_ruleset", "check_abi", "landlock_abi"]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FS_V1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    ]


class LandlockUnavailable(Exception):
    """Landlock cannot confine as asked on this kernel; the message says why."""


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _syscall(libc: ctypes.CDLL, *args: object) -> int:
    ctypes.set_errno(0)
    result = int(libc.syscall(*args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def landlock_abi() -> int:
    """Return the kernel's Landlock ABI version (0 when Landlock is unavailable).

    Returns:
        The ABI version, or 0 if the syscall is missing or Landlock is disabled.
    """
    try:
        return _syscall(
            _libc(),
            ctypes.c_long(_SYS_CREATE_RULESET),
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
    except OSError:
        return 0


def _fs_handled(abi: int) -> int:
    handled = _FS_V1
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    return handled


def _add_path_rule(libc: ctypes.CDLL, ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        raise LandlockUnavailable(f"cannot open {path!r}: {exc.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FS_FILE_RIGHTS  # directory-only rights are invalid on a file
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        _syscall(
            libc,
            ctypes.c_long(_SYS_ADD_RULE),
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
    except OSError as exc:
        raise LandlockUnavailable(f"landlock_add_rule({path!r}) failed: {exc.strerror}") from None
    finally:
        os.close(fd)


def check_abi(abi: int, *, block_network: bool) -> None:
    """Refuse a kernel whose Landlock cannot confine as asked (never confine partly)."""
    if abi < 1:
        raise LandlockUnavailable("Landlock is not supported or not enabled by this kernel")
    if block_network and abi < 4:
        raise LandlockUnavailable(
            f"Landlock ABI {abi} cannot restrict the network (needs ABI 4); refusing network=false"
        )
    if abi < 3:
        raise LandlockUnavailable(
            f"Landlock ABI {abi} cannot stop truncating files outside the writable roots "
            "(needs ABI 3); install bubblewrap instead"
        )
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        raise LandlockUnavailable(
            "/proc/PID/task/TID/children is missing (kernel without CONFIG_PROC_CHILDREN), so "
            "the descendants of a command cannot be found and killed"
        )


def build_ruleset(writable: Sequence[str], abi: int, *, block_network: bool) -> int:
    """The ruleset descriptor: read and execute everywhere, write under *writable* only."""
    libc = _libc()
    handled_fs = _fs_handled(abi)
    attr = _RulesetAttr(handled_access_fs=handled_fs, handled_access_net=0, scoped=0)
    if block_network:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX  # no host abstract socket, ever
    try:
        ruleset_fd = _syscall(
            libc,
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
            ctypes.c_uint32(0),
        )
    except OSError as exc:
        raise LandlockUnavailable(f"landlock_create_ruleset failed: {exc.strerror}") from None
    try:
        _add_path_rule(libc, ruleset_fd, "/", _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
        null_rights = _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE
        _add_path_rule(libc, ruleset_fd, "/dev/null", null_rights)
        own = nodes()  # a root host's own /dev/null, bound in its place (`_devnodes`)
        if own is not None:
            _add_path_rule(libc, ruleset_fd, str(own / "null"), null_rights)
        for path in writable:
            _add_path_rule(libc, ruleset_fd, path, handled_fs)
    except BaseException:
        os.close(ruleset_fd)
        raise
    return ruleset_fd
