"""Reading a mounted HTTP server's answers with a bound, while they arrive.

The SDK's streamable-HTTP client reads a JSON answer whole (``response.aread()``) before it
parses it, and bounds only server-sent events (``max_sse_event_size``, which `_mount` sets to
the server's ``max_result_bytes``). `BoundedTransport` wraps the HTTP client's transport: the
body of every answer that is not an event stream is counted chunk by chunk as the SDK reads it,
and the read fails (`TooLarge`, a `httpx2.StreamError` the SDK turns into an error for that
request) as soon as it passes the bound, so dsh never holds more than the bound and one chunk.
A compressed body could expand past any bound after it was counted, so dsh asks for none
(``Accept-Encoding: identity``) and refuses one that comes anyway.

`_guard.Guard` recognises both errors (`TooLarge` and the SDK's event bound) in the error the
SDK delivers for the request and ends the call as an oversized stdio line does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

__all__ = ["MARK", "BoundedTransport", "TooLarge"]

MARK = "dsh: answer over max_result_bytes"
"""How `TooLarge` starts: the guard finds it in the SDK's error for the request."""


class TooLarge(httpx2.StreamError):
    """An answer's body passed the bound while it was read."""


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, encoding: str) -> None:
        self._inner, self._limit, self._encoding = inner, limit, encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding not in ("", "identity"):
            raise TooLarge(f"{MARK} (a {self._encoding!r} body could expand past it)")
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise TooLarge(f"{MARK} ({self._limit} bytes)")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """*inner* (default: httpx2's own), with each answer's body bounded to *limit* bytes."""

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._limit = limit
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if not kind.startswith("text/event-stream"):  # events: bounded one by one by the SDK
            stream = response.stream
            assert isinstance(stream, httpx2.AsyncByteStream)
            encoding = response.headers.get("content-encoding", "").strip().lower()
            response.stream = _Bounded(stream, self._limit, encoding)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
