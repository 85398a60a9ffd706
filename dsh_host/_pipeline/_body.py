"""Running a tool body in a cancel scope that follows its signal, and normalising its value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from .._model._content import to_content
from .._model._errors import ToolOutputError
from .._model._json import canonical_json, freeze
from .._model._outcomes import aborted, failure, raised
from .._model._values import ImageBlock, TextBlock, ToolExecutionResult, ToolRunContext
from ._contain import genuine
from ._verify import checked

if TYPE_CHECKING:
    from .._schema._tool import ToolDefinition

__all__ = ["normalise", "run_body"]


async def run_body(tool: ToolDefinition, args: Any, context: ToolRunContext) -> ToolExecutionResult:
    """Run the body in a cancel scope that follows the (fused) signal; never raises.

    An ``async`` body under a signal nobody outside the pipeline holds needs no scope: the
    pipeline awaits it itself (`Pipeline.body_stage`), with no frame of this function's.
    """
    value: Any = _MISSING
    result: ToolExecutionResult | None = None
    with trio.CancelScope(deadline=context.signal.deadline) as scope:
        unsubscribe = context.signal._subscribe(lambda _signal: scope.cancel())
        try:
            call: Callable[[], Any] = (
                functools.partial(tool.execute, args, context)
                if tool.takes_context
                else functools.partial(tool.execute, args)
            )
            if tool.is_async:
                value = await call()
            else:
                value = await trio.to_thread.run_sync(call, abandon_on_cancel=True)
                if inspect.isawaitable(value):
                    value = await value
        except BaseException as exc:
            # A KeyboardInterrupt, SystemExit or stray Cancelled from the tool is its failure;
            # only a real Ctrl-C and the caller's own cancellation go on.
            if await genuine(exc):
                raise
            result = raised(exc)
        finally:
            unsubscribe()
    if result is not None:
        return result
    if value is _MISSING:
        return aborted(True)
    result = normalise(tool, value)
    if context.signal.aborted and not result.is_error:
        return aborted(True)
    return result


_MISSING: Any = object()


def normalise(tool: ToolDefinition, value: Any) -> ToolExecutionResult:
    if type(value) is str and tool.validate_output is None:  # the common case, first
        return ToolExecutionResult._success((TextBlock._of(value),))
    try:
        if isinstance(value, ToolExecutionResult):
            return checked(value, f'tool "{tool.name}"')
        if tool.validate_output is not None:
            frozen = freeze(value, "value")
            violations = tool.validate_output(frozen)
            if violations:
                raise ToolOutputError(tool.name, violations)
            return ToolExecutionResult(content=canonical_json(frozen))
        if type(value) is str:
            return ToolExecutionResult._success((TextBlock(value),))
        if isinstance(value, str | TextBlock | ImageBlock):
            return ToolExecutionResult(content=value)
        if value is None:
            return ToolExecutionResult(content=())
        if isinstance(value, list | tuple) and all(
            isinstance(v, str | TextBlock | ImageBlock) for v in value
        ):
            return ToolExecutionResult(content=to_content(value))
        return ToolExecutionResult(content=canonical_json(freeze(value, "value")))
    except ToolOutputError as exc:
        return failure(exc.message, exc.code, "ToolOutputError")
    except (ValueError, TypeError) as exc:
        error = ToolOutputError(tool.name, [str(exc)])
        return failure(error.message, error.code, "ToolOutputError")
