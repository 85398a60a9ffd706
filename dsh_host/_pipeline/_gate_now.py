"""Stages C-G on the caller's frame (`_GateNow._gate_now`): no coroutine of their own for a call
whose pre-execute chain and guards answer without waiting; `Prepared`, what they end with.

Wherever something must be awaited (a hook that raises or answers with an awaitable, a link
that waits, an ``Ask``, a registered guard, no cancel status to start a chain in), `_GateLater`
says where `_Gate._gate` goes on: nothing runs twice, and the outcome is the one `_gate` alone
would have come to.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._model._outcomes import aborted, failure
from .._model._values import Allow, Ask, CallToken, Deny, ToolExecution, ToolExecutionResult
from .._registry._hooks import Plan
from ._answers import _ALLOW, _as_reason, _check_pre
from ._chain import _Chain, _Pending, _Raised, _Suspend
from ._chains import _Chains
from ._tail import _Handed, resolve_tail
from ._trio_internals import cancel_status

__all__ = ["Prepared", "_GateLater", "_GateNow", "_note"]


@attrs.define
class Prepared:
    """The outcome of stages A-G: either dispatch *execution*, or finish with *result*."""

    execution: ToolExecution
    result: ToolExecutionResult | None = None
    post: bool = True
    allowed_by: str | None = None
    """The plugin whose ``Allow`` let the call through, if one decided (for dry runs)."""
    detail: str | None = None


def _note(execution: ToolExecution, decision: Any) -> None:
    """Note the decision a plugin made at stage C on the call's token (`ToolExecution.
    pre_decision`)."""
    token = execution.token
    if type(token) is CallToken:
        token._decision = decision


class _GateLater(Exception):
    """Where `_GateNow._gate_now` stopped. Pre-execute: *pre*, the plain hook to go on with, or
    *chain* and *slow*, the chain's link to go on with; else (*decided*) its *decision* and
    *who* made it. Then *guard*, the plain guard to go on with, if any. With none of these,
    nothing ran: `_gate` does it all."""

    def __init__(
        self,
        pre: _Raised | _Pending | None = None,
        chain: _Chain | None = None,
        slow: _Suspend | _Raised | None = None,
    ) -> None:
        self.pre, self.chain, self.slow = pre, chain, slow
        self.decided = False
        self.decision: Any = None
        self.who: str | None = None
        self.guard: _Raised | _Pending | None = None

    @classmethod
    def after(
        cls, decision: Any, who: str | None, guard: _Raised | _Pending | None = None
    ) -> _GateLater:
        """Stopped after pre-execute decided *decision* (made by *who*): at *guard*, if any."""
        later = cls()
        later.decided, later.decision, later.who, later.guard = True, decision, who, guard
        return later


class _GateNow(_Chains):
    """`_Gate`'s stages C-G without a coroutine (see the module docstring)."""

    def _chain_now(self, execution: ToolExecution, plan: Plan) -> tuple[Any, str | None]:
        """Stage C's chain (not all plain) on this frame: the decision and who made it, or
        raise `_GateLater`."""
        base = cancel_status()
        if base is None:
            raise _GateLater  # nothing ran: `_gate` finds the way
        made = self._plan_links  # `_links`, inline: made once per plan
        links = made[1] if made is not None and made[0] is plan else self._links(plan)[0]
        if links.tail:  # plain functions only: no chain made unless needed
            try:
                return resolve_tail(links, (execution,), base, execution.name)
            except _Handed as handed:
                raise _GateLater(None, handed.chain, handed.slow) from None
        chain = _Chain(links, (execution,), base)  # `_gate`'s chain, here
        try:
            return chain.resolve(0)
        except (_Suspend, _Raised) as slow:
            raise _GateLater(None, chain, slow) from None

    async def _pre_later(
        self, execution: ToolExecution, plan: Plan, later: _GateLater
    ) -> tuple[Any, str | None]:
        """Stage C, on from the plain hook (*later.pre*) or the chain's link (*later.chain*,
        *later.slow*) where `_gate_now` stopped: the decision and who made it."""
        if later.pre is not None:
            return await self._first_plain(
                plan.pre, "dsh_tool_pre_execute", (execution,), _ALLOW, _check_pre, later.pre
            )
        chain, slow = later.chain, later.slow
        assert chain is not None  # `_gate` comes here with a chain or a plain hook
        assert slow is not None
        return await chain.finish(slow)

    def _gate_now(
        self, execution: ToolExecution, plan: Plan, report: bool = False
    ) -> Prepared | None:
        """`_Gate._gate` without a trace or a report, on the caller's frame: the `Prepared` the
        call ends with, or ``None`` to dispatch it. Raises `_GateLater` where `_gate` must go
        on instead (see the module docstring)."""
        decision: Any = _ALLOW
        who: str | None = None
        if plan.pre:
            if plan.plain_pre:
                hook, args = "dsh_tool_pre_execute", (execution,)
                try:
                    decision, who = self._decide(
                        plan.pre, hook, args, execution.name, _ALLOW, _check_pre
                    )
                except (_Raised, _Pending) as slow:
                    raise _GateLater(slow) from None
            else:
                decision, who = self._chain_now(execution, plan)
            if who is not None and type(token := execution.token) is CallToken:
                token._decision = decision  # `_note`, inline
        if type(decision) is Deny:
            denial = failure(
                decision.reason, "DENIED", decided_by=who, decision_detail=decision.detail
            )
            return Prepared(execution, denial)
        if (
            type(decision) is Ask
            or (plan.guard and not plan.plain_guard)
            or self.registry.guards_for(execution.scope)
        ):  # an ask, or guards that are not all plain
            raise _GateLater.after(decision, who)
        if plan.guard:
            hook, args = "dsh_tool_guard", (execution,)
            try:
                reason, guard = self._decide(
                    plan.guard, hook, args, execution.name, None, _as_reason
                )
            except (_Raised, _Pending) as slow:
                raise _GateLater.after(decision, who, slow) from None
            if reason is not None:
                return Prepared(execution, failure(reason, "DENIED", decided_by=guard))
        if report or "signal" in execution.__dict__:  # else `_passed` answers ``None``
            return _passed(execution, decision, who, report)
        return None


def _passed(
    execution: ToolExecution, decision: Any, who: str | None, report: bool
) -> Prepared | None:
    """The gate's answer once no guard denied (`_GateNow` and `_Gate` alike): ``ABORTED`` if
    the caller's signal aborted meanwhile; the allow and who gave it, when *report* asks; else
    ``None`` (go on to the body)."""
    if (signal := execution.__dict__.get("signal")) is not None and signal.aborted:
        return Prepared(execution, aborted(False))
    if report and who is not None and type(decision) is Allow:
        return Prepared(execution, allowed_by=who, detail=decision.detail)
    return None
