"""`validate_args`: check arguments against a tool's parameters, as the pipeline does."""

from __future__ import annotations

from typing import Any

from .._model._json import freeze
from ._tool import ToolDefinition

__all__ = ["validate_args"]


def validate_args(tool: ToolDefinition, arguments: Any) -> list[str]:
    """Every violation of *tool*'s parameter schema by *arguments*, with its path; ``[]`` if valid.

    Messages are written for a model to act on: ``missing required property "path"``,
    ``"limit" must be an integer``. Arguments that are not JSON give one violation saying where.
    """
    try:
        frozen = freeze(arguments, "arguments")
    except ValueError as exc:
        return [str(exc)]
    _, violations = tool.prepare(frozen)
    return violations
