"""The host's side of the Landlock fork server (`dsh_plugins_builtin._sandbox._forkserver`).

One server per host process, started on first need (`shared`), in a fresh ``python -I -S``
(isolated: no ``PYTHON*`` variables, no user or site packages, no current directory on the
path; the package's own directory comes after the standard library, so a module planted beside
the package cannot stand in for a standard one), in a session of its own (a Ctrl-C at the terminal does not reach it). `ForkServer.spawn`
asks it for one confined command and returns a `Launched` handle, or ``None`` when the server
cannot be used; the caller then forks the host as before (`Prepared.preexec`). The server is
never a requirement: it is a faster way to the same confinement.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import errno
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

import trio

from dsh_plugins_builtin._sandbox import _forkserver, _landlock

__all__ = ["ForkServer", "Launched", "shared", "trusted_interpreter"]

ENABLED = True  # Landlock commands start from the fork server when it works (tests turn it off)
_HANDSHAKE_TIMEOUT: Final = 10.0
_BOOT: Final = (  # the package's directory goes last: nothing there can shadow the stdlib
    "import sys; sys.path.append(sys.argv[1]); "
    "from dsh_plugins_builtin._sandbox._forkserver import serve; "
    "serve(int(sys.argv[2]), *(int(a) for a in sys.argv[3:5]), *sys.argv[5:7])"
)
_RECORD = _forkserver.RECORD


class Launched:
    """A command the fork server started: its launcher (the supervisor), seen from the host.

    The launcher is not the host's child; it is reached through a pidfd (no PID reuse can
    misdirect a signal) and reports the command's exit code on its socket before it exits.
    """

    def __init__(self, pid: int, pidfd: int, sock: trio.socket.SocketType) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.returncode: int | None = None
        self._sock = sock
        self._record = b""  # what has come of the status record (a cancelled read keeps it)

    async def exited(self) -> None:
        """Wait until the command and every process under it have ended: the launcher reports
        the command's status only once it has killed and reaped all of them
        (`_supervisor.supervise`), before it exits itself, which this does not wait for (its
        own teardown is no part of the command's). A launcher that ends without a report
        (killed outright) is waited for until it has exited."""
        await self.wait()

    async def wait(self) -> int:
        """The command's exit code (negative: a signal), once the launcher has reported it."""
        while self.returncode is None:
            chunk = await self._sock.recv(_RECORD.size - len(self._record))
            self._record += chunk
            if chunk and len(self._record) < _RECORD.size:
                continue
            kind, code = _RECORD.unpack(self._record) if chunk else (0, 0)
            if kind != _forkserver.STATUS:  # the launcher died without a report
                await trio.lowlevel.wait_readable(self.pidfd)
                code = -signal.SIGKILL
            self.returncode = code
        return self.returncode

    def send_signal(self, number: int) -> None:
        """Signal the launcher (``SIGTERM``: it kills the command and every descendant)."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, number)

    def kill_all(self) -> None:
        """SIGKILL the launcher (no-op once it has exited). There is no group kill: the launcher
        is no child of ours, so its PID (the group id) may be reused once the server reaps it.
        The command dies with the launcher (PDEATHSIG), and the server kills the orphans it
        inherits."""
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        os.close(self.pidfd)
        self._sock.close()


async def _read_record(sock: trio.socket.SocketType) -> tuple[int, int] | None:
    data = b""
    while len(data) < _RECORD.size:
        chunk = await sock.recv(_RECORD.size - len(data))
        if not chunk:
            return None
        data += chunk
    kind, value = _RECORD.unpack(data)
    return kind, value


class ForkServer:
    """One fork server process, and the host's end of its control socket."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        view: tuple[int, int, str, str] | None = None,
        executable: str | None = None,
    ) -> None:
        """*root*: the directory holding the ``dsh_plugins_builtin`` package (default: this
        one's). *view*: a server for a bwrap view (`dsh_plugins_builtin._sandbox._views`): the
        namespaces each command gets there (`_landlock.VIEW`), a pidfd of the process holding
        the view, whose namespaces the server enters, (JSON) the first steps of each
        command's mount plan there, and the digest of its mount table (`_forkserver.serve`).
        *executable*: the interpreter to start (default: ``sys.executable``)."""
        self.root = Path(_forkserver.__file__).resolve().parents[2] if root is None else root
        self.view = view
        self.executable = executable
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._owner = 0
        self.broken: str | None = None  # why the server is not used (the host forks instead)
        self.stale = False  # a view's server: its mounts changed (`_forkserver.STALE`)

    def start(self, python: str | None = None) -> bool:
        """Start the server unless it runs (for this process); whether it can be used. It is
        started with `executable`, else *python* (`trusted_interpreter`), else
        ``sys.executable``."""
        with self._lock:
            if self.broken is not None:
                return False
            if self._ctl is not None:
                if self._owner == os.getpid():
                    return True
                if self.view is not None:  # a view is this process's, not a copy's
                    return False
                self._ctl.close()  # a forked copy of the host starts a server of its own
                self._ctl = self._proc = None
            executable = self.executable or python or sys.executable
            if not executable:
                self.broken = "sys.executable is unknown"
                return False
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                view = () if self.view is None else tuple(str(n) for n in self.view)
                boot = [executable, "-I", "-S", "-c", _BOOT, str(self.root), str(theirs.fileno())]
                self._proc = subprocess.Popen(
                    [*boot, *view],
                    pass_fds=(theirs.fileno(), *(self.view[1:2] if self.view else ())),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd="/",
                )
            except OSError as exc:
                ours.close()
                self.broken = f"the fork server could not be started: {exc}"
                return False
            finally:
                theirs.close()
            ours.setblocking(False)
            self._ctl = ours
            self._owner = os.getpid()
            return True

    def _failed(self, why: str) -> None:
        """Stop using the server for good (the host forks from now on).

        A server is started once, never again: a new interpreter would import the package
        anew, from files that may have changed since the host started.
        """
        with self._lock:
            self.broken = why
            ctl, self._ctl = self._ctl, None
        if ctl is not None:
            ctl.close()

    def close(self) -> None:
        """Close the control socket (the server exits) and reap the server."""
        with self._lock:
            ctl, self._ctl = self._ctl, None
            proc, self._proc = self._proc, None
        if ctl is not None:
            ctl.close()
        if proc is not None and self._owner == os.getpid():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str,
        prepared: _landlock.Prepared,
        stdout: int,
        python: str | None = None,
    ) -> Launched | None:
        """Start ``argv`` confined by *prepared*; ``None`` if the server cannot (fork instead).

        Raises:
            OSError: The working directory or the program could not be used (as a spawn would).
            ValueError: A NUL in an argument, a name or a value (as a spawn would).
            UnicodeEncodeError: One that cannot be encoded for ``exec`` (as a spawn would).
        """
        body = _request(argv, env, cwd, prepared)
        if len(body) > _forkserver.MAX_REQUEST or not self.start(python):
            return None
        ctl = self._ctl
        assert ctl is not None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ruleset = prepared.ruleset_fd if prepared.ruleset_fd >= 0 else stdout  # a view's: none
            fds = array.array("i", (theirs.fileno(), stdout, ruleset))
            ctl.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except OSError as exc:  # a full queue, a bad descriptor: this one forks instead
            ours.close()
            if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self._failed(f"the fork server has exited ({exc.strerror})")
            return None
        finally:
            theirs.close()
        sock = trio.socket.from_stdlib_socket(ours)
        launched: Launched | None = None
        # Shielded (and bounded): once the launcher exists it must be handed to the caller or
        # stopped, whatever cancels the caller meanwhile.
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + _HANDSHAKE_TIMEOUT
            try:
                launched = await self._handshake(sock, argv, cwd)
            except BaseException:
                sock.close()
                raise
        if launched is None:
            sock.close()
            if scope.cancelled_caught:
                self._failed("the fork server did not answer in time")
            elif (proc := self._proc) is not None and proc.poll() is not None:
                self._failed(f"the fork server has exited (status {proc.returncode})")
            return None
        return launched

    async def _handshake(
        self, sock: trio.socket.SocketType, argv: Sequence[str], cwd: str
    ) -> Launched | None:
        data, ancillary, _flags, _addr = await sock.recvmsg(
            _RECORD.size, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC
        )
        received = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
        if len(data) != _RECORD.size:
            for fd in received:
                os.close(fd)
            return None
        kind, value = _RECORD.unpack(data)
        if kind != _forkserver.HELLO or len(received) != 1:
            for fd in received:
                os.close(fd)
            if kind == _forkserver.FAILED_CHDIR:
                raise OSError(value, os.strerror(value), cwd)
            self.stale = self.stale or kind == _forkserver.STALE
            return None
        launched = Launched(value, received[0], sock)
        delivered = True
        try:
            # From "go" on the command may run: this call falls back to forking the host only
            # when the launcher says nothing ran (FAILED_SETUP: a spare, announced by the
            # server, may fail after HELLO; so may its working directory), or never got GO.
            try:
                await sock.send(_forkserver.GO)
            except (BrokenPipeError, ConnectionResetError):
                delivered = False  # it ended first (FAILED_SETUP, read below): nothing ran
            record = await _read_record(sock)
        except trio.Cancelled:  # our own deadline (the caller's cannot reach us here)
            launched.send_signal(signal.SIGKILL)
            os.close(launched.pidfd)
            raise OSError(
                errno.ETIMEDOUT, "the Landlock launcher did not start the command"
            ) from None
        except BaseException:
            launched.send_signal(signal.SIGKILL)
            os.close(launched.pidfd)
            raise
        if record is not None and record[0] == _forkserver.STARTED:
            return launched
        launched.send_signal(signal.SIGKILL)
        os.close(launched.pidfd)
        kind, value = record if record is not None else (0, 0)
        if kind == _forkserver.FAILED_EXEC:
            code = value or errno.ENOEXEC
            raise OSError(code, os.strerror(code), argv[0])
        if kind == _forkserver.FAILED_CHDIR:
            raise OSError(value, os.strerror(value), cwd)
        if kind == _forkserver.FAILED_SETUP or not delivered:
            return None
        raise OSError(errno.EIO, "the Landlock launcher ended before reporting the command")


def trusted_interpreter(writable: Collection[Path], protected: Collection[Path]) -> str | None:
    """`_trusted`, worked out once per set of roots, protected paths and interpreter."""
    if not sys.executable:
        return None  # no interpreter known: none to trust
    return _trusted(tuple(writable), tuple(protected), sys.executable)


@functools.lru_cache(maxsize=16)
def _trusted(
    writable: tuple[Path, ...], protected: tuple[Path, ...], executable: str
) -> str | None:
    """The interpreter a fork server is started with (its real path: no virtual environment's
    ``pyvenv.cfg`` is read), or ``None`` when a command could have written what a server runs:
    the interpreter, the standard library or the ``dsh_plugins_builtin`` package lie in a
    writable root (and not in a protected path), or a writable root lies in one of them (a
    workspace inside the package, with ``protect_install = false``). A server runs on the
    host, unconfined; commands then start from a fork of the host instead."""
    python = os.path.realpath(executable)
    places = (
        Path(python), Path(os.path.realpath(sys.base_prefix)),
        Path(os.path.realpath(_forkserver.__file__)).parents[1],
    )  # fmt: skip
    for place in places:
        for root in writable:
            if root == place or place in root.parents:  # a root in it: nothing protects it all
                return None
            if root in place.parents and not any(
                place == guard or guard in place.parents for guard in protected
            ):
                return None
    return python if os.access(python, os.X_OK) else None


_shared = ForkServer()
atexit.register(_shared.close)


def shared() -> ForkServer:
    """The process's fork server (started on first use)."""
    return _shared


def _request(
    argv: Sequence[str], env: dict[str, str], cwd: str, prepared: _landlock.Prepared
) -> bytes:
    """The fork server's request, checked as ``exec`` would (the launcher must not find out
    later)."""
    for text in (*argv, *env, *env.values(), cwd):
        if "\0" in text:
            raise ValueError("embedded null byte")
        os.fsencode(text)
    request = {
        "argv": list(argv),
        "env": env,
        "cwd": cwd,
        "program": prepared.program_hex,
        "abi": prepared.abi,
        "plan": [list(step) for step in prepared.plan],
        "limits": [list(limit) for limit in prepared.limits],
    }
    return json.dumps(request).encode()
