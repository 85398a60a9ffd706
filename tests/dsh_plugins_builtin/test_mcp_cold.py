"""The mcp plugin's start with no server (issue 27): nothing to resolve, nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_host import Host
from dsh_plugins_builtin import mcp
from dsh_plugins_builtin.sandbox import SandboxPlugin


def test_the_mcp_plugin_with_no_server_builds_no_sandbox_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its servers' commands are checked against the sandbox's policy: none, nothing to build."""

    def refuse(host: object) -> None:
        raise AssertionError("built a sandbox policy for no server")

    monkeypatch.setattr(mcp, "sandbox_policy", refuse)
    host = Host(
        {"host": {"workspace": str(tmp_path)}},
        plugins=[mcp.McpPlugin(), SandboxPlugin()],
        load_entrypoints=False,
    )
    assert [row.name for row in host.plugins() if row.status.value != "enabled"] == []
