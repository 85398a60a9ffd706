"""``dsh mcp serve --http``: the SDK's streamable-HTTP app behind a validating ASGI layer.

The SDK's HTTP transport survives hostile bodies, but answers some of them wrongly: a request
whose id is an object, a float, ``true``, ``null`` or ``NaN`` is taken for a notification
(``202``, no answer at all). So each POST body is read (bounded), parsed strictly with
`dsh_host.parse_json` and checked with the same `refusal` rules as the stdio wire before the SDK
sees it; a refused message gets its JSON-RPC error with HTTP status 400 (``202`` and no body
for a malformed notification, as for any notification). Ids must be strings or integers here:
the SDK cannot echo a fractional id. Any path but ``/mcp`` is ``404``. A request without a known
bearer token goes straight to the SDK, which answers ``401`` without reading its body. A body
must arrive within ``body_timeout`` seconds in all (else ``408``); one token's bodies being read
hold at most ``token_body_bytes`` bytes and number at most ``token_bodies`` (beyond: ``503`` to
that token only), all tokens' at most ``body_bytes`` bytes (a backstop), so slow clients cannot
pile up memory, nor one token lock the others out (`dsh_host._mcp._limits.HttpLimits`). A ``tools/call`` whose connection closes before its
answer is sent is cancelled, as by the client's ``notifications/cancelled`` (the SDK's transport
would let it run on for nobody). A lone surrogate (``"\\ud800"``) is valid JSON but the
SDK's parser refuses it, with a Parse error: over HTTP such text does not reach the tools.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio

from .. import JsonInputError, parse_json
from ._auth import Tokens
from ._limits import BODY_BYTES, BODY_TIMEOUT, TOKEN_BODIES, TOKEN_BODY_BYTES
from ._wire import DEFAULT_MAX_DEPTH, DROP, INVALID_REQUEST, PARSE_ERROR, refusal

__all__ = ["CANCEL_TIMEOUT", "ValidatingApp"]

CANCEL_TIMEOUT = 5.0
"""Seconds the SDK may take to accept the cancellation of a call whose client left."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def _error(code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}


class ValidatingApp:
    """ASGI middleware: POST bodies are checked before *app* (the SDK's) sees them."""

    def __init__(
        self,
        app: App,
        *,
        max_body: int,
        max_depth: int = DEFAULT_MAX_DEPTH,
        path: str = "/mcp",
        tokens: Tokens | None = None,
        body_timeout: float = BODY_TIMEOUT,
        body_bytes: int = BODY_BYTES,
        token_body_bytes: int = TOKEN_BODY_BYTES,
        token_bodies: int = TOKEN_BODIES,
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.max_depth = max_depth
        self.path = path
        self.tokens = tokens
        self.body_timeout = body_timeout
        self.body_bytes = body_bytes
        self.token_body_bytes = token_body_bytes
        self.token_bodies = token_bodies
        self.buffered = 0
        """Bytes of request bodies held now, all requests together."""
        self.held: Counter[str] = Counter()
        """Bytes of request bodies held now, per token (its client id)."""
        self.reading: Counter[str] = Counter()
        """Request bodies being read now, per token (its client id)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") != self.path:
            await _respond(
                _closing(send), 404, {"error": f"not found: the MCP endpoint is {self.path}"}
            )
            return
        who = self._admitted(scope) if scope["type"] == "http" else None
        if who is None and scope["type"] == "http":
            await self.app(scope, receive, _closing(send))  # the SDK answers 401, body unread
            return
        if who is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        self.reading[who] += 1
        try:
            refused = await self._read(receive, body, who)
        finally:  # read (or given up): no longer counted
            self.buffered -= len(body)
            self.held[who] -= len(body)
            self.reading[who] -= 1
            if not self.reading[who]:
                del self.reading[who], self.held[who]
        if refused is not None:
            if refused:  # the body was not read to its end
                await _respond(_closing(send), *refused)
            return
        await self._pass(bytes(body), scope, receive, send)

    async def _read(
        self, receive: Receive, body: bytearray, who: str
    ) -> tuple[int, dict[str, Any]] | tuple[()] | None:
        """Read the body of token *who* into *body*: ``None`` when whole, else the refusal to
        answer (``()``: the client is gone). At most *body_timeout* seconds in all; beyond
        *max_body* bytes (``413``), or beyond *who*'s share or the budget of all (``503``), it
        stops."""
        if self.reading[who] > self.token_bodies:
            text = f"this token has {self.token_bodies} request bodies being read: try again"
            return 503, _error(INVALID_REQUEST, text)
        with trio.move_on_after(self.body_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return ()
                chunk = message.get("body", b"")
                if len(body) + len(chunk) > self.max_body:
                    return 413, _error(
                        INVALID_REQUEST, f"message longer than {self.max_body} bytes"
                    )
                if self.held[who] + len(chunk) > self.token_body_bytes:
                    text = "this token's request bodies being read are too large: try again"
                    return 503, _error(INVALID_REQUEST, text)
                if self.buffered + len(chunk) > self.body_bytes:
                    text = "too many request bodies are being read at once: try again"
                    return 503, _error(INVALID_REQUEST, text)
                body += chunk
                self.buffered += len(chunk)
                self.held[who] += len(chunk)
                if not message.get("more_body"):
                    return None
        text = f"the request body did not arrive within {self.body_timeout:g} seconds"
        return 408, _error(INVALID_REQUEST, text)

    async def _pass(self, body: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        """Check *body*, then hand it to the SDK (or answer it here). A ``tools/call`` whose
        client disconnects before its answer is sent is cancelled (`_cancel`)."""
        answer, message = self._check(body)
        if answer is DROP:
            await _respond(send, 202, None)
            return
        if answer is not None:
            await _respond(send, 400, answer)
            return
        call = isinstance(message, dict) and message.get("method") == "tools/call"
        delivered = answered = gone = False

        async def replay() -> Message:
            nonlocal delivered, gone
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            event = await receive()
            gone = gone or event["type"] == "http.disconnect"
            return event

        async def sending(event: Message) -> None:
            nonlocal answered
            if event["type"] == "http.response.body" and not event.get("more_body"):
                answered = True
            await send(event)

        await self.app(scope, replay, sending)
        if call and gone and not answered:
            assert isinstance(message, dict)
            await self._cancel(scope, message["id"])

    async def _cancel(self, scope: Scope, request_id: object) -> None:
        """Send the SDK the ``notifications/cancelled`` of *request_id*, as its client would (same
        token and session): the connection it was asked on closed before the answer came, and
        nobody is left to read it. The call's signal is aborted; it ends ``ABORTED``."""
        keep = (b"host", b"origin", b"authorization", b"accept", b"mcp-session-id")
        headers = [(k, v) for k, v in scope.get("headers", ()) if bytes(k).lower() in keep]
        if not any(bytes(k).lower() == b"mcp-session-id" for k, _ in headers):
            return
        headers.append((b"content-type", b"application/json"))
        reason = "the HTTP connection closed before the answer was sent"
        note = {"requestId": request_id, "reason": reason}
        body = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": note})
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body.encode(), "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(event: Message) -> None:
            pass

        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_TIMEOUT):
            await self.app({**scope, "headers": headers}, receive, discard)

    def _admitted(self, scope: Scope) -> str | None:
        """The client id of the known token the request carries (``""`` without *tokens*), or
        ``None``: the body of a request without one is never read; the SDK refuses it (401)."""
        if self.tokens is None:
            return ""
        for key, value in scope.get("headers", ()):
            if key.lower() == b"authorization" and value[:7].lower() == b"bearer ":
                grant = self.tokens.find(value[7:].decode("latin-1"))
                return None if grant is None else grant.client_id
        return None

    def _check(self, body: bytes) -> tuple[dict[str, Any] | None, object]:
        """The refusal of *body* (``None``: none) and the message it holds."""
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            return _error(PARSE_ERROR, f"Parse error: the body is not UTF-8 ({exc})"), None
        try:
            message = parse_json(text, max_depth=self.max_depth)
        except JsonInputError as exc:
            return _error(PARSE_ERROR, f"Parse error: {exc}"), None
        return refusal(message, integer_ids=True), message


def _closing(send: Send) -> Send:
    """*send*, its response saying ``connection: close``. The request's body is left unread,
    so the connection cannot carry another request, and the server closes it once the response
    is sent; told so, a client does not send its next request on it (which would be lost)."""

    async def closing(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return closing


async def _respond(send: Send, status: int, payload: dict[str, Any] | None) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")] if payload is not None else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
