"""The ``mcp`` plugin: MCP servers mounted behind dsh's policy, their tools as ``mcp__NAME__TOOL``.

::

    [plugin.mcp.servers.time]
    command = "mcp-server-time"
    args = ["--local-timezone", "UTC"]

    [plugin.mcp.servers.docs]
    url = "https://example.com/mcp"
    headers = { Authorization = "Bearer ..." }
    tools = ["search"]          # mount only these (default: all)

Each server is started when the host starts (all at once, each within its ``timeout_ms``), its
tools listed (every page) and registered as ``mcp__<server>__<tool>``, the naming Claude Code
uses, so permission rules like ``mcp__time__*`` apply. dsh validates the arguments against the
server's input schema before sending; a ``readOnlyHint`` makes the tool concurrency-safe; text,
image and resource results become content blocks; an ``isError`` result is an error result
(code ``MCP_TOOL_ERROR``); an aborted call sends ``notifications/cancelled``; a server that
fails to start is reported on stderr and by `McpPlugin.status`, and its tools are not mounted.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

import attrs
import trio

from dsh_host import (
    ConfigError,
    DshError,
    Host,
    ImageBlock,
    TextBlock,
    ToolDefinition,
    ToolRunContext,
    define_tool,
    hookimpl,
)

from ._hooks._launch import HookRefused, exposure_of, plan_launch, safe_path_env, sandbox_policy
from ._mcp._mount import Link, McpServerConfig, Mount

if TYPE_CHECKING:
    import mcp_types as types  # imported when a server is mounted (see `_mcp_mount`)

__all__ = ["McpConfig", "McpPlugin", "McpServerConfig", "tool_name"]

_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""What a mounted server may call a tool (the MCP spec's recommended names): nothing that could
smuggle control characters, spaces or a very long name to the model, a prompt or a rule."""


@attrs.frozen
class McpConfig:
    """The ``[plugin.mcp]`` table: ``servers``, one table per mounted server."""

    servers: dict[str, McpServerConfig] = attrs.field(factory=dict)


def tool_name(server: str, tool: str) -> str:
    """The dsh name of *server*'s *tool*: ``mcp__server__tool``."""
    return f"mcp__{server}__{tool}"


def _launchable(config: McpConfig, host: Host) -> dict[str, McpServerConfig]:
    """Each stdio server's command resolved once, now, to a program no tool can rewrite.

    A mounted server runs unconfined (unless it is itself a sandboxed command), so its program
    and any script argument must not lie where the sandboxed side can write: the same rule as
    hook commands. A command that does is a config error naming the server.
    """
    exposure = exposure_of(sandbox_policy(host))
    path_env = safe_path_env(os.environ.get("PATH", os.defpath), exposure)
    out = {}
    for name, server in config.servers.items():
        if server.command is None or not server.enabled:
            out[name] = server
            continue
        cwd = os.path.join(host.workspace, os.path.expanduser(server.cwd or "."))
        command = shlex.join([server.command, *server.args])
        try:
            launch = plan_launch(
                command, cwd=cwd, env={**os.environ, "PATH": path_env}, exposure=exposure,
                shell="/bin/sh",
            )  # fmt: skip
        except HookRefused as exc:
            raise ConfigError(
                f"MCP server {name!r} is refused: {exc}", path=host.config.source, plugin="mcp",
                key=f"servers.{name}.command",
            ) from None  # fmt: skip
        if launch.shell:  # a name shlex.join had to quote: run exactly what was configured
            out[name] = server
            continue
        argv = launch.argv
        out[name] = attrs.evolve(server, command=argv[0], args=tuple(argv[1:]))
    return out


def _check(config: McpConfig, where: str | None) -> None:
    for name, server in config.servers.items():

        def fail(message: str, key: str, name: str = name) -> ConfigError:
            return ConfigError(message, path=where, plugin="mcp", key=f"servers.{name}.{key}")

        if not _NAME.match(name):
            raise ConfigError(
                f"server name {name!r}: use letters, digits, '-' and single '_'",
                path=where, plugin="mcp", key=f"servers.{name}",
            )  # fmt: skip
        if server.command is not None and server.url is not None:
            raise fail("give either command (a stdio server) or url (HTTP), not both", "url")
        if server.command is None and server.url is None:
            raise fail("missing: give command (a stdio server) or url (HTTP)", "command")
        if not (math.isfinite(server.timeout_ms) and server.timeout_ms > 0):
            raise fail(f"must be a positive number of ms, not {server.timeout_ms!r}", "timeout_ms")


def _content(result: types.CallToolResult, server: str) -> list[TextBlock | ImageBlock]:
    import mcp_types as types

    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            blocks.append(TextBlock(item.text))
        elif isinstance(item, types.ImageContent):
            blocks.append(ImageBlock(data=item.data, mime_type=item.mime_type))
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            text = getattr(resource, "text", None)
            blocks.append(TextBlock(text if text is not None else f"[resource {resource.uri}]"))
        elif isinstance(item, types.ResourceLink):
            blocks.append(TextBlock(f"[resource link {item.uri}]"))
        else:
            blocks.append(TextBlock(f"[{getattr(item, 'type', 'unknown')} content from {server}]"))
    return blocks


class McpPlugin:
    """Mounts the MCP servers of ``[plugin.mcp.servers]``."""

    name = "mcp"

    def __init__(self) -> None:
        self._register: Any = None
        self._mount: Mount | None = None
        self._unregister: dict[str, list[Any]] = {}

    @hookimpl
    def dsh_plugin_config(self) -> type[McpConfig]:
        return McpConfig

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        self._register = register  # tools are known only once the servers have started

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        config: McpConfig = host.config_for(self) or McpConfig()
        _check(config, host.config.source)
        servers = _launchable(config, host)
        links = [Link(n, s) for n, s in servers.items() if s.enabled]
        if not links:
            return
        self._mount = Mount()
        atexit.register(self.close)  # a clean goodbye to the servers when dsh exits
        self._mount.start(links, max(link.config.timeout_ms for link in links) / 1000 + 5)
        # Registry changes happen on the host's thread: a pre-execute hook, present only while
        # servers are mounted, applies a server's tools/list_changed before the next call.
        host.pm.register(_ListChanges(self), name="mcp_list_changes")
        for link in links:
            if link.status != "running":
                reason = link.error or f"MCP server {link.name!r} did not start"
                sys.stderr.write(f"dsh: mcp: {reason}\n")
                continue
            self._mount_tools(link)

    def apply_list_changes(self) -> None:
        """Re-register the tools of servers that sent ``tools/list_changed`` (host thread only)."""
        if self._mount is None:
            return
        for link in self._mount.links.values():
            if link.tools_changed:
                link.tools_changed = False
                try:
                    self._mount.run_blocking(link.relist, link.config.timeout_ms / 1000)
                except Exception as exc:
                    link.error = f"re-listing the tools of MCP server {link.name!r} failed: {exc}"
                    sys.stderr.write(f"dsh: mcp: {link.error}\n")
                self._mount_tools(link)

    @hookimpl
    def dsh_plugin_status(self) -> list[str]:
        """One line per mounted server for ``dsh plugins``: running with its tools, or why not."""
        lines = []
        for name, state in sorted(self.status().items()):
            tools = state["tools"]
            line = f"server {name}: {state['status']}, {len(tools)} tool{'s' * (len(tools) != 1)}"
            if state["error"]:
                line = f"{line}; {state['error']}"
            lines.append(line)
        return lines

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server's status (``running``/``failed``/``starting``), error and tools."""
        links = self._mount.links.values() if self._mount is not None else ()
        return {
            link.name: {
                "status": link.status,
                "error": link.error,
                "tools": [tool_name(link.name, t.name) for t in link.tools],
            }
            for link in links
        }

    @hookimpl
    async def dsh_host_stopping(self) -> None:
        await trio.to_thread.run_sync(self.close)  # `Host.aclose`: servers ended and reaped

    def close(self) -> None:
        """Close every session; the servers see end of input and exit."""
        if self._mount is not None:
            self._mount.close()

    def _mount_tools(self, link: Link) -> None:
        for unregister in self._unregister.pop(link.name, []):
            unregister()
        mounted = []
        for tool in link.tools:
            try:
                definition = self._definition(link, tool)
            except DshError as exc:
                link.error = f"tool {tool.name!r} of MCP server {link.name!r} not mounted: {exc}"
                sys.stderr.write(f"dsh: mcp: {link.error}\n")
                continue
            mounted.append(self._register(definition))
        self._unregister[link.name] = mounted

    def _definition(self, link: Link, tool: types.Tool) -> ToolDefinition:
        mount = self._mount
        assert mount is not None
        server, remote = link.name, tool.name
        if not _TOOL_NAME.fullmatch(remote):
            raise DshError(
                "its name is not 1 to 128 letters, digits, '_', '-' or '.'", "MCP_BAD_TOOL"
            )
        annotations = tool.annotations
        read_only = bool(annotations is not None and annotations.read_only_hint)
        timeout = link.config.timeout_ms / 1000

        async def execute(args: Any, ctx: ToolRunContext) -> Any:
            session = link.session
            if session is None:
                raise DshError(
                    link.describe_failure(f"MCP server {server!r} is not running: {link.error}"),
                    "MCP_SERVER_UNAVAILABLE",
                )

            async def call() -> types.CallToolResult:
                return await session.call_tool(remote, args, read_timeout_seconds=timeout)

            try:
                result = await mount.run(call)
            except DshError:
                raise
            except Exception as exc:
                what = f"MCP server {server!r} failed on {remote!r}: {type(exc).__name__}: {exc}"
                raise DshError(link.describe_failure(what), "MCP_SERVER_FAILED") from None
            blocks = _content(result, server)
            if result.is_error:
                text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
                raise DshError(text or f"{remote} failed", "MCP_TOOL_ERROR")
            return blocks

        return define_tool(
            name=tool_name(server, remote),
            description=tool.description or f"{remote} (MCP server {server})",
            parameters=dict(tool.input_schema),
            execute=execute,
            timeout_ms=link.config.timeout_ms,
            is_concurrency_safe=(lambda args: True) if read_only else None,
        )


class _ListChanges:
    """Applies pending ``tools/list_changed`` re-registrations; never decides anything."""

    def __init__(self, plugin: McpPlugin) -> None:
        self.plugin = plugin

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: Any) -> None:
        self.plugin.apply_list_changes()
