"""A healthy plugin in a broken distribution: it registers the ``ping`` tool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh_host import define_tool, hookimpl

ping = define_tool(
    name="ping", description="Answer pong.", parameters={}, execute=lambda args: "pong"
)


@hookimpl
def dsh_register_tools(register: Callable[..., Any]) -> None:
    register(ping)
