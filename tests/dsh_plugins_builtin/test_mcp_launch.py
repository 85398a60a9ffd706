"""The executable check of mounted servers agrees with the sandbox (issue 24 row 2)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin


def _start(workspace, server, monkeypatch=None, path=None, **sandbox):
    if path is not None:
        monkeypatch.setenv("PATH", path)
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(workspace)},
        "plugin": {
            "sandbox": {"writable_roots": ["."], **sandbox},
            "mcp": {"servers": {"s": server}},
        },
    }
    try:
        Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
        return plugin.status()["s"]
    finally:
        plugin.close()


def test_a_server_in_a_protected_project_environment_is_accepted(tmp_path):
    """A project's own virtual environment is writable by tools, so a server there is refused
    (a tool could swap it for its own code, run with the server's env and roots) unless the
    sandbox keeps it read-only: listed under [plugin.sandbox] protected, it is accepted."""
    ws = tmp_path / "ws"
    (ws / ".venv" / "bin").mkdir(parents=True)
    script = ws / ".venv" / "bin" / "server.py"
    script.write_text(Path(__file__).with_name("raw_mcp_server.py").read_text())
    server = {"command": sys.executable, "args": [str(script), "plain"]}
    refused = _start(ws, server)
    assert refused["status"] == "failed"
    assert "[plugin.sandbox] protected" in refused["error"]
    protected = [".git", ".claude", ".dsh", "dsh.toml", ".venv"]
    status = _start(ws, server, protected=protected)
    assert status["status"] == "running", status["error"]
    assert status["tools"] == ["mcp__s__echo"]


def test_a_server_in_dshs_protected_environment_inside_the_workspace_is_accepted():
    """The common install: the project's virtual environment, inside the workspace. dsh keeps
    its own environment read-only (protect_install), so its programs are safe to start."""
    venv_bin = Path(sys.executable).parent
    workspace = venv_bin.parent.parent  # the project holding .venv
    program = venv_bin / "mcp-server-time"
    if not program.exists():
        pytest.skip("mcp-server-time is not installed in this environment")
    status = _start(workspace, {"command": str(program), "args": ["--local-timezone", "UTC"]})
    assert status["status"] == "running", status["error"]
    assert "mcp__s__get_current_time" in status["tools"]


def test_the_path_lookup_says_what_it_skipped_and_why(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    planted = ws / "bin" / "my-server"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    status = _start(
        ws, {"command": "my-server"}, monkeypatch, path=f"{ws}/bin:relative/bin:/usr/bin"
    )
    assert status["status"] == "failed"
    error = status["error"]
    assert "'my-server' was not found on PATH (/usr/bin)" in error
    assert f"'{ws}/bin': inside the writable root '{os.path.realpath(ws)}'" in error
    assert "'relative/bin': relative" in error
    assert "servers.s.command" in error


def test_a_refusal_names_the_writable_root_and_the_setting(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    script = ws / "server.py"
    script.write_text("")
    status = _start(ws, {"command": sys.executable, "args": [str(script)]})
    assert status["status"] == "failed"
    error = status["error"]
    assert f"inside a writable root of the sandbox policy, '{os.path.realpath(ws)}'" in error
    assert "[plugin.sandbox] writable_roots" in error
    assert "[plugin.sandbox] protected" in error


async def test_an_unconfined_server_inherits_no_way_back_into_the_writable_roots(
    tmp_path, monkeypatch
):
    """A server run with ``sandbox = false`` gets the host's environment, but no entry of a
    code path variable that lies in a writable root: a tool could plant a module or a library
    there that the server (or what it starts) would load unconfined."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    script = outside / "server.py"
    script.write_text(Path(__file__).with_name("raw_mcp_server.py").read_text())
    monkeypatch.setenv("PYTHONPATH", f"{ws}/lib:{outside}/lib:lib")
    monkeypatch.setenv("LD_PRELOAD", f"{ws}/evil.so")
    monkeypatch.setenv("PATH", f"{ws}/bin:{os.environ['PATH']}")
    monkeypatch.setenv("DSH_TEST_KEPT", "kept")  # the control: the rest is inherited
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"writable_roots": ["."]},
            "mcp": {
                "servers": {"s": {"command": sys.executable, "args": [str(script), "env"],
                                  "sandbox": False}},
            },
        },
    }  # fmt: skip
    host = Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
    try:
        seen = {}
        for name in ("PYTHONPATH", "LD_PRELOAD", "PATH", "DSH_TEST_KEPT"):
            result = await host.call("mcp__s__echo", {"text": name})
            assert not result.is_error, result.text
            seen[name] = result.text
    finally:
        plugin.close()
    assert seen["PYTHONPATH"] == f"{outside}/lib"
    assert seen["LD_PRELOAD"] == "(unset)"
    assert f"{ws}/bin" not in seen["PATH"].split(":")
    assert seen["DSH_TEST_KEPT"] == "kept"


def _outside_server(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    script = outside / "server.py"
    script.write_text(Path(__file__).with_name("raw_mcp_server.py").read_text())
    return ws, outside, script


def test_an_unconfined_server_is_checked_with_the_environment_it_gets(tmp_path, monkeypatch):
    """Its command is planned in the environment it inherits, not the host's raw one."""
    from dsh_plugins_builtin._hooks import _launch

    ws, _outside, script = _outside_server(tmp_path)
    seen = []
    real = _launch.plan_launch

    def spy(command, **kwargs):
        seen.append(kwargs["env"])
        return real(command, **kwargs)

    monkeypatch.setattr(_launch, "plan_launch", spy)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", f"{ws}/gitconfig")
    monkeypatch.setenv("DSH_TEST_KEPT", "kept")
    server = {"command": sys.executable, "args": [str(script), "env"], "sandbox": False}
    status = _start(ws, server)
    assert status["status"] == "running", status["error"]
    assert len(seen) == 1
    assert "GIT_CONFIG_GLOBAL" not in seen[0]
    assert seen[0]["DSH_TEST_KEPT"] == "kept"


def test_a_server_starts_in_the_cwd_it_was_checked_in(tmp_path, monkeypatch):
    """A relative ``cwd`` is the workspace's, when checked and when started, whatever the
    host process's own working directory."""
    ws = tmp_path / "ws"
    (ws / ".claude" / "srv").mkdir(parents=True)  # protected: a server there may run
    (ws / ".claude" / "srv" / "server.py").write_text(
        Path(__file__).with_name("raw_mcp_server.py").read_text()
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for sandbox in (False, True):
        server = {"command": sys.executable, "args": ["server.py", "plain"],
                  "cwd": ".claude/srv", "sandbox": sandbox}  # fmt: skip
        status = _start(ws, server)
        assert status["status"] == "running", (sandbox, status["error"])
        assert status["tools"] == ["mcp__s__echo"]


def test_an_unconfined_link_without_a_safe_environment_fails_closed():
    """A link run unconfined never falls back to the host's own environment."""
    from dsh_plugins_builtin._mcp._mount import Link, McpServerConfig

    link = Link("t", McpServerConfig(command=sys.executable, sandbox=False))
    try:
        with pytest.raises(RuntimeError, match="no environment made safe"):
            link._stdio(lambda *args, **kwargs: (args, kwargs), guard=None)
        link.inherited = {"PATH": "/usr/bin"}
        _args, kwargs = link._stdio(lambda *args, **kwargs: (args, kwargs), guard=None)
        assert kwargs["env"] == {"PATH": "/usr/bin"}
    finally:
        link.close()
