"""Execute wrappers' state: ``call_next`` tokens and what one dispatch tracks.

An execute wrapper's ``call_next`` is a `_Proceed`: awaited, it runs the wrappers after it and
the tool body (`dsh_host._pipeline._dispatch` does the work); returned unawaited by a plain
wrapper, it is a tail call. `_Wrapping` holds one dispatch's wrappers and its lazy stage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any, Protocol

import attrs
import trio

from .._model._signal import AbortSignal, _fuse
from .._model._trace import Trace
from .._model._values import ToolExecution, ToolExecutionResult
from .._registry._hooks import Impl
from ._stage import _Budget, _Staging
from ._trio_internals import cancel_status


class _Wraps(Protocol):
    """What a ``call_next`` needs of the pipeline (`dsh_host._pipeline._dispatch._Dispatch`): a
    protocol, so this module does not import the pipeline that imports it."""

    hook_timeout: float

    def wrap_on(
        self, w: _Wrapping, i: int, view: ToolExecution
    ) -> Awaitable[ToolExecutionResult]: ...

    def body_stage(
        self, view: ToolExecution, state: _DispatchState | None, trace: Trace | None
    ) -> Awaitable[ToolExecutionResult]: ...


_BODY: Any = object()
"""What `Pipeline.wrap_on` returns when every link left was a tail call: its caller runs the body."""


class _Held(Exception):
    """Where `Pipeline._wrap_now` stopped: the first wrapper's *coroutine* waits (*trap* is what
    its first step yielded) or it raised *error*; with no *token*, it never started."""

    def __init__(
        self,
        w: _Wrapping,
        token: _Proceed | None,
        impl: Impl,
        coroutine: Any = None,
        trap: Any = None,
        error: BaseException | None = None,
    ) -> None:
        self.w = w
        self.token = token
        self.impl = impl
        self.coroutine = coroutine
        self.trap = trap
        self.error = error


class _Proceed:
    """An execute wrapper's ``call_next``.

    Called without a signal, it returns itself: a plain wrapper that returns it is passed over
    (a tail call), and the token is then spent (`w` is ``None``: awaiting it later raises
    `RuntimeError` rather than run the body again outside the call). Awaited, it runs the links
    after the wrapper and the body (anew each time it is awaited), with the wrapper's own time
    paused; ``call_next(signal=...)`` returns an awaitable that does the same under that signal.
    The results it gave are in `delegated`.
    """

    __slots__ = ("budget", "delegated", "index", "pipeline", "view", "w", "waiting")

    def __init__(
        self, pipeline: _Wraps, index: int, view: ToolExecution, w: _Wrapping | None = None
    ) -> None:
        self.pipeline = pipeline
        self.index = index
        self.view = view
        self.w = w  # set by `wrap_on` before the wrapper can await it, unless it passed the call on
        self.budget: _Budget | None = None
        self.waiting = False  # awaited now, with no budget made yet
        self.delegated: tuple[ToolExecutionResult, ...] = ()  # none yet: no list per call

    def __call__(self, signal: AbortSignal | None = None) -> Awaitable[ToolExecutionResult]:
        if signal is None:
            return self
        return _Signalled(self, signal)

    def own(self) -> _Budget:
        """The wrapper's own budget (made on first need: paused if made while it waits)."""
        budget = self.budget
        if budget is None:
            w = self.w
            budget = self.budget = _Budget(
                self.pipeline.hook_timeout, None if w is None else w.stage
            )
            budget.paused = self.waiting
        return budget

    def _live(self) -> _Wrapping:
        w = self.w
        if w is None:  # passed over (a tail call): the body already ran, or will, without it
            raise RuntimeError(
                "call_next() was awaited after its wrapper returned it unawaited (a tail call): "
                "the inner wrappers and the body run without it; await call_next() inside the "
                "wrapper instead"
            )
        return w

    def downstream(
        self, signal: AbortSignal | None = None
    ) -> Generator[Any, Any, ToolExecutionResult]:
        """What ``call_next(signal)`` awaits: the wrappers after this one, then the body.

        No coroutine of its own, and no budget unless the wrapper's own time was ever counted
        (`own`): while this runs, the wrapper's time is paused.
        """
        w = self.w
        if w is None:
            w = self._live()  # raises: passed over (a tail call)
        if signal is not None and not isinstance(signal, AbortSignal):
            raise TypeError(f"call_next(signal=...) takes an AbortSignal, not {signal!r}")
        budget = self.budget  # (made only once the wrapper suspended: `own`)
        if budget is not None:
            budget.close()  # waiting downstream is not the wrapper's own time
            budget.paused = True
        self.waiting = True
        pipeline, view, i = self.pipeline, self.view, self.index + 1
        dispose = None
        try:
            if signal is not None:
                fused, dispose = _fuse((view.signal, signal))
                view = attrs.evolve(view, signal=fused)
            if budget is not None:  # it waited, perhaps where its caller's cancellation could
                # not reach it (a thread, a shield): no body starts for a caller that is gone
                yield from trio.lowlevel.checkpoint_if_cancelled().__await__()
            if i == len(w.impls):  # the body next: no `wrap_on` frame held while it runs
                result = yield from pipeline.body_stage(view, w.state, w.trace).__await__()
            else:
                result = yield from pipeline.wrap_on(w, i, view).__await__()
                if result is _BODY:
                    result = yield from pipeline.body_stage(view, w.state, w.trace).__await__()
        finally:
            if dispose is not None:
                dispose()
            self.waiting = False
            if (budget := self.budget) is not None:
                budget.paused = False
        self.delegated = (*self.delegated, result)
        return result

    __await__ = downstream  # ``await call_next()``: `downstream` itself, no call in between


class _Signalled:
    """``call_next(signal=...)`` of an execute wrapper: awaited, the rest under *signal*."""

    __slots__ = ("signal", "token")

    def __init__(self, token: _Proceed, signal: AbortSignal) -> None:
        self.token = token
        self.signal = signal

    def __await__(self) -> Generator[Any, Any, ToolExecutionResult]:
        return self.token.downstream(self.signal)


class _Handover:
    """The wrapper `Pipeline._pass_over` stopped at: its ``call_next``, and what it returned
    (*value*) or raised (*error*)."""

    __slots__ = ("error", "index", "token", "value")

    def __init__(
        self, index: int, token: _Proceed, value: Any, error: BaseException | None = None
    ) -> None:
        self.index = index
        self.token = token
        self.value = value
        self.error = error


class _Wrapping(_Staging):
    """One dispatch's execute wrappers, and their stage (see `_Staging`)."""

    __slots__ = ("impls", "state", "trace")

    def __init__(self, impls: tuple[Impl, ...], state: _DispatchState, trace: Trace | None) -> None:
        self.impls = impls
        self.state = state
        self.trace = trace
        self.base = cancel_status()
        self.stage = None


class _DispatchState:
    """What `Pipeline.dispatch` tracks across its wrappers: whether the body ran."""

    __slots__ = ("body_invoked", "ready")

    def __init__(self, ready: Any = None) -> None:
        self.body_invoked = False
        self.ready = ready


def _same_outcome(a: ToolExecutionResult, b: ToolExecutionResult) -> bool:
    """Whether a wrapper passed *b* on without changing what the model reads."""
    return a is b or (a.content == b.content and a.is_error == b.is_error and a.error == b.error)
