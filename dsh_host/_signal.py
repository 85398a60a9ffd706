"""`AbortSignal`: a caller-owned, one-way cancellation flag that trio code can wait on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, final

import trio

__all__ = ["AbortSignal"]

_Callback = Callable[["AbortSignal"], None]


@final
class AbortSignal:
    """A flag the caller raises once to cancel the calls it handed this signal to.

    Abort it from the trio thread (use `trio.from_thread.run_sync` elsewhere). Aborting runs
    every subscriber at once, so a body's cancel scope is cancelled synchronously.

    Example::

        signal = AbortSignal()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(registry.execute, ToolExecutionInput(..., signal=signal))
            signal.abort("user pressed Esc")
    """

    __slots__ = ("_aborted", "_callbacks", "_event", "_inert", "_reason")

    def __init__(self) -> None:
        self._inert = False
        self._aborted = False
        self._reason: Any = None
        self._callbacks: list[_Callback] | None = None
        self._event: trio.Event | None = None

    def __repr__(self) -> str:
        state = f"aborted, reason={self._reason!r}" if self._aborted else "live"
        return f"<AbortSignal {state}>"

    @property
    def aborted(self) -> bool:
        """Whether `abort` has been called."""
        return self._aborted

    @property
    def reason(self) -> Any:
        """What `abort` was given (``"aborted"`` when it was given nothing); ``None`` while live."""
        return self._reason

    def abort(self, reason: Any = None) -> None:
        """Abort the signal; later calls do nothing. Subscribers run now, in subscription order."""
        if self._aborted:
            return
        self._aborted = True
        self._reason = "aborted" if reason is None else reason
        callbacks, self._callbacks = self._callbacks, None
        if self._event is not None:
            self._event.set()
        for callback in callbacks or ():
            callback(self)

    async def wait(self) -> None:
        """Sleep until the signal is aborted (at once if it already is)."""
        if self._aborted:
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def _subscribe(self, callback: _Callback) -> Callable[[], None]:
        """Run *callback* on abort (now, if already aborted); return a function that unsubscribes."""
        if self._aborted:
            callback(self)
            return _noop
        if self._callbacks is None:
            self._callbacks = []
        callbacks = self._callbacks
        callbacks.append(callback)

        def unsubscribe() -> None:
            if self._callbacks is callbacks:
                with contextlib.suppress(ValueError):
                    callbacks.remove(callback)

        return unsubscribe

    @classmethod
    def any(cls, signals: Iterable[AbortSignal]) -> AbortSignal:
        """A new signal that aborts, with the same reason, as soon as any of *signals* does.

        The new signal stays subscribed to its sources for their lifetime.
        """
        fused, _ = _fuse(tuple(signals))
        return fused


def _noop() -> None:
    pass


def _inert() -> AbortSignal:
    """A signal for a call whose caller passed none: no one outside the pipeline holds it, so a
    body running under it needs no cancel scope."""
    signal = AbortSignal()
    signal._inert = True
    return signal


def _fuse(signals: tuple[AbortSignal, ...]) -> tuple[AbortSignal, Callable[[], None]]:
    """Like `AbortSignal.any`, also returning a function that detaches the new signal."""
    fused = AbortSignal()
    for signal in signals:
        if signal.aborted:
            fused.abort(signal.reason)
            return fused, _noop

    def forward(source: AbortSignal) -> None:
        fused.abort(source.reason)

    unsubscribers = [signal._subscribe(forward) for signal in signals]

    def dispose() -> None:
        for unsubscribe in unsubscribers:
            unsubscribe()

    return fused, dispose
