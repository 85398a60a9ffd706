"""The ``hello-policy`` plugin: a pre-execute policy with its own configuration.

``[plugin.hello-policy]`` in ``dsh.toml`` is structured into `PolicyConfig` by the host; the
plugin reads it with ``host.config_for(self)`` once the host has started, and keeps it on the
plugin object, never in a module global. The entry point names the class, so every host makes
its own instance and two hosts in one process never share configuration.
"""

from __future__ import annotations

from typing import Any

import attrs

from dsh_host import Ask, Deny, Host, ToolExecution, hookimpl


@attrs.frozen
class PolicyConfig:
    """The ``[plugin.hello-policy]`` table."""

    deny_names: tuple[str, ...] = ()
    """Names ``hello`` may not greet (compared case-insensitively)."""
    ask_names: tuple[str, ...] = ()
    """Names a person must approve first."""


class HelloPolicy:
    """Deny or ask before greeting the configured names."""

    name = "hello-policy"
    """The name it registers under when passed to ``Host(plugins=...)`` (tests); installed, it
    registers under its entry-point name, which is the same."""

    def __init__(self) -> None:
        self.config = PolicyConfig()

    @hookimpl
    def dsh_plugin_config(self) -> type[PolicyConfig]:
        return PolicyConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)

    @hookimpl
    def dsh_tool_pre_execute(self, execution: ToolExecution) -> Deny | Ask | None:
        if execution.name != "hello":
            return None
        name: Any = execution.arguments.get("name") if execution.arguments else None
        if not isinstance(name, str):
            return None  # malformed calls are left to argument validation
        if name.casefold() in {n.casefold() for n in self.config.deny_names}:
            return Deny(f'greeting "{name}" is not allowed ([plugin.hello-policy] deny_names)')
        if name.casefold() in {n.casefold() for n in self.config.ask_names}:
            return Ask(f'greeting "{name}" needs approval ([plugin.hello-policy] ask_names)')
        return None
