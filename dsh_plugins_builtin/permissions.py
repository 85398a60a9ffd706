"""The ``permissions`` plugin: allow, ask and deny rules over tool calls, as in Claude Code.

::

    [plugin.permissions]
    allow = ["read_file", "list_dir", "glob", "grep", "bash(git status:*)", "edit_file(src/**)"]
    ask = ["bash(git push:*)"]
    deny = ["bash(rm:*)", "read_file(./secrets/**)"]
    default = "ask"

Deny beats ask beats allow; a call no rule matches gets the ``default``. The grammar and the
matching live in `dsh_plugins_builtin._rules`. A rule that does not parse stops the host with a
`ConfigError` naming the rule, the file and the key.

The plugin is a waterfall link of ``dsh_tool_pre_execute``: unless its own verdict is a denial
it asks the plugins after it too, and the stricter decision wins (deny > ask > allow), so an
``allow`` here never hides another policy plugin's ``deny`` or ``ask``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, final

import attrs

from dsh_host import Allow, Ask, ConfigError, Deny, Host, ToolExecution, hookimpl

from ._rules import Effect, Rule, RuleError, RuleSet, Verdict, Workspace, parse_rule

__all__ = ["DEFAULT_ALLOW", "PermissionsConfig", "PermissionsPlugin"]

DEFAULT_ALLOW: tuple[str, ...] = ("read_file", "list_dir", "glob", "grep")
"""The read-only tools: allowed (inside the workspace) when no ``allow`` list is configured."""


@final
@attrs.frozen
class PermissionsConfig:
    """The ``[plugin.permissions]`` table.

    Attributes:
        allow: rules whose calls run without asking.
        ask: rules whose calls need an approver's ``allowed-once``.
        deny: rules whose calls are refused.
        default: what happens to a call no rule matches.
    """

    allow: tuple[str, ...] = DEFAULT_ALLOW
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    default: Literal["allow", "ask", "deny"] = "ask"


PreDecision = Allow | Deny | Ask
_SEVERITY: dict[type[PreDecision], int] = {Allow: 0, Ask: 1, Deny: 2}


@final
class PermissionsPlugin:
    """Decides every call by the configured rules (see the module docstring)."""

    name = "permissions"

    def __init__(self) -> None:
        self._rules: RuleSet | None = None
        self._where = ""

    @hookimpl
    def dsh_plugin_config(self) -> type[PermissionsConfig]:
        return PermissionsConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Compile the rules; a rule that does not parse stops the host (fail closed).

        Raises:
            ConfigError: naming the rule, the config file and the key (``deny[2]``).
        """
        config: PermissionsConfig = host.config_for(self)
        self._where = host.config.describe()
        compiled: dict[Effect, list[Rule]] = {"allow": [], "ask": [], "deny": []}
        for effect, rules in compiled.items():
            for i, text in enumerate(getattr(config, effect)):
                try:
                    rules.append(parse_rule(text, effect))
                except RuleError as exc:
                    raise ConfigError(
                        f"rule {text!r} {exc}",
                        path=host.config.source, plugin=self.name, key=f"{effect}[{i}]",
                    ) from None  # fmt: skip
        self._rules = RuleSet(
            **compiled, default=config.default, workspace=Workspace.at(host.workspace)
        )

    def decide(self, execution: ToolExecution) -> PreDecision:
        """This plugin's own decision on *execution*, before any other plugin is consulted."""
        if self._rules is None:
            raise RuntimeError("the permissions plugin was not started (dsh_host_started)")
        return self._decision(
            execution.name, self._rules.decide(execution.name, execution.arguments)
        )

    def _decision(self, name: str, verdict: Verdict) -> PreDecision:
        if verdict.effect == "allow":
            if not verdict.allowed_by:
                return Allow(detail="default allow")
            rules = ", ".join(rule.text for rule in verdict.allowed_by)
            noun = "rule" if len(verdict.allowed_by) == 1 else "rules"
            return Allow(detail=f"{noun} {rules} in {self._where}")
        if verdict.rule is not None:
            detail = f"rule {verdict.rule.text} in {self._where}"
            how = "denied" if verdict.effect == "deny" else "approval required"
            reason = f"{how} by {detail}"
        else:
            detail = f"default {verdict.effect}"
            reason = f"no rule matched {name}; the default is {verdict.effect}"
            if verdict.note:
                reason += f" ({verdict.note})"
        if verdict.effect == "deny":
            return Deny(reason, detail=detail)
        return Ask(reason, detail=detail)

    @hookimpl
    async def dsh_tool_pre_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        own = self.decide(execution)
        if isinstance(own, Deny):
            return own
        downstream = await call_next()
        stricter = _SEVERITY[type(downstream)] > _SEVERITY[type(own)]
        return downstream if stricter else own
