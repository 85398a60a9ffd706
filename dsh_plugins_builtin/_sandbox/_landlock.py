r"""Landlock confinement, set up in the child between ``fork`` and ``exec`` (no runner process).

`prepare` runs in the host, once per policy: it checks the kernel's Landlock ABI, builds the
ruleset (read+execute under ``/``, read+write on the ``/dev/null`` node only, every handled right
under each writable root, the roots opened once so the rules hold the pinned directories) and
loads the seccomp program (`dsh_plugins_builtin._sandbox._seccomp`). `Prepared.preexec` is then given to
``subprocess``/``trio`` as ``preexec_fn``; in the forked child it:

1. makes the child a *supervisor*: ``PR_SET_CHILD_SUBREAPER``, then ``fork``; the supervisor
   closes every descriptor, waits for the command, and on its exit (or on ``SIGTERM`` from the
   host, for a timeout or a cancellation) ``SIGKILL``\s every descendant still alive, the ones
   that called ``setsid``/``setpgid`` included (they were re-parented to it), then exits with
   the command's status;
2. in the grandchild, which goes on to ``exec`` the command: ``PR_SET_PDEATHSIG(SIGKILL)``,
   ``PR_SET_NO_NEW_PRIVS``, ``landlock_restrict_self`` with ABI 5 ``IOCTL_DEV`` handled (no
   ``ioctl`` on any device outside the writable roots) and the ABI 6 scopes (signals always,
   abstract Unix sockets with ``network = false``), a private IPC namespace (through a user
   namespace for an ordinary user, where the kernel allows one), every capability dropped (bounding set,
   ambient, effective, permitted, inheritable), then the seccomp filter.

The host's Python interpreter is forked, never started, per command. Any failure to confine
in the child prints one stderr line starting ``landlock-run: `` and exits 125, before the
command runs. An ABI below 3 (no ``TRUNCATE`` right) or, with ``network = false``, below 4 (no
TCP rules) is refused in `prepare`: the backend never confines partly.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import stat
import struct
from collections.abc import Iterator, Sequence
from typing import NoReturn

from dsh_plugins_builtin._sandbox._seccomp import SeccompUnavailable, filter_bpf

__all__ = [
    "EXIT_RUNNER_FAILURE",
    "PREFIX",
    "REPORT",
    "REPORT_STATUS",
    "LandlockUnavailable",
    "Prepared",
    "exited",
    "landlock_abi",
    "prepare",
]

PREFIX = "landlock-run: "
EXIT_RUNNER_FAILURE = 125

# The Landlock syscalls have the same numbers on every architecture.
REPORT = struct.Struct("=ii")  # a fork-server launcher's (kind, value) records to the host
REPORT_STATUS = 3  # the kind of the record that carries the command's exit code

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

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


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


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
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


@functools.cache
def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 63


class Prepared:
    """A ruleset and a seccomp program built once, applied in each child by `preexec`."""

    def __init__(self, ruleset_fd: int, program: bytes, abi: int) -> None:
        """Keep the ruleset descriptor and the filter; nothing is applied yet.

        Args:
            ruleset_fd: The Landlock ruleset (close-on-exec; lives as long as the host).
            program: The raw seccomp BPF program.
            abi: The kernel's Landlock ABI.
        """
        self.ruleset_fd = ruleset_fd
        self.abi = abi
        self.program = program
        self._program = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len=len(program) // 8, filter=ctypes.addressof(self._program))
        self._libc = _libc()
        self._cap_last = _cap_last()
        machine = os.uname().machine
        if machine not in _SYS_CAPSET:
            raise LandlockUnavailable(f"cannot drop capabilities on architecture {machine!r}")
        self._nr_capset = _SYS_CAPSET[machine]
        self._cap_header = _CapHeader(version=_LINUX_CAPABILITY_VERSION_3, pid=0)
        self._cap_data = (_CapData * 2)()

    @functools.cached_property
    def program_hex(self) -> str:
        """The seccomp program as hex text (the fork server's request carries it), made once."""
        return self.program.hex()

    def _fail(self, what: str) -> NoReturn:
        err = ctypes.get_errno()
        message = f"{PREFIX}{what} failed: {os.strerror(err)}\n".encode()
        try:
            os.write(2, message)
        finally:
            os._exit(EXIT_RUNNER_FAILURE)

    def _prctl(self, what: str, *args: int) -> int:
        ctypes.set_errno(0)
        result = int(self._libc.prctl(*(ctypes.c_ulong(a) for a in args)))
        if result < 0:
            self._fail(what)
        return result

    def _private_ipc(self) -> None:
        """A new IPC namespace, so SysV shared memory and semaphores die with the command.

        Root unshares it directly; an ordinary user goes through a user namespace mapping only
        its own uid and gid. Where neither is allowed (user namespaces disabled) SysV IPC stays
        shared with the host: a documented limit of this backend.
        """
        libc = self._libc
        if libc.unshare(ctypes.c_int(_CLONE_NEWIPC)) == 0:
            return
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWIPC)) != 0:
            return
        for name, text in (
            ("uid_map", f"{uid} {uid} 1\n"),
            ("setgroups", "deny\n"),
            ("gid_map", f"{gid} {gid} 1\n"),
        ):
            try:
                fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
                try:
                    os.write(fd, text.encode())
                finally:
                    os.close(fd)
            except OSError:
                self._fail(f"writing /proc/self/{name} in the new user namespace")

    def confine_self(self) -> None:
        """Confine the calling process for good (no way back). Call only in a forked child."""
        libc = self._libc
        self._private_ipc()
        self._prctl("prctl(PR_SET_PDEATHSIG)", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        self._prctl("prctl(PR_SET_NO_NEW_PRIVS)", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        ctypes.set_errno(0)
        if (
            libc.syscall(
                ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(self.ruleset_fd), ctypes.c_uint32(0)
            )
            < 0
        ):
            self._fail("landlock_restrict_self")
        privileged = os.geteuid() == 0
        for cap in range(self._cap_last + 1):
            ctypes.set_errno(0)
            dropped = libc.prctl(ctypes.c_ulong(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), 0, 0, 0)
            # Without CAP_SETPCAP (an ordinary user) the bounding set cannot shrink; with no
            # capabilities and no_new_privs it can never be used either.
            if dropped < 0 and privileged:
                self._fail(f"dropping capability {cap} from the bounding set")
        ctypes.set_errno(0)
        libc.prctl(
            ctypes.c_ulong(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0
        )
        ctypes.set_errno(0)
        if (
            libc.syscall(
                ctypes.c_long(self._nr_capset),
                ctypes.byref(self._cap_header),
                ctypes.byref(self._cap_data),
            )
            < 0
        ):
            self._fail("capset")
        ctypes.set_errno(0)
        if (
            libc.prctl(
                ctypes.c_ulong(_PR_SET_SECCOMP),
                ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                ctypes.byref(self._fprog),
                0,
                0,
            )
            < 0
        ):
            self._fail("installing the seccomp filter")

    def preexec(self) -> None:
        """The ``preexec_fn``: fork a supervisor, confine the grandchild, which then execs."""
        blocked = {signal.SIGTERM, signal.SIGCHLD}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        self._prctl("prctl(PR_SET_CHILD_SUBREAPER)", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        try:
            pid = os.fork()
        except OSError:
            self._fail("fork")
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            self.confine_self()
            return
        _supervise(pid)


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as handle:
            return [int(pid) for pid in handle.read().split()]
    except (OSError, ValueError):
        return []


def exited() -> Iterator[tuple[int, int]]:
    """Reap the children that have exited, without waiting: ``(pid, wait status)`` each."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child at all
            return
        if pid == 0:  # none has exited (yet)
            return
        yield pid, status


def _kill_descendants() -> None:
    """SIGKILL every child until none is left (orphans of killed ones come back as children)."""
    while True:
        kids = _children()
        if not kids:
            while True:  # reap anything /proc did not list
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    break
            continue
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in kids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _supervise(child: int, report: int = -1) -> NoReturn:
    """Wait for the command, then kill every descendant; exit as the command did.

    *report*: a socket kept open, on which the command's exit code is sent before exiting
    (the fork server's launcher; see `dsh_plugins_builtin._sandbox._forkserver`).
    """
    status: int | None = None
    try:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        top = os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536
        if report < 0:
            os.closerange(3, top)
        else:
            os.closerange(3, report)
            os.closerange(report + 1, top)
        while status is None:
            info = signal.sigwaitinfo({signal.SIGTERM, signal.SIGCHLD})
            if info.si_signo == signal.SIGTERM:
                break
            for pid, st in exited():
                if pid == child:
                    status = st
                    break
        _kill_descendants()
    finally:
        if report >= 0:
            code = -signal.SIGKILL if status is None else os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                os.write(report, REPORT.pack(REPORT_STATUS, code))
        if status is None or os.WIFSIGNALED(status):
            sig = signal.SIGKILL if status is None else os.WTERMSIG(status)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status))


def prepare(writable: Sequence[str], *, block_network: bool) -> Prepared:
    """Build the ruleset and the seccomp program for one policy (in the host, once).

    Args:
        writable: The writable roots (real paths; opened now, so later swaps do not matter).
        block_network: Refuse TCP (Landlock ABI 4), abstract Unix sockets (ABI 6) and every
            socket family but ``AF_UNIX`` (seccomp).

    Returns:
        The prepared confinement; hand `Prepared.preexec` to the spawn.

    Raises:
        LandlockUnavailable: This kernel cannot confine as asked (the message says why).
    """
    libc = _libc()
    abi = landlock_abi()
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
    try:
        program = filter_bpf(block_network)
    except SeccompUnavailable as exc:
        raise LandlockUnavailable(str(exc)) from None
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
        raise LandlockUnavailable(f"landlock_create_ruleset failed: {exc.strerror}") from None
    try:
        _add_path_rule(libc, ruleset_fd, "/", _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
        null_rights = _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE
        _add_path_rule(libc, ruleset_fd, "/dev/null", null_rights)
        for path in writable:
            _add_path_rule(libc, ruleset_fd, path, handled_fs)
        return Prepared(ruleset_fd, program, abi)
    except BaseException:
        os.close(ruleset_fd)
        raise
