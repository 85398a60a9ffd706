"""Run one hook command as a process tree that cannot outlive its run.

A process group is not enough to bound a hook: a child that calls ``setsid`` (or double-forks)
leaves the group and outlives ``killpg``. So every hook runs under a *reaper*, a process that

1. makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan of the
   hook's tree -- a ``setsid`` or double-forked child included -- is re-parented to it, not to
   init;
2. forks the hook in a new session, with the hook's stdin, stdout and stderr (pipes to the host);
3. waits until the hook exits **or** its *lifeline* pipe from the host reaches end of file (the
   host closes it on a timeout, an abort, an output cap, a cancellation, or when it dies);
4. then kills every process left in the tree: it SIGKILLs each of its children, reaps them, and
   repeats until it has none (the killed children's own children are re-parented to it, so the
   loop reaches every descendant), and reports what the hook did on a status pipe.

The reapers are forked by one *runner* process per interpreter, started when the first host with
hooks starts:
the host's Python interpreter with ``-I -S`` and the code below passed with ``-c`` (no file a
tool could rewrite), detached from the host (its own session) and serving requests on a
``SOCK_SEQPACKET`` socket: each request is the hook's argv and working directory, with the five
pipe ends passed as file descriptors (``SCM_RIGHTS``). Forking the already-started runner costs
about a millisecond; starting an interpreter per hook would cost tens. The runner exits when the
host's end of the socket closes (the plugin is collected, or the host dies). Its code is
`._runner_code.RUNNER_CODE`.

Why hand-written: no packaged library does "subreaper + kill the whole tree" (``psutil`` finds
children but cannot re-parent a ``setsid`` escapee; cgroups and PID namespaces need privileges
that an ordinary user may not have). The runner is some eighty lines of standard library.

The host reads the hook's stdout and stderr, each capped; more than the cap is a failure (the
tree is killed), as is a timeout or an abort. `HookRunner.run` never raises for the hook.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import weakref
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs
import trio

from dsh_host import AbortSignal

from ._runner_code import RUNNER_CODE

__all__ = ["HookRunner", "TreeRun", "shared_runner"]


@attrs.frozen
class TreeRun:
    """What one run of a hook's process tree did.

    Attributes:
        outcome: ``exited`` (see ``code``), ``signaled`` (see ``code``: the signal number),
            ``timeout``, ``aborted``, ``overflow`` (an output stream passed its cap; see
            ``overflow``) or ``error`` (it could not start; see ``error``).
        code: The exit code or the killing signal.
        stdout: What the hook printed on stdout (at most the cap).
        stderr: What it printed on stderr (at most the cap).
        overflow: ``"stdout"`` or ``"stderr"``: the stream that passed the cap.
        error: Why it could not start.
    """

    outcome: Literal["exited", "signaled", "timeout", "aborted", "overflow", "error"]
    code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    overflow: str | None = None
    error: str | None = None


class _Reader:
    def __init__(self, name: str, cap: int, on_overflow: trio.Event) -> None:
        self.name = name
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflowed = False
        self.on_overflow = on_overflow

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            if self.overflowed:
                continue  # keep draining (discarding) until the killed tree closes the pipe
            self.size += len(chunk)
            if self.size > self.cap:
                self.overflowed = True
                self.on_overflow.set()
                continue
            self.chunks.append(bytes(chunk))

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        async with stream:
            await stream.send_all(data)


class HookRunner:
    """The runner process of one plugin: forks a reaper per hook run (see the module docstring).

    One runner per interpreter serves every host of the process (`shared_runner`); each request
    carries the hook's argv, working directory and environment.

    Args:
        interpreter: The absolute path of the Python interpreter that runs the runner.
    """

    def __init__(self, interpreter: str) -> None:
        self.interpreter = interpreter
        self._sock: socket.socket | None = None

    @property
    def started(self) -> bool:
        """Whether the runner is up (as far as the host knows)."""
        return self._sock is not None

    def start(self) -> None:
        """Start the runner (once, when the host starts; again only if it died)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            first = subprocess.Popen(
                [self.interpreter, "-I", "-S", "-c", RUNNER_CODE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if first.wait() != 0:  # it forks the runner and exits
                raise OSError(f"the hook runner exited with code {first.returncode} at start")
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        weakref.finalize(self, ours.close)

    def close(self) -> None:
        """Close the socket; the runner then exits (running hooks are killed by their reapers
        when their lifelines close)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def _send(self, message: bytes, fds: list[int]) -> None:
        for attempt in range(2):
            if self._sock is None:
                self.start()
            assert self._sock is not None
            try:
                while True:
                    try:
                        socket.send_fds(self._sock, [message], fds)
                        return
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(self._sock)
            except (BrokenPipeError, ConnectionError):
                self.close()  # the runner died: start another one, once
                if attempt:
                    raise

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes,
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        abort: AbortSignal,
        max_output_bytes: int,
        grace: float = 10.0,
    ) -> TreeRun:
        """Run *argv* under a reaper and return what it did; never raises for the hook.

        Args:
            argv: The hook's argv; ``argv[0]`` an absolute path.
            stdin: Bytes written to the hook's stdin (then closed).
            cwd: The hook's working directory.
            env: The hook's whole environment.
            timeout: Seconds the whole tree may run.
            abort: The call's signal: an abort kills the tree.
            max_output_bytes: The cap on each of stdout and stderr.
            grace: Seconds to wait for the reaper to finish killing the tree once told to.
        """
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        life_r, life_w = os.pipe()
        status_r, status_w = os.pipe()
        theirs = [in_r, out_w, err_w, life_r, status_w]
        try:
            request = json.dumps({"argv": list(argv), "cwd": cwd, "env": dict(env)}).encode()
            await self._send(request, theirs)
        except (OSError, ValueError) as exc:
            for fd in (in_w, out_r, err_r, life_w, status_r):
                os.close(fd)
            return TreeRun("error", error=f"the hook runner is unavailable: {exc}")
        finally:
            for fd in theirs:
                os.close(fd)
        return await _supervise(
            trio.lowlevel.FdStream(in_w), trio.lowlevel.FdStream(out_r),
            trio.lowlevel.FdStream(err_r), trio.lowlevel.FdStream(status_r), life_w,
            stdin=stdin, timeout=timeout, abort=abort, max_output_bytes=max_output_bytes,
            grace=grace,
        )  # fmt: skip


_RUNNERS: dict[str, HookRunner] = {}


def shared_runner(interpreter: str) -> HookRunner:
    """The process's runner for *interpreter*, started if it is not up (raises `OSError` if it
    cannot start)."""
    runner = _RUNNERS.setdefault(interpreter, HookRunner(interpreter))
    if not runner.started:
        runner.start()
    return runner


async def _supervise(
    stdin_stream: trio.lowlevel.FdStream,
    stdout: trio.lowlevel.FdStream,
    stderr: trio.lowlevel.FdStream,
    status: trio.lowlevel.FdStream,
    life_w: int,
    *,
    stdin: bytes,
    timeout: float,
    abort: AbortSignal,
    max_output_bytes: int,
    grace: float,
) -> TreeRun:
    overflow = trio.Event()
    out = _Reader("stdout", max_output_bytes, overflow)
    err = _Reader("stderr", max_output_bytes, overflow)
    said: list[bytes] = []
    stopped: Literal["timeout", "aborted", "overflow"] | None = None

    def cut_lifeline() -> None:
        nonlocal life_w
        if life_w >= 0:
            os.close(life_w)
            life_w = -1

    async def read_status() -> None:
        while chunk := await status.receive_some(4096):
            said.append(bytes(chunk))

    async def watch() -> None:
        async with trio.open_nursery() as watchers:

            async def on_abort() -> None:
                nonlocal stopped
                await abort.wait()
                stopped = stopped or "aborted"
                watchers.cancel_scope.cancel()

            async def on_overflow() -> None:
                nonlocal stopped
                await overflow.wait()
                stopped = stopped or "overflow"
                watchers.cancel_scope.cancel()

            watchers.start_soon(on_abort)
            watchers.start_soon(on_overflow)
        cut_lifeline()  # the reaper kills the tree; the pipes then close

    async def until(deadline: float) -> None:
        nonlocal stopped
        await trio.sleep_until(deadline)
        stopped = stopped or "timeout"
        cut_lifeline()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            nursery.start_soon(until, trio.current_time() + timeout)
            async with trio.open_nursery() as io:
                io.start_soon(_feed, stdin_stream, stdin)
                io.start_soon(out.drain, stdout)
                io.start_soon(err.drain, stderr)
                io.start_soon(read_status)
            nursery.cancel_scope.cancel()
    finally:
        cut_lifeline()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(grace) as late:
                await read_status()  # to end of file: the reaper has killed the tree and left
            if late.cancelled_caught:
                _kill_reaper(said)  # stuck: last resort (its tree may survive)
            for stream in (status, stdin_stream, stdout, stderr):
                await stream.aclose()
    if stopped == "overflow":
        name = "stdout" if out.overflowed else "stderr"
        return TreeRun("overflow", stdout=out.data, stderr=err.data, overflow=name)
    if stopped is not None:
        return TreeRun(stopped, stdout=out.data, stderr=err.data)
    lines = b"".join(said).decode("utf-8", "replace").split("\n", 1)
    kind, _, rest = (lines[1] if len(lines) > 1 else "").partition(" ")
    if kind == "exit":
        return TreeRun("exited", int(rest), out.data, err.data)
    if kind == "signal":
        return TreeRun("signaled", int(rest), out.data, err.data)
    if kind == "error":
        return TreeRun("error", stdout=out.data, stderr=err.data, error=rest)
    return TreeRun("error", error="the hook's reaper ended without a report")


def _kill_reaper(said: list[bytes]) -> None:
    first = b"".join(said).split(b"\n", 1)[0]
    if first.startswith(b"pid "):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(first[4:]), signal.SIGKILL)
