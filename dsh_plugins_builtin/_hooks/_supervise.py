"""The host's side of one hook run: feed stdin, drain stdout and stderr under a cap, and watch.

`supervise` takes the pipe ends the runner's reaper holds the other ends of (see ``_process``).
The tree is stopped by closing the *lifeline* pipe -- on a timeout, an abort, an output cap or a
cancellation -- and the reaper then kills it and closes the pipes; its report on the status pipe
says how the hook ended. `supervise` never raises for the hook.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Literal

import attrs
import trio

from dsh_host import AbortSignal

__all__ = ["TreeRun", "supervise"]


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


_Stopped = Literal["timeout", "aborted", "overflow"]


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


async def supervise(
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
    """Feed, drain and watch one hook run until its tree is gone; what it did."""
    run = _Supervision(status, life_w, abort, max_output_bytes)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.watch)
            nursery.start_soon(run.until, trio.current_time() + timeout)
            async with trio.open_nursery() as io:
                io.start_soon(_feed, stdin_stream, stdin)
                io.start_soon(run.out.drain, stdout)
                io.start_soon(run.err.drain, stderr)
                io.start_soon(run.read_status)
            nursery.cancel_scope.cancel()
    finally:
        await run.wind_down(grace, (status, stdin_stream, stdout, stderr))
    return run.outcome()


class _Supervision:
    """The state of one run: its outputs, the reaper's report, its lifeline, and why it stopped."""

    def __init__(
        self, status: trio.lowlevel.FdStream, life_w: int, abort: AbortSignal, cap: int
    ) -> None:
        self.status = status
        self.life_w = life_w
        self.abort = abort
        self.overflow = trio.Event()
        self.out = _Reader("stdout", cap, self.overflow)
        self.err = _Reader("stderr", cap, self.overflow)
        self.said: list[bytes] = []
        self.stopped: _Stopped | None = None

    def cut_lifeline(self) -> None:
        if self.life_w >= 0:
            os.close(self.life_w)
            self.life_w = -1

    async def read_status(self) -> None:
        while chunk := await self.status.receive_some(4096):
            self.said.append(bytes(chunk))

    async def watch(self) -> None:
        """Cut the lifeline on an abort or an output overflow."""
        async with trio.open_nursery() as watchers:
            watchers.start_soon(self._stop_on, self.abort.wait, "aborted", watchers.cancel_scope)
            watchers.start_soon(
                self._stop_on, self.overflow.wait, "overflow", watchers.cancel_scope
            )
        self.cut_lifeline()  # the reaper kills the tree; the pipes then close

    async def _stop_on(
        self, event: Callable[[], Awaitable[object]], why: _Stopped, watchers: trio.CancelScope
    ) -> None:
        await event()
        self.stopped = self.stopped or why
        watchers.cancel()

    async def until(self, deadline: float) -> None:
        """Cut the lifeline at *deadline*."""
        await trio.sleep_until(deadline)
        self.stopped = self.stopped or "timeout"
        self.cut_lifeline()

    async def wind_down(self, grace: float, streams: tuple[trio.lowlevel.FdStream, ...]) -> None:
        """Cut the lifeline, wait (shielded, up to *grace*) for the reaper to leave, close all."""
        self.cut_lifeline()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(grace) as late:
                await self.read_status()  # to end of file: the reaper has killed the tree and left
            if late.cancelled_caught:
                _kill_reaper(self.said)  # stuck: last resort (its tree may survive)
            for stream in streams:
                await stream.aclose()

    def outcome(self) -> TreeRun:
        """What the run did: why it was stopped, else what the reaper reported."""
        out, err = self.out.data, self.err.data
        if self.stopped == "overflow":
            name = "stdout" if self.out.overflowed else "stderr"
            return TreeRun("overflow", stdout=out, stderr=err, overflow=name)
        if self.stopped is not None:
            return TreeRun(self.stopped, stdout=out, stderr=err)
        lines = b"".join(self.said).decode("utf-8", "replace").split("\n", 1)
        kind, _, rest = (lines[1] if len(lines) > 1 else "").partition(" ")
        if kind == "exit":
            return TreeRun("exited", int(rest), out, err)
        if kind == "signal":
            return TreeRun("signaled", int(rest), out, err)
        if kind == "error":
            return TreeRun("error", stdout=out, stderr=err, error=rest)
        return TreeRun("error", error="the hook's reaper ended without a report")


def _kill_reaper(said: list[bytes]) -> None:
    first = b"".join(said).split(b"\n", 1)[0]
    if first.startswith(b"pid "):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(first[4:]), signal.SIGKILL)
