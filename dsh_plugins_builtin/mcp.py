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
uses. dsh validates the arguments against the server's input schema before sending; a
``readOnlyHint`` makes the tool concurrency-safe; text, image and resource results become
content blocks; an ``isError`` result is an error result (code ``MCP_TOOL_ERROR``); a malformed
or oversized answer (``max_result_bytes``) ends its call at once (``MCP_BAD_RESULT``); an
aborted call sends ``notifications/cancelled``. A stdio server runs confined (``sandbox``,
``writable_roots``, ``read_roots``, ``network``, ``unix_sockets``: `_mcp._confine`). A server that fails to start,
is refused or lists a tool badly affects only itself or that tool: it is reported on stderr and
by `McpPlugin.status` (``dsh plugins``), and the rest is mounted.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import math
import os
import re
import shlex
import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from dsh_host import (
    ConfigError,
    Host,
    hookimpl,
)

from ._mcp._mount import Link, McpServerConfig
from ._mcp._mountloop import Mount

if TYPE_CHECKING:  # imported when a server is configured (no server: a cold start skips them)
    from ._mcp._confine import Confinement
    from ._mcp._native import NativeMount

__all__ = ["McpConfig", "McpPlugin", "McpServerConfig", "tool_name"]

log = logging.getLogger("dsh_plugins_builtin.mcp")

_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")


@attrs.frozen
class McpConfig:
    """The ``[plugin.mcp]`` table: ``servers``, one table per mounted server."""

    servers: dict[str, McpServerConfig] = attrs.field(factory=dict)


def tool_name(server: str, tool: str) -> str:
    """The dsh name of *server*'s *tool*: ``mcp__server__tool``."""
    return f"mcp__{server}__{tool}"


Launchable = tuple[McpServerConfig, "Confinement | None", "dict[str, str] | None"]
"""A server, how it is confined, and the environment it inherits when it is not."""


def _launchable(config: McpConfig, host: Host) -> dict[str, Launchable | str]:
    """Each stdio server's command resolved once, now, to a program no tool can rewrite.

    A server's program or script must not lie where the sandboxed side can write (unless kept
    read-only: the rule of hook commands); one that does is not started, its entry the reason
    (naming the server and the key). No servers: no policy built, no PATH walked (cold start).
    """
    if not config.servers:
        return {}
    from ._hooks._environment import unconfined_environment
    from ._hooks._launch import HookRefused, exposure_of, plan_launch, sandbox_policy

    # what an unconfined server inherits: nothing that leads back into the writable roots;
    # its command is planned with that same environment
    unconfined = unconfined_environment(os.environ, exposure := exposure_of(sandbox_policy(host)))
    inherited = unconfined.env
    if any(s.command and s.enabled and not s.sandbox for s in config.servers.values()):
        unconfined.warn(log, "MCP servers with sandbox = false")
    out: dict[str, Launchable | str] = {}
    for name, server in config.servers.items():
        if server.command is None or not server.enabled:
            out[name] = (server, None, None)
            continue
        cwd = os.path.join(host.workspace, os.path.expanduser(server.cwd or "."))
        command = shlex.join([server.command, *server.args])
        server = attrs.evolve(server, cwd=cwd)  # where it is planned is where it starts
        try:
            launch = plan_launch(
                command, cwd=cwd, env=inherited, exposure=exposure, shell="/bin/sh",
                skipped_path=unconfined.skipped_path,
            )  # fmt: skip
        except HookRefused as exc:
            where = host.config.source or "the configuration"
            out[name] = (
                f"MCP server {name!r} is refused ({where}, [plugin.mcp] servers.{name}.command): "
                f"{exc}"
            )
            continue
        if not launch.shell:  # else a name shlex.join had to quote: run exactly what was given
            argv = launch.argv
            server = attrs.evolve(server, command=argv[0], args=tuple(argv[1:]))
        out[name] = _confined(name, server, host, launch.checked, inherited)
    return out


def _confined(
    name: str,
    server: McpServerConfig,
    host: Host,
    checked: tuple[str, ...],
    inherited: dict[str, str],
) -> Launchable | str:
    """*server* with its confinement (``sandbox = true``) or, unconfined, the environment it
    inherits; or why it cannot be confined."""
    if not server.sandbox:
        return (server, None, inherited)
    from ._mcp._confine import confinement_for

    seen = tuple(os.path.dirname(path) for path in checked)  # its program and scripts
    confinement = confinement_for(
        name, host, writable_roots=server.writable_roots,
        read_roots=(*server.read_roots, *seen), network=server.network,
        unix_sockets=server.unix_sockets,
    )  # fmt: skip
    return confinement if isinstance(confinement, str) else (server, confinement, None)


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


class McpPlugin:
    """Mounts the MCP servers of ``[plugin.mcp.servers]``."""

    name = "mcp"

    def __init__(self) -> None:
        self._register: Any = None
        self._mount: Mount | NativeMount | None = None
        self._unregister: dict[str, list[Any]] = {}
        self._mounted: dict[str, list[str]] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._wait_limit = 15.0
        """The longest a call waits for its server's re-listing: half of ``[host]
        hook_timeout``, so the call goes on (with the tools listed before) instead of failing."""

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
        self._wait_limit = host.config.host.hook_timeout / 2
        servers = _launchable(config, host)
        links, refused = [], []
        for name, launchable in servers.items():
            if isinstance(launchable, str):  # refused: reported, never started
                link = Link(name, config.servers[name])
                link.status, link.error = "failed", launchable
                refused.append(link)
            elif launchable[0].enabled:
                link = Link(name, launchable[0])
                link.confinement, link.inherited = launchable[1], launchable[2]
                links.append(link)
        if not links and not refused:
            return
        from ._mcp._native import NativeMount, virtual_time

        for link in links:
            link.on_relisted = self._relisted
        timeout = max((link.config.timeout_ms for link in links), default=0) / 1000 + 5
        stdio = [link for link in links if link.config.command is not None]
        if stdio and host.services is not None and not virtual_time():
            # The stdio sessions live in the host's trio run; HTTP ones stay in the mount
            # thread (the SDK's HTTP client leaves async generators to the loop's finalizer).
            http = [link for link in links if link.config.command is None]
            fallback = self._start_thread(http, timeout) if http else None
            self._mount = mount = NativeMount(stdio, timeout, fallback)
            mount.links.update({link.name: link for link in refused})
            ready = functools.partial(self._started, host, [*refused, *links])
            host.services.start(functools.partial(mount.serve, on_ready=ready), name="mcp")
            return
        self._mount = self._start_thread(links, timeout)
        self._mount.links.update({link.name: link for link in refused})
        self._started(host, [*refused, *links])

    def _start_thread(self, links: list[Link], timeout: float) -> Mount:
        """A mount thread holding *links*, started (each running or failed, or *timeout*)."""
        mount = Mount()
        atexit.register(mount.close)  # a clean goodbye to the servers when dsh exits
        if links:
            mount.start(links, timeout)
        return mount

    def _started(self, host: Host, links: list[Link]) -> None:
        """Once the servers are running or failed: report the failures, mount the tools."""
        with contextlib.suppress(RuntimeError):  # in a trio run: list changes wake it
            self._token = trio.lowlevel.current_trio_token()
        # Registry changes happen on the host's thread: a pre-execute hook, present only while
        # servers are mounted, applies a server's tools/list_changed before the next call (a
        # call to that server's tools waits for its re-listing under way; no other call does).
        host.pm.register(_ListChanges(self), name="mcp_list_changes")
        for link in links:
            if link.status != "running":
                reason = link.error or f"MCP server {link.name!r} did not start"
                sys.stderr.write(f"dsh: mcp: {reason}\n")
                continue
            self._mount_tools(link)

    def apply_list_changes(self) -> None:
        """Register the re-listed tools of servers that sent ``tools/list_changed``.

        On the host's thread only (a registry change); the re-listing itself happened in the
        mount loop. ``dsh mcp serve`` tells its clients through the registry's change.
        """
        if self._mount is None:
            return
        for link in self._mount.links.values():
            if link.tools_changed:
                link.tools_changed = False
                self._mount_tools(link)

    def _relisted(self) -> None:
        """In the mount loop: a re-listing finished; register it on the host's trio loop now."""
        token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self.apply_list_changes)

    async def _await_relisting(self, link: Link, done: Any) -> None:
        """Wait (without blocking the loop; at most *link*'s timeout, and within the hook's
        bound) for its re-listing, then register it."""
        limit = min(link.config.timeout_ms / 1000, self._wait_limit)
        with trio.move_on_after(limit), contextlib.suppress(Exception):
            await link.runner.wait(done)
        self.apply_list_changes()

    def before_call(self, name: str) -> Awaitable[None] | None:
        """Before a call of tool *name*: re-listed tools registered now; a call to a server
        whose re-listing is under way waits for it (only that server's calls wait)."""
        if self._mount is None:
            return None
        if isinstance(self._mount, Mount):
            with contextlib.suppress(RuntimeError):  # not in a trio run: nothing to wake later
                self._token = trio.lowlevel.current_trio_token()
        self.apply_list_changes()
        link = _link_of(self._mount, name)
        if link is None or link.runner is None:
            return None
        done = link.relister.awaited()
        return None if done is None else self._await_relisting(link, done)

    @hookimpl
    def dsh_plugin_status(self) -> list[str]:
        """One line per mounted server for ``dsh plugins``: running with its tools, or why not."""
        lines = []
        for name, state in sorted(self.status().items()):
            tools = state["tools"]
            line = f"server {name}: {state['status']}, {len(tools)} tool{'s' * (len(tools) != 1)}"
            if state["unconfined"]:
                line += ", UNCONFINED (sandbox = false: it runs with dsh's user, files and env)"
            elif state["confined"] and state["status"] == "running":
                sockets = "; Unix sockets allowed" if state["unix_sockets"] else ""
                line += f", confined ({state['confined']}{sockets})"
            if restarts := state["restarts"]:
                times = f"{len(restarts)} time{'s' * (len(restarts) != 1)}"
                line += f", restarted {times} (last: {restarts[-1]})"
            if state["error"]:
                line = f"{line}; {state['error']}"
            lines.append(line)
            lines.extend(f"  {problem}" for problem in state["problems"])
        return lines

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server's status (``running``/``failed``/``starting``/``restarting``), error
        and tools, the backend confining it (``bwrap``, ``landlock``; ``None``: unconfined or
        HTTP), whether that sandbox lets it make Unix sockets, and why it was restarted, each
        time (its sandbox moved: `_mcp._watch`)."""
        links = self._mount.links.values() if self._mount is not None else ()
        return {
            link.name: {
                "status": link.status,
                "error": link.error,
                "tools": [tool_name(link.name, n) for n in self._mounted.get(link.name, ())],
                "problems": link.problems(),
                "unconfined": link.config.command is not None and not link.config.sandbox,
                "confined": link.confinement.backend if link.confinement is not None else None,
                "unix_sockets": link.confinement is not None and link.confinement.unix_sockets,
                "restarts": list(link.restarts),
            }
            for link in links
        }

    @hookimpl
    async def dsh_host_stopping(self) -> None:
        """`Host.aclose`: every session closed, its server ended and reaped."""
        if self._mount is None:
            return  # no server was configured: nothing to close (and no thread to hop to)
        from ._mcp._native import NativeMount

        if isinstance(self._mount, NativeMount):
            await self._mount.aclose()
        else:
            await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Close the mount thread's sessions (the servers see end of input and exit); those of
        a host's trio run end with the host (`dsh_host_stopping`)."""
        if self._mount is not None:
            self._mount.close()

    def _mount_tools(self, link: Link) -> None:
        """Register *link*'s tools; a tool that cannot be is reported, the others still are."""
        from ._mcp._tooldef import mounted_tool

        for unregister in self._unregister.pop(link.name, []):
            unregister()
        unregisters, names = [], []
        link.tool_problems = []
        for tool in link.tools:
            try:
                unregisters.append(
                    self._register(mounted_tool(link, tool, tool_name(link.name, tool.name)))
                )
            except Exception as exc:  # a bad schema or name: this tool only
                problem = f"tool {tool.name!r} of MCP server {link.name!r} not mounted: {exc}"
                link.tool_problems.append(problem)
                sys.stderr.write(f"dsh: mcp: {problem}\n")
                continue
            names.append(tool.name)
        for problem in link.guard.rejected if link.guard is not None else ():
            sys.stderr.write(f"dsh: mcp: MCP server {link.name!r}: {problem}\n")
        self._unregister[link.name] = unregisters
        self._mounted[link.name] = names


class _ListChanges:
    """Applies pending ``tools/list_changed`` re-registrations; never decides anything."""

    def __init__(self, plugin: McpPlugin) -> None:
        self.plugin = plugin

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: Any) -> Awaitable[None] | None:
        return self.plugin.before_call(execution.name)


def _link_of(mount: Any, name: str) -> Link | None:
    """The link of *mount* whose tool *name* is (``mcp__<server>__<tool>``; a server name has
    no ``__``), or ``None`` (dsh's own tool, another plugin's)."""
    if mount is None or not name.startswith("mcp__"):
        return None
    link: Link | None = mount.links.get(name[5:].split("__", 1)[0])
    return link
