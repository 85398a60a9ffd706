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

import ctypes
import fcntl
import functools
import os
import resource
import signal
import socket
import struct
from collections.abc import Sequence
from typing import NoReturn

from dsh_plugins_builtin._sandbox import _mountns
from dsh_plugins_builtin._sandbox._ruleset import (
    _SYS_RESTRICT_SELF,
    LandlockUnavailable,
    _libc,
    build_ruleset,
    check_abi,
    landlock_abi,
)
from dsh_plugins_builtin._sandbox._seccomp import SeccompUnavailable, filter_bpf
from dsh_plugins_builtin._sandbox._supervisor import REPORT, REPORT_STATUS, exited, supervise

__all__ = [
    "EXIT_RUNNER_FAILURE",
    "PREFIX",
    "REPORT",
    "REPORT_STATUS",
    "LandlockUnavailable",
    "Prepared",
    "die_with_parent",
    "exited",
    "landlock_abi",
    "prepare",
    "unshare_namespaces",
]

PREFIX = "landlock-run: "
EXIT_RUNNER_FAILURE = 125

# The Landlock syscalls have the same numbers on every architecture.

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWUSER = 0x10000000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


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


@functools.cache
def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 63


class Prepared:
    """A ruleset and a seccomp program built once, applied in each child by `preexec`."""

    def __init__(
        self,
        ruleset_fd: int,
        program: bytes,
        abi: int,
        plan: _mountns.Plan = (),
        limits: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Keep the ruleset descriptor and the filter; nothing is applied yet.

        Args:
            ruleset_fd: The Landlock ruleset (close-on-exec; lives as long as the host).
            program: The raw seccomp BPF program.
            abi: The kernel's Landlock ABI; ``0`` only in a bwrap view (`_views`), whose
                mounts confine the files: no Landlock ruleset is applied then.
            plan: The command's mount namespace (`dsh_plugins_builtin._sandbox._mountns`);
                empty: the host's view, no namespace (probes).
            limits: ``(RLIMIT_*, value)`` set, soft and hard, just before the filter.
        """
        self.plan = plan
        self.limits = tuple(limits)
        self.fresh = True  # the plan's mount namespace is still to make (`_ahead.EARLY`)
        self.cwd: str | None = None  # the working directory to enter in it (default: the one)
        self.host_pid = os.getpid()  # `preexec`'s parent: the host that made it
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

    def with_plan(
        self, plan: _mountns.Plan, *, fresh: bool = True, cwd: str | None = None
    ) -> Prepared:
        """The same ruleset and filter with another mount plan (no rule is built again); with
        *fresh* false, one to carry out in the mount namespace the caller made already; with
        *cwd*, the working directory to enter after it (default: the caller's, by its path)."""
        prepared = Prepared(self.ruleset_fd, self.program, self.abi, plan, self.limits)
        prepared.fresh = fresh
        prepared.cwd = cwd
        return prepared

    @functools.cached_property
    def program_hex(self) -> str:
        """The seccomp program as hex text (the fork server's request carries it), made once."""
        return self.program.hex()

    @staticmethod
    def fail_early(what: str) -> NoReturn:
        """A command forked ahead failed its early steps (no output to say it on yet): it exits,
        and its launcher takes no request (`_ahead.EarlyFailed`)."""
        os._exit(EXIT_RUNNER_FAILURE)

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

    def unshare(self) -> None:
        """Before the command is forked: new PID and IPC namespaces, so that the command is
        PID 1 of its own (the host's processes are out of its sight and reach, and every
        process in it dies with it) and SysV IPC dies with it.

        Root unshares them directly; an ordinary user goes through a user namespace mapping
        only its own uid and gid. Where that is not allowed (user namespaces disabled) this
        fails, and so does the command: it never runs with the host's processes in view.
        Without a plan (a probe) nothing is unshared.
        """
        if not self.plan:
            return
        try:
            unshare_namespaces()
        except OSError as exc:
            ctypes.set_errno(exc.errno or 0)
            self._fail(str(exc.strerror))

    def confine_self(self) -> None:
        """Confine the calling process for good (no way back). Call only in a forked child."""
        libc = self._libc
        if self.plan:
            _mountns.apply(libc, self.plan, self._fail, fresh=self.fresh, cwd=self.cwd)
        self._prctl("prctl(PR_SET_PDEATHSIG)", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        self._prctl("prctl(PR_SET_NO_NEW_PRIVS)", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        ctypes.set_errno(0)
        if self.abi and (
            libc.syscall(
                ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(self.ruleset_fd), ctypes.c_uint32(0)
            )
            < 0
        ):
            self._fail("landlock_restrict_self")
        if not _BOUNDED:
            failed = drop_bounding_set(libc, self._cap_last)
            # Without CAP_SETPCAP (an ordinary user) the bounding set cannot shrink; with no
            # capabilities and no_new_privs it can never be used either.
            if failed is not None and os.geteuid() == 0:
                self._fail(f"dropping capability {failed} from the bounding set")
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
        for which, value in self.limits:
            try:
                resource.setrlimit(which, (value, value))
            except (OSError, ValueError):
                self._fail(f"setting resource limit {which}")
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
        if not self.abi:  # a view's request (no Landlock): never run by forking the host
            self._fail("confining without Landlock outside a bwrap view")
        blocked = {signal.SIGTERM, signal.SIGCHLD}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        self._prctl("prctl(PR_SET_CHILD_SUBREAPER)", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # The host killed outright: SIGTERM, and the supervisor kills everything under it.
        self._prctl("prctl(PR_SET_PDEATHSIG)", _PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != self.host_pid:  # the host ended before that took
            os._exit(EXIT_RUNNER_FAILURE)
        self.unshare()
        try:
            pid = os.fork()
        except OSError:
            self._fail("fork")
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            self.confine_self()
            return
        supervise(pid)


VIEW: list[int] = []
"""Set once in a kept bwrap view's fork server (`_forkserver.serve`): the extra namespaces each
command gets there (``CLONE_NEWNET`` unless the view shares the host's network)."""


_BOUNDED: list[bool] = []
"""Set in a command's process forked ahead once its bounding set is empty (`drop_early`)."""


def die_with_parent() -> None:
    """``SIGKILL`` when the calling thread's parent ends (``PR_SET_PDEATHSIG``); `OSError` if
    that cannot be set."""
    ctypes.set_errno(0)
    if _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def drop_bounding_set(libc: ctypes.CDLL, cap_last: int) -> int | None:
    """Drop every capability from the calling thread's bounding set (the ones it holds stay
    in use: a mount still can be made, and what is dropped can never be gained again); the
    first capability that could not be dropped, or ``None``."""
    failed = None
    for cap in range(cap_last + 1):
        ctypes.set_errno(0)
        if libc.prctl(ctypes.c_ulong(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), 0, 0, 0) < 0:
            failed = cap if failed is None else failed
    return failed


def drop_early() -> None:
    """In a command's process forked ahead, while it waits for its request: empty the
    bounding set now (41 system calls off the command's path), which `Prepared.confine_self`
    then skips. Where that fails nothing is marked, and `confine_self` tries again and says
    why."""
    if drop_bounding_set(_libc(), _cap_last()) is None:
        _BOUNDED.append(True)


def unshare_namespaces() -> None:
    """`Prepared.unshare`'s namespaces for the caller's next child (PID, IPC; through a user
    namespace mapping only the caller's uid and gid for an ordinary user, in a bwrap view too,
    where a network namespace of its own is made as well unless the view shares the host's).

    Raises:
        OSError: They cannot be made; its ``strerror`` names the step (`Prepared._fail`).
    """
    libc = _libc()
    flags = _CLONE_NEWPID | _CLONE_NEWIPC | (VIEW[0] if VIEW else 0)
    ctypes.set_errno(0)
    if os.geteuid() == 0:  # (root: no process limit to share with the view's other commands)
        if libc.unshare(ctypes.c_int(flags)) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID | CLONE_NEWIPC)")
        if flags & _CLONE_NEWNET:
            _loopback_up()
        return
    # In a view too, an ordinary user's command gets a user namespace of its own (the same
    # ids): the kernel counts processes per user and user namespace, and commands sharing the
    # view's would share one `processes` limit.
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(ctypes.c_int(_CLONE_NEWUSER | flags)) != 0:
        what = "unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC): user namespaces"
        raise OSError(ctypes.get_errno(), what)
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
        except OSError as exc:
            what = f"writing /proc/self/{name} in the new user namespace"
            raise OSError(exc.errno, what) from None
    if flags & _CLONE_NEWNET:
        _loopback_up()


def _loopback_up() -> None:
    """Bring ``lo`` up in the network namespace just made (as bwrap's ``--unshare-net`` does):
    the command's own servers on 127.0.0.1 work; nothing else is there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS, UP


def prepare(writable: Sequence[str], *, block_network: bool, plan: _mountns.Plan = ()) -> Prepared:
    """Build the ruleset and the seccomp program for one policy (in the host, once).

    Args:
        writable: The writable roots (real paths; opened now, so later swaps do not matter).
        block_network: Refuse TCP (Landlock ABI 4), abstract Unix sockets (ABI 6) and every
            socket family but ``AF_UNIX`` (seccomp).
        plan: The command's mount namespace (`dsh_plugins_builtin._bwrap.mount_plan`).

    Returns:
        The prepared confinement; hand `Prepared.preexec` to the spawn.

    Raises:
        LandlockUnavailable: This kernel cannot confine as asked (the message says why).
    """
    abi = landlock_abi()
    check_abi(abi, block_network=block_network)
    try:
        program = filter_bpf(block_network)
    except SeccompUnavailable as exc:
        raise LandlockUnavailable(str(exc)) from None
    ruleset = build_ruleset(writable, abi, block_network=block_network)
    return Prepared(ruleset, program, abi, plan)
