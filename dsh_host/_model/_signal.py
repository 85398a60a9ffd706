"""`AbortSignal`: a caller-owned, one-way cancellation flag that trio code can wait on."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    import trio

__all__ = ["AbortSignal"]

_Callback = Callable[["AbortSignal"], None]
_INF = math.inf


_current_time: Callable[[], float] | None = None
"""`trio.current_time`, once a signal first needs the clock (`import dsh_host` imports no trio)."""


def _now() -> float | None:
    global _current_time
    if _current_time is None:
        import trio

        _current_time = trio.current_time
    try:
        return _current_time()
    except RuntimeError:  # outside trio.run
        return None


@final
class AbortSignal:
    """A flag the caller raises once to cancel the calls it handed this signal to.

    Abort it from the trio thread (use `trio.from_thread.run_sync` elsewhere). Aborting runs
    every subscriber at once, so a body's cancel scope is cancelled synchronously.

    A signal may also carry a *deadline* (`after`, `at`): it counts as aborted once trio's clock
    passes it, and a tool body running under it is cancelled then, with no timer task of its
    own. This is how an execute wrapper installs a timeout:
    ``await call_next(signal=AbortSignal.after(30))``.

    Example::

        signal = AbortSignal()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(registry.execute, ToolExecutionInput(..., signal=signal))
            signal.abort("user pressed Esc")
    """

    __slots__ = (
        "_aborted",
        "_aborted_at",
        "_callbacks",
        "_deadline",
        "_deadline_reason",
        "_event",
        "_follower",
        "_inert",
        "_reason",
    )

    def __init__(self) -> None:
        self._inert = False
        self._aborted = False
        self._aborted_at: float | None = None
        self._reason: Any = None
        self._deadline = math.inf
        self._deadline_reason: Any = None
        self._callbacks: list[_Callback] | None = None
        self._event: trio.Event | None = None
        self._follower: Any = None
        """Set by a caller that follows this signal itself from the call's first suspension on
        (the asyncio host's worker; see `_pipeline._body.body_raised`); ``None``: the
        pipeline follows it."""

    @classmethod
    def at(cls, deadline: float, reason: Any = None) -> AbortSignal:
        """A signal that aborts with *reason* once `trio.current_time` reaches *deadline*."""
        signal = cls()
        signal._deadline = deadline
        signal._deadline_reason = "deadline passed" if reason is None else reason
        return signal

    @classmethod
    def after(cls, seconds: float, reason: Any = None) -> AbortSignal:
        """A signal that aborts *seconds* from now (on trio's clock); call it inside `trio.run`."""
        import trio

        return cls.at(trio.current_time() + seconds, reason)

    def __repr__(self) -> str:
        state = f"aborted, reason={self._reason!r}" if self.aborted else "live"
        return f"<AbortSignal {state}>"

    @property
    def deadline(self) -> float:
        """The trio time this signal aborts at by itself (`math.inf`: none)."""
        return self._deadline

    @property
    def aborted(self) -> bool:
        """Whether `abort` has been called, or the deadline has passed."""
        if self._aborted:
            return True
        if self._deadline != _INF:
            now = _now()
            if now is not None and now >= self._deadline:
                self._abort(self._deadline_reason, self._deadline)
                return True
        return False

    @property
    def aborted_at(self) -> float | None:
        """The trio time it was aborted at (its deadline, for a deadline); ``None`` if unknown."""
        return self._aborted_at if self.aborted else None

    @property
    def reason(self) -> Any:
        """What `abort` was given (``"aborted"`` when it was given nothing); ``None`` while live."""
        return self._reason if self.aborted else None

    def abort(self, reason: Any = None) -> None:
        """Abort the signal; later calls do nothing. Subscribers run now, in subscription order."""
        if not self.aborted:
            self._abort("aborted" if reason is None else reason, _now())

    def _abort(self, reason: Any, at: float | None) -> None:
        self._aborted = True
        self._aborted_at = at
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, None
        if self._event is not None:
            self._event.set()
        for callback in callbacks or ():
            callback(self)

    async def wait(self) -> None:
        """Sleep until the signal is aborted (at once if it already is)."""
        if self.aborted:
            return
        import trio

        if self._event is None:
            self._event = trio.Event()
        with trio.move_on_at(self._deadline):
            await self._event.wait()
        self.aborted  # noqa: B018 - reading it aborts a signal whose deadline passed

    def _subscribe(self, callback: _Callback) -> Callable[[], None]:
        """Run *callback* on abort (now, if already aborted); return a function that unsubscribes.

        A deadline does not run callbacks when it passes (nothing watches the clock): code
        that must act at the deadline uses `deadline` (as the body's cancel scope does).
        """
        if self.aborted:
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

        It takes the earliest of their deadlines, and stays subscribed to its sources for their
        lifetime.
        """
        fused, _ = _fuse(tuple(signals))
        return fused


def _noop() -> None:
    pass


def _inert() -> AbortSignal:
    """A signal for a call whose caller passed none: no one outside the pipeline holds it, so a
    body running under it needs no cancel scope."""
    signal = _new_signal(AbortSignal)  # `AbortSignal()`, its slots filled here: once per call
    signal._inert = True
    signal._aborted = False
    signal._aborted_at = None
    signal._reason = None
    signal._deadline = math.inf
    signal._deadline_reason = None
    signal._callbacks = None
    signal._event = None
    signal._follower = None
    return signal


_new_signal = object.__new__


def _fuse(signals: tuple[AbortSignal, ...]) -> tuple[AbortSignal, Callable[[], None]]:
    """Like `AbortSignal.any`, also returning a function that detaches the new signal."""
    fused = AbortSignal()
    for signal in signals:
        if signal.aborted:
            fused._abort(signal.reason, signal.aborted_at)
            return fused, _noop
    earliest = min(signals, key=lambda s: s._deadline, default=None)
    if earliest is not None and earliest._deadline != math.inf:
        fused._deadline = earliest._deadline
        fused._deadline_reason = earliest._deadline_reason

    def forward(source: AbortSignal) -> None:
        if not fused._aborted:
            fused._abort(source.reason, source.aborted_at)

    unsubscribers = [signal._subscribe(forward) for signal in signals]

    def dispose() -> None:
        for unsubscribe in unsubscribers:
            unsubscribe()

    return fused, dispose
