"""One audit row: what a call queues (`Entry`) and the row the writer commits for it."""

from __future__ import annotations

import json
import logging
from typing import Any

from ._redact import arguments_json, safe_text, scrub
from ._redact import timestamp as _timestamp

__all__ = ["Entry", "build_row"]

logger = logging.getLogger("dsh_plugins_builtin.audit")

Entry = tuple[float, Any, Any, "float | None", "str | None", "str | None", "str | None"]
"""What a call queues: (wall-clock end time, `ToolExecution`, `ToolExecutionResult`, duration ms,
the rule that allowed it or ``None``, who approved it or ``None``, the canonical JSON of its
arguments if it was made already (`_canonical.remembered`) or ``None``)."""


def build_row(
    entry: Entry, workspace: str | None, host_id: str, reported: set[str]
) -> tuple[Any, ...]:
    """The audit row of *entry*; arguments that cannot be JSON are reported once (*reported*)."""
    wall, execution, result, duration, rule, approved_by, known = entry
    if rule is None:
        rule = result.decision_detail
    try:
        arguments = arguments_json(execution.arguments, known)
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
    message = error.message if error is not None else None
    if type(message) is str:  # it may quote what the call was given (a URL with its password)
        message = scrub(message)
    scope = execution.scope.name if execution.scope is not None else None
    texts = (execution.call_id, execution.name, outcome, message, result.decided_by, scope)
    call_id, name, outcome, message, decided_by, scope = texts
    # `safe_text` of each only when one is not printable text (the common case: all are). Each
    # is checked in turn: formatting them into one text (``None`` as "None") cost twice as much.
    # A value that is not text (a caller's call id of another type) is stored as its text.
    if not (
        _plain(call_id)
        and _plain(name)
        and _plain(outcome)
        and _plain(message)
        and _plain(decided_by)
        and _plain(scope)
        and _plain(rule)
        and _plain(approved_by)
    ):
        call_id, name, outcome, message, decided_by, scope = map(_text, texts)
        rule, approved_by = _text(rule), _text(approved_by)
    return (
        _timestamp(wall),
        call_id,
        name,
        arguments,
        int(result.is_error),
        outcome,
        message,
        decided_by,
        duration,
        scope,
        workspace,
        host_id,
        rule,
        approved_by,
    )


def _plain(value: object) -> bool:
    return value is None or (type(value) is str and value.isprintable())


def _text(value: object) -> str | None:
    """*value* as a text column holds it (`safe_text`; a value that is not text, as its text)."""
    return None if value is None else safe_text(value if isinstance(value, str) else str(value))
