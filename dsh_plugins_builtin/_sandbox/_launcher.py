"""The fork server's launchers (`dsh_plugins_builtin._sandbox._forkserver`): the records they
and the server send the host, a spare forked ahead, and the launcher itself, which sets up,
starts the command (forked ahead, or forked now) and supervises it."""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import signal
import socket
from collections.abc import Sequence
from typing import Final, NoReturn

from dsh_plugins_builtin._sandbox import _ahead, _landlock, _ruleset, _supervisor
from dsh_plugins_builtin._sandbox._ahead import GO, Ahead, command, parse, receive, stdio

__all__ = [
    "FAILED_CHDIR", "FAILED_EXEC", "FAILED_SETUP", "HELLO", "RECORD", "SERVER", "STALE",
    "STARTED", "STATUS", "launch", "ready", "send", "spare", "subreaper",
]  # fmt: skip

RECORD: Final = _supervisor.REPORT
HELLO: Final = 1  # value: the launcher's pid; carries its pidfd
STARTED: Final = 2  # the command was exec'd
# value: the command's exit code (negative: the signal that ended it)
STATUS: Final = _supervisor.REPORT_STATUS
FAILED_CHDIR: Final = 4  # value: errno
FAILED_EXEC: Final = 5  # value: errno
FAILED_SETUP: Final = 6  # value: errno (0: not an OSError); nothing ran
STALE: Final = 7  # a view's mounts changed since it was made: nothing ran, nothing will


def subreaper() -> None:
    """Become a child subreaper, or raise `OSError` (nothing here goes on without it)."""
    ctypes.set_errno(0)
    if _ruleset._libc().prctl(_landlock._PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def send(sock: socket.socket, kind: int, value: int, fds: tuple[int, ...] = ()) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([RECORD.pack(kind, value)], ancillary)


def ready(server_fds: tuple[int, ...]) -> None:
    """A launcher's first steps (in the forked server), before its request is known: none of
    the server's descriptors or signal handling, a session of its own, and ``SIGTERM`` when the
    server ends (``PR_SET_PDEATHSIG``): it ends when the host does (its control socket closes),
    and a launcher left supervising would otherwise keep its command running under init; on
    ``SIGTERM`` it kills the command and everything under it, as when the host asks."""
    if _ruleset._libc().prctl(_landlock._PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        os._exit(_landlock.EXIT_RUNNER_FAILURE)
    if os.getppid() != SERVER[0]:  # the server ended before that took: end with it
        os._exit(0)
    for fd in server_fds:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()


SERVER = [0]  # the server's pid (`serve`), which each launcher it forks checks it still has


def spare(sock: socket.socket, server_fds: tuple[int, ...]) -> NoReturn:
    """A launcher forked ahead (`_forkserver._Server.prefork`): wait for the request the server
    hands over on *sock*, and launch it; the socket closed (the server gone) ends it."""
    try:
        ready(server_fds)
        subreaper()  # failing, it takes no request (the server finds its socket closed and
        ahead = Ahead.fork(sock.fileno())  # forks a fresh launcher); so on EarlyFailed
        _ahead.warm()
        data, fds = receive(sock, 3)
        sock.close()
    except BaseException:
        os._exit(0)
    if not data or len(fds) != 3:
        os._exit(0)  # the server is gone (or sent it torn): nothing to answer on
    launch(data, fds, None, ahead)


def launch(
    data: bytes,
    fds: Sequence[int],
    server_fds: tuple[int, ...] | None,
    ahead: Ahead | None = None,
) -> NoReturn:
    """The launcher (in the forked server; *server_fds*: not `ready` yet, a spare is): set
    up, fork the command (or start the one forked *ahead*), supervise it.

    A spare was announced to the host by the server (`_forkserver._Server.hand_over`): it sends
    no `HELLO`, and its command forked ahead takes the host's `GO` itself. `FAILED_SETUP` is
    sent only while nothing can have run: the host may then start the command another way."""
    rep = None
    handed = False  # whether a command may run from here on
    rep_fd, out, ruleset = fds
    try:
        if server_fds is not None:
            ready(server_fds)
            subreaper()  # before HELLO: if it fails, the host forks instead (FAILED_SETUP)
        rep = socket.socket(fileno=rep_fd)
        argv, env, prepared, cwd = parse(data, ruleset)
        stdio(out)
        try:
            os.chdir(cwd)
        except OSError as exc:
            send(rep, FAILED_CHDIR, exc.errno or 0)
            os._exit(0)
        if server_fds is not None:
            pidfd = os.pidfd_open(os.getpid())
            send(rep, HELLO, os.getpid(), (pidfd,))
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
        if failed == _ahead.STALE_MOUNTS:  # it ran nothing: the host starts it another way
            os.waitpid(child, 0)
            send(rep, FAILED_SETUP, 0)
            os._exit(0)
        if failed:
            os.waitpid(child, 0)
            send(rep, FAILED_EXEC, int(failed))
            os._exit(0)
        send(rep, STARTED, 0)
    except BaseException as exc:  # a command forked already dies with us (PDEATHSIG)
        if rep is not None and not handed:
            with contextlib.suppress(BaseException):
                send(rep, FAILED_SETUP, (exc.errno or 0) if isinstance(exc, OSError) else 0)
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
