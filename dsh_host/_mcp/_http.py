"""``dsh mcp serve --http``: the SDK's streamable-HTTP app behind a validating ASGI layer.

The SDK's HTTP transport survives hostile bodies, but answers some of them wrongly: a request
whose id is an object, a float, ``true``, ``null`` or ``NaN`` is taken for a notification
(``202``, no answer at all). So each POST body is read (bounded), parsed strictly with
`dsh_host.parse_json` and checked with the same `refusal` rules as the stdio wire before the SDK
sees it; a refused message gets its JSON-RPC error with HTTP status 400 (``202`` and no body
for a malformed notification, as for any notification). Ids must be strings or integers here:
the SDK cannot echo a fractional id. Any path but ``/mcp`` is ``404``. With ``--token-file``, a
request without a known bearer token goes straight to the SDK, which answers ``401`` without
reading its body. A lone surrogate (``"\\ud800"``) is valid JSON but the
SDK's parser refuses it, with a Parse error: over HTTP such text does not reach the tools.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .. import JsonInputError, parse_json
from ._auth import Tokens
from ._wire import DEFAULT_MAX_DEPTH, DROP, INVALID_REQUEST, PARSE_ERROR, refusal

__all__ = ["ValidatingApp"]

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
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.max_depth = max_depth
        self.path = path
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") != self.path:
            await _respond(send, 404, {"error": f"not found: the MCP endpoint is {self.path}"})
            return
        if scope["type"] != "http" or scope.get("method") != "POST" or not self._admitted(scope):
            await self.app(scope, receive, send)  # the SDK answers (401 for a bad token)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body:
                text = f"message longer than {self.max_body} bytes"
                await _respond(send, 413, _error(INVALID_REQUEST, text))
                return
            if not message.get("more_body"):
                break
        answer = self._check(bytes(body))
        if answer is DROP:
            await _respond(send, 202, None)
            return
        if answer is not None:
            await _respond(send, 400, answer)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _admitted(self, scope: Scope) -> bool:
        """Whether the request carries a known token (always, without ``--token-file``): the
        body of a request that does not is never read; the SDK refuses it with 401."""
        if self.tokens is None:
            return True
        for key, value in scope.get("headers", ()):
            if key.lower() == b"authorization" and value[:7].lower() == b"bearer ":
                return self.tokens.find(value[7:].decode("latin-1")) is not None
        return False

    def _check(self, body: bytes) -> dict[str, Any] | None:
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            return _error(PARSE_ERROR, f"Parse error: the body is not UTF-8 ({exc})")
        try:
            message = parse_json(text, max_depth=self.max_depth)
        except JsonInputError as exc:
            return _error(PARSE_ERROR, f"Parse error: {exc}")
        return refusal(message, integer_ids=True)


async def _respond(send: Send, status: int, payload: dict[str, Any] | None) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")] if payload is not None else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
