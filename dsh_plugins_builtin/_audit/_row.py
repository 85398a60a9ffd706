"""One audit row: what a call queues (`Entry`) and the row the writer commits for it."""

from __future__ import annotations

import json
import logging
from typing import Any

from ._redact import arguments_json, safe_text
from ._redact import timestamp as _timestamp

__all__ = ["Entry", "build_row"]

logger = logging.getLogger("dsh_plugins_builtin.audit")

Entry = tuple[float, Any, Any, "float | None", "str | None", "str | None"]
"""What a call queues: (wall-clock end time, `ToolExecution`, `ToolExecutionResult`, duration ms,
the rule that allowed it or ``None``, who approved it or ``None``)."""


def build_row(
    entry: Entry, workspace: str | None, host_id: str, reported: set[str]
) -> tuple[Any, ...]:
    """The audit row of *entry*; arguments that cannot be JSON are reported once (*reported*)."""
    wall, execution, result, duration, rule, approved_by = entry
    if rule is None:
        rule = result.decision_detail
    try:
        arguments = arguments_json(execution.arguments)
    except (ValueError, TypeError, RecursionError) as exc:
        if "encode" not in reported:
            reported.add("encode")
            logger.error(
                'audit: the arguments of call %s to tool "%s" cannot be recorded as JSON '
                "(%s: %s); the row keeps a placeholder instead. This is reported once.",
                safe_text(execution.call_id), safe_text(execution.name),
                type(exc).__name__, exc,
            )  # fmt: skip
        arguments = json.dumps(f"[not recordable: {type(exc).__name__}]")
    error = result.error
    ok = "error" if result.is_error else "ok"
    outcome = (error.code or "error") if error is not None else ok
    return (
        _timestamp(wall),
        safe_text(execution.call_id),
        safe_text(execution.name),
        arguments,
        int(result.is_error),
        safe_text(outcome),
        safe_text(error.message) if error is not None else None,
        safe_text(result.decided_by),
        duration,
        safe_text(execution.scope.name) if execution.scope is not None else None,
        workspace,
        host_id,
        safe_text(rule),
        safe_text(approved_by),
    )
