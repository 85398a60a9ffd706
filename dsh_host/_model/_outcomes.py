"""How a call ends: error results, aborts, and what an exception becomes."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._errors import DshError, PluginFailure
from ._values import HookContext, TextBlock, ToolExecutionResult, ToolFailure
from ._where import located

__all__ = [
    "ABORT_NAME",
    "aborted",
    "detailed",
    "failure",
    "from_exception",
    "plugin_failed",
    "raised",
]

ABORT_NAME = "AbortError"


def failure(
    message: str,
    code: str | None,
    name: str | None = None,
    *,
    decided_by: str | None = None,
    decision_detail: str | None = None,
    contexts: tuple[HookContext, ...] = (),
) -> ToolExecutionResult:
    """An error result whose model-facing text is ``Error: <message>``."""
    return ToolExecutionResult(
        content=(TextBlock(f"Error: {message}"),),
        is_error=True,
        error=ToolFailure(message, code, name),
        additional_contexts=contexts,
        decided_by=decided_by,
        decision_detail=decision_detail,
    )


def aborted(body_invoked: bool, contexts: tuple[HookContext, ...] = ()) -> ToolExecutionResult:
    if body_invoked:
        return failure("tool call aborted", "ABORTED", ABORT_NAME, contexts=contexts)
    return failure(
        "tool call aborted before dispatch",
        "ABORTED_BEFORE_DISPATCH",
        ABORT_NAME,
        contexts=contexts,
    )


def raised(exc: BaseException) -> ToolExecutionResult:
    """The error result of a tool body that raised *exc* (``TOOL_FAILED`` unless a `DshError`
    says otherwise); a `DshError`'s ``detail`` goes to ``meta["detail"]``, for the host only."""
    message, code, name = from_exception(exc, "TOOL_FAILED")
    result = failure(message, code, name)
    detail = getattr(exc, "detail", None) if isinstance(exc, DshError) else None
    if type(detail) is str:
        result = attrs.evolve(result, meta={"detail": detail})
    return result


def detailed(result: ToolExecutionResult) -> str:
    """A body's outcome for the trace: its code, and an error's ``meta["detail"]`` if any."""
    outcome = result.code or "ok"
    meta = result.meta
    if result.is_error and isinstance(meta, Mapping) and type(meta.get("detail")) is str:
        outcome = f"{outcome}: {meta['detail']}"
    return outcome


def from_exception(exc: BaseException, default_code: str) -> tuple[str, str, str]:
    if isinstance(exc, DshError):
        return exc.message or type(exc).__name__, exc.code, type(exc).__name__
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable exception>"
    name = type(exc).__name__
    return (f"{name}: {text}" if text else name), default_code, name


def plugin_failed(failure_: PluginFailure) -> ToolExecutionResult:
    error = failure_.error
    if isinstance(error, DshError):
        message, code, name = from_exception(error, "PLUGIN_FAILED")
    else:
        message = str(failure_)
        code, name = "PLUGIN_FAILED", type(error).__name__
    result = failure(message, code, name, decided_by=failure_.plugin)
    if error.__traceback__ is not None:  # where, for the plugin's author (see _where.py)
        result = located(result, error)
    return result
