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

import contextlib
import inspect
import itertools
import logging
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._model._errors import PluginFailure, ToolArgsError, ToolNotFoundError
from .._model._json import freeze
from .._model._outcomes import aborted, failure, from_exception, plugin_failed
from .._model._signal import _inert
from .._model._text import printable
from .._model._trace import Trace, TraceEvent, describe, emit
from .._model._values import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    Block,
    Deny,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRunContext,
    content_text,
    parent_token,
)
from .._registry._hooks import HookRelay, Impl, Plan
from ._body import normalise, run_body
from ._chain import _HOOK_ARGS, _Chain, _Later, _Links, _Pending, _Raised, _same_decision, _Suspend
from ._contain import Watchdog, genuine, real_interrupt, seconds
from ._stage import (
    _Budget,
    _contained,
    _Driven,
    _late,
    _settle,
    _Stage,
    _stage_failed,
)
from ._trio_internals import cancel_status
from ._verify import checked, context_violations, invalid
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
    from .._registry._registry import ToolTable

__all__ = ["Pipeline", "Prepared", "new_call_id"]

logger = logging.getLogger("dsh_host")


@attrs.define
class Prepared:
    """The outcome of stages A-G: either dispatch *execution*, or finish with *result*."""

    execution: ToolExecution
    result: ToolExecutionResult | None = None
    post: bool = True
    allowed_by: str | None = None
    """The plugin whose ``Allow`` let the call through, if one decided (for dry runs)."""
    detail: str | None = None


_NO_SCOPE = contextlib.nullcontext()
_UNCALLED: Any = object()
_PRE_TYPES = (Allow, Deny, Ask)
_POST_TYPES = (Accept, Block)
_ANSWERS = (Allow, Deny, Ask, Accept, Block, str)
_WRAPPER_ARGS = ("execution", "call_next")
_ALLOW = Allow()
_ACCEPT = Accept()
_call_ids = itertools.count(1)
_clock = time.monotonic  # the watchdog's clock (`Watchdog` reads the same one)


class Pipeline:
    """Runs calls for one `ToolTable`, calling its plugins' hooks."""

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

    async def run(self, input: ToolExecutionInput, trace: Trace | None) -> ToolExecutionResult:
        execution, done = self._snapshot(input, False)
        if done is not None:
            return await self.finalize(execution, done, False, trace)
        plan = self.hooks.plan()
        if plan.pre or plan.guard or self.registry.guards_for(execution.scope):
            try:
                prepared = await self._gate(execution, trace, plan, report=False)
            except PluginFailure as exc:
                return await self.finalize(execution, plugin_failed(exc), False, trace)
            if prepared is not None and prepared.result is not None:
                return await self.finalize(execution, prepared.result, prepared.post, trace)
        handover = None
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
        else:  # no wrapper, or all passed it on: the body's result, straight (`dispatch` without its layers)
            result, post = await self._dispatch(execution, None, trace), True
            if not result.is_error and execution.signal.aborted:
                result = aborted(True, result.additional_contexts)
            elif result.decided_by is not None and result.decision_detail is None:
                result = self._attributed(result)
        if (plan.post and post) or plan.result:
            if trace is not None or (plan.result and not plan.plain_result):
                return await self.finalize(execution, result, post, trace, plan)
            # `finalize`, on this frame until a hook waits or raises
            if plan.post and post:
                try:
                    result = self._post_now(execution, result, plan)
                except _Later as later:
                    result = await self._post(execution, result, None, plan, later)
            if plan.result:
                slow = self._observe_now(plan.result, execution, result)
                if slow is not None:
                    await self._observe_plain(plan.result, execution, result, slow)
        return result

    # -- hook calling ----------------------------------------------------------------------

    def _sync(self, plugin: str, hook: str, tool: str, function: Any, *args: Any) -> Any:
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
                watchdog.check(watchdog.started + ran)
                raise PluginFailure(plugin, hook, _late(plugin, hook, watchdog.bound))

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
                value = self._sync(impl.plugin, hook, name, impl.call_sync, kwargs)
            if impl.is_async or (value is not None and inspect.isawaitable(value)):
                if budget is None:
                    budget = _Budget(limit, stage)
                if stage is None:
                    own = budget.stage = _Stage.lazy() or _Stage()
                    with own:
                        value = await _settle(value, budget, own, impl.plugin, hook)
                    own.fail()
                else:
                    value = await _settle(value, budget, stage, impl.plugin, hook)
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
                    watchdog.check(now)
                    late = PluginFailure(impl.plugin, hook, _late(impl.plugin, hook, bound))
                    raise _Raised(i, impl, late)
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
        i, value = self._plain(impls, 0, hook, args, tool)
        if value is None:
            return default, None
        impl = impls[i]
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

    def _stage(self, hook: str) -> _Stage | None:
        """The stage of a hook whose implementations may suspend (``async`` or waterfall links),
        lazy where it can be (see `_Stage`), else ``None``."""
        if self.hooks.may_suspend(hook):
            return _Stage.lazy() or _Stage()
        return None

    async def _first(
        self,
        hook: str,
        kwargs: dict[str, Any],
        default: Any,
        accept: Callable[[Any], Any],
        trace: Trace | None,
        bound: float | None = None,
        *,
        args: tuple[Any, ...] | None = None,
        impls: tuple[Impl, ...] | None = None,
    ) -> tuple[Any, str | None]:
        """A firstresult chain whose links may take ``call_next`` (a waterfall).

        Returns the decision and the name of the plugin that made it: a link that returns the
        downstream decision unchanged (contexts aside) leaves it credited downstream. *args*
        (the hook's arguments in order) and *impls* spare looking them up again.
        """
        if impls is None:
            impls = self.hooks.impls(hook)
        stage = self._stage(hook)
        with stage if stage is not None else _NO_SCOPE:
            if trace is None and stage is not None:
                if args is None:
                    args = tuple(kwargs[name] for name in _HOOK_ARGS[hook])
                limit = self.hook_timeout if bound is None else bound
                return await self._waterfall(impls, hook, args, default, accept, limit, stage)
            if any(impl.waterfall for impl in impls):
                return await self._chain(impls, hook, kwargs, default, accept, trace, bound, stage)
            name = (kwargs.get("execution") or kwargs["request"].execution).name
            for impl in impls:
                if impl.is_async or trace is not None:
                    value = await self._call(impl, hook, trace, kwargs, bound=bound, stage=stage)
                else:  # a plain function: called right here, no coroutine of its own
                    try:
                        value = self._sync(impl.plugin, hook, name, impl.call_sync, kwargs)
                    except BaseException as exc:
                        await _contained(impl.plugin, hook, exc)
                    if value is not None and inspect.isawaitable(value):
                        value = await self._call(
                            impl, hook, trace, kwargs, bound=bound, stage=stage, returned=value
                        )
                if value is not None:
                    try:
                        value = accept(value)
                    except TypeError as exc:
                        raise PluginFailure(impl.plugin, hook, exc) from None
                    return value, impl.plugin
            return default, None
        _stage_failed(stage)  # reached only when the stage's own deadline cancelled it

    def _links(self, plan: Plan) -> tuple[_Links, _Links]:
        """The pre- and post-execute chains' `_Links` for *plan* (made once per plan)."""
        made = self._plan_links
        if made is None or made[0] is not plan:
            pre = _Links(
                self, plan.pre, "dsh_tool_pre_execute", _ALLOW, _check_pre, self.hook_timeout
            )
            post = _Links(
                self, plan.post, "dsh_tool_post_execute", _ACCEPT, _check_post, self.hook_timeout
            )
            made = self._plan_links = (plan, pre, post)
        return made[1], made[2]

    def _waterfall(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        args: tuple[Any, ...],
        default: Any,
        accept: Callable[[Any], Any],
        limit: float,
        stage: _Stage,
    ) -> Awaitable[tuple[Any, str | None]]:
        """`_chain` without a trace: the same decisions and credit, with less machinery.

        Each waterfall link gets one ``call_next`` (memoised, pausing the link's own time)
        and is called with the hook's arguments positionally; the chain is resolved on this
        frame until a link really waits. See `_Chain`.
        """
        links = _Links(self, impls, hook, default, accept, limit)
        return _Chain(links, args, stage.base, stage).run(0)

    async def _chain(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        kwargs: dict[str, Any],
        default: Any,
        accept: Callable[[Any], Any],
        trace: Trace | None,
        bound: float | None,
        stage: _Stage | None,
    ) -> tuple[Any, str | None]:
        """The waterfall case of `_first`: links that take ``call_next``."""

        async def run_from(i: int) -> tuple[Any, str | None]:
            while i < len(impls):
                impl = impls[i]
                memo: list[tuple[Any, str | None]] = []
                started = time.perf_counter() if trace is not None else 0.0
                if impl.waterfall:

                    async def call_next(_i: int = i + 1, _memo: list[Any] = memo) -> Any:
                        if not _memo:
                            _memo.append(await run_from(_i))
                        return _memo[0][0]

                    value = await self._call(
                        impl, hook, trace, kwargs, call_next=call_next, bound=bound,
                        report=False, stage=stage,
                    )  # fmt: skip
                else:
                    value = await self._call(impl, hook, trace, kwargs, bound=bound, stage=stage)
                if value is None:
                    if impl.waterfall and trace is not None:
                        emit(trace, kwargs, hook, impl.plugin, "abstained", started)
                    if memo:
                        return memo[0]
                    i += 1
                    continue
                try:
                    value = accept(value)
                except TypeError as exc:
                    raise PluginFailure(impl.plugin, hook, exc) from None
                if memo and _same_decision(value, memo[0][0]):
                    if trace is not None:
                        passed = f"passed on {describe(value)} from {memo[0][1] or 'the default'}"
                        emit(trace, kwargs, hook, impl.plugin, passed, started)
                    return value, memo[0][1]
                if impl.waterfall and trace is not None:
                    emit(trace, kwargs, hook, impl.plugin, describe(value), started)
                return value, impl.plugin
            return default, None

        return await run_from(0)

    # -- A to G ----------------------------------------------------------------------------

    def _snapshot(
        self, input: ToolExecutionInput, dry_run: bool, frozen: Any = None
    ) -> tuple[ToolExecution, ToolExecutionResult | None]:
        """Stages A and B: the frozen execution, and the result when the call ends there.

        *frozen*: ``freeze(input.arguments)``, already made (a batch froze them to classify
        the call); ``None``: freeze them here."""
        given = input.signal
        signal = _inert() if given is None else given
        parent = input.parent
        message: str | None = None
        if parent is not None:
            try:
                parent = parent_token(parent)
            except TypeError as exc:
                parent, message = None, str(exc)
        try:
            arguments = freeze(input.arguments, "arguments") if frozen is None else frozen
        except ValueError as exc:
            arguments, message = None, message or f"tool arguments must be JSON: {exc}"
        execution = ToolExecution._make(
            input.call_id, input.name, arguments, input.scope, parent, signal, dry_run
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
        return self._snapshot(input, False, frozen)

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
            return await self._gate(execution, trace, plan) or Prepared(execution)
        except PluginFailure as exc:
            return Prepared(execution, plugin_failed(exc), False)

    async def _gate(
        self, execution: ToolExecution, trace: Trace | None, plan: Plan, report: bool = True
    ) -> Prepared | None:
        """Stages C-G: the `Prepared` the call ends with, or ``None`` to dispatch it (a
        `Prepared` without a result when *report* asks who allowed it)."""
        decision: Any = _ALLOW
        who: str | None = None
        if plan.pre:
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
        if type(decision) is Deny:
            result = failure(
                decision.reason, "DENIED", decided_by=who, decision_detail=decision.detail
            )
            return Prepared(execution, result)
        if type(decision) is Ask:
            if self.registry.get(execution.name, execution.scope) is None:
                # Nobody is asked about a tool that does not exist (CONTRACT §14).
                error = ToolNotFoundError(execution.name)
                return Prepared(execution, failure(error.message, error.code, "ToolNotFoundError"))
            denied = await self._ask(execution, decision, who, trace)
            if denied is not None:
                return denied
        if not plan.guard and not self.registry.guards_for(execution.scope):
            reason = guard = None
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
        if reason is not None:
            return Prepared(execution, failure(reason, "DENIED", decided_by=guard))
        if execution.signal.aborted:
            return Prepared(execution, aborted(False))
        if report and who is not None and type(decision) is Allow:
            return Prepared(execution, allowed_by=who, detail=decision.detail)
        return None

    async def _ask(
        self, execution: ToolExecution, ask: Ask, asker: str | None, trace: Trace | None
    ) -> Prepared | None:
        request = ApprovalRequest(execution=execution, reason=ask.reason, asked_by=asker)
        outcome, approver = await self._first(
            "dsh_tool_approve", {"request": request}, ApprovalOutcome.UNAVAILABLE, _check_outcome,
            trace, bound=self.approval_timeout,
        )  # fmt: skip
        name = execution.name
        if trace is not None and approver is None:
            outcome_text = "unavailable: no approver answered"
            trace(TraceEvent(execution.call_id, "dsh_tool_approve", None, outcome_text, 0.0))
        if outcome is ApprovalOutcome.ALLOWED_ONCE:
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
                reason = self._sync(name, "guard", execution.name, guard, execution)
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
                        reason = self._sync(impl.plugin, hook, name, impl.call_sync, kwargs)
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

    # -- H to J ----------------------------------------------------------------------------

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
                result = await self._dispatch(execution, state, trace)
            else:
                wrapping = _Wrapping(impls, state, trace)
                with wrapping:
                    start = 0 if handover is None else handover.index
                    result = await self._wrap(wrapping, start, execution, handover)
                wrapping.fail()
                if result is _BODY:  # every wrapper was a tail call: none of them waits
                    del wrapping
                    result = await self._dispatch(execution, state, trace)
        except PluginFailure as exc:
            return plugin_failed(exc), False
        return self._dispatched(execution, state, result), True

    async def _nested(self, input: ToolExecutionInput) -> ToolExecutionResult:
        return await self.run(input, None)

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
        `_Handover` of the first that answered, raised or returned something else (`_wrap` goes
        on from it).
        """
        hook = "dsh_tool_execute"
        name = view.name
        for i, impl in enumerate(impls):
            token = _Proceed(self, i, view)
            try:
                if impl.argnames == _WRAPPER_ARGS:
                    value = self._sync(impl.plugin, hook, name, impl.function, view, token)
                else:
                    kwargs = {"execution": view, "call_next": token}
                    value = self._sync(impl.plugin, hook, name, impl.call_sync, kwargs)
            except BaseException as exc:
                return _Handover(i, token, None, exc)
            if value is not token:
                return _Handover(i, token, value)
        return None

    async def _wrap(
        self, w: _Wrapping, i: int, view: ToolExecution, handover: _Handover | None = None
    ) -> ToolExecutionResult:
        hook = "dsh_tool_execute"
        impls, trace = w.impls, w.trace
        if i == len(impls):
            return await self._dispatch(view, w.state, trace)
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
                    elif not impl.is_async:
                        if impl.argnames == _WRAPPER_ARGS:
                            value = self._sync(
                                impl.plugin, hook, view.name, impl.function, view, token
                            )
                        else:
                            kwargs = {"execution": view, "call_next": token}
                            value = self._sync(impl.plugin, hook, view.name, impl.call_sync, kwargs)
                        if value is token and not token.delegated:
                            # A tail call not yet begun: the links after it answer, as they
                            # would through it; they run from this same frame.
                            token.w = None  # spent: never to be awaited (see `_Proceed`)
                            i += 1
                            continue
                    elif impl.argnames == _WRAPPER_ARGS:
                        value = impl.function(view, token)
                    else:
                        value = impl.call_sync({"execution": view, "call_next": token})
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
        return self._dispatched(view, w.state, self._wrapper_result(impl, token, value))

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
        return self._dispatched(view, w.state, result), True

    def _dispatched(
        self, view: ToolExecution, state: _DispatchState, result: ToolExecutionResult
    ) -> ToolExecutionResult:
        """`dispatch`'s last step: an aborted call's result, a body's attribution."""
        if view.signal.aborted and not result.is_error:
            return aborted(state.body_invoked, result.additional_contexts)
        if result.decided_by is not None and result.decision_detail is None:
            return self._attributed(result)
        return result

    async def _dispatch(
        self, view: ToolExecution, state: _DispatchState | None, trace: Trace | None
    ) -> ToolExecutionResult:
        """Stage I: resolve, validate, run the body, normalise. A result that is not an error
        means the body ran (every way to end before it is an error)."""
        started = time.perf_counter() if trace is not None else 0.0
        tool = self.registry.get(view.name, view.scope)
        if tool is None:
            error = ToolNotFoundError(view.name)
            return failure(error.message, error.code, "ToolNotFoundError")
        signal = view.signal
        if signal.aborted:
            return aborted(False)
        arguments = view.arguments
        ready = state.ready if state is not None else None
        if ready is not None and ready[0] is tool and ready[1] is arguments:
            args, violations = ready[2], None
        elif (accepts := tool.accepts) is not None and accepts(arguments):
            args, violations = arguments, None
        else:
            args, violations = tool.prepare(arguments)
        if violations:
            error_ = ToolArgsError(violations)
            return failure(error_.message, error_.code, "ToolArgsError")
        context = ToolRunContext._make(view, tool, self._run_nested)
        if state is not None:
            state.body_invoked = True
        if signal._inert and tool.is_async:
            # Nobody outside the pipeline holds this signal: no cancel scope, no `run_body`.
            try:
                value = await (
                    tool.execute(args, context) if tool.takes_context else tool.execute(args)
                )
            except BaseException as exc:
                if await genuine(exc):
                    raise
                message, code, name = from_exception(exc, "TOOL_FAILED")
                result = failure(message, code, name)
            else:
                result = normalise(tool, value)
        else:
            result = await run_body(tool, args, context)
        if context._deferred:
            contexts = (*context._deferred, *result.additional_contexts)
            result = attrs.evolve(result, additional_contexts=contexts)
            result = checked(result, f'tool "{tool.name}" (defer_context)', contexts_only=True)
        if result.decided_by is not None and not self._plugin_named(
            result.decided_by.partition(": ")[0]
        ):
            # Only bodies set ``decided_by`` here (the pipeline's own results do not).
            result = checked(result, f'tool "{tool.name}"', plugin_named=self._plugin_named)
        if trace is not None:
            outcome = result.code or "ok"
            trace(TraceEvent(view.call_id, "body", None, outcome, time.perf_counter() - started))
        return result

    # -- K to M ----------------------------------------------------------------------------

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
                chain = _Chain(self._links(plan)[1], args, base)
                try:
                    decision, who = chain.resolve(0)
                except (_Suspend, _Raised) as slow:
                    raise _Later(None, chain, slow) from None
        except PluginFailure as exc:
            return plugin_failed(exc)
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
        where `_post_now` stopped."""
        hook = "dsh_tool_post_execute"
        if trace is None and later is None:
            try:
                return self._post_now(execution, result, plan)
            except _Later as stopped:
                later = stopped
        try:
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
        except PluginFailure as exc:
            return plugin_failed(exc)
        return self._applied(execution, result, decision, who)

    def _applied(
        self, execution: ToolExecution, result: ToolExecutionResult, decision: Any, who: str | None
    ) -> ToolExecutionResult:
        """*result* with the post-execute *decision* (made by *who*) applied."""
        if decision is _ACCEPT:
            if execution.signal.aborted and not result.is_error:
                result = aborted(True, result.additional_contexts)
            return result
        if decision.additional_contexts:
            found = context_violations(decision.additional_contexts)
            if found:
                producer = f"plugin {who!r} (dsh_tool_post_execute)"
                return invalid(producer, found, decided_by=who)
        if type(decision) is Block:
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
        if execution.signal.aborted and not result.is_error:
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
                value = self._sync(impl.plugin, hook, execution.name, impl.call_sync, kwargs)
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


def _as_reason(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"returned {value!r}; expected str or None")


def _failed(exc: BaseException) -> str:
    """``raised KeyError: 'x'`` (for the trace and logs); never itself raises."""
    try:
        text = printable(str(exc))
    except Exception:
        text = "<unprintable>"
    return f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"


def _check_pre(value: Any) -> Any:
    if isinstance(value, _PRE_TYPES):
        return value
    raise TypeError(f"returned {value!r}; expected Allow(), Deny(reason), Ask() or None")


def _check_post(value: Any) -> Any:
    if isinstance(value, _POST_TYPES):
        return value
    raise TypeError(f"returned {value!r}; expected Accept(...), Block(feedback) or None")


def _check_outcome(value: Any) -> ApprovalOutcome:
    try:
        return ApprovalOutcome(value)
    except ValueError:
        raise TypeError(
            f"returned {value!r}; expected an ApprovalOutcome "
            f"({', '.join(o.value for o in ApprovalOutcome)}) or None"
        ) from None


def _check_reason(reason: Any, who: str) -> str:
    if isinstance(reason, str):
        return reason
    raise PluginFailure(
        who, "dsh_tool_guard", TypeError(f"returned {reason!r}; expected str or None")
    )


_RUN = secrets.token_hex(4)


def new_call_id() -> str:
    """A call id for callers that have none: unique to this process run (``call-1f2e3d4c-1``)."""
    return f"call-{_RUN}-{next(_call_ids)}"
