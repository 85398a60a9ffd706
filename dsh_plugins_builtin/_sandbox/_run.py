"""Running one command: spawn, stream its output, wait, and kill whatever it left behind.

A caller may also stream the output as it arrives (``sink``, see `Output`): when the sink has
had enough, the command is stopped exactly as at a timeout (its group killed, the process
reaped, bwrap's PID namespace seen gone) and `run` returns; ``timed_out`` stays false.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal as _signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from dsh_plugins_builtin._sandbox import _forkclient, _landlock
from dsh_plugins_builtin._sandbox._output import Output, Sink
from dsh_plugins_builtin._sandbox._pidns import SUPERVISOR_GRACE, Block, Namespace

__all__ = [
    "Block", "Output", "ProcessResult", "Sink", "Unstarted", "result", "run", "runner_failure",
]  # fmt: skip

_DRAIN_GRACE: Final = 1.0
_READ_CHUNK: Final = 65536


@attrs.frozen
class ProcessResult:
    """The outcome of one (possibly confined) command.

    Attributes:
        output: stdout and stderr interleaved; if truncated, the head, a notice and the tail.
        exit_code: The exit status, or ``None`` when a signal ended the process.
        signal: The signal that ended the process, or ``None``.
        truncated: Whether bytes were dropped from the middle of the output.
        timed_out: Whether the timeout killed the process group.
        backend: ``"bwrap"``, ``"landlock"`` or ``"none"`` (unconfined).
        total_bytes: How many bytes the command wrote in all.
        limit: The resource limit the command ran into (``[plugin.sandbox.limits]``), if any;
            the output ends with the same sentence.
    """

    output: str
    exit_code: int | None
    signal: int | None
    truncated: bool
    timed_out: bool
    backend: str
    total_bytes: int
    limit: str | None = None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, _signal.SIGKILL)


async def _wait_exited(proc: trio.Process, pidfd: int | None) -> None:
    """Wait until ``proc`` has exited, without reaping it when a pidfd is available.

    Not reaping keeps the PID (and so the process group id) reserved, so the group kill that
    follows cannot hit a recycled PID.
    """
    if pidfd is None:
        await proc.wait()
    else:
        await trio.lowlevel.wait_readable(pidfd)


async def _pump(
    stream: trio.lowlevel.FdStream, out: Output, done: trio.Event, enough: trio.CancelScope
) -> None:
    try:
        while True:
            data = await stream.receive_some(_READ_CHUNK)
            if not data:
                return
            if out.feed(data):  # a streaming caller has had enough: stop the command
                enough.cancel()
    finally:
        done.set()


class Unstarted(Exception):
    """A view's server could not start the command (nothing ran): start it another way."""


def runner_failure(output: str, exit_code: int | None, backend: str) -> str | None:
    """Return the runner's own failure line if the wrapper (not the command) failed."""
    if exit_code is None or exit_code == 0:
        return None
    lines = output.splitlines()
    first = lines[0] if lines else ""
    if backend == "landlock" and exit_code == _landlock.EXIT_RUNNER_FAILURE:
        return first if first.startswith(_landlock.PREFIX) else None
    if backend == "bwrap":  # bwrap's own line, or a view's launcher's (`_views`)
        view = exit_code == _landlock.EXIT_RUNNER_FAILURE and first.startswith(_landlock.PREFIX)
        return first if first.startswith("bwrap: ") or view else None
    return None


class _Local:
    """A command the host spawned itself (`trio.lowlevel.open_process`), seen as `_run` needs.

    It is not reaped before the group kill (a pidfd tells when it has exited), so the group id
    cannot have been recycled when it is killed.
    """

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.pid = proc.pid
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def exited(self) -> None:
        await _wait_exited(self.proc, self.pidfd)

    async def wait(self) -> int:
        return await self.proc.wait()

    def send_signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, number)

    def kill_all(self) -> None:
        _kill_group(self.pid)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)


@functools.cache
def _pidfds() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


class _Direct(_Local):
    """A command spawned on the event loop's own thread: `subprocess.Popen` uses ``vfork``
    (no preexec hook), so it returns as soon as the child has ``exec``'d, well under the cost
    of the worker-thread hop `trio.lowlevel.open_process` makes. Waited on through its pidfd,
    so it needs one (``None`` from `start` without it: the caller spawns the usual way)."""

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pidfd = self._pidfd = pidfd

    @classmethod
    def start(cls, argv: list[str], options: dict[str, Any]) -> _Direct | None:
        if not _pidfds():
            return None
        popen = subprocess.Popen(argv, **options)
        try:
            return cls(popen, os.pidfd_open(popen.pid))
        except OSError:  # not reaped: the group is ours until it is
            _kill_group(popen.pid)
            popen.wait()
            raise

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def exited(self) -> None:
        await trio.lowlevel.wait_readable(self._pidfd)

    async def wait(self) -> int:
        if self.popen.returncode is None:
            await self.exited()
        return self.popen.wait()  # it has exited: reaping does not block


async def run(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float | None,
    cap: int,
    landlock: _landlock.Prepared | None = None,
    info: tuple[int, int] | None = None,
    block: Block | None = None,
    sink: Sink | None = None,
    server: _forkclient.ForkServer | None = None,
    python: str | None = None,
    **spawn: Any,
) -> tuple[Output, int | None, bool]:
    """Start *argv*, keep a head and a tail of its output, wait (up to *timeout*), then kill
    whatever of it is left; ``(output, returncode, timed_out)``.

    *landlock*: confine it in the child (from the fork server when it works); *info*: bwrap's
    ``--info-fd`` pipe, to wait until its PID namespace is gone; *block*: the write end of
    bwrap's ``--block-fd`` and the resource limits (``(RLIMIT_*, value)``) to set on the first
    process of its namespace before it goes on (`Namespace`); *sink*: stream the output
    (at most *cap* bytes); once it says enough, the command is stopped as at a timeout.
    *server*: start it from that fork server (a bwrap view's) and nowhere else: `Unstarted`
    when it cannot. *python*: the interpreter the Landlock fork server may be started with
    (`_forkclient.trusted_interpreter`); none: that server is not used, the host forks.
    """
    read_fd, write_fd = os.pipe()
    try:
        proc = await _start(argv, cwd, env, landlock, write_fd, spawn, server, python)
    except BaseException:
        os.close(read_fd)
        if info is not None:
            os.close(info[0])
        if block is not None:
            os.close(block[0])
        raise
    finally:
        os.close(write_fd)
        if info is not None:
            os.close(info[1])  # bwrap's copy is the only writer now
    stream = trio.lowlevel.FdStream(read_fd)
    out = Output(cap, sink)
    namespace = Namespace(block)
    stop = functools.partial(_stop, proc, supervised=landlock is not None)
    try:
        timed_out = await _watch(proc, stream, out, namespace, info, timeout, stop)
    except BaseException:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:  # not reaped yet, so the group id cannot be recycled
                await stop()
            await proc.wait()
        raise
    finally:
        proc.close()
        namespace.close()
        with trio.CancelScope(shield=True):
            await stream.aclose()
    return out, proc.returncode, timed_out


async def _start(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    landlock: _landlock.Prepared | None,
    write_fd: int,
    spawn: dict[str, Any],
    server: _forkclient.ForkServer | None,
    python: str | None,
) -> _Local | _forkclient.Launched:
    if server is not None:  # a view's request: that server, or nothing
        assert landlock is not None
        started = await server.spawn(
            argv, env=env, cwd=str(cwd), prepared=landlock, stdout=write_fd
        )
        if started is None:
            raise Unstarted
        return started
    if landlock is not None and _forkclient.ENABLED and python is not None:
        launched = await _forkclient.shared().spawn(
            argv, env=env, cwd=str(cwd), prepared=landlock, stdout=write_fd, python=python
        )
        if launched is not None:
            return launched
    # Standard input: an empty pipe, not the host's /dev/null, whose mode a root command
    # could change through /proc/self/fd/0 (a pipe's inode is the command's alone).
    empty, closed = os.pipe()
    os.close(closed)
    options: dict[str, Any] = {
        "stdin": empty,
        "stdout": write_fd,
        "stderr": write_fd,
        "cwd": str(cwd),
        "env": env,
        "start_new_session": True,
        **spawn,
    }
    try:
        if landlock is None:
            direct = _Direct.start(argv, options)
            if direct is not None:
                return direct
        else:
            options["preexec_fn"] = landlock.preexec  # a fork of the host: off the event loop
        return _Local(await trio.lowlevel.open_process(argv, **options))
    finally:
        os.close(empty)


async def _stop(proc: _Local | _forkclient.Launched, *, supervised: bool) -> None:
    # The Landlock supervisor kills every descendant (setsid ones too) on SIGTERM; a
    # SIGKILL would orphan them. It is our code, so it answers; the group kill follows.
    if supervised and proc.returncode is None:
        proc.send_signal(_signal.SIGTERM)
        with trio.move_on_after(SUPERVISOR_GRACE):
            await proc.exited()
    proc.kill_all()


async def _watch(
    proc: _Local | _forkclient.Launched,
    stream: trio.lowlevel.FdStream,
    out: Output,
    namespace: Namespace,
    info: tuple[int, int] | None,
    timeout: float | None,
    stop: Callable[[], Awaitable[None]],
) -> bool:
    """Pump the output until the command has ended and all of it is gone; whether it timed out."""
    async with trio.open_nursery() as nursery:
        drained = trio.Event()
        enough = trio.CancelScope()  # cancelled when a streaming caller has had enough
        nursery.start_soon(_pump, stream, out, drained, enough)
        if info is not None:
            nursery.start_soon(namespace.watch, info[0], stop, out)
        with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            with enough:
                await proc.exited()
        await stop()  # the timeout, enough output, or background children left after the exit
        await proc.wait()
        if info is not None and not await namespace.wait_gone():
            out.notes.append(
                "[sandbox: the command's PID namespace did not end within "
                f"{SUPERVISOR_GRACE:g} s: some of its processes may still be running]"
            )
        with trio.move_on_after(_DRAIN_GRACE):
            await drained.wait()
        nursery.cancel_scope.cancel()
    return deadline.cancelled_caught


def result(out: Output, returncode: int | None, timed_out: bool, backend: str) -> ProcessResult:
    exit_code = returncode if returncode is not None and returncode >= 0 else None
    sig = -returncode if returncode is not None and returncode < 0 else None
    return ProcessResult(
        output=out.text(),
        exit_code=exit_code,
        signal=sig,
        truncated=out.truncated,
        timed_out=timed_out,
        backend=backend,
        total_bytes=out.total,
    )
