"""Shared fixtures: every test builds its own host with entry-point loading off."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from dsh_host import Host, ToolDefinition, define_tool, testing


def pytest_configure(config: pytest.Config) -> None:
    """Keep every test (and every ``dsh`` subprocess) out of the user's real data, cache and
    config directories: the audit and output_budget plugins write there by default."""
    home = tempfile.mkdtemp(prefix="dsh-tests-")
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        os.environ[name] = os.path.join(home, name.lower())
    os.environ.pop("CLAUDE_PROJECT_DIR", None)  # run inside Claude Code: `dsh hook` would go there


def soak_size(ci: int, full: int) -> int:
    """The size of a soak or fuzz run: *ci* in the test suite, *full* under ``nox -s soak``
    (which sets ``DSH_SOAK=full``). Mark such tests ``@pytest.mark.soak``."""
    return full if os.environ.get("DSH_SOAK") == "full" else ci


def make_echo(name: str = "echo", **kwargs: Any) -> ToolDefinition:
    """A tool that returns its ``text`` argument. Its object is open (``strict_arguments=False``):
    rule and audit tests pass it extra keys (``command``) that only policy reads."""

    async def execute(args: Any, ctx: Any) -> str:
        return args["text"]

    return define_tool(
        name=name,
        description="echo arguments back",
        parameters={"text": {"type": "string", "required": True}},
        execute=execute,
        **{"strict_arguments": False, **kwargs},
    )


@pytest.fixture
def make_host() -> Callable[..., Host]:
    """``make_host(*plugins, tools=[...], config=None)``: a host with only what the test gives it.

    It is `dsh_host.testing.make_host`, the plugin author's kit, so the kit is exercised by every
    test of this project and cannot rot."""

    def build(*plugins: object, tools: tuple[ToolDefinition, ...] = (), config: Any = None) -> Host:
        return testing.make_host(*plugins, tools=tools, config=config)

    return build
