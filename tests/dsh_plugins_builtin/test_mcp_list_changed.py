"""``tools/list_changed`` from a mounted server reaches ``dsh mcp serve``'s client (issue 24 row 6)."""

from __future__ import annotations

import sys

import mcp_types as types
import trio

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin

from ..dsh_host.mcp_support import sdk_session
from .test_mcp_mount import SERVER


def test_a_mounted_servers_list_change_is_relisted_and_told_to_the_client(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    plugin = McpPlugin()
    server = {"command": sys.executable, "args": [str(script), "ok", str(tmp_path / "m")]}
    host = Host(
        {"plugin": {"mcp": {"servers": {"t": server}}}}, plugins=[plugin], load_entrypoints=False
    )
    told = trio.Event()

    async def on_message(message):
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            told.set()

    async def main():
        async with sdk_session(host, message_handler=on_message) as session:
            before = {t.name for t in (await session.list_tools()).tools}
            changed = await session.call_tool("mcp__t__change", {})
            with trio.fail_after(30):  # a bound, not a pace: no other call is made meanwhile
                await told.wait()
            after = {t.name for t in (await session.list_tools()).tools}
            return before, changed, after

    try:
        before, changed, after = trio.run(main)
    finally:
        plugin.close()
    assert changed.content[0].text == "changed"
    assert "mcp__t__extra" not in before
    assert after - before == {"mcp__t__extra"}
