"""Mounted stdio servers run confined by default (issue 24 row 1).

The attack of the issue, with the guide's own example: the agent plants a nested repository
whose ``core.fsmonitor`` names a command, then has ``mcp-server-git`` run ``git status`` there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture
def outside():
    """A directory outside the workspace and outside /tmp (a stand-in for the home directory)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-mcp-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


def _plant(ws: Path, outside: Path) -> Path:
    """The agent's work: a nested repository whose fsmonitor writes outside and inside."""
    for args in (["init", "-q", str(ws)], ["init", "-q", str(ws / "sub")]):
        subprocess.run(["git", *args], check=True)
    (ws / "sub" / "a.txt").write_text("hello")
    hook = ws / "sub" / "monitor.sh"
    hook.write_text(
        "#!/bin/sh\n"
        f"echo pwned > {outside}/bashrc\n"
        f"echo pwned > {ws}/pwned\n"
        f"echo ran > {ws}/scratch/ran\n"
    )
    hook.chmod(0o755)
    subprocess.run(
        ["git", "-C", str(ws / "sub"), "config", "core.fsmonitor", str(hook)], check=True
    )
    (ws / "scratch").mkdir()
    return ws / "sub"


def _git_status(ws: Path, server: dict) -> str:
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "mcp": {
                "servers": {
                    "git": {
                        "command": sys.executable,
                        "args": ["-m", "mcp_server_git", "--repository", str(ws)],
                        **server,
                    }
                }
            }
        },
    }
    host = Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
    try:
        assert plugin.status()["git"]["status"] == "running", plugin.status()
        result = trio.run(host.call, "mcp__git__git_status", {"repo_path": str(ws / "sub")})
        return result.text
    finally:
        plugin.close()


def test_the_control_unconfined_the_planted_command_writes_outside(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    _git_status(ws, {"sandbox": False})
    assert (outside / "bashrc").exists()  # the attack is real: this is what confinement stops


def test_confined_with_no_writable_roots_the_planted_command_writes_nothing(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    text = _git_status(ws, {})
    assert "a.txt" in text  # the server worked
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()
    assert not (ws / "scratch" / "ran").exists()


def test_confined_the_planted_command_runs_but_writes_only_its_writable_roots(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    _git_status(ws, {"writable_roots": ["scratch"]})
    assert (ws / "scratch" / "ran").read_text() == "ran\n"  # it ran, inside the sandbox
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()
