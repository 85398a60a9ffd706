"""How a call may run beside others (`classify`), deciding it once for `execute_batch`."""

from __future__ import annotations

from typing import Any

from .._model._json import freeze
from .._model._values import ExecutionMode, ToolExecutionInput
from .._registry._registry import ToolTable
from .._schema._tool import ToolDefinition
from ._contain import real_interrupt

__all__ = ["classify"]


def classify(
    registry: ToolTable, input: ToolExecutionInput
) -> tuple[ExecutionMode, ToolDefinition | None, Any, Any]:
    """`ToolRegistry.execution_mode`, with the frozen arguments and the body's arguments it made.

    Returns ``(mode, tool, frozen, args)``; *frozen* is ``None`` when the arguments are not JSON
    and *args* is ``None`` when they are invalid (or were not looked at). `execute_batch` hands
    both on, so a call is frozen and validated once, not twice.
    """
    tool = registry.get(input.name, input.scope)
    if tool is None or tool.is_concurrency_safe is None:
        return ExecutionMode.EXCLUSIVE, tool, None, None
    snapshot = tool.snapshot
    made = None if snapshot is None else snapshot(input.arguments)  # frozen and accepted
    if made is None:
        try:
            frozen = freeze(input.arguments, "arguments")
        except ValueError:
            return ExecutionMode.EXCLUSIVE, tool, None, None
    else:
        frozen = made
    try:
        if made is not None:
            args = made  # accepted in the walk that froze them
        elif (accepts := tool.accepts) is not None and accepts(frozen):
            args = frozen  # valid as they are, as the pipeline's dispatch finds them
        else:
            args, violations = tool.prepare(frozen)
            if violations:
                return ExecutionMode.EXCLUSIVE, tool, frozen, None
        safe = tool.is_concurrency_safe(args)
    except BaseException as exc:  # the tool's fault: run it alone; a real Ctrl-C goes on
        if real_interrupt(exc):
            raise
        return ExecutionMode.EXCLUSIVE, tool, frozen, None
    mode = ExecutionMode.PARALLEL if safe is True else ExecutionMode.EXCLUSIVE
    return mode, tool, frozen, args
