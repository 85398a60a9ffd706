"""Landlock runner: confine this process, then exec a command.

Usage::

    python -I -m dsh_plugins_builtin._landlock [--rw PATH]... [--no-net] -- CMD [ARG...]

(`dsh_plugins_builtin._confine` runs this file by path with ``python -I``, so a workspace cannot
shadow it through ``sys.path``.) The module is stdlib-only and talks to the kernel through
``ctypes`` syscalls:

1. ``prctl(PR_SET_NO_NEW_PRIVS)``;
2. ``landlock_create_ruleset`` handling every filesystem right the kernel's ABI knows (except
   ``IOCTL_DEV``), then ``landlock_add_rule`` granting read+execute under ``/``, read+write on
   the ``/dev/null`` node only, and every right under each ``--rw`` path;
3. with ``--no-net``: Landlock ABI >= 4 TCP bind/connect rules (none granted, so all denied),
   ABI >= 6 abstract-unix-socket scoping, **and** a seccomp filter that refuses ``socket()`` for
   every family except ``AF_UNIX`` and refuses ``io_uring_setup`` (Landlock's net rules cover TCP
   only, so without the filter UDP, e.g. DNS, would still leave the box). Below ABI 4, or on an
   architecture the filter does not know, ``--no-net`` is refused: the runner never pretends;
4. ABI >= 6: signal scoping, so the command cannot signal processes outside its domain;
5. ``landlock_restrict_self`` and ``execvp(CMD)``.

Any failure to confine exits 125 with one stderr line starting ``landlock-run: ``. That
includes an ABI below 3, which has no ``TRUNCATE`` right (a file outside the roots could still
be truncated): the runner fails closed rather than confine partly.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import sys
from collections.abc import Sequence

__all__ = ["EXIT_RUNNER_FAILURE", "PREFIX", "landlock_abi", "main"]

PREFIX = "landlock-run: "
EXIT_RUNNER_FAILURE = 125

# The Landlock syscalls have the same numbers on every architecture.
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
_FS_V1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EACCES = 13
_AF_UNIX = 1

# machine -> (AUDIT_ARCH, __NR_socket, __NR_io_uring_setup)
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


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


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [
        ("len", ctypes.c_uint16),
        ("filter", ctypes.POINTER(_SockFilter)),
    ]


class _RunnerError(Exception):
    """Confinement could not be established."""


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
    return handled  # IOCTL_DEV (ABI 5) is deliberately left unhandled


def _add_path_rule(libc: ctypes.CDLL, ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        raise _RunnerError(f"cannot open {path!r}: {exc.strerror}") from None
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
        raise _RunnerError(f"landlock_add_rule({path!r}) failed: {exc.strerror}") from None
    finally:
        os.close(fd)


def _install_net_filter(libc: ctypes.CDLL) -> None:
    machine = platform.machine()
    if machine not in _SECCOMP_ARCHES:
        raise _RunnerError(f"cannot block the network on architecture {machine!r}")
    audit_arch, nr_socket, nr_io_uring_setup = _SECCOMP_ARCHES[machine]
    ld_abs = 0x20  # BPF_LD | BPF_W | BPF_ABS
    jeq = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
    jge = 0x35  # BPF_JMP | BPF_JGE | BPF_K
    ret = 0x06  # BPF_RET | BPF_K
    program = [
        (ld_abs, 0, 0, 4),  # 0: A = seccomp_data.arch
        (jeq, 0, 7, audit_arch),  # 1: foreign arch -> deny (9)
        (ld_abs, 0, 0, 0),  # 2: A = seccomp_data.nr
        (jge, 5, 0, 0x40000000),  # 3: x32 syscalls -> deny (9)
        (jeq, 4, 0, nr_io_uring_setup),  # 4: io_uring (socket ops bypass socket()) -> deny
        (jeq, 0, 2, nr_socket),  # 5: not socket() -> allow (8)
        (ld_abs, 0, 0, 16),  # 6: A = low 32 bits of args[0] (little-endian)
        (jeq, 0, 1, _AF_UNIX),  # 7: AF_UNIX -> allow (8), else deny (9)
        (ret, 0, 0, _SECCOMP_RET_ALLOW),  # 8
        (ret, 0, 0, _SECCOMP_RET_ERRNO | _EACCES),  # 9
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    prog = _SockFprog(len=len(program), filter=filters)
    ctypes.set_errno(0)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise _RunnerError(f"installing the seccomp network filter failed: {os.strerror(err)}")


def _confine(writable: Sequence[str], *, block_network: bool) -> None:
    libc = _libc()
    abi = landlock_abi()
    if abi < 1:
        raise _RunnerError("Landlock is not supported or not enabled by this kernel")
    if block_network and abi < 4:
        raise _RunnerError(
            f"Landlock ABI {abi} cannot restrict the network (needs ABI 4); refusing network=false"
        )
    if abi < 3:
        raise _RunnerError(
            f"Landlock ABI {abi} cannot stop truncating files outside the writable roots "
            "(needs ABI 3); install bubblewrap instead"
        )
    ctypes.set_errno(0)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _RunnerError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")

    handled_fs = _fs_handled(abi)
    attr = _RulesetAttr(handled_access_fs=handled_fs, handled_access_net=0, scoped=0)
    if block_network:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | (_SCOPE_ABSTRACT_UNIX if block_network else 0)
    try:
        ruleset_fd = _syscall(
            libc,
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
            ctypes.c_uint32(0),
        )
    except OSError as exc:
        raise _RunnerError(f"landlock_create_ruleset failed: {exc.strerror}") from None
    try:
        _add_path_rule(libc, ruleset_fd, "/", _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
        null_rights = _FS_READ_FILE | _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        _add_path_rule(libc, ruleset_fd, "/dev/null", null_rights)
        for path in writable:
            _add_path_rule(libc, ruleset_fd, path, handled_fs)
        if block_network:
            _install_net_filter(libc)
        try:
            _syscall(
                libc,
                ctypes.c_long(_SYS_RESTRICT_SELF),
                ctypes.c_int(ruleset_fd),
                ctypes.c_uint32(0),
            )
        except OSError as exc:
            raise _RunnerError(f"landlock_restrict_self failed: {exc.strerror}") from None
    finally:
        os.close(ruleset_fd)


def _parse(argv: Sequence[str]) -> tuple[list[str], bool, list[str]]:
    writable: list[str] = []
    block_network = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            command = list(argv[i + 1 :])
            if not command:
                raise _RunnerError("no command after --")
            return writable, block_network, command
        if arg == "--rw" and i + 1 < len(argv):
            writable.append(argv[i + 1])
            i += 2
        elif arg == "--no-net":
            block_network = True
            i += 1
        else:
            raise _RunnerError(f"unexpected argument {arg!r}")
    raise _RunnerError("usage: _landlock [--rw PATH]... [--no-net] -- CMD [ARG...]")


def main(argv: Sequence[str] | None = None) -> int:
    """Confine the current process and exec the command; return only on failure.

    Args:
        argv: The arguments (defaults to ``sys.argv[1:]``).

    Returns:
        125 when confinement failed, 127 (or 126) when the command could not be executed.
    """
    try:
        writable, block_network, command = _parse(sys.argv[1:] if argv is None else argv)
        _confine(writable, block_network=block_network)
    except _RunnerError as exc:
        print(f"{PREFIX}{exc}", file=sys.stderr, flush=True)
        return EXIT_RUNNER_FAILURE
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"{command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127 if isinstance(exc, FileNotFoundError) else 126


if __name__ == "__main__":
    sys.exit(main())
