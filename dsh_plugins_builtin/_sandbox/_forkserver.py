"""The Landlock fork server: a small interpreter that starts confined commands for the host.

Forking the host to confine a command is what makes the Landlock backend slow: a ``fork`` copies
the page tables of the whole host (tens of MB of heap), twice per command (the supervisor, then
the command), and on a virtual machine each copy costs milliseconds. So the host starts this
module once, in a fresh ``python -I -S`` (stdlib only, ~13 MB resident; `dsh_plugins_builtin._sandbox._forkclient`
does that), and sends it one message per command over a private ``SOCK_SEQPACKET`` socket pair.

The server keeps one *launcher* forked ahead (a spare, with the command's process forked ahead
in the command's PID namespace: `Ahead`), hands it the next request and forks the next spare:
no fork is on a command's path. The launcher is the command's supervisor, exactly as in the
in-process path (`dsh_plugins_builtin._sandbox._landlock`): in a session of its own, it sends the
host a pidfd of itself on its own socket, starts the command, which confines itself
(`Prepared.confine_self`) and ``exec``\\s, and supervises it: on its exit (or on ``SIGTERM``
from the host) it ``SIGKILL``\\s every descendant still alive and reports the exit status.

The server is itself a child subreaper: were a launcher killed outright, its orphans come to the
server, which kills every child of its own that is not a launcher. It exits when the host's end
of the control socket closes (the host exited, or closed it). It never runs anything the host did
not ask for, and it is confined by nothing: the command's Landlock domain (signal scope, ABI 6)
keeps the command from signalling or tracing it, as it does for the in-process supervisor.

A request is one message on the control socket: JSON (``argv``, ``env``, ``cwd``, ``program``
hex, ``abi``; at most `MAX_REQUEST` bytes) carrying three descriptors: the launcher's socket, the
command's stdout and the Landlock ruleset. The launcher answers on its socket with 8-byte records
(kind, value): `HELLO` carrying its pidfd; the host answers `GO` (only then is the command
handed over: a host that gave up before it held the pidfd leaves nothing running); `STARTED` or
a failure, then `STATUS`.
"""

from __future__ import annotations

import array
import codecs
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import time
from collections.abc import Sequence
from typing import Final, NoReturn

from dsh_plugins_builtin._sandbox import (
    _ahead,
    _beneath,
    _landlock,
    _mountns,
    _ruleset,
    _supervisor,
)
from dsh_plugins_builtin._sandbox._ahead import (
    GO,
    MAX_REQUEST,
    Ahead,
    command,
    parse,
    receive,
    stdio,
)

__all__ = [
    "FAILED_CHDIR",
    "FAILED_EXEC",
    "FAILED_SETUP",
    "GO",
    "HELLO",
    "MAX_REQUEST",
    "RECORD",
    "STALE",
    "STARTED",
    "STATUS",
]

PREFORK_DELAY: Final = 0.005  # seconds after a request before the next spare is forked
RECORD: Final = _supervisor.REPORT
HELLO: Final = 1  # value: the launcher's pid; carries its pidfd
STARTED: Final = 2  # the command was exec'd
# value: the command's exit code (negative: the signal that ended it)
STATUS: Final = _supervisor.REPORT_STATUS
FAILED_CHDIR: Final = 4  # value: errno
FAILED_EXEC: Final = 5  # value: errno
FAILED_SETUP: Final = 6  # value: errno (0: not an OSError); nothing ran
STALE: Final = 7  # a view's mounts changed since it was made: nothing ran, nothing will


def _subreaper() -> None:
    """Become a child subreaper, or raise `OSError` (nothing here goes on without it)."""
    ctypes.set_errno(0)
    if _ruleset._libc().prctl(_landlock._PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


class _Server:
    def __init__(self, ctl: socket.socket) -> None:
        self.ctl = ctl
        self.launchers: set[int] = set()
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.spare: socket.socket | None = None  # the next launcher's socket (`prefork`)
        self.spare_pid = 0
        self.mounts: select.poll | None = None  # in a view: its mount table's changes
        self.due: float | None = None  # when to fork the next spare launcher
        self.stale = False

    def watch_mounts(self) -> None:
        """In a bwrap view: watch the view's mount table. It changes only when the host's
        does: a mount the host makes propagates here (bwrap's root is a slave of the host's,
        and that mount was never made read-only), and a mask is detached when the host
        removes or renames what it covers (``rename`` over ``/etc/shadow``, ``rmdir`` of
        ``~/.aws``). Either way the view no longer is the one a new bwrap would build: from
        then on every request is answered `STALE` and the host builds another."""
        # The server has no pid in the view's /proc; its first process (bwrap's command, that
        # the server joined) shares its mount namespace.
        fd = os.open("/proc/1/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        self.mounts = select.poll()
        self.mounts.register(fd, select.POLLPRI | select.POLLERR)

    def changed(self) -> bool:
        if self.mounts is not None and not self.stale and self.mounts.poll(0):
            self.stale = True
        return self.stale

    def prefork(self) -> None:
        """Fork the next request's launcher now, off the request's path: the fork (and the
        child's start) costs about a millisecond. It waits on its own socket for the request
        (`_spare`); the server closing that socket (its exit) ends it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            pid = -1  # none spare: the next request forks its launcher
        if pid == 0:
            ours.close()
            _spare(theirs, (self.ctl.fileno(), self.wake_r, self.wake_w))
        theirs.close()
        if pid < 0:
            ours.close()
            return
        self.launchers.add(pid)
        self.spare, self.spare_pid = ours, pid

    def hand_over(self, data: bytes, fds: Sequence[int]) -> bool:
        """Give a request to the spare launcher; whether it took it (then fork the next). The
        host is then sent `HELLO` with a pidfd of the launcher from here, at once: its `GO`
        is on its way while the launcher and the command forked ahead read the request."""
        spare, self.spare = self.spare, None
        if spare is None:
            return False
        try:
            spare.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        except OSError:  # it is gone: this request forks its own
            return False
        finally:
            spare.close()
        with contextlib.suppress(OSError):  # gone: the host finds its socket closed, and forks
            pidfd = os.pidfd_open(self.spare_pid)
            try:
                with socket.socket(fileno=os.dup(fds[0])) as rep:
                    _send(rep, HELLO, self.spare_pid, (pidfd,))
            finally:
                os.close(pidfd)
        return True

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        poller = select.poll()
        poller.register(self.ctl.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            wait = None if self.due is None else max(0, int((self.due - time.monotonic()) * 1000))
            try:
                events = poller.poll(wait)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            if not events and self.due is not None:
                self.due = None
                if self.spare is None:
                    self.prefork()
            for fd, _ in events:
                if fd == self.wake_r:
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 4096):
                            pass
                    self.reap()
                elif not self.accept():
                    return

    def accept(self) -> bool:
        """Take one request off the control socket; ``False`` when the host has gone."""
        fds = array.array("i")
        try:
            data, ancillary, flags, _addr = self.ctl.recvmsg(
                MAX_REQUEST, socket.CMSG_SPACE(3 * fds.itemsize), socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            return True
        except OSError:
            return False
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data and not fds:
            return False
        valid = data and len(fds) == 3 and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)
        if valid and self.changed():
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fds[0])) as rep:
                _send(rep, STALE, 0)
            valid = False
        if valid:
            _ahead.LAST[:] = [data]
        if valid and not self.hand_over(data, fds):
            try:
                pid = os.fork()
            except OSError:
                pid = -1  # the host sees the launcher's socket close, and fails the command
            if pid == 0:
                _launch(data, fds, (self.ctl.fileno(), self.wake_r, self.wake_w))
            if pid > 0:
                self.launchers.add(pid)
        for fd in fds:
            os.close(fd)
        if self.spare is None and self.due is None:
            # The next spare a little later: forking it (and its command's namespaces and
            # mounts) now would take the CPU the command just handed over needs to start.
            self.due = time.monotonic() + PREFORK_DELAY
        return True

    def reap(self) -> None:
        for pid, _ in _supervisor.exited():
            self.launchers.discard(pid)
        for pid in _supervisor.children():  # orphans of a launcher that was killed outright
            if pid not in self.launchers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _send(sock: socket.socket, kind: int, value: int, fds: tuple[int, ...] = ()) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([RECORD.pack(kind, value)], ancillary)


def _ready(server_fds: tuple[int, ...]) -> None:
    """A launcher's first steps (in the forked server), before its request is known: none of
    the server's descriptors or signal handling, a session of its own, and ``SIGTERM`` when the
    server ends (``PR_SET_PDEATHSIG``): it ends when the host does (its control socket closes),
    and a launcher left supervising would otherwise keep its command running under init; on
    ``SIGTERM`` it kills the command and everything under it, as when the host asks."""
    if _ruleset._libc().prctl(_landlock._PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        os._exit(_landlock.EXIT_RUNNER_FAILURE)
    if os.getppid() != _SERVER[0]:  # the server ended before that took: end with it
        os._exit(0)
    for fd in server_fds:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()


_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_JOINED = (
    _landlock._CLONE_NEWUSER | _mountns._CLONE_NEWNS | _landlock._CLONE_NEWNET
    | _landlock._CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWCGROUP
    | _landlock._CLONE_NEWPID  # for its children: the launchers live in the view's
)  # fmt: skip
"""The namespaces of a view its server joins (`_enter`)."""


def _enter(holder: int) -> None:
    """Join every namespace of the process holding a bwrap view (*holder*, a pidfd) in one
    ``setns``: its user namespace (where this server then holds every capability, and nothing
    outside it), its mounts (the view: ``/`` is the view's root from here on), network, IPC,
    UTS and cgroup namespaces, and, for the launchers it forks, its PID namespace (each still
    makes one of its own for its command). The server's code is all loaded already: nothing
    is read from the view's files (its interpreter may lie where the view hides it). The
    descriptor of ``/`` that `_beneath` opened at import is pointed at the view's root too, so
    no walk starts outside."""
    codecs.lookup("ascii")  # what the launchers' reading of /proc would import from the view
    libc = _ruleset._libc()
    ctypes.set_errno(0)
    if libc.setns(ctypes.c_int(holder), ctypes.c_int(_JOINED)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into the view: {os.strerror(err)}")
    os.close(holder)
    os.chdir("/")
    slash = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.dup2(slash, _beneath._SLASH_FD, inheritable=False)
    os.close(slash)


_SERVER = [0]  # the server's pid (`serve`), which each launcher it forks checks it still has


def _spare(sock: socket.socket, server_fds: tuple[int, ...]) -> NoReturn:
    """A launcher forked ahead (`_Server.prefork`): wait for the request the server hands over on
    *sock*, and launch it; the socket closed (the server gone) ends it."""
    try:
        _ready(server_fds)
        _subreaper()  # failing, it takes no request (the server finds its socket closed and
        ahead = Ahead.fork(sock.fileno())  # forks a fresh launcher); so on EarlyFailed
        _ahead.warm()
        data, fds = receive(sock, 3)
        sock.close()
    except BaseException:
        os._exit(0)
    if not data or len(fds) != 3:
        os._exit(0)  # the server is gone (or sent it torn): nothing to answer on
    _launch(data, fds, None, ahead)


def _launch(
    data: bytes,
    fds: Sequence[int],
    server_fds: tuple[int, ...] | None,
    ahead: Ahead | None = None,
) -> NoReturn:
    """The launcher (in the forked server; *server_fds*: not `_ready` yet, a spare is): set
    up, fork the command (or start the one forked *ahead*), supervise it.

    A spare was announced to the host by the server (`_Server.hand_over`): it sends no
    `HELLO`, and its command forked ahead takes the host's `GO` itself. `FAILED_SETUP` is
    sent only while nothing can have run: the host may then start the command another way."""
    rep = None
    handed = False  # whether a command may run from here on
    rep_fd, out, ruleset = fds
    try:
        if server_fds is not None:
            _ready(server_fds)
            _subreaper()  # before HELLO: if it fails, the host forks instead (FAILED_SETUP)
        rep = socket.socket(fileno=rep_fd)
        argv, env, prepared, cwd = parse(data, ruleset)
        stdio(out)
        try:
            os.chdir(cwd)
        except OSError as exc:
            _send(rep, FAILED_CHDIR, exc.errno or 0)
            os._exit(0)
        if server_fds is not None:
            pidfd = os.pidfd_open(os.getpid())
            _send(rep, HELLO, os.getpid(), (pidfd,))
            os.close(pidfd)
        if ahead is not None:  # it confines itself, waits for the host's GO, and runs
            handed = True
            ahead.start(data, ruleset, rep.fileno())
            child, errors_r = ahead.pid, ahead.errors
        else:
            if rep.recv(len(GO)) != GO:  # the host gave up before it knew of us: run nothing
                os._exit(0)
            handed = True
            child, errors_r = _fork_command(prepared, argv, env, rep.fileno())
        with os.fdopen(errors_r, "rb") as errors:
            failed = errors.read()
        if failed:
            os.waitpid(child, 0)
            _send(rep, FAILED_EXEC, int(failed))
            os._exit(0)
        _send(rep, STARTED, 0)
    except BaseException as exc:  # a command forked already dies with us (PDEATHSIG)
        if rep is not None and not handed:
            with contextlib.suppress(BaseException):
                _send(rep, FAILED_SETUP, (exc.errno or 0) if isinstance(exc, OSError) else 0)
        os._exit(_landlock.EXIT_RUNNER_FAILURE)
    _supervisor.supervise(child, rep.fileno())


def _fork_command(
    prepared: _landlock.Prepared, argv: list[str], env: dict[str, str], rep: int
) -> tuple[int, int]:
    """Fork the command the usual way: its pid, and the read end of its exec failure."""
    errors_r, errors_w = os.pipe2(os.O_CLOEXEC)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCHLD})
    prepared.unshare()  # the command's PID namespace (a failure: exit 125, a message)
    child = os.fork()
    if child == 0:
        command(prepared, argv, env, old, errors_w, (rep, errors_r))
    os.close(errors_w)
    return child, errors_r


def serve(ctl_fd: int, view: int | None = None, holder: int | None = None, early: str = "") -> None:
    """The server's main loop, on the inherited control socket *ctl_fd*. With *view* and
    *holder* (a pidfd): the server of a bwrap view (`dsh_plugins_builtin._sandbox._views`): it
    enters the holder's namespaces first (`_enter`), and *view* are the namespaces each command
    gets there besides its PID and IPC ones (`_landlock.VIEW`), *early* (JSON) the first steps
    of each command's mount plan there (`_ahead.EARLY`)."""
    _landlock._cap_last()  # read once here, not in every launcher
    _SERVER[0] = os.getpid()
    if view is not None and holder is not None:
        _enter(holder)
        _landlock.VIEW.append(view)
        _ahead.EARLY.append(tuple(tuple(step) for step in json.loads(early or "[]")))
        _SERVER[0] = 0  # what a launcher in the view's PID namespace sees of its parent
    os.set_inheritable(ctl_fd, False)
    os.chdir("/")
    _subreaper()
    ctl = socket.socket(fileno=ctl_fd)
    server = _Server(ctl)
    if view is not None:
        server.watch_mounts()
    server.prefork()
    server.serve()
