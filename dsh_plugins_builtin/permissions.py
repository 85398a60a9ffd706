"""The ``permissions`` plugin: allow, ask and deny rules over tool calls, as in Claude Code.

::

    [plugin.permissions]
    allow = ["read_file", "list_dir", "glob", "grep", "Bash(git status:*)", "edit_file(src/**)"]
    ask = ["bash(git push:*)"]
    deny = ["bash(rm:*)", "Read(./secrets/**)"]
    default = "ask"
    import = [".claude/settings.json"]   # Claude Code settings: permissions.allow/ask/deny

Deny beats ask beats allow; a call no rule matches gets the ``default``. The grammar and the
matching live in `dsh_plugins_builtin._rules._rules` (and the shell reading in ``_shell``). A rule
that does not parse, or a settings file that is not valid, stops the host with a `ConfigError`
naming the rule, the file and the key; a settings file that does not exist, and a rule for a
tool that is not installed, are a one-line warning on ``dsh_plugins_builtin.permissions``.

The plugin is a waterfall link of ``dsh_tool_pre_execute``: unless its own verdict is a denial
it asks the plugins after it too, and the stricter decision wins (deny > ask > allow), so an
``allow`` here never hides another policy plugin's ``deny`` or ``ask``. The link is a plain
function: a denial is returned as it is, with no coroutine.

Deny and ask *rules* are final whatever any other plugin returns, at any position: the plugin
checks them again in its ``dsh_tool_guard``, which runs after every allowed call and cannot be
undone (see `dsh_plugins_builtin._rules._final`). A call a deny rule matches is denied there
even when a plugin called before this one allowed it; a call an ask rule matches is denied
there unless it was put to the approvers (a person, or an approver plugin) and they allowed it
once. The reason names the rule and the plugins that could have allowed the call. Only the
``default`` (no rule matched) gives way to another plugin's ``Allow``.

Per call, the plugin's own decision is a dictionary lookup for every tool whose decision no
argument can change (every rule that applies to it names the tool alone, and no allow rule
has to check its path arguments against the workspace): it is worked out once per tool
definition, at start for the tools registered then and on the first call for later ones (a
tool registered again under the same name is worked out again). Other tools' calls are
matched against their arguments, over rules compiled once per tool. It also answers
``dsh_path_denied``, so a search leaves out the files a read (or edit) rule denies.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, final

import attrs

from dsh_host import (
    Allow,
    Ask,
    ConfigError,
    Deny,
    Host,
    ToolDefinition,
    ToolExecution,
    hookimpl,
)

from ._rules._checks import sandbox_fence, unmounted
from ._rules._final import who_allowed
from ._rules._rules import (
    EDIT_RULES,
    READ_RULES,
    Anchors,
    Effect,
    Rule,
    RuleError,
    RuleSet,
    Verdict,
    parse_rule,
)
from ._rules._settings import imported_rules

__all__ = ["DEFAULT_ALLOW", "PermissionsConfig", "PermissionsPlugin"]

log = logging.getLogger("dsh_plugins_builtin.permissions")

DEFAULT_ALLOW: tuple[str, ...] = ("read_file", "list_dir", "glob", "grep")
"""The read-only tools: allowed (inside the workspace) unless ``allow_defaults = false``; an
``allow`` list adds to them."""

_EFFECTS: tuple[Effect, ...] = ("allow", "ask", "deny")
_FIXED_KEPT = 1_024
_FINAL_HOOKS = ("dsh_tool_guard",)
_PATH_HOOK = "dsh_path_denied"  # idle: `RuleSet.withheld` answers None for every path


@final
@attrs.frozen
class PermissionsConfig:
    """The ``[plugin.permissions]`` table.

    Attributes:
        allow: rules whose calls run without asking, added to `DEFAULT_ALLOW`.
        allow_defaults: ``false`` drops `DEFAULT_ALLOW`: only ``allow`` allows.
        ask: rules whose calls need an approver's ``allowed-once``.
        deny: rules whose calls are refused.
        default: what happens to a call no rule matches.
        imports: the ``import`` key: Claude Code settings files (relative to the workspace)
            whose ``permissions.allow``, ``ask`` and ``deny`` lists are added to these.
    """

    allow: tuple[str, ...] = ()
    allow_defaults: bool = True
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    default: Literal["allow", "ask", "deny"] = "ask"
    imports: tuple[str, ...] = attrs.field(default=(), metadata={"key": "import"})


PreDecision = Allow | Deny | Ask
_SEVERITY: dict[type[PreDecision], int] = {Allow: 0, Ask: 1, Deny: 2}


@final
class PermissionsPlugin:
    """Decides every call by the configured rules (see the module docstring)."""

    name = "permissions"
    DEFAULTS = DEFAULT_ALLOW
    """`DEFAULT_ALLOW`, for ``dsh call``'s hint (which reaches the plugin, not this module)."""

    def __init__(self) -> None:
        self._rules: RuleSet | None = None
        self._host: Host | None = None
        # tool definition (by id) or unknown tool name -> (the tool, its fixed decision or None)
        self._fixed: dict[object, tuple[ToolDefinition | None, PreDecision | None]] = {}
        # verdict (by id) -> (the verdict, the tool name, its decision): made once per verdict
        self._made: dict[int, tuple[Verdict, str, PreDecision]] = {}
        self.dsh_idle_hooks: frozenset[str] = frozenset()
        self._last: tuple[object, PreDecision] | None = None  # (token, decision): for the guard
        # The host calls `_alone` instead of our link when nothing follows it (the default
        # allow is never stricter); not for a subclass's own link, which `_alone` is not.
        own = type(self).dsh_tool_pre_execute is PermissionsPlugin.dsh_tool_pre_execute
        self.dsh_last_links = {"dsh_tool_pre_execute": self._alone} if own else {}
        # Whether a pre-execute link comes after ours, for the plugin set of this generation.
        self._after: tuple[object, bool] | None = None

    @hookimpl
    def dsh_plugin_config(self) -> type[PermissionsConfig]:
        return PermissionsConfig

    @hookimpl
    def dsh_config_files(self, host: Host) -> list[pathlib.Path]:
        """The ``import`` files: their rules decide as the table's do (part of its trust)."""
        config: PermissionsConfig = host.config_for(self)
        return [pathlib.Path(host.workspace, os.path.expanduser(s)) for s in config.imports]

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Compile the rules (and imported settings files) once; fail closed on a bad one.

        Raises:
            ConfigError: naming the rule, the file and the key (``deny[2]``,
                ``permissions.allow[0]``).
        """
        config: PermissionsConfig = host.config_for(self)
        workspace = str(host.workspace)
        home = os.path.expanduser("~")
        where = host.config.describe()
        own = Anchors(workspace=workspace, project=workspace, home=home)
        compiled: dict[Effect, list[Rule]] = {"allow": [], "ask": [], "deny": []}
        if config.allow_defaults:  # what a rule says it came from: not the user's file
            builtin = "the built-in defaults"
            compiled["allow"] = [
                parse_rule(text, "allow", own, builtin)
                for text in DEFAULT_ALLOW
                if text not in config.allow  # the user's own rule names its file instead
            ]
        for effect in _EFFECTS:
            for i, text in enumerate(getattr(config, effect)):
                try:
                    compiled[effect].append(parse_rule(text, effect, own, where))
                except RuleError as exc:
                    raise ConfigError(
                        f"rule {text!r} {exc}",
                        path=host.config.source, plugin=self.name, key=f"{effect}[{i}]",
                    ) from None  # fmt: skip
        self._check_mounted(host, compiled)
        for spelled in config.imports:
            path = pathlib.Path(workspace, os.path.expanduser(spelled))
            for effect, rules in imported_rules(path, workspace, home, where, host).items():
                compiled[effect].extend(rules)
        self._rules = RuleSet(**compiled, default=config.default, workspace=workspace)
        self._rules.fence = sandbox_fence(host)
        # with no deny or ask rule nothing is final: the guard (and its note) is never called;
        # with none naming a path no path is withheld: searches need not ask (no walk)
        final = compiled["deny"] or compiled["ask"]
        idle = set() if final else set(_FINAL_HOOKS)
        if not any(rule.path is not None for rule in (*compiled["deny"], *compiled["ask"])):
            idle.add(_PATH_HOOK)
        self.dsh_idle_hooks = frozenset(idle)
        self._host = host
        self._fixed.clear()
        self._made.clear()
        for tool in host.registry.tools():  # the tools known now; later ones on first call
            self._remember(id(tool), tool, tool.name)
        self._warn_unknown(host, self._rules)

    def _check_mounted(self, host: Host, compiled: Mapping[Effect, list[Rule]]) -> None:
        """A rule of this table naming an MCP server the ``mcp`` plugin does not mount (or a
        tool its ``tools`` list leaves out) can never match: a `ConfigError` naming the rule."""
        if host.pm.get_plugin("mcp") is None:
            return  # MCP tools come from elsewhere (or nowhere): nothing to check against
        servers: Mapping[str, Any] = getattr(host.config_for("mcp"), "servers", {})
        for effect, rules in compiled.items():
            for i, rule in enumerate(rules):
                why = unmounted(rule.tool, servers)
                if why is not None:
                    raise ConfigError(
                        f"rule {rule.text!r} {why}, so it can never match; mounted servers: "
                        f"{', '.join(sorted(servers)) or 'none'}",
                        path=host.config.source, plugin=self.name, key=f"{effect}[{i}]",
                    )  # fmt: skip

    @staticmethod
    def _warn_unknown(host: Host, rules: RuleSet) -> None:
        tools = host.registry.tools()
        if not tools:
            return  # tools come later (an embedding host registers its own): nothing to say yet
        mounting = host.pm.get_plugin("mcp") is not None  # its tools come later (`_check_mounted`)
        for rule in rules.rules():
            if mounting and rule.tool.startswith("mcp__"):
                continue
            reaches = any(rule.names(t.name, t.claude_name) for t in tools)
            if rule.path is not None and rule.tool in READ_RULES | EDIT_RULES:
                reaches = reaches or any(t.paths for t in tools)
            if not reaches:
                log.warning(
                    "permissions: %s names a tool that is not installed; it matches nothing",
                    rule.detail,
                )

    def decide(self, execution: ToolExecution) -> PreDecision:
        """This plugin's own decision on *execution*, before any other plugin is consulted.

        For a tool whose decision no argument can change (``echo`` under an ``echo`` rule,
        any tool only the default covers) it is worked out once per tool definition and then
        looked up; otherwise the rules are matched against the call's arguments.
        """
        rules, host = self._rules, self._host
        if rules is None or host is None:
            raise RuntimeError("the permissions plugin was not started (dsh_host_started)")
        tool = host.registry.get(execution.name, execution.scope)
        key: object = execution.name if tool is None else id(tool)
        known = self._fixed.get(key)
        if known is not None and known[0] is tool:
            fixed = known[1]
        else:
            fixed = self._remember(key, tool, execution.name)
        if fixed is not None:
            return fixed
        return self._by_arguments(execution, tool)

    def _by_arguments(self, execution: ToolExecution, tool: ToolDefinition | None) -> PreDecision:
        """`decide` for a tool whose decision depends on the call's arguments."""
        assert self._rules is not None
        verdict = self._rules.decide(execution.name, tool, execution.arguments)
        made = self._made.get(id(verdict))  # a verdict looked up by place comes back as it was
        if made is not None and made[0] is verdict and made[1] == execution.name:
            return made[2]
        decision = _decision(execution.name, verdict)
        if len(self._made) >= _FIXED_KEPT:
            self._made.clear()
        self._made[id(verdict)] = (verdict, execution.name, decision)
        return decision

    def _remember(self, key: object, tool: ToolDefinition | None, name: str) -> PreDecision | None:
        """Work out (once) the decision on every call of *tool*, if no argument can change it."""
        assert self._rules is not None
        verdict = self._rules.fixed(name, tool)
        decision = None if verdict is None else _decision(name, verdict)
        if len(self._fixed) >= _FIXED_KEPT:  # unknown names come from the model: bounded
            self._fixed.clear()
        self._fixed[key] = (tool, decision)
        return decision

    @hookimpl
    def dsh_tool_pre_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision | Awaitable[PreDecision]:
        # A plain function: a denial is returned as it is (no coroutine, nobody after us is
        # asked); an allow or an ask waits for the downstream decision, and the stricter wins.
        # With no link after ours, the downstream decision is the host's default (allow), which
        # is never stricter: our own is returned as it is then too (as `_alone` does).
        own = self._alone(execution)
        if type(own) is Deny:
            return own
        return _stricter(own, call_next) if self._downstream() else own

    def _alone(self, execution: ToolExecution) -> PreDecision:
        """Our own decision on *execution*, noted for the guard unless it denies: what the link
        answers when no pre-execute implementation is called after it."""
        host = self._host
        own: PreDecision | None = None
        if host is not None:  # `decide`'s lookup of a fixed decision, inline
            tool = host.registry.get(execution.name, execution.scope)
            known = self._fixed.get(execution.name if tool is None else id(tool))
            if known is not None and known[0] is tool:
                own = known[1]
                if own is None:  # known to depend on the arguments
                    own = self._by_arguments(execution, tool)
        if own is None:
            own = self.decide(execution)
        if type(own) is not Deny:
            self._last = (execution.token, own)
        return own

    def _downstream(self) -> bool:
        """Whether any pre-execute implementation is called after ours (worked out once per
        plugin set: the plugin manager counts registrations in ``generation``)."""
        assert self._host is not None  # `decide` checked it
        pm = self._host.pm
        generation = getattr(pm, "generation", None)
        after = self._after
        if after is not None and generation is not None and after[0] == generation:
            return after[1]
        # pluggy lists implementations in reverse call order: those before ours run after it
        impls = pm.hook.dsh_tool_pre_execute.get_hookimpls()
        link = self.dsh_tool_pre_execute  # ours: another link of ours (specname) runs after it
        mine = next((i for i, impl in enumerate(impls) if impl.function == link), len(impls))
        found = any(not _idle(impl.plugin) for impl in impls[:mine])
        self._after = (generation, found)
        return found

    @hookimpl
    def dsh_tool_guard(self, execution: ToolExecution) -> str | None:
        """Deny and ask rules again, after every other plugin: final whoever allowed the call."""
        asked = execution.approved_by is not None
        last = self._last
        mine = last is not None and last[0] is execution.token
        own = last[1] if last is not None and mine else self.decide(execution)
        if type(own) is Allow or not (own.detail or "").startswith("rule "):
            return None  # allowed, or only the default: another plugin's Allow may stand
        if type(own) is Ask and asked:
            return None  # the approvers were asked and allowed it once
        who = who_allowed(self._host, self.name)
        if type(own) is Deny:
            return (
                f"{own.reason} (final: {who} allowed the call, but no plugin overrides a deny rule)"
            )
        return (
            f"{own.reason} (final: {who} allowed the call without putting it to an approver; a"
            " call an ask rule matches runs only when a person or a configured approver allows it)"
        )

    @hookimpl
    def dsh_path_denied(self, execution: ToolExecution, path: str, access: str) -> str | None:
        """Why a deny (or ask) rule withholds *path* from the running search, or ``None``."""
        if self._rules is None or self._host is None:
            return "the permissions plugin was not started, so no path is let through"
        tool = self._host.registry.get(execution.name, execution.scope)
        rule = self._rules.withheld(execution.name, tool, path, access)
        if rule is None:
            return None
        how = "denied" if rule in self._rules.denying() else "needs approval"
        return f"{how} by {rule.detail}"


def _idle(plugin: object) -> bool:
    """Whether *plugin* set its pre-execute hook idle, exactly as the host reads it."""
    idle = getattr(plugin, "dsh_idle_hooks", None)
    return isinstance(idle, frozenset | set | tuple | list) and "dsh_tool_pre_execute" in idle


async def _stricter(
    own: PreDecision, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    downstream = await call_next()
    stricter = _SEVERITY[type(downstream)] > _SEVERITY[type(own)]
    return downstream if stricter else own


def _decision(name: str, verdict: Verdict) -> PreDecision:
    if verdict.effect == "allow":
        if not verdict.allowed_by:
            return Allow(detail="default allow")
        return Allow(detail="; ".join(rule.detail for rule in verdict.allowed_by))
    if verdict.rule is not None:
        detail = verdict.rule.detail
        how = "denied" if verdict.effect == "deny" else "approval required"
        reason = f"{how} by {detail}"
        if verdict.note:
            reason += f" ({verdict.note})"
    else:
        detail = f"default {verdict.effect}"
        reason = f"no rule matched {name}; the default is {verdict.effect}"
        if verdict.note:
            reason += f" ({verdict.note})"
    if verdict.effect == "deny":
        return Deny(reason, detail=detail)
    return Ask(reason, detail=detail)
