"""The connections of the ``mcp`` plugin: `Link`, one server's session (`Mount`, the thread
that holds links where no trio run does, is `_mountloop`).

A `Link` runs on anyio, so under trio or asyncio. Where a trio run owns the host
(``open_host``, ``own_host``), its stdio links are tasks of that run (`_native`). Elsewhere
(``Host(...)`` made directly, as ``dsh call`` does; HTTP servers; a run in virtual time) a
session must still live as long as the host, across any number of ``trio.run``, so the links
live in a daemon thread running an asyncio loop, `Mount`, and a tool call hops there and back,
waiting from its own trio loop. Cancelling the call (it was aborted) cancels the SDK request,
which sends ``notifications/cancelled`` to the server, either way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ._relist import Relister

if TYPE_CHECKING:
    import anyio
    import anyio.abc
    import mcp_types as types
    from mcp.client.session import ClientSession

    from ._confine import Confinement
    from ._guard import Guard
    from ._watch import Hiding, Watch

# The SDK (pydantic models: about a second to import) and asyncio are imported only when a
# server is mounted, so a host with no [plugin.mcp] servers starts without them (issue 27).

__all__ = ["BAD_RESULT", "Link", "McpServerConfig"]

T = TypeVar("T")

BAD_RESULT = -32099
"""The JSON-RPC error code `_guard` answers a refused message with (kept here: no SDK import)."""

STDERR_TAIL = 2000
"""How many characters of a stdio server's stderr an error message quotes."""

MAX_RESULT_BYTES = 8 * 1024 * 1024
"""The default bound of one message from a server (``max_result_bytes``)."""


@attrs.frozen
class McpServerConfig:
    """One ``[plugin.mcp.servers.NAME]`` table: a stdio ``command`` or an HTTP ``url``.

    Attributes:
        command: the program to start (stdio); with ``args``, ``env`` (added to dsh's
            environment) and ``cwd``.
        url: a streamable-HTTP endpoint, with ``headers`` (e.g. ``Authorization``).
        enabled: ``false`` mounts nothing.
        timeout_ms: the time budget of each call (also the start timeout).
        tools: the server's tool names to mount (default: all).
        max_result_bytes: the longest message read from the server (a stdio line; over HTTP,
            a JSON answer's body or one server-sent event), counted while it is read; a longer
            answer ends its call at once with an error (default 8 MiB).
        sandbox: run a stdio server confined (default); ``false`` runs it with dsh's user,
            files and environment, and is flagged by ``dsh plugins``.
        writable_roots: where a confined server may write (default: nowhere; relative to the
            workspace).
        read_roots: more roots to keep visible to it (what lies under ``/tmp`` is hidden by
            its private ``/tmp`` otherwise).
        network: whether a confined server may use the network (default: no).
        unix_sockets: whether a confined server may make Unix sockets (``socket(AF_UNIX)``:
            to connect to a named or abstract one, or to listen; default: no, unless the
            sandbox's ``allow_unix_sockets`` names some). A host socket that starts listening
            after the server started would be in its view: each command's sandbox covers the
            sockets listening when it starts, and a server's runs on. Pipes between its own
            processes (``socketpair``) work either way.
    """

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    enabled: bool = True
    timeout_ms: float = 60_000.0
    tools: tuple[str, ...] | None = None
    max_result_bytes: int = MAX_RESULT_BYTES
    sandbox: bool = True
    writable_roots: tuple[str, ...] = ()
    read_roots: tuple[str, ...] = ()
    network: bool = False
    unix_sockets: bool = False


class Link:
    """One mounted server: its session (in the mount loop), status, tools and stderr."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.session: ClientSession | None = None
        self.status = "starting"
        self.error: str | None = None
        self.tools: list[types.Tool] = []
        self.tools_changed = False
        """A re-listing found new tools, which the host has not registered yet."""
        self.relister = Relister(self)
        """Its re-listings after ``tools/list_changed`` (bounded: `_relist`)."""
        self.confinement: Confinement | None = None
        """How a stdio server is confined (``None``: it runs unconfined, ``sandbox = false``)."""
        self.inherited: dict[str, str] | None = None
        """The environment an unconfined stdio server inherits (``None``: it is not started)."""
        self.on_relisted: Callable[[], None] | None = None
        """Called in the mount loop when a re-listing has finished (the plugin's wake-up)."""
        self.guard: Guard | None = None
        self.runner: Any = None
        """The mount running the session (`Mount`, `_native.NativeMount`): calls go through it."""
        self.tool_problems: list[str] = []
        self.restarts: list[str] = []
        """Why the server was restarted, each time (`restart`)."""
        self.watch: Watch | None = None
        """A confined stdio server's mount table, checked around each call (`_watch`)."""
        self._hiding: Hiding | None = None
        self._pid = 0
        self._restart: anyio.Event | None = None
        """Set when the restart asked for (`restart`) has ended."""
        self._stop: anyio.Event | None = None
        self._stopped = False
        self._tasks: anyio.abc.TaskGroup | None = None
        # Lives as long as the link (the server writes to it until it exits).
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115

    def stderr_tail(self) -> str:
        """The end of what a stdio server wrote to stderr ('' for none)."""
        with contextlib.suppress(OSError, ValueError):
            self._errlog.flush()
            size = self._errlog.seek(0, os.SEEK_END)
            self._errlog.seek(max(0, size - STDERR_TAIL * 4))
            return self._errlog.read()[-STDERR_TAIL:].strip()
        return ""

    def problems(self) -> list[str]:
        """Tools not mounted and why, then the server's last protocol errors."""
        guard = self.guard
        return [
            *(guard.rejected if guard is not None else ()),
            *self.tool_problems,
            *(guard.notes[-3:] if guard is not None else ()),
        ]

    def describe_failure(self, what: str) -> str:
        """*what*, plus the server's stderr tail when there is one (`_text.printable`: both
        may hold what the server wrote)."""
        from ._text import printable

        tail = self.stderr_tail()
        return printable(f"{what}; its stderr ends: {tail}" if tail else what)

    async def run(self, ready: anyio.Event) -> None:
        """Connect, initialize, list tools, set *ready*; then hold the session until closed,
        starting the server again whenever `restart` asks.

        Runs under asyncio (the mount thread) or trio (a host's services: `_native`), by anyio.
        """
        import anyio

        self._stop = anyio.Event()
        if self._stopped:  # the host closed before this ran: nothing is started
            self.status, self.error = "failed", f"MCP server {self.name!r}: the host closed"
            ready.set()
            return
        try:
            while await self._session(ready):
                self._stop = anyio.Event()
        finally:
            ready.set()
            self._restarted()

    async def _session(self, ready: anyio.Event) -> bool:
        """One session of the server, from its start to its end; whether `restart` ended it."""
        import anyio
        from mcp.client.session import ClientSession

        from ._guard import Guard
        from ._relist import list_tools
        from ._stdio import stdio_transport

        if self._stopped:  # closed between two sessions: nothing is started again
            return False
        self.guard = guard = Guard(self.name, limit=self.config.max_result_bytes)
        guard.on_list_changed = self.relister.notice
        config, before = self.config, (self.tools if self._restart is not None else None)
        stop = self._stop
        assert stop is not None  # `run` made it for this session
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.command is not None:
                    read, write = await stack.enter_async_context(
                        self._stdio(stdio_transport, guard)
                    )
                else:
                    read, write = await _http(config, stack, guard)
                self._tasks = await stack.enter_async_context(anyio.create_task_group())
                session = await stack.enter_async_context(ClientSession(read, write))
                stack.callback(self._tasks.cancel_scope.cancel)  # re-listings end first
                with anyio.fail_after(config.timeout_ms / 1000):
                    await session.initialize()
                    self.tools = await list_tools(session, config.tools)
                self._watch()
                self.session = session
                self.relister.listed(self._tasks)
                self.status = "running"
                if before is not None and self.tools != before and self.on_relisted is not None:
                    self.tools_changed = True  # registered as a re-listing's are
                    self.on_relisted()
                self._restarted()
                ready.set()
                await stop.wait()
        except Exception as exc:
            if self._restart is not None and not self._stopped:
                return True  # the end of the server killed for a restart: start it again
            what = "did not start in time" if isinstance(exc, TimeoutError) else _describe(exc)
            self.error = self.describe_failure(
                f"MCP server {self.name!r} "
                + ("failed: " if self.status == "running" else "")
                + what
            )
            self.status = "failed"
            return False
        finally:
            self.session = self._tasks = None
            watch, self.watch = self.watch, None
            if watch is not None:
                watch.close()
        return self._restart is not None and not self._stopped

    def _watch(self) -> None:
        """Hold a confined server's mount table, checked against what its sandbox was made
        to hide (`_watch`), now that the server answers (its sandbox is all made)."""
        if self._hiding is None:
            return
        from ._watch import Watch, first_child

        try:
            self.watch = watch = Watch(first_child(self._pid), self._hiding)
            restart = functools.partial(self._restart_now, watch=watch)
            watch.sentinel(functools.partial(_soon(), restart))
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"its sandbox could not be checked: {exc}") from None

    async def restart(self, why: str | None, watch: Watch | None = None) -> None:
        """End the server and start it again in a sandbox made anew (in the session's loop),
        because *why* (what *watch* found, when given); return once it runs again, or failed.
        Callers at once share one; with *why* ``None``, only wait for the restart under way,
        if any."""
        from ._watch import RESTARTED

        if why is not None and why != RESTARTED:  # (a watch of the server before: just wait)
            self._restart_now(why, watch)
        if self._restart is not None:
            await self._restart.wait()

    def _restart_now(self, why: str, watch: Watch | None = None) -> None:
        """Kill the server at once (a sandbox that moved may show it what it should not: no
        grace), and have its session start it again (`restart`; in the session's loop). What
        the *watch* of a server already restarted found is old news: nothing is done."""
        import anyio

        if self._restart is not None or self.status != "running" or self._stop is None:
            return
        if watch is not None and watch is not self.watch:
            return
        self._restart = anyio.Event()
        self.restarts.append(why)
        sys.stderr.write(f"dsh: mcp: MCP server {self.name!r} restarted: {why}\n")
        self.status, self.session = "restarting", None
        if self.confinement is not None and self._pid > 0:  # not reaped yet: still its group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pid, signal.SIGKILL)
        self._stop.set()

    @property
    def restarting(self) -> bool:
        """A restart was asked for and has not ended."""
        return self._restart is not None

    def _restarted(self) -> None:
        """Wake those waiting for a restart (the server runs again, or failed)."""
        restart, self._restart = self._restart, None
        if restart is not None:
            restart.set()

    def _stdio(self, transport: Any, guard: Guard) -> Any:
        """The stdio transport of this server, confined unless ``sandbox = false``."""
        config = self.config
        assert config.command is not None
        confinement = self.confinement
        if confinement is None and self.inherited is None:  # fail closed: not the host's own
            raise RuntimeError(
                f"MCP server {self.name!r} runs unconfined but has no environment made safe for "
                "it; it is not started"
            )
        argv, env = [config.command, *config.args], {**(self.inherited or {}), **config.env}
        fds: list[int] = []
        if confinement is not None:
            argv, fds, self._hiding = confinement.wrap(argv, config.cwd or os.getcwd())
            env = confinement.environment(dict(config.env))
        return transport(
            argv, env=env, cwd=config.cwd, errlog=self._errlog,
            max_line=config.max_result_bytes, pass_fds=fds, check=guard,
            started=self._started,
        )  # fmt: skip

    def _started(self, pid: int) -> None:
        self._pid = pid

    def close(self) -> None:
        """Release the stderr file (after the session has ended)."""
        self._errlog.close()

    def stop(self) -> None:
        """Ask `run` to close the session, or not to open it (call in the session's loop)."""
        self._stopped = True
        if self._stop is not None:
            self._stop.set()


async def _http(
    config: McpServerConfig, stack: contextlib.AsyncExitStack, guard: Guard
) -> tuple[Any, Any]:
    """The streams of the HTTP transport of the server *config* names, bounded by
    ``max_result_bytes``."""
    import anyio
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from ._bounded import BoundedTransport
    from ._guard import guarded_pumps

    assert config.url is not None
    limit = config.max_result_bytes
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers={"Accept-Encoding": "identity", **config.headers},
            transport=BoundedTransport(limit),
        )
    )
    streams: Any = await stack.enter_async_context(
        streamable_http_client(config.url, http_client=http, max_sse_event_size=limit)
    )
    pumps = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(pumps.cancel_scope.cancel)  # before the group is awaited
    return guarded_pumps(guard, streams[0], streams[1], pumps)


def _soon() -> Callable[[Callable[..., object], Any], object]:
    """How another thread has a function run in this (the session's) loop, soon: asyncio's
    ``call_soon_threadsafe`` or trio's ``run_sync_soon``. One that comes after the loop ended
    is dropped: there is no server left to restart."""
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        token = trio.lowlevel.current_trio_token()

        def soon(function: Callable[..., object], argument: Any) -> object:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(function, argument)
            return None

        return soon
    import asyncio

    loop = asyncio.get_running_loop()

    def soon_asyncio(function: Callable[..., object], argument: Any) -> object:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(function, argument)
        return None

    return soon_asyncio


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"
