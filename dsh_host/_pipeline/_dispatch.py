"""Stages H to J (CONTRACT §4): the execute wrappers around the body, and the body (`body_stage`).

::

    H execute wrappers -> I dispatch (resolve, validate, body, normalise) -> J aborted?

`dispatch` is the general version; beside it, its fast paths: `_pass_over` (plain wrappers
that all pass the call on), `_wrap_now`/`_wrap_later` (an ``async`` first wrapper, on the
caller's frame until it waits), and `dispatched` (the last step both share, and a batch).
"""

from __future__ import annotations

import inspect
import math
import time
from typing import TYPE_CHECKING, Any

import attrs

from .._model._errors import PluginFailure, ToolArgsError, ToolNotFoundError
from .._model._outcomes import aborted, detailed, failure, plugin_failed, raised
from .._model._trace import Trace, TraceEvent
from .._model._values import (
    ToolExecution,
    ToolExecutionResult,
    ToolRunContext,
)
from .._registry._hooks import Impl, Plan
from ._body import followed, normalise, run_body
from ._contain import genuine
from ._stage import (
    _contained,
    _Driven,
)
from ._trio_internals import CAN_ENTER_BELOW, cancel_status
from ._verify import checked
from ._wrappers import (
    _BODY,
    _DispatchState,
    _Handover,
    _Held,
    _Proceed,
    _same_outcome,
    _Wrapping,
)

if TYPE_CHECKING:
    from .._schema._tool import ToolDefinition

from ._answers import (
    _WRAPPER_ARGS,
    _clock,
)
from ._chains import _Chains

__all__ = ["_Dispatch"]

_text_result = ToolExecutionResult._text


class _Dispatch(_Chains):
    """Stages H-J of `Pipeline`."""

    async def dispatch(
        self,
        execution: ToolExecution,
        trace: Trace | None,
        ready: Any = None,
        plan: Plan | None = None,
        handover: _Handover | None = None,
    ) -> tuple[ToolExecutionResult, bool]:
        """Run the wrappers and the body; return the result and whether post-execute sees it.

        *ready* is ``(tool, frozen arguments, body arguments)`` already validated (a batch
        classified the call): used when the body's tool and arguments are those very objects.
        *handover*: the wrapper `_pass_over` stopped at, already called; the rest go on from it.
        """
        state = _DispatchState(ready)
        if plan is None:
            plan = self.hooks.plan()
        impls = plan.execute
        try:
            if not impls:
                result = await self.body_stage(execution, state, trace)
            else:
                wrapping = _Wrapping(impls, state, trace)
                with wrapping:
                    start = 0 if handover is None else handover.index
                    result = await self.wrap_on(wrapping, start, execution, handover)
                wrapping.fail()
                if result is _BODY:  # every wrapper was a tail call: none of them waits
                    del wrapping
                    result = await self.body_stage(execution, state, trace)
        except PluginFailure as exc:
            return plugin_failed(exc), False
        return self.dispatched(execution, state, result), True

    def _plugin_named(self, name: str) -> bool:
        pm = self.hooks.pm
        return pm is None or pm.get_plugin(name) is not None

    def _attributed(self, result: ToolExecutionResult) -> ToolExecutionResult:
        """Split a body's ``decided_by="plugin: detail"`` into the name and `decision_detail`."""
        name, sep, detail = (result.decided_by or "").partition(": ")
        pm = self.hooks.pm
        if sep and pm is not None and pm.get_plugin(name) is not None:
            return attrs.evolve(result, decided_by=name, decision_detail=detail)
        return result

    def _pass_over(self, impls: tuple[Impl, ...], view: ToolExecution) -> _Handover | None:
        """Ask plain execute wrappers, in order, whether they pass the call on.

        Each gets a `_Proceed` as its ``call_next``; one that returns it (a tail call) is passed
        over. Returns ``None`` when all did (the caller runs the body, as with no wrapper), or the
        `_Handover` of the first that answered, raised or returned something else (`wrap_on` goes
        on from it).
        """
        hook = "dsh_tool_execute"
        name = view.name
        watchdog = self.watchdog
        for i, impl in enumerate(impls):
            token = _Proceed(self, i, view)
            try:  # `watched`, inline (once per plain wrapper of every call)
                if watchdog.registered:
                    watchdog.hook, watchdog.tool = hook, name
                    watchdog.started = _clock()
                    watchdog.plugin = impl.plugin  # last: the watching thread reads it first
                else:
                    watchdog.enter(impl.plugin, hook, name)
                try:
                    if impl.argnames == _WRAPPER_ARGS:
                        value = impl.function(view, token)
                    else:
                        value = impl.call_sync({"execution": view, "call_next": token})
                finally:
                    watchdog.plugin = None
                    ran = _clock() - watchdog.started
                    if ran > watchdog.bound:  # it answered late, so it fails closed
                        raise watchdog.overran(impl.plugin, hook, ran)
            except BaseException as exc:
                return _Handover(i, token, None, exc)
            if value is not token:
                return _Handover(i, token, value)
        return None

    async def wrap_on(
        self, w: _Wrapping, i: int, view: ToolExecution, handover: _Handover | None = None
    ) -> ToolExecutionResult:
        hook = "dsh_tool_execute"
        impls, trace = w.impls, w.trace
        if i == len(impls):
            return await self.body_stage(view, w.state, trace)
        while i < len(impls):  # once per link; on only after a tail call not yet begun
            impl = impls[i]
            if handover is not None:  # called already (`_pass_over`): on from what it did
                token = handover.token
                token.w = w
            else:
                token = _Proceed(self, i, view, w)
            if trace is not None:
                kwargs = {"execution": view, "call_next": token}
                result = await self._call(
                    impl, hook, trace, kwargs, stage=w.staged(), budget=token.own()
                )
            else:  # `_call`, for this one shape, without its generality
                try:
                    if handover is not None:
                        given, handover = handover, None
                        if given.error is not None:
                            raise given.error
                        value = given.value
                    else:
                        value = self._invoke(impl, view, token)
                        if value is token and not impl.is_async and not token.delegated:
                            # A tail call not yet begun: the links after it answer, as they
                            # would through it; they run from this same frame.
                            token.w = None  # spent: never to be awaited (see `_Proceed`)
                            i += 1
                            continue
                    if impl.is_async or (value is not None and inspect.isawaitable(value)):
                        if inspect.iscoroutine(value):
                            # Its first step runs here, undriven: a wrapper that never waits costs
                            # no driver (nor a stage). A wait (its own, or downstream's) hands over
                            # to `_Driven`.
                            stage = w.stage
                            depth = 0 if stage is None else len(stage.stack)
                            try:
                                trap = value.send(None)
                            except StopIteration as stop:
                                value = stop.value
                            else:
                                value = await _Driven(
                                    w.staged(), value, token.own(), impl.plugin, hook, trap, depth
                                )
                        else:
                            value = await w.staged().run(value, token.own(), impl.plugin, hook)
                except BaseException as exc:
                    await _contained(impl.plugin, hook, exc)
                result = value
            return self._wrapper_result(impl, token, result)
        # Every link left was a tail call: the caller runs the body, so that no frame of the
        # links' is held while it runs.
        body: ToolExecutionResult = _BODY
        return body

    def _invoke(self, impl: Impl, view: ToolExecution, token: _Proceed) -> Any:
        """Call one wrapper with *token* as its ``call_next`` (a plain one watched); what it
        returned, not awaited."""
        if impl.argnames == _WRAPPER_ARGS:
            if impl.is_async:
                return impl.function(view, token)
            return self.watched(
                impl.plugin, "dsh_tool_execute", view.name, impl.function, view, token
            )
        kwargs = {"execution": view, "call_next": token}
        if impl.is_async:
            return impl.call_sync(kwargs)
        return self.watched(impl.plugin, "dsh_tool_execute", view.name, impl.call_sync, kwargs)

    def _wrapper_result(self, impl: Impl, token: _Proceed, value: Any) -> ToolExecutionResult:
        """What a wrapper returned, checked (raises `PluginFailure` for nonsense)."""
        delegated = token.delegated
        if not isinstance(value, ToolExecutionResult):
            error = TypeError(
                f"returned {value!r}; dsh_tool_execute must return a ToolExecutionResult"
            )
            raise PluginFailure(impl.plugin, "dsh_tool_execute", error)
        result = value
        if delegated and delegated[-1] is result:  # passed on as it came: nothing to check
            return result
        if not any(result is r for r in delegated):
            # A result the wrapper built itself: the final check (stage L) for what it made.
            producer = f"plugin {impl.plugin!r} (dsh_tool_execute)"
            result = checked(
                result, producer, decided_by=impl.plugin, plugin_named=self._plugin_named
            )
        if result.decided_by is None and not any(_same_outcome(result, r) for r in delegated):
            result = attrs.evolve(result, decided_by=impl.plugin)
        return result

    def _wrap_now(self, view: ToolExecution, impls: tuple[Impl, ...]) -> ToolExecutionResult:
        """`dispatch` with no trace and an ``async`` first wrapper, on the caller's frame.

        The wrapper's first step runs here, undriven (its ``call_next`` runs the rest inline);
        when anything in it waits, or it raises, `_Held` hands it to `_wrap_later`.
        """
        impl = impls[0]
        w = _Wrapping(impls, _DispatchState(), None)
        if w.base is None:  # no lazy stage here: `dispatch` enters an eager one first
            raise _Held(w, None, impl)
        token = _Proceed(self, 0, view, w)
        try:
            if impl.argnames == _WRAPPER_ARGS:
                coroutine = impl.function(view, token)
            else:
                coroutine = impl.call_sync({"execution": view, "call_next": token})
            trap = coroutine.send(None)
        except StopIteration as stop:
            value = stop.value
        except BaseException as exc:
            raise _Held(w, token, impl, error=exc) from None
        else:
            raise _Held(w, token, impl, coroutine, trap)
        result = self._wrapper_result(impl, token, value)
        if result.decided_by is None and "signal" not in view.__dict__:
            return result  # `dispatched`, when it has nothing to do (no signal was made)
        return self.dispatched(view, w.state, result)

    async def _wrap_later(
        self, view: ToolExecution, held: _Held, plan: Plan
    ) -> tuple[ToolExecutionResult, bool]:
        """`_wrap_now` from where it stopped: a wait (driven now) or an exception (contained)."""
        token, impl, w = held.token, held.impl, held.w
        if token is None:
            return await self.dispatch(view, None, None, plan)
        hook = "dsh_tool_execute"
        try:
            with w:
                if held.error is not None:
                    await _contained(impl.plugin, hook, held.error)
                value = await _Driven(
                    w.staged(), held.coroutine, token.own(), impl.plugin, hook, held.trap
                )
            w.fail()
            result = self._wrapper_result(impl, token, value)
        except PluginFailure as exc:
            return plugin_failed(exc), False
        return self.dispatched(view, w.state, result), True

    def dispatched(
        self, view: ToolExecution, state: _DispatchState | None, result: ToolExecutionResult
    ) -> ToolExecutionResult:
        """`dispatch`'s last step: an aborted call's result, a body's attribution. *state*
        ``None``: the body stage ran alone (a result that is not an error: the body ran)."""
        if not result.is_error and (
            (signal := view.__dict__.get("signal")) is not None and signal.aborted
        ):
            ran = True if state is None else state.body_invoked
            return aborted(ran, result.additional_contexts)
        if result.decided_by is not None and result.decision_detail is None:
            return self._attributed(result)
        return result

    async def body_stage(
        self, view: ToolExecution, state: _DispatchState | None, trace: Trace | None
    ) -> ToolExecutionResult:
        """Stage I: resolve, validate, run the body, normalise. A result that is not an error
        means the body ran (every way to end before it is an error)."""
        started = time.perf_counter() if trace is not None else 0.0
        views = self._global_tools if view.scope is None else self.registry._view(view.scope)
        tool = views.get(view.name)  # `ToolTable.get`, inline
        if tool is None:
            error = ToolNotFoundError(view.name)
            return failure(error.message, error.code, "ToolNotFoundError")
        signal = view.__dict__.get("signal")  # ``None``: not made yet, so nobody holds it
        if signal is not None and signal.aborted:
            return aborted(False)
        arguments = view.arguments
        ready = state.ready if state is not None else None
        if ready is not None and ready[0] is tool and ready[1] is arguments:
            args, violations = ready[2], None
        elif (seen := self._accepted) is not None and seen[1] is arguments and seen[0] is tool:
            args, violations = arguments, None  # this tool's snapshot made and accepted them
        elif (accepts := tool.accepts) is not None and accepts(arguments):
            args, violations = arguments, None
        else:
            args, violations = tool.prepare(arguments)
        seen = None  # a parked body holds no memo of the pipeline's
        if violations:
            error_ = ToolArgsError(violations)
            return failure(error_.message, error_.code, "ToolArgsError")
        context = ToolRunContext._make(view, tool, self._run_nested)
        if state is not None:
            state.body_invoked = True
        if (signal is None or signal._inert) and tool.is_async:
            # Nobody outside the pipeline holds this signal: no cancel scope, no `run_body`.
            try:
                value = await (
                    tool.execute(args, context) if tool.takes_context else tool.execute(args)
                )
            except BaseException as exc:
                if await genuine(exc):
                    raise
                result = raised(exc)
            else:  # `normalise`, its first case inline
                text = type(value) is str and tool.validate_output is None
                result = _text_result(value) if text else normalise(tool, value)
        elif (
            CAN_ENTER_BELOW
            and tool.is_async
            and signal is not None
            and signal.deadline == math.inf
            and (base := cancel_status()) is not None
        ):
            result = await followed(tool, args, context, base)
        else:
            result = await run_body(tool, args, context)
        if context._deferred or result.decided_by is not None:
            result = self._after_body(tool, context, result)
        if trace is not None:
            outcome = detailed(result)
            trace(TraceEvent(view.call_id, "body", None, outcome, time.perf_counter() - started))
        return result

    def _after_body(
        self, tool: ToolDefinition, context: ToolRunContext, result: ToolExecutionResult
    ) -> ToolExecutionResult:
        """A body's result with what it deferred (`ToolRunContext.defer_context`), checked, and
        its ``decided_by`` checked: the body stage's last step, when either is there."""
        if context._deferred:
            contexts = (*context._deferred, *result.additional_contexts)
            result = attrs.evolve(result, additional_contexts=contexts)
            result = checked(result, f'tool "{tool.name}" (defer_context)', contexts_only=True)
        if result.decided_by is not None and not self._plugin_named(
            result.decided_by.partition(": ")[0]
        ):
            # Only bodies set ``decided_by`` here (the pipeline's own results do not).
            result = checked(result, f'tool "{tool.name}"', plugin_named=self._plugin_named)
        return result
