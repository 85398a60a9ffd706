"""``--trace``: one event for each plugin consulted, with what it said and how long it took."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, final

import attrs

from ._content import ToolExecutionResult, content_text
from ._decisions import Allow, ApprovalOutcome, Ask, Block, Deny

__all__ = ["Trace", "TraceEvent", "describe", "emit"]


@final
@attrs.frozen
class TraceEvent:
    """One step of one call, for ``--trace``: the stage, the plugin consulted, what it said, how long."""

    call_id: str
    stage: str
    plugin: str | None
    outcome: str
    seconds: float


Trace = Callable[[TraceEvent], None]


def emit(
    trace: Trace, kwargs: dict[str, Any], stage: str, plugin: str, outcome: str, started: float
) -> None:
    execution = kwargs.get("execution") or getattr(kwargs.get("request"), "execution", None)
    call_id = execution.call_id if execution is not None else "?"
    trace(TraceEvent(call_id, stage, plugin, outcome, time.perf_counter() - started))


def describe(value: Any) -> str:
    if isinstance(value, Allow):
        return f"allow: {value.detail}" if value.detail else "allow"
    if isinstance(value, Deny):
        return f"deny: {value.reason}"
    if isinstance(value, Ask):
        return f"ask: {value.reason}" if value.reason else "ask"
    if isinstance(value, Block):
        return f"block: {content_text(value.feedback)}"
    if isinstance(value, ToolExecutionResult):
        return value.code or "ok"
    if isinstance(value, ApprovalOutcome):
        return value.value
    if isinstance(value, str):
        return f"deny: {value}"
    return type(value).__name__.lower()
