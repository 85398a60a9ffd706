"""Shared fixtures: every test builds its own host with entry-point loading off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dsh_host import Host, ToolDefinition, define_tool


def make_echo(name: str = "echo", **kwargs: Any) -> ToolDefinition:
    """A tool that returns its ``text`` argument."""

    async def execute(args: Any, ctx: Any) -> str:
        return args["text"]

    return define_tool(
        name=name,
        description="echo arguments back",
        parameters={"text": {"type": "string", "required": True}},
        execute=execute,
        **kwargs,
    )


@pytest.fixture
def make_host() -> Callable[..., Host]:
    """``make_host(*plugins, tools=[...], config=None)``: a host with only what the test gives it."""

    def build(*plugins: object, tools: tuple[ToolDefinition, ...] = (), config: Any = None) -> Host:
        host = Host(config=config, plugins=plugins, load_entrypoints=False)
        for tool in tools:
            host.registry.register(tool)
        return host

    return build
