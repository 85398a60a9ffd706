"""``dsh mcp serve`` over the built-in stack: the permissions plugin decides what is listed."""

from __future__ import annotations

from dsh_plugins_builtin.permissions import PermissionsPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_host.mcp_support import run_session


async def test_rules_that_deny_outright_hide_tools_and_argument_rules_do_not(make_host, tmp_path):
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {
            "permissions": {
                "deny": ["bash", "write_file(secret/**)"],
                "allow": ["read_file"],
                "default": "ask",
            }
        },
    }
    host = make_host(ToolsPlugin(), PermissionsPlugin(), config=config)

    async def body(client):
        await client.initialize()
        listed = await client.request(1, "tools/list")
        tools = {t["name"]: t for t in listed["result"]["tools"]}
        assert "bash" not in tools  # denied outright
        assert "write_file" in tools  # denied only for some paths
        assert "edit_file" in tools  # asks: the client may approve
        assert tools["read_file"]["annotations"]["readOnlyHint"] is True
        assert tools["write_file"]["annotations"]["destructiveHint"] is True
        denied = await client.request(
            2, "tools/call", {"name": "bash", "arguments": {"command": "true"}}
        )
        assert denied["result"]["_meta"]["dsh/decided_by"].startswith("permissions")

    await run_session(host, body)
