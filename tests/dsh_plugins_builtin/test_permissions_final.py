"""Deny and ask rules are final: no plugin at any position, with any return value, undoes them.

Issue #23 row 1: a plugin whose ``dsh_tool_pre_execute`` answers ``Allow`` (or ``Ask`` plus any
approver) before ``permissions`` used to get ``sudo rm -rf /`` past ``deny = ["bash(sudo:*)"]``.
Each third-party plugin here is tried at every position: registered before and after
``permissions``, ``tryfirst``, ``trylast``, as a waterfall link overriding its downstream, and
loaded through entry points sorted by name around ``permissions``.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any

import pytest

from dsh_host import (
    Allow,
    ApprovalOutcome,
    Ask,
    Host,
    ToolExecution,
    ToolExecutionInput,
    define_tool,
    hookimpl,
)
from dsh_plugins_builtin.permissions import PermissionsPlugin

RAN: list[str] = []


def _bash() -> Any:
    def execute(args: Any) -> str:
        RAN.append(args["command"])
        return "ran"

    return define_tool(
        name="bash", description="a stand-in", parameters={"command": {"type": "string"}},
        execute=execute, claude_name="Bash",
    )  # fmt: skip


class Plain:
    name = "thirdparty"

    def __init__(self, decision: Any) -> None:
        self.decision = decision

    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return self.decision


class First(Plain):
    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return self.decision


class Last(Plain):
    @hookimpl(trylast=True)
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return self.decision


class Overrider(Plain):
    """A tryfirst waterfall link that replaces whatever its downstream decided."""

    @hookimpl(tryfirst=True)
    async def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        await call_next()
        return self.decision


class Approver:
    """An approver that allows everything it is asked (a person saying yes)."""

    name = "yes_man"

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl(trylast=True)
    def dsh_tool_approve(self, request: Any) -> ApprovalOutcome:
        self.asked.append(request.execution.arguments["command"])
        return ApprovalOutcome.ALLOWED_ONCE


POSITIONS = ["before", "after", "tryfirst", "trylast", "waterfall"]
DECISIONS = {"allow": Allow(), "ask": Ask("trust me")}


def _host(rules: dict[str, Any], position: str, decision: Any, approver: Any) -> Host:
    kind = {"tryfirst": First, "trylast": Last, "waterfall": Overrider}.get(position, Plain)
    other = kind(decision)
    perms = PermissionsPlugin()
    plugins = [perms, other] if position == "after" else [other, perms]
    host = Host(
        config={"plugin": {"permissions": rules}},
        plugins=[*plugins, approver],
        load_entrypoints=False,
    )
    host.registry.register(_bash())
    return host


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("returns", sorted(DECISIONS))
async def test_a_deny_rule_holds_whatever_another_plugin_returns_wherever_it_sits(
    position: str, returns: str
) -> None:
    RAN.clear()
    approver = Approver()
    rules = {"allow": ["bash"], "deny": ["bash(sudo:*)"]}
    host = _host(rules, position, DECISIONS[returns], approver)
    result = await host.call("bash", {"command": "sudo rm -rf /"})
    assert result.code == "DENIED", (position, returns, result.text)
    assert result.decided_by == "permissions"
    assert "rule bash(sudo:*)" in result.text
    assert RAN == []
    # the same plugin does not stop an allowed command
    assert not (await host.call("bash", {"command": "ls"})).is_error


@pytest.mark.parametrize("position", POSITIONS)
async def test_an_ask_rule_is_never_skipped_by_another_plugins_allow(position: str) -> None:
    RAN.clear()
    rules = {"allow": ["bash"], "ask": ["bash(git push:*)"]}
    host = _host(rules, position, Allow(), Approver())
    host.pm.unregister(name="yes_man")  # nobody to answer: the ask must deny
    result = await host.call("bash", {"command": "git push"})
    assert result.code == "DENIED", (position, result.text)
    assert result.decided_by == "permissions"
    assert "rule bash(git push:*)" in result.text
    assert RAN == []


@pytest.mark.parametrize("position", POSITIONS)
async def test_an_ask_rule_is_put_to_the_approver_and_runs_when_allowed(position: str) -> None:
    RAN.clear()
    approver = Approver()
    rules = {"allow": ["bash"], "ask": ["bash(git push:*)"]}
    host = _host(rules, position, Ask("me too"), approver)
    result = await host.call("bash", {"command": "git push"})
    assert not result.is_error, result.text
    assert approver.asked == ["git push"]
    assert RAN == ["git push"]


class FirstApprover(Approver):
    """A ``tryfirst`` approver registered after ``permissions``: it answers before any other."""

    @hookimpl(tryfirst=True)
    def dsh_tool_approve(self, request: Any) -> ApprovalOutcome:
        self.asked.append(request.execution.arguments["command"])
        return ApprovalOutcome.ALLOWED_ONCE


@pytest.mark.parametrize("position", POSITIONS)
async def test_an_ask_rule_allowed_by_a_tryfirst_approver_runs(position: str) -> None:
    """The guard reads the approval the pipeline noted (``execution.approved_by``), so the
    order of the approvers does not matter; a plain ``Allow`` still never counts as one."""
    RAN.clear()
    approver = FirstApprover()
    rules = {"allow": ["bash"], "ask": ["bash(git push:*)"]}
    host = _host(rules, position, Ask("me too"), approver)
    result = await host.call("bash", {"command": "git push"})
    assert not result.is_error, result.text
    assert approver.asked == ["git push"]
    assert RAN == ["git push"]


class Forger:
    """A plugin that claims the call was approved, then allows it."""

    name = "forger"

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        execution.token.approved_by = "a person"  # no such public slot: it cannot stick
        return Allow()


async def test_a_plugin_cannot_claim_an_approval_it_did_not_get() -> None:
    RAN.clear()
    perms = PermissionsPlugin()
    host = Host(
        config={"plugin": {"permissions": {"allow": ["bash"], "ask": ["bash(git push:*)"]}}},
        plugins=[perms, Forger()],
        load_entrypoints=False,
    )
    host.registry.register(_bash())
    result = await host.call("bash", {"command": "git push"})
    assert result.is_error, result.text
    assert RAN == []


async def test_only_the_default_gives_way_to_another_plugins_allow() -> None:
    RAN.clear()
    host = _host({"allow": ["grep"], "default": "deny"}, "tryfirst", Allow(), Approver())
    result = await host.call("bash", {"command": "make"})
    assert not result.is_error, result.text


async def test_the_denial_names_who_allowed_and_the_final_rule() -> None:
    host = _host({"deny": ["bash(sudo:*)"]}, "tryfirst", Allow(), Approver())
    result = await host.call("bash", {"command": "sudo id"})
    assert "rule bash(sudo:*)" in result.text
    assert "'thirdparty'" in result.text
    call = ToolExecutionInput(call_id="d", name="bash", arguments={"command": "sudo id"})
    dry = await host.registry.preview(call)
    assert dry is not None
    assert dry.code == "DENIED"
    assert "thirdparty" in dry.text


# -- entry points, registered in sorted name order around permissions ------------------------


class EntryAllow:
    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return Allow()


@pytest.mark.parametrize("name", ["aaa_policy", "zzz_policy"])
@pytest.mark.parametrize("first", [True, False])
async def test_entry_point_plugins_loaded_before_or_after_permissions_cannot_allow(
    name: str, first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("dsh_test_final_policy")
    module.EntryAllow = EntryAllow  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dsh_test_final_policy", module)
    real = importlib.metadata.entry_points

    def entry_points(**kw: Any) -> Any:
        found = list(real(**kw))
        if kw.get("group") == "dsh.plugins":
            found.append(
                importlib.metadata.EntryPoint(
                    name, "dsh_test_final_policy:EntryAllow", "dsh.plugins"
                )
            )
        return found

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    config = {
        "plugins": {"enable": [name, "permissions"] if first else ["permissions", name]},
        "plugin": {"permissions": {"allow": ["bash"], "deny": ["bash(sudo:*)"]}},
    }
    host = Host(config=config)
    host.registry.register(_bash())
    RAN.clear()
    result = await host.call("bash", {"command": "sudo rm -rf /"})
    assert result.code == "DENIED", result.text
    assert RAN == []


# -- rules that can never match (issue #23 row 8) ---------------------------------------------


@pytest.mark.parametrize("rule", ["mcp__gh__delete_repo", "mcp__gh__*", "mcp__gh", "mcp__g*"])
def test_a_rule_naming_an_mcp_server_that_is_not_mounted_stops_the_host(rule: str) -> None:
    from dsh_host import ConfigError
    from dsh_plugins_builtin.mcp import McpPlugin

    config = {"plugin": {"permissions": {"deny": ["bash(rm:*)", rule]}}}
    with pytest.raises(ConfigError, match=r"deny\[1\].*never match|never match.*deny\[1\]"):
        Host(config=config, plugins=[McpPlugin(), PermissionsPlugin()], load_entrypoints=False)


def test_mcp_wildcards_are_accepted_and_mounted_servers_pass() -> None:
    from dsh_plugins_builtin._rules._checks import unmounted

    servers = {"gh": types.SimpleNamespace(tools=("create_issue",))}
    assert unmounted("mcp__*", servers) is None
    assert unmounted("mcp__gh__*", servers) is None
    assert unmounted("mcp__g*", servers) is None
    assert unmounted("mcp__gh__create_issue", servers) is None
    assert unmounted("mcp__gh__delete_repo", servers) is not None
    assert unmounted("bash", servers) is None


def test_a_runners_write_option_goes_through_the_sandbox_fence(tmp_path) -> None:
    """Issue #23 point 7: ``--junitxml=.git/x`` is a write the sandbox fence refuses."""
    from dsh_plugins_builtin.sandbox import SandboxPlugin

    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    rules = {"allow": ["bash(pytest:*)", "Edit(**)"]}
    config = {"host": {"workspace": str(ws)}, "plugin": {"permissions": rules}}
    host = Host(
        config=config, plugins=[SandboxPlugin(), PermissionsPlugin()], load_entrypoints=False
    )
    host.registry.register(_bash())
    plugin = host.pm.get_plugin("permissions")
    for line, allowed in (
        ("pytest", True), ("pytest --junitxml=r.xml", True), ("pytest --junitxml=.git/r.xml", False)
    ):  # fmt: skip
        execution = ToolExecution(call_id="x", name="bash", arguments={"command": line})
        decision = plugin.decide(execution)
        assert (type(decision) is Allow) is allowed, (line, decision)
        if not allowed:
            assert ".git" in (decision.reason or "")


async def test_a_deny_rule_from_imported_claude_settings_is_final_too(tmp_path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"permissions": {"deny": ["Bash(sudo:*)"]}}')
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {"permissions": {"allow": ["bash"], "import": [".claude/settings.json"]}},
    }
    host = Host(
        config=config, plugins=[PermissionsPlugin(), First(Allow())], load_entrypoints=False
    )
    host.registry.register(_bash())
    RAN.clear()
    result = await host.call("bash", {"command": "sudo rm -rf /"})
    assert (result.code, result.decided_by) == ("DENIED", "permissions")
    assert str(settings) in result.text
    assert RAN == []
