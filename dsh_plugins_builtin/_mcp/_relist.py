"""A mounted server's ``tools/list_changed``: re-listed at a bounded cost (`Relister`).

A server may send any number of notices. Whatever it sends, its link has at most one
re-listing in flight and at most one pending (every notice that arrives meanwhile is folded
into the pending one), and re-listings start at least `MIN_INTERVAL` seconds apart (by the
session loop's clock). A re-listing that finds the same tools changes nothing (no
re-registration, so no change told to dsh's own clients). Only a call to this server's tools
waits for its re-listing (`Relister.awaited`); nothing else does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import anyio
    import anyio.abc
    import mcp_types as types
    from mcp.client.session import ClientSession

    from ._mount import Link

__all__ = ["MAX_PAGES", "MIN_INTERVAL", "Relister", "list_tools"]

MIN_INTERVAL = 1.0
"""The fewest seconds between the starts of two listings of one server."""

MAX_PAGES = 1000
"""The most pages one listing reads: a server whose cursor never ends is cut off."""


async def list_tools(session: ClientSession, allowed: tuple[str, ...] | None) -> list[types.Tool]:
    """Every page of the server's tools (at most `MAX_PAGES`), those in *allowed* (all: None)."""
    import mcp_types as types

    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return [t for t in tools if allowed is None or t.name in allowed]


class Relister:
    """The re-listings of one link (see the module docstring); runs in the link's loop."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._pending: anyio.Event | None = None
        """Set once the re-listing covering every notice so far (not started yet) has ended."""
        self._current: anyio.Event | None = None
        """Set once the re-listing under way has ended."""
        self._running = False
        self._last = -math.inf
        self._tasks: anyio.abc.TaskGroup | None = None
        """Where re-listings run: the session's task group, once the first listing is made."""
        self.listings = 0
        """How many re-listings were sent (for `McpPlugin.status` and tests)."""

    def listed(self, tasks: anyio.abc.TaskGroup) -> None:
        """The first listing has just been made (the interval counts from it); a notice that
        came during it is re-listed now."""
        import anyio

        self._last = anyio.current_time()
        self._tasks = tasks
        self.notice(pending_only=True)

    def notice(self, *, pending_only: bool = False) -> None:
        """A ``tools/list_changed`` arrived: a re-listing is pending (one, however many)."""
        import anyio

        if self._pending is None and not pending_only:
            self._pending = anyio.Event()
        if self._pending is not None and not self._running and self._tasks is not None:
            self._running = True
            self._tasks.start_soon(self._run)

    def awaited(self) -> Any:
        """The event a call to this server's tools waits for (``None``: nothing under way)."""
        for event in (self._pending, self._current):
            if event is not None and not event.is_set():
                return event
        return None

    async def _run(self) -> None:
        import anyio

        try:
            while self._pending is not None:
                await anyio.sleep_until(self._last + MIN_INTERVAL)
                current = self._current = self._pending
                self._pending, self._last = None, anyio.current_time()
                try:
                    await self._relist()
                finally:
                    current.set()
                    self._current = None
        finally:
            self._running = False
            for event in (self._pending, self._current):  # cancelled: no waiter is left hanging
                if event is not None:
                    event.set()
            self._pending = self._current = None

    async def _relist(self) -> None:
        import anyio

        from ._mount import _describe
        from ._text import printable

        link = self._link
        session = link.session
        if session is None:
            return
        self.listings += 1
        try:
            with anyio.fail_after(link.config.timeout_ms / 1000):
                tools = await list_tools(session, link.config.tools)
        except Exception as exc:
            what = f"re-listing the tools of MCP server {link.name!r} failed: {_describe(exc)}"
            link.error = printable(what)
            return
        if tools == link.tools:
            return  # the same tools: nothing to register, nothing to tell
        link.tools = tools
        link.tools_changed = True
        if link.on_relisted is not None:
            link.on_relisted()
