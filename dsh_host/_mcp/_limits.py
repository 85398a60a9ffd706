"""What one token may hold of ``dsh mcp serve --http``: sessions, and calls in flight.

Without these, one token (a read-only one will do) can open sessions until the SDK's global cap
(10,000) refuses everybody else, or start calls without end. So:

- each token keeps at most `HttpLimits.sessions_per_token` sessions (opening ones included);
  opening one more ends that token's own least recently used **idle** session (no request of
  it in flight, no open ``GET`` stream), by a ``DELETE`` as its client would send; if none is
  idle the new one is refused with ``503``. Another token's sessions are never touched.
- a session runs at most `HttpLimits.calls_per_session` ``tools/call`` at once, a token at most
  `HttpLimits.calls_per_token`; a call beyond either is answered at once with a JSON-RPC error
  (`TOO_BUSY`) saying so, never queued.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import attrs
from mcp.shared.exceptions import MCPError

from ._auth import Tokens

__all__ = [
    "BODY_BYTES",
    "BODY_TIMEOUT",
    "TOKEN_BODIES",
    "TOKEN_BODY_BYTES",
    "TOO_BUSY",
    "CallCaps",
    "HttpLimits",
    "SessionCaps",
]

TOO_BUSY = -32000
"""The JSON-RPC error code (implementation-defined server error) of a call beyond a cap."""

BODY_TIMEOUT = 30.0
"""Seconds a request body may take to arrive, in total (beyond: ``408``)."""

TOKEN_BODY_BYTES = 16 * 1024 * 1024
"""Bytes of request bodies being read at once for one token (beyond: ``503`` to that token)."""

TOKEN_BODIES = 4
"""Request bodies being read at once for one token (beyond: ``503`` to that token)."""

BODY_BYTES = 8 * TOKEN_BODY_BYTES
"""Bytes of request bodies being read at once, all tokens together (beyond: ``503``): a backstop
eight tokens' shares wide, so one token's slow bodies cannot lock the others out."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@attrs.frozen
class HttpLimits:
    """The caps of ``dsh mcp serve --http`` (the defaults are documented in the MCP guide)."""

    sessions_per_token: int = 64
    calls_per_session: int = 16
    calls_per_token: int = 64
    body_timeout: float = BODY_TIMEOUT
    body_bytes: int = BODY_BYTES
    token_body_bytes: int = TOKEN_BODY_BYTES
    token_bodies: int = TOKEN_BODIES


class CallCaps:
    """The ``tools/call`` in flight per HTTP session and per token."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self._sessions: Counter[str] = Counter()
        self._tokens: Counter[str] = Counter()

    @contextmanager
    def admit(self, session: str | None, token: str | None) -> Iterator[None]:
        """Count one call of *session* and *token* (either ``None``: not counted) while open;
        `MCPError` `TOO_BUSY` if either has its cap's worth in flight already."""
        limits = self.limits
        if session is not None and self._sessions[session] >= limits.calls_per_session:
            raise MCPError(
                code=TOO_BUSY,
                message=f"too many calls in flight in this session (at most "
                f"{limits.calls_per_session}): wait for one to end",
            )
        if token is not None and self._tokens[token] >= limits.calls_per_token:
            raise MCPError(
                code=TOO_BUSY,
                message=f"too many calls in flight for this token (at most "
                f"{limits.calls_per_token}): wait for one to end",
            )
        for counter, key in ((self._sessions, session), (self._tokens, token)):
            if key is not None:
                counter[key] += 1
        try:
            yield
        finally:
            for counter, key in ((self._sessions, session), (self._tokens, token)):
                if key is not None:
                    counter[key] -= 1
                    if not counter[key]:
                        del counter[key]


@attrs.define
class _Book:
    """One token's sessions, least recently used first: id -> requests in flight."""

    sessions: OrderedDict[str, int] = attrs.field(factory=OrderedDict)
    opening: int = 0


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    return value[7:] if value is not None and value[:7].lower() == "bearer " else None


class SessionCaps:
    """ASGI middleware in front of the SDK's app: at most *limits*' sessions per token."""

    def __init__(self, app: App, tokens: Tokens, limits: HttpLimits) -> None:
        self.app = app
        self.tokens = tokens
        self.limits = limits
        self._books: dict[str, _Book] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _bearer(scope) if scope["type"] == "http" else None
        grant = self.tokens.find(token) if token is not None else None
        if grant is None:
            await self.app(scope, receive, send)  # the SDK answers (401)
            return
        book = self._books.setdefault(grant.client_id, _Book())
        session = _header(scope, b"mcp-session-id")
        if session is None and scope.get("method") == "POST":
            await self._open(book, scope, receive, send)
        elif session is not None and session in book.sessions:
            await self._use(book, session, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _open(self, book: _Book, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that opens a session: room is made first, its new id filed after."""
        if len(book.sessions) + book.opening >= self.limits.sessions_per_token:
            idle = next((s for s, busy in book.sessions.items() if not busy), None)
            if idle is None:
                text = (
                    f"too many open sessions for this token (at most "
                    f"{self.limits.sessions_per_token}) and none idle: end one (DELETE)"
                )
                await _reply(send, 503, text)
                return
            del book.sessions[idle]
            await self._end(scope, idle)

        async def filing(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if bytes(key).lower() == b"mcp-session-id":
                        book.sessions[bytes(value).decode("latin-1")] = 0
            await send(message)

        book.opening += 1
        try:
            await self.app(scope, receive, filing)
        finally:
            book.opening -= 1

    async def _use(
        self, book: _Book, session: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        status = 0

        async def watching(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        book.sessions[session] += 1
        book.sessions.move_to_end(session)
        try:
            await self.app(scope, receive, watching)
        finally:
            if session in book.sessions:
                book.sessions[session] -= 1
                ended = scope.get("method") == "DELETE" and status < 300
                if status == 404 or ended:  # gone (expired, or ended by its client)
                    del book.sessions[session]

    async def _end(self, scope: Scope, session: str) -> None:
        """End *session* as its client would: a ``DELETE`` with the same credentials."""
        keep = (b"host", b"origin", b"authorization", b"accept")
        headers = [(k, v) for k, v in scope.get("headers", ()) if bytes(k).lower() in keep]
        headers.append((b"mcp-session-id", session.encode("latin-1")))
        delete = {**scope, "method": "DELETE", "headers": headers}
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(message: Message) -> None:
            pass

        await self.app(delete, receive, discard)


async def _reply(send: Send, status: int, text: str) -> None:
    import json

    error = {"jsonrpc": "2.0", "id": None, "error": {"code": TOO_BUSY, "message": text}}
    body = json.dumps(error).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
