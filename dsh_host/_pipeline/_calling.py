"""Calling hook implementations: watched when synchronous, bounded when they wait, contained.

The first of the classes `Pipeline` is made of (`._pipeline`): `watched` (one plain call,
watched), `_call` (one implementation, any kind), and the plain loop (`_plain`, `_decide`) with
its general version beside it (`_first_plain`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._model._errors import PluginFailure
from .._model._trace import Trace, describe, emit
from .._model._values import (
    ToolExecutionInput,
    ToolExecutionResult,
)
from .._registry._hooks import HookRelay, Impl, Plan
from ._chain import _HOOK_ARGS, _Links, _Pending, _Raised
from ._contain import Watchdog, genuine
from ._stage import (
    _Budget,
    _contained,
    _settle,
    _Stage,
)

if TYPE_CHECKING:
    from .._registry._registry import ToolTable
    from .._schema._tool import ToolDefinition

from ._answers import (
    _ANSWERS,
    _UNCALLED,
    _clock,
    _failed,
)

__all__ = ["_Calling"]


class _Calling:
    """The hook-calling part of `Pipeline`."""

    # Set by `Pipeline.__init__` (`._pipeline`); declared here, where the calling starts.
    registry: ToolTable
    hooks: HookRelay
    observer_timeout: float
    hook_timeout: float
    approval_timeout: float
    watchdog: Watchdog
    _cut_off: set[str]
    _run_nested: Callable[[ToolExecutionInput], Awaitable[ToolExecutionResult]]
    _plan_links: tuple[Plan, _Links, _Links] | None
    _accepted: tuple[ToolDefinition, Any] | None
    _global_tools: dict[str, ToolDefinition]  # the table's global tools (`ToolTable.get`, inline)
    _bare_plan: Plan | None  # see `Pipeline.__init__`
    _bare_generation: int
    cut_short: Callable[..., Awaitable[None]]  # `_Finish.cut_short`, for `_Gate.prepare`

    def watched(self, plugin: str, hook: str, tool: str, function: Any, *args: Any) -> Any:
        """``function(*args)``: the synchronous part of a hook, watched for blocking the loop."""
        watchdog = self.watchdog
        if watchdog.registered:  # `Watchdog.enter` and `leave`, inline (once per plain hook)
            watchdog.hook, watchdog.tool = hook, tool
            watchdog.started = _clock()
            watchdog.plugin = plugin  # last: the watching thread looks at it first
        else:
            watchdog.enter(plugin, hook, tool)
        try:
            return function(*args)
        finally:
            watchdog.plugin = None
            ran = _clock() - watchdog.started
            if ran > watchdog.bound:
                # A blocking hook cannot be pre-empted; it answered late, so it fails closed.
                raise watchdog.overran(plugin, hook, ran)

    async def _call(
        self,
        impl: Impl,
        hook: str,
        trace: Trace | None,
        kwargs: dict[str, Any],
        call_next: Callable[..., Any] | None = None,
        bound: float | None = None,
        report: bool = True,
        stage: _Stage | None = None,
        returned: Any = _UNCALLED,
        budget: _Budget | None = None,
    ) -> Any:
        """Call one hook implementation, contained and bounded; raise `PluginFailure` for it.

        *returned* is what a synchronous implementation already returned (see `_plain`): an
        awaitable to finish, without calling the implementation again.

        A synchronous implementation is watched (`Watchdog`); an awaitable it returns gets
        *bound* seconds (default ``hook_timeout``) of its own time: the time it spends in
        *call_next* (downstream links, wrappers, the body) does not count. The bound is kept by
        the deadline of the *stage*'s one cancel scope, which follows the link running now (no
        scope per implementation); without a stage, the awaitable gets a scope of its own.
        *budget* is the link's own, when its ``call_next`` (in *kwargs*) already pauses it.
        """
        started = time.perf_counter() if trace is not None else 0.0
        limit = self.hook_timeout if bound is None else bound
        if call_next is not None:
            budget = _Budget(limit, stage)
            kwargs = {**kwargs, "call_next": budget.pausing(call_next)}
        try:
            if returned is not _UNCALLED:
                value = returned
            elif impl.is_async:
                value = impl.call_sync(kwargs)  # only makes the coroutine: nothing to watch
            else:
                name = (kwargs.get("execution") or kwargs["request"].execution).name
                value = self.watched(impl.plugin, hook, name, impl.call_sync, kwargs)
            if impl.is_async or (value is not None and inspect.isawaitable(value)):
                budget = budget if budget is not None else _Budget(limit, stage)
                value = await _bounded(value, budget, stage, impl, hook)
        except PluginFailure as exc:
            if trace is not None and exc.plugin == impl.plugin and exc.hook == hook:
                emit(trace, kwargs, hook, impl.plugin, _failed(exc.error), started)
            raise
        except BaseException as exc:
            if await genuine(exc):
                if trace is not None and stage is not None and stage.blame is not None:
                    plugin, where, late = stage.blame
                    if (plugin, where) == (impl.plugin, hook):  # this one ran out of time
                        emit(trace, kwargs, hook, plugin, _failed(late), started)
                raise
            if trace is not None:
                emit(trace, kwargs, hook, impl.plugin, _failed(exc), started)
            raise PluginFailure(impl.plugin, hook, exc) from exc
        if trace is not None and report:
            outcome = "abstained" if value is None else describe(value)
            emit(trace, kwargs, hook, impl.plugin, outcome, started)
        return value

    def _plain(
        self, impls: tuple[Impl, ...], start: int, hook: str, args: tuple[Any, ...], tool: str
    ) -> tuple[int, Any]:
        """Call plain implementations in order from *start*, each watched, until one answers.

        Returns ``(index, answer)``, or ``(len(impls), None)`` when none answered. One clock
        read per implementation: the `Watchdog` sees which plugin runs and since when. Raises
        `_Raised` for what an implementation raised, or a `PluginFailure` for one that blocked
        past the bound (it answered late, so it fails closed).
        """
        watchdog = self.watchdog
        clock = time.monotonic
        bound = watchdog.bound
        count = len(impls)
        i = start
        if watchdog.registered:
            watchdog.hook, watchdog.tool = hook, tool
            then = clock()
        else:
            watchdog.enter(impls[i].plugin, hook, tool)
            then = watchdog.started
        try:
            while i < count:
                impl = impls[i]
                watchdog.plugin = impl.plugin
                watchdog.started = then
                try:
                    value = impl.positional(*args)  # type: ignore[misc]
                except BaseException as exc:
                    raise _Raised(i, impl, exc) from None
                now = clock()
                if now - then > bound:
                    raise _Raised(i, impl, watchdog.overran(impl.plugin, hook, now - then))
                if value is not None:
                    return i, value
                then = now
                i += 1
            return count, None
        finally:
            watchdog.plugin = None

    def _decide(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        args: tuple[Any, ...],
        tool: str,
        default: Any,
        accept: Callable[[Any], Any],
    ) -> tuple[Any, str | None]:
        """`_first` for plain implementations, synchronously: the first answer and who gave it.

        Raises `_Raised` for what an implementation raised, and `_Pending` for an awaitable one
        returned: `_first_plain` takes over from there (both are rare).
        """
        watchdog = self.watchdog  # `_plain`, inline (once per plain stage of every call)
        clock, bound = _clock, watchdog.bound
        if watchdog.registered:
            watchdog.hook, watchdog.tool = hook, tool
            then = clock()
        else:
            watchdog.enter(impls[0].plugin, hook, tool)
            then = watchdog.started
        value = None
        try:
            for i, impl in enumerate(impls):
                watchdog.plugin = impl.plugin
                watchdog.started = then
                try:
                    value = impl.positional(*args)  # type: ignore[misc]
                except BaseException as exc:
                    raise _Raised(i, impl, exc) from None
                now = clock()
                if now - then > bound:
                    raise _Raised(i, impl, watchdog.overran(impl.plugin, hook, now - then))
                if value is not None:
                    break
                then = now
        finally:
            watchdog.plugin = None
        if value is None:
            return default, None
        if not isinstance(value, _ANSWERS) and inspect.isawaitable(value):
            raise _Pending(i, impl, value)
        try:
            return accept(value), impl.plugin
        except TypeError as exc:
            raise PluginFailure(impl.plugin, hook, exc) from None

    async def _first_plain(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        args: tuple[Any, ...],
        default: Any,
        accept: Callable[[Any], Any],
        slow: _Raised | _Pending,
    ) -> tuple[Any, str | None]:
        """`_decide`, on from the implementation that raised or returned an awaitable."""
        while True:
            impl = slow.impl
            if isinstance(slow, _Raised):
                await _contained(impl.plugin, hook, slow.error)
            kwargs = dict(zip(_HOOK_ARGS[hook], args, strict=True))
            value = await self._call(impl, hook, None, kwargs, returned=slow.error)
            if value is not None:
                try:
                    return accept(value), impl.plugin
                except TypeError as exc:
                    raise PluginFailure(impl.plugin, hook, exc) from None
            rest = impls[slow.index + 1 :]
            if not rest:
                return default, None
            try:
                return self._decide(rest, hook, args, args[0].name, default, accept)
            except (_Raised, _Pending) as again:
                slow = again
                impls = rest


async def _bounded(value: Any, budget: _Budget, stage: _Stage | None, impl: Impl, hook: str) -> Any:
    """Await what an implementation returned under its *budget*: in *stage*, else in a stage of
    its own (raising `PluginFailure` if that one's deadline passed)."""
    if stage is not None:
        return await _settle(value, budget, stage, impl.plugin, hook)
    own = budget.stage = _Stage.lazy() or _Stage()
    with own:
        value = await _settle(value, budget, own, impl.plugin, hook)
    own.fail()
    return value
