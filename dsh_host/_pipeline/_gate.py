"""Stages A to G (CONTRACT §4): the snapshot, pre-execute, approval, guards; `prepare`.

::

    A snapshot -> B aborted? -> C pre-execute -> D ask -> F guards -> G aborted?

`admit` is `prepare`'s fast path (no policy: no coroutine); inside `_gate`, each hook's plain
loop (`_decide`) comes before its general version (`_first`, `_guards`).
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any, Final

import trio

from .._model._errors import PluginFailure, ToolNotFoundError
from .._model._json import freeze
from .._model._outcomes import aborted, failure, plugin_failed
from .._model._trace import Trace, TraceEvent, emit
from .._model._values import (
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    CallToken,
    Deny,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    parent_token,
)
from .._registry._hooks import Plan
from ._chain import _Chain, _Pending, _Raised, _Suspend
from ._contain import genuine, is_cancellation
from ._follow import _GATE, Following
from ._stage import (
    _contained,
    _stage_failed,
)
from ._trio_internals import cancel_status

if TYPE_CHECKING:
    pass

from ._answers import (
    _ALLOW,
    _NO_SCOPE,
    _as_reason,
    _check_outcome,
    _check_pre,
    _check_reason,
    _failed,
)
from ._gate_now import Prepared, _GateLater, _GateNow, _note, _passed

__all__ = ["Prepared", "_Gate", "_GateLater"]

_CUT: Final = object()  # `_gate`: no answer, the signal's abort cut a stage short


class _Gate(_GateNow):
    """Stages A-G of `Pipeline`."""

    def _snapshot(
        self, input: ToolExecutionInput, dry_run: bool, frozen: Any = None
    ) -> tuple[ToolExecution, ToolExecutionResult | None]:
        """Stages A and B: the frozen execution, and the result when the call ends there.

        *frozen*: ``freeze(input.arguments)``, already made (a batch froze them to classify
        the call); ``None``: freeze them here."""
        given = input.signal  # ``None``: the execution makes an inert one if it is asked for
        parent = input.parent
        message: str | None = None
        if parent is not None:
            try:
                parent = parent_token(parent)
            except TypeError as exc:
                parent, message = None, str(exc)
        if frozen is not None:
            arguments = frozen
        elif (
            (
                tool := self._global_tools.get(input.name)
                if input.scope is None
                else self.registry.get(input.name, input.scope)
            )
            is not None
            and (snapshot := tool.snapshot) is not None
            and (arguments := snapshot(input.arguments)) is not None
        ):  # frozen and validated in one walk: the body stage need not validate them again
            self._accepted = (tool, arguments)
        else:
            try:
                arguments = freeze(input.arguments, "arguments")
            except ValueError as exc:
                arguments, message = None, message or f"tool arguments must be JSON: {exc}"
        execution = ToolExecution._make(
            input.call_id, input.name, arguments, input.scope, parent, given, dry_run
        )
        if message is not None:
            return execution, failure(message, "INVALID_ARGS", "ToolArgsError")
        if given is not None and given.aborted:
            return execution, aborted(False)
        return execution, None

    def admit(
        self, input: ToolExecutionInput, frozen: Any, plan: Plan
    ) -> tuple[ToolExecution, ToolExecutionResult | None] | None:
        """`prepare` for a call that no policy can stop (no pre-execute or guard hook, no
        registered guard), on this frame: the execution, and the result when the call ends
        before dispatch; ``None`` when there is policy to run (await `prepare`)."""
        if plan.pre or plan.guard or self.registry.guards_for(input.scope):
            return None
        if plan.idle and self._bare_plan is None:
            self.note_idle(plan)  # the batch's next calls may run bare (`_bare_batch`)
        return self._snapshot(input, False, frozen)

    def note_idle(self, plan: Plan) -> None:
        """Let `run` choose `_bare` from the next call on, if *plan* (the current one) has no
        hook and no global guard is registered. Only with a plugin manager that counts its
        (un)registrations (`_bare` compares the count), or none."""
        pm = self.hooks.pm
        generation = 0 if pm is None else getattr(pm, "generation", None)
        if (
            plan.idle
            and type(generation) is int
            and plan is self.hooks.plan()
            and not self.registry.guards_for(None)
        ):
            self._bare_plan, self._bare_generation = plan, generation

    async def prepare(
        self,
        input: ToolExecutionInput,
        trace: Trace | None,
        *,
        dry_run: bool = False,
        frozen: Any = None,
    ) -> Prepared:
        """Stages A-G: dispatch the execution, or finish with a result (see `Prepared`).
        *frozen*: the arguments already frozen (see `_snapshot`)."""
        execution, done = self._snapshot(input, dry_run, frozen)
        if done is not None:
            return Prepared(execution, done, False)
        plan = self.hooks.plan()
        if not plan.pre and not plan.guard and not self.registry.guards_for(execution.scope):
            return Prepared(execution)  # no policy at all: nothing can stop the call here
        try:
            if trace is None and not dry_run:  # `_run`'s way, saying who allowed the call
                try:
                    return self._gate_now(execution, plan, True) or Prepared(execution)
                except _GateLater as later:
                    return await self._gate(execution, None, plan, True, later) or Prepared(
                        execution
                    )
            return await self._gate(execution, trace, plan) or Prepared(execution)
        except PluginFailure as exc:
            return Prepared(execution, plugin_failed(exc), False)
        except BaseException as exc:  # a batch's call: its caller's cancellation (`cut_short`)
            if not dry_run:  # a preview has no observer round
                await self.cut_short(execution, _GATE, None, trace, exc)
            raise

    async def _gate(
        self,
        execution: ToolExecution,
        trace: Trace | None,
        plan: Plan,
        report: bool = True,
        later: _GateLater | None = None,
    ) -> Prepared | None:
        """Stages C-G: the `Prepared` the call ends with, or ``None`` to dispatch it (a `Prepared`
        without a result when *report* asks who allowed it); on from *later*, if given.

        The stages follow the caller's signal (`Following`): its abort cuts a hook that waits
        short, and the call ends ``ABORTED_BEFORE_DISPATCH`` (an approval so cut short is
        ``cancelled``)."""
        signal = execution.__dict__.get("signal")
        prepared: Any = _CUT
        if signal is None or signal._inert:  # nobody outside the pipeline can abort it
            prepared = await self._stages(execution, trace, plan, report, later)
        else:
            base = None if later is None or later.chain is None else later.chain.base
            with Following(signal, base):  # below a link that already began, if one did
                prepared = await self._stages(execution, trace, plan, report, later)
            if prepared is _CUT:
                return Prepared(execution, aborted(False))  # the signal's abort cut a stage short
        if prepared is None or prepared.result is None:
            # A hook waited: its caller may have been cancelled meanwhile, with no checkpoint
            # since (an approver that answered at once). The body must not start then.
            await trio.lowlevel.checkpoint_if_cancelled()
        done: Prepared | None = prepared
        return done

    async def _stages(
        self,
        execution: ToolExecution,
        trace: Trace | None,
        plan: Plan,
        report: bool,
        later: _GateLater | None,
    ) -> Prepared | None:
        """`_gate`'s stages C-G, as it says."""
        decision: Any = _ALLOW
        who: str | None = None
        if later is not None and later.decided:
            decision, who = later.decision, later.who
        elif later is not None and (later.pre is not None or later.chain is not None):
            decision, who = await self._pre_later(execution, plan, later)
        elif plan.pre:
            if plan.plain_pre and trace is None:
                hook, args = "dsh_tool_pre_execute", (execution,)
                try:
                    decision, who = self._decide(
                        plan.pre, hook, args, execution.name, _ALLOW, _check_pre
                    )
                except (_Raised, _Pending) as slow:
                    decision, who = await self._first_plain(
                        plan.pre, hook, args, _ALLOW, _check_pre, slow
                    )
            elif trace is None and (base := cancel_status()) is not None:
                # `_first`'s chain, on this frame until a link waits
                chain = _Chain(self._links(plan)[0], (execution,), base)
                try:
                    decision, who = chain.resolve(0)
                except (_Suspend, _Raised) as slow:
                    decision, who = await chain.finish(slow)
            else:
                decision, who = await self._first(
                    "dsh_tool_pre_execute", {"execution": execution}, _ALLOW, _check_pre, trace,
                    args=(execution,), impls=plan.pre,
                )  # fmt: skip
        if who is not None:
            _note(execution, decision)
        if type(decision) is Deny:
            denial = failure(
                decision.reason, "DENIED", decided_by=who, decision_detail=decision.detail
            )
            return Prepared(execution, denial)
        if type(decision) is Ask:
            denied = await self._ask(execution, decision, who, trace)
            if denied is not None:
                return denied
        reason, guard = await self._guard_stage(execution, trace, plan, later)
        if reason is not None:
            return Prepared(execution, failure(reason, "DENIED", decided_by=guard))
        return _passed(execution, decision, who, report)

    async def _guard_stage(
        self, execution: ToolExecution, trace: Trace | None, plan: Plan, later: _GateLater | None
    ) -> tuple[str | None, str | None]:
        """Stage F: the guards' reason to deny and who gave it (``None, None``: none denies)."""
        if later is not None and later.guard is not None:
            reason, guard = await self._first_plain(
                plan.guard, "dsh_tool_guard", (execution,), None, _as_reason, later.guard
            )
        elif not plan.guard and not self.registry.guards_for(execution.scope):
            return None, None
        elif plan.plain_guard and trace is None and not self.registry.guards_for(execution.scope):
            hook, args = "dsh_tool_guard", (execution,)
            try:  # `_guards`, for plain guards only, without its coroutine
                reason, guard = self._decide(
                    plan.guard, hook, args, execution.name, None, _as_reason
                )
            except (_Raised, _Pending) as slow:
                reason, guard = await self._first_plain(
                    plan.guard, hook, args, None, _as_reason, slow
                )
        else:
            reason, guard = await self._guards(execution, trace, plan)
        return reason, guard

    async def _ask(
        self, execution: ToolExecution, ask: Ask, asker: str | None, trace: Trace | None
    ) -> Prepared | None:
        """Stage D: ask the approvers; the `Prepared` the call ends with, or ``None`` to go on."""
        if self.registry.get(execution.name, execution.scope) is None:
            # Nobody is asked about a tool that does not exist (CONTRACT §14).
            error = ToolNotFoundError(execution.name)
            return Prepared(execution, failure(error.message, error.code, "ToolNotFoundError"))
        request = ApprovalRequest(execution=execution, reason=ask.reason, asked_by=asker)
        token = execution.token
        try:
            outcome, approver = await self._first(
                "dsh_tool_approve", {"request": request}, ApprovalOutcome.UNAVAILABLE,
                _check_outcome, trace, bound=self.approval_timeout,
            )  # fmt: skip
        except BaseException as exc:
            # Cut short by the caller's cancellation or its signal (`_gate`): cancelled.
            if is_cancellation(exc) and type(token) is CallToken:
                token._approval, token._approver = ApprovalOutcome.CANCELLED, None
            raise
        if type(token) is CallToken:  # how it ended: `ToolExecution.approval`, `.approver`
            token._approval, token._approver = outcome, approver
        name = execution.name
        if trace is not None and approver is None:
            outcome_text = f"{outcome.value}: no approver answered"
            trace(TraceEvent(execution.call_id, "dsh_tool_approve", None, outcome_text, 0.0))
        if outcome is ApprovalOutcome.ALLOWED_ONCE:
            if type(token) is CallToken:  # noted for the guards: `ToolExecution.approved_by`
                token._approved_by = approver or "an approver"
            return None
        if outcome is ApprovalOutcome.CANCELLED:
            if execution.signal.aborted:
                return Prepared(execution, aborted(False))
            message = f'approval for tool "{name}" was cancelled'
            return Prepared(execution, failure(message, "DENIED", decided_by=approver))
        if outcome is ApprovalOutcome.REJECTED:
            message = f'tool "{name}" was rejected by {approver}'
            return Prepared(execution, failure(message, "DENIED", decided_by=approver))
        message = f'tool "{name}" requires approval, but no approval channel is available'
        if ask.reason:
            message = f"{message}. Reason for asking: {ask.reason}"
        result = failure(message, "DENIED", decided_by=asker, decision_detail=ask.detail)
        return Prepared(execution, result)

    async def _guards(
        self, execution: ToolExecution, trace: Trace | None, plan: Plan
    ) -> tuple[str | None, str | None]:
        kwargs = {"execution": execution}
        for guard, name in self.registry.guards_for(execution.scope):
            started = time.perf_counter() if trace is not None else 0.0
            try:
                reason = self.watched(name, "guard", execution.name, guard, execution)
            except PluginFailure:
                raise
            except BaseException as exc:
                if await genuine(exc):
                    raise
                if trace is not None:
                    emit(trace, kwargs, "guard", name, _failed(exc), started)
                raise PluginFailure(name, "guard", exc) from exc
            if trace is not None:
                outcome = "abstained" if reason is None else f"deny: {reason}"
                emit(trace, kwargs, "guard", name, outcome, started)
            if reason is not None:
                return _check_reason(reason, name), name
        impls = plan.guard
        if not impls:
            return None, None
        if plan.plain_guard and trace is None:
            hook, args = "dsh_tool_guard", (execution,)
            try:
                return self._decide(impls, hook, args, execution.name, None, _as_reason)
            except (_Raised, _Pending) as slow:
                return await self._first_plain(impls, hook, args, None, _as_reason, slow)
        stage = self._stage("dsh_tool_guard")
        hook, name = "dsh_tool_guard", execution.name
        with stage if stage is not None else _NO_SCOPE:
            for impl in impls:
                if impl.is_async or trace is not None:
                    reason = await self._call(impl, hook, trace, kwargs, stage=stage)
                else:  # a plain function: called right here, no coroutine of its own
                    try:
                        reason = self.watched(impl.plugin, hook, name, impl.call_sync, kwargs)
                    except BaseException as exc:
                        await _contained(impl.plugin, hook, exc)
                    if reason is not None and inspect.isawaitable(reason):
                        reason = await self._call(
                            impl, hook, trace, kwargs, stage=stage, returned=reason
                        )
                if reason is not None:
                    return _check_reason(reason, impl.plugin), impl.plugin
            return None, None
        _stage_failed(stage)  # reached only when the stage's own deadline cancelled it
