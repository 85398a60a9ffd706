"""The final check of a result that plugin or tool code built itself (stage L).

Results the pipeline builds (`failure`, a normalised body value) are valid by construction and
never pass through here: the check runs only where a foreign `ToolExecutionResult` (or foreign
contexts) enter the call, so the common case pays nothing. A violation becomes an
``INVALID_TOOL_OUTPUT`` error result naming who produced it.

attrs validators on `ToolExecutionResult` itself would check every result, the pipeline's own
included, on every call; and ``attrs.evolve`` or ``object.__setattr__`` can still bypass them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._model._content import image_problem
from .._model._json import freeze
from .._model._outcomes import failure
from .._model._values import HookContext, ImageBlock, TextBlock, ToolExecutionResult, ToolFailure

__all__ = ["checked", "content_violations", "context_violations", "invalid", "violations"]


def _string(value: Any, where: str, out: list[str], *, optional: bool = False) -> None:
    if type(value) is str or (optional and value is None):
        return
    kind = "a str or None" if optional else "a str"
    out.append(f"{where} must be {kind}, not {type(value).__name__}")


def _content(content: Any, where: str, out: list[str]) -> None:
    if type(content) is not tuple:
        out.append(f"{where} must be a tuple of content blocks, not {type(content).__name__}")
        return
    for i, block in enumerate(content):
        if type(block) is TextBlock:
            _string(block.text, f"{where}[{i}].text", out)
        elif type(block) is ImageBlock:  # validated when made, unless set around attrs
            problem = image_problem(block.data, block.mime_type)
            if problem is not None:
                out.append(f"{where}[{i}]: {problem}")
        else:
            out.append(
                f"{where}[{i}] must be a TextBlock or ImageBlock, not {type(block).__name__}"
            )


def _contexts(contexts: Any, where: str, out: list[str]) -> None:
    if type(contexts) is not tuple:
        out.append(f"{where} must be a tuple of HookContext, not {type(contexts).__name__}")
        return
    for i, context in enumerate(contexts):
        if type(context) is not HookContext:
            out.append(f"{where}[{i}] must be a HookContext, not {type(context).__name__}")
            continue
        _content(context.content, f"{where}[{i}].content", out)
        _string(context.source, f"{where}[{i}].source", out)


def content_violations(content: Any, where: str = "content") -> list[str]:
    """Everything wrong with a tuple of content blocks (empty when it is sound)."""
    out: list[str] = []
    _content(content, where, out)
    return out


def context_violations(contexts: Any, where: str = "additional_contexts") -> list[str]:
    """Everything wrong with a tuple of `HookContext` (empty when it is sound)."""
    out: list[str] = []
    _contexts(contexts, where, out)
    return out


def violations(
    result: Any, *, plugin_named: Callable[[str], bool] | None = None, contexts_only: bool = False
) -> list[str]:
    """Everything wrong with *result* as a final result (empty when it is sound).

    *plugin_named* says whether a name is a registered plugin: ``decided_by`` may only name one.
    With *contexts_only*, only ``additional_contexts`` is looked at.
    """
    if type(result) is not ToolExecutionResult:
        return [f"must be a ToolExecutionResult, not {type(result).__name__}"]
    out: list[str] = []
    _contexts(result.additional_contexts, "additional_contexts", out)
    if contexts_only:
        return out
    _content(result.content, "content", out)
    is_error: Any = result.is_error  # typed bool, but plugin code can put anything there
    error: Any = result.error
    if type(is_error) is not bool:
        out.append(f"is_error must be True or False, not {is_error!r}")
    if error is not None:
        if type(error) is not ToolFailure:
            out.append(f"error must be a ToolFailure or None, not {type(error).__name__}")
        else:
            _string(error.message, "error.message", out)
            _string(error.code, "error.code", out, optional=True)
            _string(error.name, "error.name", out, optional=True)
    if is_error is True and error is None:
        out.append("an error result (is_error=True) must carry error=ToolFailure(...)")
    if is_error is False and error is not None:
        out.append("a success (is_error=False) must not carry an error")
    if result.meta is not None:
        if is_error is not False:
            out.append("meta is only allowed on a success")
        try:
            freeze(result.meta, "meta")
        except (ValueError, TypeError) as exc:
            out.append(str(exc))
    _string(result.decided_by, "decided_by", out, optional=True)
    _string(result.decision_detail, "decision_detail", out, optional=True)
    if type(result.decided_by) is str and plugin_named is not None:
        name = result.decided_by.partition(": ")[0]
        if not plugin_named(name):
            out.append(
                f"decided_by must name a registered plugin, not {result.decided_by!r} "
                "(the pipeline sets it; leave it None)"
            )
    return out


def checked(
    result: Any,
    producer: str,
    *,
    decided_by: str | None = None,
    plugin_named: Callable[[str], bool] | None = None,
    contexts_only: bool = False,
) -> ToolExecutionResult:
    """*result* if it is sound, else an ``INVALID_TOOL_OUTPUT`` result naming *producer*."""
    found = violations(result, plugin_named=plugin_named, contexts_only=contexts_only)
    if not found:
        return result  # type: ignore[no-any-return]
    return invalid(producer, found, decided_by=decided_by)


def invalid(
    producer: str, found: list[str], *, decided_by: str | None = None
) -> ToolExecutionResult:
    """The ``INVALID_TOOL_OUTPUT`` result for what *producer* made, listing *found*."""
    message = (
        f"{producer} produced an invalid result: {'; '.join(found)}. "
        "Return a ToolExecutionResult of plain JSON data, or a plain value and let dsh build it."
    )
    return failure(message, "INVALID_TOOL_OUTPUT", "ToolOutputError", decided_by=decided_by)
