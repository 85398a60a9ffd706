"""How a call ends: error results, aborts, and what an exception becomes."""

from __future__ import annotations

from ._errors import DshError, PluginFailure
from ._values import HookContext, TextBlock, ToolExecutionResult, ToolFailure
from ._where import located

__all__ = ["ABORT_NAME", "aborted", "failure", "from_exception", "plugin_failed"]

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
