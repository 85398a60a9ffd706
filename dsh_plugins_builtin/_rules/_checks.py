"""What the ``permissions`` plugin asks of the rest of the host at start: the sandbox's write
fence (test runners' path options are checked against it), and whether a rule's MCP name can
match a server the ``mcp`` plugin mounts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dsh_host import DshError, Host

__all__ = ["sandbox_fence", "unmounted"]


def sandbox_fence(host: Host) -> Callable[[str], str | None] | None:
    """The sandbox plugin's write fence, as a function of a path (``None``: no sandbox)."""
    check = getattr(host.pm.get_plugin("sandbox"), "check_write", None)
    if check is None:
        return None

    def fence(path: str) -> str | None:
        try:
            check(path)
        except DshError as exc:
            return str(exc)
        return None

    return fence


def unmounted(tool: str, servers: Mapping[str, Any]) -> str | None:
    """Why the rule tool name *tool* can match no tool of the mounted MCP *servers* (by name,
    each with an optional ``tools`` list), or ``None``."""
    if not tool.startswith("mcp__") or tool == "mcp__*":
        return None
    server, sep, name = tool[5:].partition("__")
    if not sep and server.endswith("*"):
        if any(s.startswith(server[:-1]) for s in servers):
            return None
        return f"names MCP servers starting {server[:-1]!r}, and [plugin.mcp] mounts none"
    if server not in servers:
        return f"names the MCP server {server!r}, which [plugin.mcp] does not mount"
    only = getattr(servers[server], "tools", None)
    if only and name and not name.endswith("*") and name not in only:
        return f"names the tool {name!r}, which the tools list of server {server!r} leaves out"
    return None
