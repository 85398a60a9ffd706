"""The commands ``dsh`` hands to built-in plugins (``audit``, ``sandbox check``) and ``mcp serve``,
run as a user would: ``python -m dsh_host`` in a fresh working directory, all entry points loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.trusted import write_config


def dsh(*argv: str, cwd, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_host", *argv],
        cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def ws(tmp_path):
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    write_config(
        tmp_path / "dsh.toml", f'[plugin.audit]\npath = "{tmp_path / ".dsh" / "audit.db"}"\n'
    )
    return tmp_path


def test_audit_reads_back_the_calls_dsh_made(ws):
    assert dsh("call", "read_file", '{"path": "notes.txt"}', cwd=ws).returncode == 0
    assert dsh("call", "bash", '{"command": "ls"}', cwd=ws).returncode == 1
    listed = dsh("audit", "--json", "--db", str(ws / ".dsh" / "audit.db"), cwd=ws)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["tool"], r["outcome"]) for r in rows] == [("read_file", "ok"), ("bash", "DENIED")]
    assert rows[1]["decided_by"] == "permissions"
    assert rows[0]["call_id"] != rows[1]["call_id"]  # ids are unique across dsh runs


def test_switching_the_permissions_plugin_off_is_said_on_every_command(ws):
    """With permissions off nothing asks before a call: a newcomer ran bash that way unwarned."""
    warning = "the permissions plugin is off (blocked by --disable)"
    done = dsh("--disable", "permissions", "call", "read_file", '{"path": "notes.txt"}', cwd=ws)
    assert done.returncode == 0
    assert warning in done.stderr
    assert "every call is allowed" in done.stderr
    assert (
        "permissions plugin is off"
        not in dsh("call", "read_file", '{"path": "notes.txt"}', cwd=ws).stderr
    )


def test_global_options_before_a_plugins_own_command_are_no_internal_error(ws):
    # `dsh --config X audit` fell through to a parser entry with no handler: AttributeError
    for argv, status in (
        (("--config", "dsh.toml", "audit"), 1),
        (("--disable", "audit", "audit"), 2),
    ):
        done = dsh(*argv, cwd=ws)
        assert "internal error" not in done.stderr
        assert done.returncode == status  # 1: read, and no database there yet; 2: usage
    done = dsh("--config", "dsh.toml", "sandbox", "check", cwd=ws)
    assert (done.returncode, "internal error" in done.stderr) == (0, False)


def test_sandbox_check_reports_backends(ws):
    checked = dsh("sandbox", "check", "--json", cwd=ws)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert "bwrap" in json.dumps(report)
    assert dsh("sandbox", cwd=ws).returncode == 2


def test_mcp_serve_runs_the_default_stack_over_stdio(ws):
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18"},
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "notes.txt"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "ls"}},
        },
    ]
    # A client waits for its answers before it closes stdin: closing is cancellation.
    served = subprocess.Popen(
        [sys.executable, "-m", "dsh_host", "mcp", "serve"], cwd=ws, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    served.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
    served.stdin.flush()
    replies = {}
    while len(replies) < 4:
        reply = json.loads(served.stdout.readline())
        replies[reply["id"]] = reply
    _, err = served.communicate(timeout=120)
    assert served.returncode == 0, err
    assert {t["name"] for t in replies[2]["result"]["tools"]} >= {"read_file", "bash", "grep"}
    assert "two" in replies[3]["result"]["content"][0]["text"]
    assert replies[3]["result"]["isError"] is False
    # no terminal behind the MCP transport: the ask is unavailable, hence denied
    assert replies[4]["result"]["isError"] is True
    assert replies[4]["result"]["_meta"]["dsh/code"] == "DENIED"


def _commands() -> list[str]:
    from dsh_host._cli._main import make_parser

    [sub] = [a for a in make_parser()._actions if a.dest == "command"]
    return sorted(sub.choices)


@pytest.mark.parametrize("command", _commands())
def test_every_command_answers_help_with_status_0(command, capsys):
    """Issue 26, row 5: ``dsh sandbox --help`` exited 2 with an error."""
    from dsh_host._cli._main import main

    try:
        status = main([command, "--help"])
    except SystemExit as exited:  # argparse's own --help
        status = exited.code
    assert status in (0, None)
    assert "usage:" in capsys.readouterr().out


def test_load_module(tmp_path, monkeypatch):
    """``--plugin MODULE[:ATTRIBUTE]``: a module, or an attribute (a class is instantiated)."""
    from dsh_host import PluginLoadError
    from dsh_host._cli._common import load_module

    (tmp_path / "plugmod_for_load.py").write_text(
        "class K:\n    class Inner:\n        pass\n\n\nclass Bad:\n"
        "    def __init__(self):\n        raise ValueError('no')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plugmod_for_load", raising=False)
    module = load_module("plugmod_for_load")
    assert module.__name__ == "plugmod_for_load"  # type: ignore[attr-defined]
    assert type(load_module("plugmod_for_load:K.Inner")).__name__ == "Inner"  # an instance
    with pytest.raises(PluginLoadError, match=r"Bad\(\): ValueError: no"):
        load_module("plugmod_for_load:Bad")
    with pytest.raises(PluginLoadError, match="cannot import 'no_such_mod'"):
        load_module("no_such_mod")
    with pytest.raises(PluginLoadError, match="has no attribute 'Nope'"):
        load_module("plugmod_for_load:Nope")
    with pytest.raises(PluginLoadError, match="MODULE or MODULE:ATTRIBUTE"):
        load_module(":x")


def test_effective_config_is_plain_data_with_defaults_for_enabled_plugins():
    """``Host.effective_config``: what ``dsh config check`` prints, one table per enabled plugin
    with a config class, defaults filled in, by name."""
    import attrs

    from dsh_host import Host, hookimpl

    @attrs.frozen
    class Settings:
        deny: tuple[str, ...] = ()
        limit: int = 3

    class Policy:
        name = "policy"

        @hookimpl
        def dsh_plugin_config(self):
            return Settings

    class Plain:
        name = "plain"

        @hookimpl
        def dsh_tool_guard(self):
            return None

    config = {"plugin": {"policy": {"deny": ["mallory"]}}}
    host = Host(config, plugins=[Policy(), Plain()], load_entrypoints=False)
    effective = host.effective_config()
    assert effective["plugin"] == {"policy": {"deny": ["mallory"], "limit": 3}}
    assert effective["host"]["workspace"] == str(host.workspace)
    assert isinstance(effective["plugins"], dict)
