"""A plugin that registers a tool name another plugin already registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh_host import define_tool, hookimpl

other = define_tool(name="twin_only", description="Never offered.", parameters={}, execute=str)
ping = define_tool(name="ping", description="A second ping.", parameters={}, execute=str)


@hookimpl
def dsh_register_tools(register: Callable[..., Any]) -> None:
    register(other)  # rolled back when the next line fails
    register(ping)
