"""Stages K to M (CONTRACT §4): post-execute, the final result, the observers; `finalize`.

::

    K post-execute -> L finish -> M observers

`_post_now` is `_post`'s fast path (on the caller's frame until a hook waits or raises);
`_observe_now` and `_observe_plain` are `_observe`'s, for plain observers.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._model._content import content_text
from .._model._errors import PluginFailure
from .._model._outcomes import aborted, plugin_failed
from .._model._text import printable
from .._model._trace import Trace, emit
from .._model._values import (
    Block,
    ToolExecution,
    ToolExecutionResult,
    ToolFailure,
)
from .._registry._hooks import Impl, Plan
from ._chain import _Chain, _Later, _Pending, _Raised, _Suspend
from ._contain import genuine, is_cancellation, real_interrupt, seconds
from ._follow import _FINALIZED, _GATE, _POST, Following, shielded_for
from ._stage import (
    _Budget,
    _Stage,
)
from ._trio_internals import cancel_status
from ._verify import content_violations, context_violations, invalid

if TYPE_CHECKING:
    pass

from ._answers import (
    _ACCEPT,
    _NO_SCOPE,
    _UNCALLED,
    _check_post,
    _failed,
    logger,
)
from ._chains import _Chains
from ._tail import _Handed, resolve_tail

__all__ = ["_Finish"]


class _Finish(_Chains):
    """Stages K-M of `Pipeline`."""

    async def finalize(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        post: bool,
        trace: Trace | None,
        plan: Plan | None = None,
    ) -> ToolExecutionResult:
        if plan is None:
            plan = self.hooks.plan()
        if post and plan.post:
            result = await self._post(execution, result, trace, plan)
        impls = plan.result
        if not impls:
            return result
        if plan.plain_result and trace is None:
            await self._observe_plain(impls, execution, result)
            return result
        i = 0
        while i < len(impls):
            # One scope for the observers; a fresh one only after an observer was cut off.
            # Eager: an observer cut off is reported as such, and the next gets a fresh scope.
            stage = _Stage() if self.hooks.any_async("dsh_tool_result") else None
            with stage.scope if stage is not None else _NO_SCOPE:
                while i < len(impls):
                    impl = impls[i]
                    i += 1
                    started = time.perf_counter() if trace is not None else 0.0
                    outcome = await self._observe(impl, execution, result, stage)
                    if trace is not None:
                        kwargs = {"execution": execution}
                        emit(trace, kwargs, "dsh_tool_result", impl.plugin, outcome, started)
                    if stage is not None and stage.expired():
                        break
        return result

    async def cut_short(
        self,
        execution: ToolExecution,
        reached: str,
        result: ToolExecutionResult | None,
        trace: Trace | None,
        cause: BaseException | None = None,
    ) -> None:
        """Nothing unless *cause* (if given) is a cancellation (the caller's own: the pipeline
        contains the rest). Else the observer round of a call its caller's cancellation cut
        short in stage *reached*
        (`_follow._GATE`, ...), *result* the result it had then, if any: every call has one
        (CONTRACT §4), and its audit row with it. The call ends ``ABORTED_BEFORE_DISPATCH`` in
        the gate, else ``ABORTED`` (an error result is kept: cancellation replaces only
        successes). The round runs shielded from the cancellation, bounded as it always is
        (each observer by the observer timeout); the caller then re-raises the cancellation."""
        if reached == _FINALIZED or (cause is not None and not is_cancellation(cause)):
            return  # `finalize` saw to it, or it is no cancellation
        plan = self.hooks.plan()
        if not plan.result:
            return
        if reached == _GATE:
            result = aborted(False)
        elif result is None or not result.is_error:
            result = aborted(True, () if result is None else result.additional_contexts)
        with shielded_for(self.observer_timeout * len(plan.result)):
            await self.finalize(execution, result, False, trace, plan)

    def _post_now(
        self, execution: ToolExecution, result: ToolExecutionResult, plan: Plan
    ) -> ToolExecutionResult:
        """`_post` without a trace, on this frame: raises `_Later` when a hook waits or raises
        (`_post` goes on from there), or where trio's cancel status cannot be read."""
        args = (execution, result)
        try:
            if plan.plain_post:
                try:
                    decision, who = self._decide(
                        plan.post, "dsh_tool_post_execute", args, execution.name, _ACCEPT,
                        _check_post,
                    )  # fmt: skip
                except (_Raised, _Pending) as slow:
                    raise _Later(slow) from None
            else:
                base = cancel_status()
                if base is None:  # an eager stage: the whole of `_post`
                    raise _Later(None)
                made = self._plan_links  # `_links`, inline: made once per plan
                links = made[2] if made is not None and made[0] is plan else self._links(plan)[1]
                if links.tail:  # plain functions only: no chain made unless needed
                    try:
                        decision, who = resolve_tail(links, args, base, execution.name)
                    except _Handed as handed:
                        raise _Later(None, handed.chain, handed.slow) from None
                else:
                    chain = _Chain(links, args, base)
                    try:
                        decision, who = chain.resolve(0)
                    except (_Suspend, _Raised) as slow:
                        raise _Later(None, chain, slow) from None
        except PluginFailure as exc:
            return plugin_failed(exc)
        if decision is _ACCEPT and (result.is_error or "signal" not in execution.__dict__):
            return result  # `_applied`, when there is nothing to apply (no signal was made)
        return self._applied(execution, result, decision, who)

    async def _post(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        trace: Trace | None,
        plan: Plan,
        later: _Later | None = None,
    ) -> ToolExecutionResult:
        """Stage K: the post-execute hooks' decision applied to *result*; *later*: on from
        where `_post_now` stopped. A caller's signal that aborts while a hook waits cuts the
        stage short (`Following`; one aborted before, as for an ``ABORTED`` call, does not):
        the result is then kept if an error, else ``ABORTED``."""
        hook = "dsh_tool_post_execute"
        if trace is None and later is None:
            try:
                return self._post_now(execution, result, plan)
            except _Later as stopped:
                later = stopped
        signal = execution.__dict__.get("signal")
        base = None if later is None or later.chain is None else later.chain.base
        try:
            with Following(None if signal is None or signal.aborted else signal, base):
                if later is not None and later.plain is not None:
                    decision, who = await self._first_plain(
                        plan.post, hook, (execution, result), _ACCEPT, _check_post, later.plain
                    )
                elif later is not None and later.chain is not None and later.slow is not None:
                    decision, who = await later.chain.finish(later.slow)
                else:
                    kwargs = {"execution": execution, "result": result}
                    decision, who = await self._first(
                        hook, kwargs, _ACCEPT, _check_post, trace, args=(execution, result),
                        impls=plan.post,
                    )  # fmt: skip
                return self._applied(execution, result, decision, who)
        except PluginFailure as exc:
            return plugin_failed(exc)
        except BaseException as exc:
            await self.cut_short(execution, _POST, result, trace, exc)
            raise
        return result if result.is_error else aborted(True, result.additional_contexts)

    def _applied(
        self, execution: ToolExecution, result: ToolExecutionResult, decision: Any, who: str | None
    ) -> ToolExecutionResult:
        """*result* with the post-execute *decision* (made by *who*) applied."""
        if decision is _ACCEPT:
            if not result.is_error and (
                (signal := execution.__dict__.get("signal")) is not None and signal.aborted
            ):
                result = aborted(True, result.additional_contexts)
            return result
        blocked = type(decision) is Block
        content = decision.feedback if blocked else decision.content
        found = (
            [] if content is None else content_violations(content, ("content", "feedback")[blocked])
        )
        if decision.additional_contexts:
            found += context_violations(decision.additional_contexts)
        if found:  # blocks set around their validators (a forged image) never reach the model
            producer = f"plugin {who!r} (dsh_tool_post_execute)"
            return invalid(producer, found, decided_by=who)
        if blocked:
            message = (
                content_text(decision.feedback) or "tool result blocked by post-execute policy"
            )
            result = ToolExecutionResult(
                content=decision.feedback,
                is_error=True,
                error=ToolFailure(message, "BLOCKED"),
                additional_contexts=decision.additional_contexts,
                decided_by=who,
                decision_detail=decision.detail,
            )
        elif decision.content is not None or decision.additional_contexts:
            changes: dict[str, Any] = {}
            if decision.content is not None:
                changes["content"] = decision.content
                changes["decided_by"] = who
                changes["decision_detail"] = decision.detail
            if decision.additional_contexts:
                contexts = (*result.additional_contexts, *decision.additional_contexts)
                changes["additional_contexts"] = contexts
            result = attrs.evolve(result, **changes)
        if not result.is_error and (
            (signal := execution.__dict__.get("signal")) is not None and signal.aborted
        ):
            result = aborted(True, result.additional_contexts)
        return result

    def _observe_now(
        self, impls: tuple[Impl, ...], execution: ToolExecution, result: ToolExecutionResult
    ) -> _Raised | _Pending | None:
        """The plain observers called in a loop, on this frame, until one raises or returns
        something: that, for `_observe_plain` to go on from (``None`` when all ran)."""
        try:
            i, value = self._plain(impls, 0, "dsh_tool_result", (execution, result), execution.name)
        except _Raised as raised:
            return raised
        return None if i == len(impls) else _Pending(i, impls[i], value)

    async def _observe_plain(
        self,
        impls: tuple[Impl, ...],
        execution: ToolExecution,
        result: ToolExecutionResult,
        slow: _Raised | _Pending | None = None,
    ) -> None:
        """The observers, all plain functions, called in a loop (no trace); each contained.
        *slow*: on from what `_observe_now` stopped at."""
        hook = "dsh_tool_result"
        args = (execution, result)
        i, count = 0, len(impls)
        while i < count:
            raised: _Raised | None = None
            if isinstance(slow, _Raised):
                raised, slow = slow, None
            elif slow is not None:
                i, value, slow = slow.index, slow.error, None
            else:
                try:
                    i, value = self._plain(impls, i, hook, args, execution.name)
                except _Raised as caught:
                    raised = caught
            if raised is not None:
                exc = raised.error
                if isinstance(exc, PluginFailure):  # one that blocked too long
                    exc = exc.error
                elif await genuine(exc):
                    raise exc  # itself (a real Ctrl-C, a cancellation), not `_Raised`
                logger.warning(
                    'tool "%s" (%s): dsh_tool_result observer %r failed: %s',
                    printable(execution.name), execution.call_id, raised.impl.plugin,
                    _failed(exc),
                )  # fmt: skip
                i = raised.index + 1
                continue
            if i < count:  # it returned something: an awaitable is awaited, in its bound
                await self._observe(impls[i], execution, result, returned=value)
                i += 1

    async def _observe(
        self,
        impl: Impl,
        execution: ToolExecution,
        result: ToolExecutionResult,
        stage: _Stage | None = None,
        returned: Any = _UNCALLED,
    ) -> str:
        """Run one observer, contained and bounded; say how it went (for the trace).

        An observer cut off by ``observer_timeout`` is reported on stderr the first time for
        each plugin (and logged every time), so its lost work is never silent.
        """
        hook = "dsh_tool_result"
        kwargs = {"execution": execution, "result": result}
        try:
            if returned is not _UNCALLED:
                value = returned
            elif impl.is_async:
                value = impl.call_sync(kwargs)  # only makes the coroutine
            else:
                value = self.watched(impl.plugin, hook, execution.name, impl.call_sync, kwargs)
            if value is not None and inspect.isawaitable(value):
                if stage is None:
                    with trio.move_on_after(self.observer_timeout) as scope:
                        await value
                    cut = scope.cancel_called
                else:
                    budget = _Budget(self.observer_timeout, stage)
                    try:
                        await stage.run(value, budget, impl.plugin, hook)
                    except BaseException as exc:
                        if not stage.scope.cancel_called or real_interrupt(exc):
                            raise
                    cut = stage.expired()
                if cut:
                    self._report_cut_off(impl.plugin, execution)
                    return f"cut off after {seconds(self.observer_timeout)} (its work is lost)"
        except BaseException as exc:
            if isinstance(exc, PluginFailure):  # a synchronous observer that blocked too long
                exc = exc.error
            elif await genuine(exc):
                raise
            logger.warning(
                'tool "%s" (%s): dsh_tool_result observer %r failed: %s',
                printable(execution.name), execution.call_id, impl.plugin, _failed(exc),
            )  # fmt: skip
            return f"{_failed(exc)} (contained)"
        return "observed"

    def _report_cut_off(self, plugin: str, execution: ToolExecution) -> None:
        message = (
            f"dsh: warning: observer {plugin!r} (dsh_tool_result) did not finish within "
            f"[host] observer_timeout = {seconds(self.observer_timeout)} and was cut off; "
            f'what it was doing for tool "{printable(execution.name)}" ({execution.call_id}) '
            "is lost. Raise observer_timeout, or make the observer faster."
        )
        logger.warning("%s", message)
        if plugin not in self._cut_off:
            self._cut_off.add(plugin)
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(message + " (reported once per plugin)\n")
