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
server, which kills every child of its own that is not a launcher (in a view they go to the
view's first process instead, which is why a command dies with its launcher from its start,
``PR_SET_PDEATHSIG``). It exits when the host's end
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
from typing import Final

from dsh_plugins_builtin._sandbox import (
    _ahead,
    _beneath,
    _landlock,
    _launcher,
    _mountns,
    _ruleset,
    _supervisor,
    _viewtable,
)
from dsh_plugins_builtin._sandbox._ahead import GO, MAX_REQUEST
from dsh_plugins_builtin._sandbox._launcher import (
    FAILED_CHDIR,
    FAILED_EXEC,
    FAILED_SETUP,
    HELLO,
    RECORD,
    STALE,
    STARTED,
    STATUS,
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


class _Server:
    def __init__(self, ctl: socket.socket, table: str | None = None) -> None:
        self.ctl = ctl
        self.table = table  # in a view: the digest of its mount table as the host checked it
        self.mounts_fd = -1
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
        self.mounts_fd = os.open("/proc/1/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        self.mounts = select.poll()
        self.mounts.register(self.mounts_fd, select.POLLPRI | select.POLLERR)

    def moved(self) -> bool:
        """In a view: whether its mount table differs from the one the host checked. A rename
        on the host moves a mask with what it covered, and makes no mount event (`_viewtable`);
        read after each request is handed over, while the launcher reads it: no command can
        start before the `HELLO` that follows (`hand_over`)."""
        if self.table is None or self.stale:
            return self.stale
        try:
            self.stale = _viewtable.digest(_viewtable.read(self.mounts_fd)) != self.table
        except OSError:
            self.stale = True
        return self.stale

    def changed(self) -> bool:
        if self.mounts is not None and not self.stale and self.mounts.poll(0):
            self.stale = True
        return self.stale

    def prefork(self) -> None:
        """Fork the next request's launcher now, off the request's path: the fork (and the
        child's start) costs about a millisecond. It waits on its own socket for the request
        (`_launcher.spare`); the server closing that socket (its exit) ends it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            pid = -1  # none spare: the next request forks its launcher
        if pid == 0:
            ours.close()
            _launcher.spare(theirs, (self.ctl.fileno(), self.wake_r, self.wake_w))
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
        if self.moved():  # the host is told STALE instead; its launcher and command end here
            with contextlib.suppress(OSError):
                os.kill(self.spare_pid, signal.SIGKILL)  # a child not reaped yet: no reuse
            _stale(fds[0])
            return True
        with contextlib.suppress(OSError):  # gone: the host finds its socket closed, and forks
            pidfd = os.pidfd_open(self.spare_pid)
            try:
                with socket.socket(fileno=os.dup(fds[0])) as rep:
                    _launcher.send(rep, HELLO, self.spare_pid, (pidfd,))
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
            _stale(fds[0])
            valid = False
        if valid:
            _ahead.LAST[:] = [data]
            if not self.hand_over(data, fds):  # no spare: the table is read before the fork
                if self.moved():
                    _stale(fds[0])
                else:
                    self.launch(data, fds)
        for fd in fds:
            os.close(fd)
        if self.spare is None and self.due is None:
            # The next spare a little later: forking it (and its command's namespaces and
            # mounts) now would take the CPU the command just handed over needs to start.
            self.due = time.monotonic() + PREFORK_DELAY
        return True

    def launch(self, data: bytes, fds: Sequence[int]) -> None:
        """Fork a launcher for a request no spare took."""
        try:
            pid = os.fork()
        except OSError:
            return  # the host sees the launcher's socket close, and fails the command
        if pid == 0:
            _launcher.launch(data, fds, (self.ctl.fileno(), self.wake_r, self.wake_w))
        self.launchers.add(pid)

    def reap(self) -> None:
        for pid, _ in _supervisor.exited():
            self.launchers.discard(pid)
        for pid in _supervisor.children():  # orphans of a launcher that was killed outright
            if pid not in self.launchers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_JOINED = (
    _landlock._CLONE_NEWUSER | _mountns._CLONE_NEWNS | _landlock._CLONE_NEWNET
    | _landlock._CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWCGROUP
    | _landlock._CLONE_NEWPID  # for its children: the launchers live in the view's
)  # fmt: skip
"""The namespaces of a view its server joins (`_enter`)."""


def _stale(rep_fd: int) -> None:
    """Tell the host its request is refused: the view no longer is the one it was made as."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(rep_fd)) as rep:
        _launcher.send(rep, STALE, 0)


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


def serve(
    ctl_fd: int,
    view: int | None = None,
    holder: int | None = None,
    early: str = "",
    table: str | None = None,
) -> None:
    """The server's main loop, on the inherited control socket *ctl_fd*. With *view* and
    *holder* (a pidfd): the server of a bwrap view (`dsh_plugins_builtin._sandbox._views`): it
    enters the holder's namespaces first (`_enter`), and *view* are the namespaces each command
    gets there besides its PID and IPC ones (`_landlock.VIEW`), *early* (JSON) the first steps
    of each command's mount plan there (`_ahead.EARLY`), *table* the digest of its mount table
    as the host checked it (`_viewtable`)."""
    _landlock._cap_last()  # read once here, not in every launcher
    _launcher.SERVER[0] = os.getpid()
    if view is not None and holder is not None:
        _enter(holder)
        _landlock.VIEW.append(view)
        _ahead.EARLY.append(tuple(tuple(step) for step in json.loads(early or "[]")))
        _launcher.SERVER[0] = 0  # what a launcher in the view's PID namespace sees of its parent
    os.set_inheritable(ctl_fd, False)
    os.chdir("/")
    _launcher.subreaper()
    ctl = socket.socket(fileno=ctl_fd)
    server = _Server(ctl, table if view is not None else None)
    if view is not None:
        server.watch_mounts()
        server.stale = not table  # no table to compare with: no command runs here
    server.prefork()
    server.serve()
