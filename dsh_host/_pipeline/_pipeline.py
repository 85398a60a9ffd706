"""The stage machine of one call (CONTRACT §4).

::

    A snapshot -> B aborted? -> C pre-execute -> D ask -> F guards -> G aborted?      (prepare)
    -> H execute wrappers -> I dispatch (resolve, validate, body, normalise)          (dispatch)
    -> K post-execute -> L finish -> M observers                                      (finalize)

A denial, an abort after the gate, a body failure and an unknown tool are *POST* results:
post-execute sees them. A plugin raising in C, D, F or H, and arguments that are not JSON, are
*FINAL*: post-execute is skipped. Every call yields exactly one result and one observer round.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .._model._errors import PluginFailure
from .._model._outcomes import aborted, plugin_failed
from .._model._signal import AbortSignal
from .._model._trace import Trace
from .._model._values import (
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRunContext,
    signal_aborted,
)
from .._registry._hooks import HookRelay, Plan
from ._body import body_raised, followed, normalise
from ._chain import _Later, _Links
from ._contain import Watchdog
from ._follow import _BODY, _FINALIZED, _GATE
from ._trio_internals import CAN_ENTER_BELOW, cancel_status
from ._wrappers import (
    _Held,
)

if TYPE_CHECKING:
    from .._registry._registry import ToolTable
    from .._schema._tool import ToolDefinition

from ._dispatch import _Dispatch
from ._finish import _Finish
from ._gate import Prepared, _Gate, _GateLater

__all__ = ["Pipeline", "Prepared", "new_call_id"]


_call_ids = itertools.count(1)
_text_result = ToolExecutionResult._text
_bare_context = ToolRunContext._call


class Pipeline(_Gate, _Dispatch, _Finish):
    """Runs calls for one `ToolTable`, calling its plugins' hooks.

    Made of one class per stage group, each in its module, in the order a call meets them:
    `_Calling` and `_Chains` (how hooks are called), `_Gate` (A-G), `_Dispatch` (H-J),
    `_Finish` (K-M). `run` below is the whole flow, A to M, in one place.
    """

    def __init__(
        self,
        registry: ToolTable,
        hooks: HookRelay,
        *,
        observer_timeout: float,
        hook_timeout: float = 30.0,
        approval_timeout: float = 900.0,
    ) -> None:
        self.registry = registry
        self.hooks = hooks
        self.observer_timeout = observer_timeout
        self.hook_timeout = hook_timeout
        self.approval_timeout = approval_timeout
        self.watchdog = Watchdog(hook_timeout)
        self._cut_off: set[str] = set()
        self._run_nested = self._nested  # bound once: every body's context holds it
        self._plan_links: tuple[Plan, _Links, _Links] | None = None
        # The last (tool, arguments) a tool's snapshot froze and accepted at stage A: frozen
        # arguments are immutable, so the body stage trusts them for that very tool.
        self._accepted = None
        # The plan last seen with no hook at all, while no global guard was registered: `run`
        # then chooses `_bare`. Forgotten when a tool, restriction or guard changes.
        self._bare_plan: Plan | None = None
        self._bare_generation = 0
        self._global_tools = registry._global.tools  # the same dict for the table's lifetime
        registry.listeners.append(self._forget_bare)

    def _forget_bare(self) -> None:
        self._bare_plan = None

    def run(
        self, input: ToolExecutionInput, trace: Trace | None
    ) -> Coroutine[Any, Any, ToolExecutionResult]:
        """The call's coroutine: `_bare` when no hook could see it (last seen so), else `_run`.

        Which one is chosen when called; `_bare` checks again when awaited (and hands over
        to `_run` when a plugin or guard came meanwhile)."""
        if self._bare_plan is not None and trace is None and input.parent is None:
            return self._bare(input)
        return self._run(input, trace)

    async def _bare(self, input: ToolExecutionInput, ready: Any = None) -> ToolExecutionResult:
        """`_run` for a call no hook, guard or trace sees, of an ``async`` tool its snapshot
        accepts: the body alone, on this frame, a live signal with no deadline followed (`followed`,
        or by its caller: `body_raised`); else `_run`. *ready*: a batch's (tool, frozen, args)."""
        scope = input.scope
        arguments: Any = None
        if ready is not None:
            tool, arguments = ready[0], ready[1]
        elif scope is None:
            tool = self._global_tools.get(input.name)  # `ToolTable.get`, inline
        else:
            tool = self.registry.get(input.name, scope)
        pm: Any = self.hooks.pm
        if self._bare_plan is None or (pm is not None and pm.generation != self._bare_generation):
            self._bare_plan = None  # a plugin or guard came: `_run` finds out what it does
            return await self._run(input, None)
        signal: Any = input.signal
        follows = signal is not None and signal._follower is None  # else its caller follows it
        if (
            (follows and (base := _followable(signal)) is None)
            or tool is None
            or not tool.is_async
            or (scope is not None and self.registry.guards_for(scope))
            or (
                arguments is None
                and (
                    (snapshot := tool.snapshot) is None
                    or (arguments := snapshot(input.arguments)) is None
                )
            )
        ):
            return await self._run(input, None)  # it names what is wrong, or runs the rest
        context = _bare_context(input, arguments, tool, self._run_nested)
        if follows:  # `followed` checks whether the signal aborted
            result = await followed(tool, arguments, context, base, signal)
        else:
            if (follower := signal and signal._follower) is not None:  # its caller follows
                signal._follower = None  # it from the call's first suspension (`body_raised`)
                follower.unscoped = True
            try:
                run = tool.execute
                value = await (run(arguments, context) if tool.takes_context else run(arguments))
            except BaseException as exc:
                result = await body_raised(exc, signal, follower)  # or raises it again
            else:
                if type(value) is str and tool.validate_output is None:  # `normalise`, first case
                    result = _text_result(value)
                else:
                    result = normalise(tool, value)
                if follower is not None:
                    if follower.scope is None:  # never armed: nothing to exit
                        follower.unscoped = False
                    else:
                        follower.ended(None)
                    if signal._aborted and not result.is_error:
                        result = aborted(True)
        if context._deferred or result.decided_by is not None or "execution" in context.__dict__:
            return self.bare_end(tool, context, result)
        return result  # nothing deferred, decided or read (so no signal was made, nor aborted)

    def bare_end(
        self, tool: ToolDefinition, context: ToolRunContext, result: ToolExecutionResult
    ) -> ToolExecutionResult:
        """What `_run` does after a bare body's result (`body_stage`'s end, then `dispatched`),
        when the body deferred a context, named a plugin, or read its context."""
        if context._deferred or result.decided_by is not None:
            result = self._after_body(tool, context, result)
        if (
            not result.is_error
            and "execution" in context.__dict__  # else nobody made the signal, nor aborted it
            and signal_aborted(context.execution)
        ):
            return aborted(True, result.additional_contexts)
        if result.decided_by is not None and result.decision_detail is None:
            return self._attributed(result)
        return result

    def bare_now(self) -> bool:
        """Whether `_bare`, started now, would run its call bare (a global one of an ``async``
        tool): no hook and no global guard, as last seen, and no plugin (un)registered since."""
        pm: Any = self.hooks.pm
        return self._bare_plan is not None and (
            pm is None or pm.generation == self._bare_generation
        )

    async def _run(self, input: ToolExecutionInput, trace: Trace | None) -> ToolExecutionResult:
        if (signal := input.signal) is not None:  # only a bare body's caller follows its signal
            signal._follower = None  # (`_bare`, `body_raised`): not this call's, nor its body's
        execution, done = self._snapshot(input, False)
        if done is not None:
            return await self.finalize(execution, done, False, trace)
        plan = self.hooks.plan()
        if plan.idle and self._bare_plan is None:
            self.note_idle(plan)
        reached = _GATE  # how far it got, for its caller's cancellation (`cut_short`)
        try:
            if plan.pre or plan.guard or self.registry.guards_for(execution.scope):
                try:
                    try:  # `_gate` on this frame (no trace), until a hook waits or raises
                        if trace is not None:
                            raise _GateLater
                        prepared = self._gate_now(execution, plan)
                    except _GateLater as later:
                        prepared = await self._gate(execution, trace, plan, False, later)
                except PluginFailure as exc:
                    prepared = Prepared(execution, plugin_failed(exc), False)
                if prepared is not None and (early := prepared.result) is not None:
                    reached = _FINALIZED  # `finalize` sees to its own cancellation
                    return await self.finalize(execution, early, prepared.post, trace)
            reached, handover = _BODY, None
            if plan.execute and trace is None and plan.execute[0].is_async:
                try:
                    result, post = self._wrap_now(execution, plan.execute), True
                except _Held as held:
                    result, post = await self._wrap_later(execution, held, plan)
                except PluginFailure as exc:
                    result, post = plugin_failed(exc), False
            elif plan.execute and (
                trace is not None
                or not plan.plain_execute
                or (handover := self._pass_over(plan.execute, execution)) is not None
            ):
                result, post = await self.dispatch(execution, trace, None, plan, handover)
            else:  # no wrapper, or all passed it on: the body's result (`dispatch`, no layers)
                result, post = await self.body_stage(execution, None, trace), True
                if not result.is_error and signal_aborted(execution):
                    result = aborted(True, result.additional_contexts)
                elif result.decided_by is not None and result.decision_detail is None:
                    result = self._attributed(result)
            reached = _FINALIZED  # `_post` and `finalize` see to their own cancellation
            if trace is not None or (plan.result and not plan.plain_result):
                return await self.finalize(execution, result, post, trace, plan)
            if plan.post and post:  # `finalize`, on this frame until a hook waits or raises
                try:
                    result = self._post_now(execution, result, plan)
                except _Later as later:
                    result = await self._post(execution, result, None, plan, later)
        except BaseException as exc:
            await self.cut_short(execution, reached, None, trace, exc)
            raise
        if plan.result:
            slow = self._observe_now(plan.result, execution, result)
            if slow is not None:
                await self._observe_plain(plan.result, execution, result, slow)
        return result

    async def _nested(self, input: ToolExecutionInput) -> ToolExecutionResult:
        return await self.run(input, None)


def _followable(signal: AbortSignal) -> object | None:
    """The cancel status `followed` starts a body under *signal* from, if the body stage would
    run the body so (*signal* live, with no deadline); else ``None``."""
    if CAN_ENTER_BELOW and signal._deadline == math.inf and not signal._aborted:
        return cancel_status()
    return None


_RUN = os.urandom(4).hex()  # `secrets.token_hex`, without importing hmac (issue 27)


def new_call_id() -> str:
    """A call id for callers that have none: unique to this process run (``call-1f2e3d4c-1``)."""
    return f"call-{_RUN}-{next(_call_ids)}"
