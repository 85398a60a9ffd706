"""``timeout``: give every tool call a time budget, and report ``TOOL_TIMEOUT`` when it runs out.

A `dsh_tool_execute` wrapper registered ``trylast``, so it sits inside the other wrappers and
its clock covers the tool body (not a permission prompt or an outer retry loop's back-off).

The budget of a call, first match wins:

1. ``per_tool`` in the plugin's config (``per_tool = { bash = 600000 }``);
2. the tool's own ``timeout_ms`` (``define_tool(..., timeout_ms=...)``);
3. ``default_ms``; ``0`` (the default) means no deadline at all, as the seed's ``timeoutMs``
   ("omit for no deadline") says. ``bash`` declares its own ``timeout_ms``, so it keeps one.

The wrapper is a plain function: a call with no budget is handed straight on (it returns what
``call_next()`` returns, for the host to await): no coroutine of its own, no deadline signal, no
cancel scope, no ledger. The budget is one dictionary lookup and one registry lookup per call.

The plugin installs a signal for the body that carries the deadline
(``call_next(signal=AbortSignal.at(deadline))``), so no timer task runs per call: the host gives
the body's trio cancel scope that deadline, and when it passes the call's result becomes
``Error: tool call timed out after <ms>ms`` (code ``TOOL_TIMEOUT``), whatever the body returned
while unwinding. If the caller aborted first, the host's ``ABORTED`` result stands.

The body gets ``grace_ms`` to unwind (shielded ``finally:`` cleanup, for instance). The plugin's
own cancel scope around ``call_next`` has its deadline at the end of the grace period: if the
delegated call is still running then, everything inside it that is not shielded is cancelled
(an inner wrapper that ignores the signal, say) and a warning is logged. Structured concurrency
never abandons a task: a body that shields itself indefinitely keeps the call open until it
finishes, and the result is then still ``TOOL_TIMEOUT``. A synchronous body runs in a worker
thread that the host stops waiting for at the deadline; the thread itself cannot be killed and
runs on in the background.

An error result means nothing changed: a write that was committed (``write_file`` /
``edit_file`` renamed its file into place) is reported as the success it is, even when the
deadline passed meanwhile, with a note that the budget ran out. The plugin opens a
`dsh_plugins_builtin._common._commit.CommitLedger` around the call for this; the file tools record
a committed write there, and refuse to commit once the call has stopped waiting for them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import final

import attrs
import trio

from dsh_host import (
    AbortSignal,
    Host,
    TextBlock,
    ToolExecution,
    ToolExecutionResult,
    ToolFailure,
    hookimpl,
)
from dsh_plugins_builtin._common._commit import commit_ledger

__all__ = [
    "TOOL_TIMEOUT",
    "TimeoutConfig",
    "TimeoutPlugin",
    "ToolTimeoutReason",
    "timeout_result",
]

TOOL_TIMEOUT = "TOOL_TIMEOUT"
"""The outcome code of a call whose budget ran out."""

logger = logging.getLogger("dsh_plugins_builtin.timeout")


def _not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(
            f"{attribute.name} must be zero or a positive number of milliseconds, got {value}"
        )


def _per_tool_positive(
    instance: object, attribute: attrs.Attribute[dict[str, int]], value: dict[str, int]
) -> None:
    for tool, ms in value.items():
        if ms <= 0:
            raise ValueError(
                f"per_tool.{tool} must be a positive number of milliseconds, got {ms}; "
                f"remove the entry to use the tool's own timeout or default_ms"
            )


@final
@attrs.frozen
class TimeoutConfig:
    """``[plugin.timeout]``.

    Attributes:
        default_ms: the budget of a tool with no ``per_tool`` entry and no ``timeout_ms``;
            ``0`` (the default): no deadline for such tools.
        per_tool: budgets by tool name; they override the tool's own ``timeout_ms``.
        grace_ms: how long a timed-out call may take to unwind before the plugin cancels
            everything in it that is not shielded.
    """

    default_ms: int = attrs.field(default=0, validator=_not_negative)
    per_tool: dict[str, int] = attrs.field(factory=dict, validator=_per_tool_positive)
    grace_ms: int = attrs.field(default=2_000, validator=_not_negative)


@final
@attrs.frozen
class ToolTimeoutReason:
    """The reason on the body's signal when its budget ran out (``ctx.signal.reason``).

    A body can bound its own shielded cleanup by the grace period::

        finally:
            with trio.CancelScope(shield=True) as cleanup:
                reason = ctx.signal.reason
                cleanup.deadline = getattr(reason, "grace_deadline", math.inf)
                await tidy_up()

    Attributes:
        timeout_ms: the budget that ran out.
        grace_ms: how long the call may take to unwind.
        grace_deadline: the trio time (``trio.current_time()``) at which the grace ends.
    """

    timeout_ms: float
    grace_ms: float
    grace_deadline: float
    code: str = attrs.field(default=TOOL_TIMEOUT, init=False)

    def __str__(self) -> str:
        return f"{TOOL_TIMEOUT} after {_ms(self.timeout_ms)}ms"


def timeout_result(ms: float) -> ToolExecutionResult:
    """The result of a call whose budget of *ms* milliseconds ran out."""
    message = f"tool call timed out after {_ms(ms)}ms"
    return ToolExecutionResult(
        content=f"Error: {message}",
        is_error=True,
        error=ToolFailure(message, TOOL_TIMEOUT, "ToolTimeoutError"),
    )


def _ms(ms: float) -> str:
    return str(int(ms)) if float(ms).is_integer() else str(ms)


class TimeoutPlugin:
    """Time every tool call out after its budget; see the module docstring."""

    name = "timeout"

    def __init__(self) -> None:
        self.config = TimeoutConfig()
        self._host: Host | None = None

    @hookimpl
    def dsh_plugin_config(self) -> type[TimeoutConfig]:
        return TimeoutConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)
        self._host = host

    def budget_ms(self, execution: ToolExecution) -> float:
        """The budget of *execution*: ``per_tool``, else the tool's ``timeout_ms``, else the default.

        ``0`` means no deadline.
        """
        override = self.config.per_tool.get(execution.name)
        if override is not None:
            return override
        if self._host is not None:
            tool = self._host.registry.get(execution.name, execution.scope)
            if tool is not None and tool.timeout_ms is not None:
                return tool.timeout_ms
        return self.config.default_ms

    @hookimpl(trylast=True)
    def dsh_tool_execute(
        self, execution: ToolExecution, call_next: Callable[..., Awaitable[ToolExecutionResult]]
    ) -> Awaitable[ToolExecutionResult]:
        # A plain function: a call with no budget is handed straight on (the host awaits what
        # call_next returns), with no coroutine, deadline, scope or ledger of ours. The budget
        # is read now, as the call is dispatched (`budget_ms`, inline): a tool registered with
        # a budget while the call waited (for approval, say) runs with it.
        per_tool = self.config.per_tool
        ms: float | None = per_tool.get(execution.name) if per_tool else None
        if ms is None:
            host = self._host
            tool = None if host is None else host.registry.get(execution.name, execution.scope)
            ms = tool.timeout_ms if tool is not None else None
            if ms is None:
                ms = self.config.default_ms
        if ms <= 0:
            return call_next()
        return self._timed(execution, call_next, ms)

    async def _timed(
        self,
        execution: ToolExecution,
        call_next: Callable[..., Awaitable[ToolExecutionResult]],
        ms: float,
    ) -> ToolExecutionResult:
        # No timer task: the deadline rides on the signal, and the host runs the body in a
        # cancel scope with that deadline; the grace period is a second deadline, on our scope.
        grace = self.config.grace_ms
        expires = trio.current_time() + ms / 1000
        reason = ToolTimeoutReason(ms, grace, expires + grace / 1000)
        deadline = AbortSignal.at(expires, reason)
        with commit_ledger() as ledger, trio.CancelScope(deadline=reason.grace_deadline) as hard:
            result = await call_next(signal=deadline)
        if ledger.committed is not None and result.is_error:
            # The write was committed before the call stopped waiting: say so, not "failed".
            return _committed(ledger.committed, ms)
        caller = execution.signal
        if caller.aborted and (caller.aborted_at is None or caller.aborted_at < expires):
            # The caller (or an outer wrapper) aborted first: its outcome stands.
            return result if not hard.cancelled_caught else _aborted()
        if hard.cancelled_caught:
            if grace > 0:  # with no grace at all, cancelling at once is what was asked for
                logger.warning(
                    'timeout: tool "%s" (call %s) timed out after %sms and was still running %sms '
                    "later; cancelled everything in it that was not shielded. Raise "
                    "[plugin.timeout] grace_ms if its cleanup needs longer.",
                    execution.name, execution.call_id, _ms(ms), grace,
                )  # fmt: skip
            return timeout_result(ms)
        if deadline.aborted:
            return timeout_result(ms)
        return result


def _committed(result: ToolExecutionResult, ms: float) -> ToolExecutionResult:
    """A committed write's result, noting that the budget ran out as it finished."""
    note = TextBlock(
        f"(the change was committed, although the tool's {_ms(ms)}ms budget ran out as it finished)"
    )
    return attrs.evolve(result, content=(*result.content, note))


def _aborted() -> ToolExecutionResult:
    """What the host reports for a call its caller aborted, for when our scope cut it short."""
    return ToolExecutionResult(
        content="Error: tool call aborted",
        is_error=True,
        error=ToolFailure("tool call aborted", "ABORTED", "AbortError"),
    )
