"""Claude Code material drives the permissions plugin: settings files, spellings, withholding."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import ConfigError, Host, ToolExecution, define_tool
from dsh_plugins_builtin.permissions import PermissionsPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

SETTINGS = {
    "permissions": {
        "allow": ["Bash(git status:*)", "Bash(npm run *)", "Read(~/.zshrc)", "Read(./src/**)"],
        "deny": [
            "Read(./.env)",
            "Read(./secrets/**)",
            "Bash(curl:*)",
            "WebFetch(domain:evil.test)",
        ],
        "ask": ["Bash(git push:*)", "Edit(/docs/**)"],
        "defaultMode": "default",
    },
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "python3 check.py"}]}
        ]
    },
}


def project(tmp_path: Path, settings: Any = SETTINGS) -> Path:
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    (ws / "secrets").mkdir()
    (ws / "src").mkdir()
    (ws / "docs").mkdir()
    (ws / "secrets" / "key").write_text("TOKEN=hunter2\n")
    (ws / ".env").write_text("TOKEN=hunter2\n")
    text = settings if isinstance(settings, str) else json.dumps(settings, indent=2)
    (ws / ".claude" / "settings.json").write_text(text)
    return ws


def web_fetch():
    async def execute(args):
        return "fetched"

    return define_tool(
        name="web_fetch", description="fetch", parameters={"url": {"type": "string"}},
        execute=execute, claude_name="WebFetch",
    )  # fmt: skip


def host_for(ws: Path, **table: Any) -> tuple[Host, PermissionsPlugin]:
    plugin = PermissionsPlugin()
    table.setdefault("import", [".claude/settings.json"])
    config = {"host": {"workspace": str(ws)}, "plugin": {"permissions": table}}
    host = Host(config=config, plugins=[ToolsPlugin(), plugin], load_entrypoints=False)
    host.registry.register(web_fetch())
    return host, plugin


def verdict(plugin: PermissionsPlugin, name: str, arguments: Any) -> tuple[str, str | None]:
    decision = plugin.decide(ToolExecution(call_id="c", name=name, arguments=arguments))
    return type(decision).__name__, decision.detail


@pytest.mark.parametrize(
    ("name", "arguments", "expected", "rule"),
    [
        ("bash", {"command": "git status -s"}, "Allow", "Bash(git status:*)"),
        ("bash", {"command": "npm run test"}, "Allow", "Bash(npm run *)"),
        ("bash", {"command": "npm install"}, "Ask", None),
        ("bash", {"command": "git --no-pager push"}, "Ask", "Bash(git push:*)"),
        ("bash", {"command": "env curl http://x"}, "Deny", "Bash(curl:*)"),
        ("read_file", {"path": ".env"}, "Deny", "Read(./.env)"),
        ("read_file", {"path": "secrets/key"}, "Deny", "Read(./secrets/**)"),
        ("list_dir", {"path": "secrets"}, "Deny", "Read(./secrets/**)"),
        ("glob", {"pattern": "*", "path": "secrets"}, "Deny", "Read(./secrets/**)"),
        ("grep", {"pattern": "x", "path": "secrets"}, "Deny", "Read(./secrets/**)"),
        ("read_file", {"path": "src/a.py"}, "Allow", "Read(./src/**)"),
        (
            "edit_file",
            {"path": "docs/x.md", "old_text": "a", "new_text": "b"},
            "Ask",
            "Edit(/docs/**)",
        ),
        ("write_file", {"path": "docs/y.md", "content": "x"}, "Ask", "Edit(/docs/**)"),
        ("web_fetch", {"url": "https://a.evil.test/"}, "Deny", "WebFetch(domain:evil.test)"),
    ],
)
def test_a_claude_code_settings_file_loads_and_enforces(tmp_path, name, arguments, expected, rule):
    ws = project(tmp_path)
    _, plugin = host_for(ws, allow=[], allow_defaults=False)
    kind, detail = verdict(plugin, name, arguments)
    assert kind == expected
    settings = ws / ".claude" / "settings.json"
    assert detail == (f"rule {rule} in {settings}" if rule else "default ask")


def test_reading_the_home_file_a_settings_file_allows(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    ws = project(tmp_path)
    _, plugin = host_for(ws, allow=[], allow_defaults=False)
    assert verdict(plugin, "read_file", {"path": str(home / ".zshrc")})[0] == "Allow"
    assert verdict(plugin, "read_file", {"path": str(home / ".bashrc")})[0] == "Ask"


def test_imported_rules_add_to_the_tables_own(tmp_path):
    ws = project(tmp_path, {"permissions": {"deny": ["Bash(rm:*)"]}})
    _, plugin = host_for(ws, allow=["bash"], deny=["bash(curl:*)"])
    assert verdict(plugin, "bash", {"command": "rm x"})[0] == "Deny"
    assert verdict(plugin, "bash", {"command": "curl x"})[0] == "Deny"
    assert verdict(plugin, "bash", {"command": "ls"})[0] == "Allow"


def test_a_missing_settings_file_is_a_warning(tmp_path, caplog):
    ws = project(tmp_path, {})
    with caplog.at_level(logging.WARNING, logger="dsh_plugins_builtin.permissions"):
        host_for(ws, **{"import": [".claude/settings.local.json"]})
    [message] = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert str(ws / ".claude" / "settings.local.json") in message


@pytest.mark.parametrize(
    ("text", "key", "why"),
    [
        ("{not json", None, "cannot be read as a Claude Code settings file"),
        ("[]", None, "must hold a JSON object"),
        ('{"permissions": []}', "permissions", "must be an object"),
        ('{"permissions": {"deny": "Bash"}}', "permissions.deny", "must be a list"),
        ('{"permissions": {"deny": ["Bash", 3]}}', "permissions.deny[1]", "must be a rule string"),
        ('{"permissions": {"allow": ["Bash("]}}', "permissions.allow[0]", "the ( is not closed"),
        ('{"permissions": {}, "permissions": {}}', None, "duplicate key 'permissions'"),
    ],
)
def test_a_malformed_settings_file_stops_the_host_naming_file_and_key(tmp_path, text, key, why):
    ws = project(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        host_for(ws)
    assert info.value.path == str(ws / ".claude" / "settings.json")
    assert info.value.key == key
    assert why in str(info.value)


def test_a_settings_file_that_is_not_a_regular_file_stops_the_host(tmp_path):
    ws = project(tmp_path, {})
    settings = ws / ".claude" / "settings.json"
    settings.unlink()
    os.mkfifo(settings)  # reading it would block the host forever
    with pytest.raises(ConfigError, match="is not a regular file") as info:
        host_for(ws)
    assert info.value.path == str(settings)


def test_a_rule_for_a_tool_that_is_not_installed_is_a_one_line_warning(tmp_path, caplog):
    ws = project(tmp_path, {"permissions": {"deny": ["NotebookRead", "mcp__github__*"]}})
    with caplog.at_level(logging.WARNING, logger="dsh_plugins_builtin.permissions"):
        host_for(ws)
    lines = [r.getMessage() for r in caplog.records if "not installed" in r.getMessage()]
    settings = ws / ".claude" / "settings.json"
    assert lines == [
        f"permissions: rule NotebookRead in {settings} names a tool that is not installed; it matches nothing",
        f"permissions: rule mcp__github__* in {settings} names a tool that is not installed; it matches nothing",
    ]
    assert all("\n" not in line for line in lines)


def test_no_warning_while_no_tool_is_registered_yet(tmp_path, caplog):
    ws = project(tmp_path, {"permissions": {"deny": ["NotebookRead"]}})
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"permissions": {"import": [".claude/settings.json"]}},
    }
    with caplog.at_level(logging.WARNING, logger="dsh_plugins_builtin.permissions"):
        Host(config=config, plugins=[PermissionsPlugin()], load_entrypoints=False)
    assert not [r for r in caplog.records if "not installed" in r.getMessage()]


def test_mcp_rules_match_server_tools(tmp_path):
    ws = project(tmp_path, {"permissions": {"deny": ["mcp__gh__*"], "allow": ["mcp__docs"]}})
    _, plugin = host_for(ws)
    assert verdict(plugin, "mcp__gh__delete_repo", {})[0] == "Deny"
    assert verdict(plugin, "mcp__docs__search", {})[0] == "Allow"
    assert verdict(plugin, "mcp__other__x", {})[0] == "Ask"


# -- dsh_path_denied -------------------------------------------------------------------------


def test_path_denied_withholds_what_a_read_rule_denies(tmp_path):
    ws = project(tmp_path)
    host, _ = host_for(ws, allow=[], allow_defaults=False)
    grep = ToolExecution(call_id="c", name="grep", arguments={"pattern": "x"})
    settings = ws / ".claude" / "settings.json"
    reason = host.path_denied(grep, str(ws / "secrets" / "key"), "read")
    assert reason == f"denied by rule Read(./secrets/**) in {settings}"
    assert host.path_denied(grep, str(ws / ".env"), "read") is not None
    assert host.path_denied(grep, str(ws / "src" / "a.py"), "read") is None
    assert host.path_denied(grep, str(ws / "secrets" / "key"), "write") is None
    edit = host.path_denied(grep, str(ws / "docs" / "a.md"), "write")
    assert edit == f"needs approval by rule Edit(/docs/**) in {settings}"


def test_path_denied_matches_the_real_workspace_behind_a_symlink(tmp_path):
    real = project(tmp_path)
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    host, _ = host_for(alias, allow=[])
    grep = ToolExecution(call_id="c", name="grep", arguments={})
    assert host.path_denied(grep, str(real / "secrets" / "key"), "read") is not None


def test_an_unstarted_plugin_withholds_everything():
    execution = ToolExecution(call_id="c", name="grep", arguments={})
    assert PermissionsPlugin().dsh_path_denied(execution, "/x", "read") is not None
