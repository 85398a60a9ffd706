"""The mcp plugin's start with no server (issue 27): nothing to resolve, nothing built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dsh_host import Host
from dsh_plugins_builtin import mcp
from dsh_plugins_builtin._hooks import _launch
from dsh_plugins_builtin.sandbox import SandboxPlugin


def test_the_mcp_plugin_with_no_server_builds_no_sandbox_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its servers' commands are checked against the sandbox's policy: none, nothing to build."""

    def refuse(host: object) -> None:
        raise AssertionError("built a sandbox policy for no server")

    monkeypatch.setattr(_launch, "sandbox_policy", refuse)
    host = Host(
        {"host": {"workspace": str(tmp_path)}},
        plugins=[mcp.McpPlugin(), SandboxPlugin()],
        load_entrypoints=False,
    )
    assert [row.name for row in host.plugins() if row.status.value != "enabled"] == []


MOUNTING = (
    "dsh_plugins_builtin._hooks._launch",  # resolving a server's command
    "dsh_plugins_builtin._mcp._confine",  # confining it (and the sandbox's command runner)
    "dsh_plugins_builtin._mcp._native",  # the mount loop
    "dsh_plugins_builtin._mcp._tooldef",  # its tools
)


def test_the_mcp_plugin_with_no_server_imports_nothing_of_mounting(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from dsh_host import Host\n"
        "from dsh_plugins_builtin.mcp import McpPlugin\n"
        f"host = Host({{'host': {{'workspace': {str(tmp_path)!r}}}}}, plugins=[McpPlugin()],"
        " load_entrypoints=False)\n"
        "print(*sorted(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    modules = set(done.stdout.split())
    assert "dsh_plugins_builtin.mcp" in modules
    assert [name for name in MOUNTING if name in modules] == []
