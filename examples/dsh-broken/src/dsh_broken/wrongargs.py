"""A plugin whose hook takes an argument the hook does not pass."""

from __future__ import annotations

from typing import Any

from dsh_host import hookimpl


@hookimpl
def dsh_tool_pre_execute(call: Any) -> None:
    return None
