"""A plugin that marks a misspelt hook name."""

from __future__ import annotations

from dsh_host import Deny, ToolExecution, hookimpl


@hookimpl
def dsh_tool_pre_exec(execution: ToolExecution) -> Deny:
    return Deny("never reached: the hook is dsh_tool_pre_execute")
