"""The ``hello`` plugin: one tool, registered through ``dsh_register_tools``.

The entry point names this module, so the module itself is the plugin object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from dsh_host import GenericCallView, ToolCallKind, hookimpl, tool


@attrs.frozen
class HelloArgs:
    """What the model passes to ``hello``."""

    name: str = attrs.field(metadata={"description": "Who to greet"})
    shout: bool = attrs.field(default=False, metadata={"description": "Greet in capitals"})


def present_hello(args: HelloArgs) -> GenericCallView:
    """The card a UI shows before the call runs."""
    return GenericCallView(title=f"Greet {args.name}", kind=ToolCallKind.OTHER)


@tool(present_call=present_hello, is_concurrency_safe=lambda args: True)
def hello(args: HelloArgs) -> str:
    """Greet someone by name."""
    greeting = f"Hello, {args.name}!"
    return greeting.upper() if args.shout else greeting


@hookimpl
def dsh_register_tools(register: Callable[..., Any]) -> None:
    """Offer the ``hello`` tool to every agent."""
    register(hello)
