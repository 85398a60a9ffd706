"""The open streamable-HTTP sessions of ``dsh mcp serve --http``, told when the tools change.

The SDK hands each request its own `ServerSession`; one sent without a related request id goes
out on the connection's standalone stream (the SSE stream the client opened with ``GET /mcp``),
which is what a server-initiated ``notifications/tools/list_changed`` needs. So the latest
session object of each ``mcp-session-id`` is kept (from ``notifications/initialized`` and every
request after it) and told when the registry changes. A session whose streams are closed is
forgotten when telling it fails; at most `MAX_REMEMBERED` are kept, the least recently active
forgotten first (the SDK ends a session idle for 30 minutes anyway).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import trio

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

__all__ = ["MAX_REMEMBERED", "NOTIFY_TIMEOUT", "HttpSessions"]

logger = logging.getLogger("dsh_host.mcp")

MAX_REMEMBERED = 10_000
"""Sessions remembered at most (the SDK's own default cap on open sessions)."""

NOTIFY_TIMEOUT = 5.0
"""Seconds one session may take to accept a notification before it is skipped."""


class HttpSessions:
    """The latest `ServerSession` of each open HTTP session id."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._by_id: dict[str, ServerSession] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def remember(self, ctx: ServerRequestContext[Any]) -> None:
        """File *ctx*'s session under its ``mcp-session-id`` (nothing for stdio or no id)."""
        headers = getattr(ctx.request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if not isinstance(session_id, str) or not session_id:
            return
        self._by_id.pop(session_id, None)  # re-inserted last: most recently active
        self._by_id[session_id] = ctx.session
        while len(self._by_id) > self.limit:
            del self._by_id[next(iter(self._by_id))]

    async def tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every remembered session, concurrently."""

        async def tell(session_id: str, session: ServerSession) -> None:
            try:
                with trio.move_on_after(NOTIFY_TIMEOUT):
                    await session.send_tool_list_changed()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                if self._by_id.get(session_id) is session:
                    del self._by_id[session_id]
                logger.debug("dsh mcp serve: session %s is gone", session_id)

        async with trio.open_nursery() as nursery:
            for session_id, session in list(self._by_id.items()):
                nursery.start_soon(tell, session_id, session)
