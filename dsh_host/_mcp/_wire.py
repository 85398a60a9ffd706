"""The validating front of ``dsh mcp serve`` on a byte stream (stdio): one JSON-RPC message a line.

The official SDK's own stdio transport reads unbounded lines, treats a request whose ``id`` is an
object, a float, ``true`` or ``null`` as a notification (so it never answers), and its writer
crashes on a lone surrogate. So this layer sits in front of the SDK session and owns the wire:

- lines are split in linear time and bounded (`DEFAULT_MAX_LINE`); a longer line is skipped up
  to its newline and answered with an Invalid Request error;
- each line is parsed strictly with `dsh_host.parse_json` (duplicate keys, depth, integer size);
- a malformed message gets the JSON-RPC error the spec prescribes (Parse error, Invalid Request
  with ``id: null`` when the id itself is unusable), a malformed notification gets nothing;
- request ids are swapped for fresh integers before the SDK sees them and swapped back on the
  way out, so every id the spec allows (string or number, lone surrogates included) is echoed
  exactly as it came, and ``notifications/cancelled`` is translated the same way;
- output is always valid JSON (``allow_nan=False``; a lone surrogate is written escaped).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .. import JsonInputError, parse_json

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_LINE",
    "DROP",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "Wire",
    "encode_message",
    "refusal",
]

logger = logging.getLogger("dsh_host.mcp")

DEFAULT_MAX_LINE = 16 * 1024 * 1024
"""The longest message line read (bytes); ``dsh mcp serve --max-message-bytes`` changes it."""

DEFAULT_MAX_DEPTH = 512
"""The deepest JSON nesting accepted in one message."""

DEFAULT_DRAIN_TIMEOUT = 10.0
"""Seconds the calls still running at end of input may take before they are aborted."""

PARSE_ERROR, INVALID_REQUEST, INTERNAL_ERROR = -32700, -32600, -32603

_INITIALIZE_DEFAULTS: dict[str, Any] = {
    "protocolVersion": "2025-03-26",
    "capabilities": {},
    "clientInfo": {"name": "unknown", "version": "0"},
}
_CANCELLED_KEEP = 1024  # ids of cancelled requests remembered, in case their answer was in flight

Session = Callable[
    [MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]],
    Awaitable[None],
]


def _valid_id(value: Any) -> bool:
    """MCP request ids are strings or numbers (never null, never a boolean)."""
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


def _kind(value: Any) -> str:
    """What JSON value *value* is, in words (for an error message)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _id_key(value: Any) -> tuple[str, str]:
    """A key telling ``1``, ``1.0`` and ``"1"`` apart (they are three different ids)."""
    return (type(value).__name__, value if isinstance(value, str) else repr(value))


def encode_message(message: dict[str, Any]) -> bytes:
    """One message as a line of JSON: UTF-8, no NaN, a lone surrogate escaped (never raises)."""
    text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: JSON's \\uXXXX escape keeps it, losslessly
        return json.dumps(message, allow_nan=False, separators=(",", ":")).encode() + b"\n"


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


DROP: dict[str, Any] = {}
"""`refusal`'s answer for a malformed notification or response: drop it, say nothing."""


def refusal(message: Any, *, integer_ids: bool = False) -> dict[str, Any] | None:
    """The JSON-RPC error a parsed *message* gets, `DROP` to ignore it, or ``None`` if it is fine.

    *integer_ids* refuses fractional ids too (over HTTP the SDK cannot echo them).
    """
    if isinstance(message, list):
        what = "an empty batch" if not message else "a batch"
        return _error(None, INVALID_REQUEST, f"{what}: MCP takes one JSON-RPC message at a time")
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "a message must be a JSON object")
    has_id = "id" in message
    raw_id = message.get("id")
    id_ok = has_id and _valid_id(raw_id) and not (integer_ids and isinstance(raw_id, float))
    if "method" not in message and ("result" in message or "error" in message):
        well_formed = id_ok and ("result" in message) != ("error" in message)
        if not well_formed:
            logger.info("dsh mcp serve: ignoring a malformed response from the client")
        return None if well_formed else DROP
    if has_id and not id_ok:
        kinds = "a string or an integer" if integer_ids else "a string or a number"
        return _error(None, INVALID_REQUEST, f"the id must be {kinds}, not {_kind(raw_id)}")
    problem = None
    if message.get("jsonrpc") != "2.0":
        problem = 'not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0"'
    elif not isinstance(message.get("method"), str):
        problem = '"method" must be a string'
    elif "params" in message and not isinstance(message["params"], dict):
        problem = '"params" must be an object'
    if problem is None:
        return None
    return _error(raw_id, INVALID_REQUEST, problem) if has_id else DROP


class Wire:
    """One session's wire: reads *receive*, writes *send*, and runs the SDK *session* between."""

    def __init__(
        self,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        max_line: int = DEFAULT_MAX_LINE,
        max_depth: int = DEFAULT_MAX_DEPTH,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        on_end_of_input: Callable[[], None] | None = None,
    ) -> None:
        if max_line < 1:
            raise ValueError(f"max_line must be a positive number of bytes, not {max_line!r}")
        self._receive = receive
        self._send = send
        self._max_line = max_line
        self._max_depth = max_depth
        self._drain_timeout = drain_timeout
        self._on_end_of_input = on_end_of_input
        self._send_lock = trio.Lock()
        self._next_id = 0
        self._outer: dict[int, Any] = {}  # our id -> the client's id
        self._inner: dict[tuple[str, str], int] = {}  # the client's id -> our latest id
        self._cancelled: OrderedDict[int, None] = OrderedDict()
        self._pending: set[int] = set()  # requests owed an answer
        self._idle = trio.Event()
        self.initialized = False
        """Whether the client said ``notifications/initialized`` (notifications may go out)."""
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception]

    async def run(self, session: Session) -> None:
        """Serve until the input ends (EOF) and every request read has been answered (or aborted)."""
        to_session, session_in = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        session_out, from_session = anyio.create_memory_object_stream[SessionMessage](64)
        self._to_session = to_session
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop, from_session)

            async def run_session() -> None:
                try:
                    await session(session_in, session_out)
                finally:
                    self._give_up()  # nothing more will be answered

            async with session_out:
                nursery.start_soon(run_session)
                async with to_session:
                    await self._read_loop()
                    # End of input: the client is gone, so its running calls are aborted at
                    # once (`on_end_of_input`: they end ABORTED, audited); what else was asked
                    # is answered, for up to drain_timeout, before the session closes.
                    if self._on_end_of_input is not None:
                        self._on_end_of_input()
                    with trio.move_on_after(self._drain_timeout):
                        while self._pending:
                            self._idle = trio.Event()
                            await self._idle.wait()

    def _forget(self, inner: int) -> Any:
        """Drop the mapping of our id *inner*; return the client's id it stood for."""
        outer = self._outer.pop(inner, None)
        self._cancelled.pop(inner, None)
        self._settled(inner)
        key = _id_key(outer)
        if self._inner.get(key) == inner:
            del self._inner[key]
        return outer

    def _settled(self, inner: int) -> None:
        """Request *inner* was answered or cancelled: no answer is owed for it any more."""
        self._pending.discard(inner)
        if not self._pending:
            self._idle.set()

    def _give_up(self) -> None:
        self._pending.clear()
        self._idle.set()

    # -- output --------------------------------------------------------------------------

    async def write(self, message: dict[str, Any]) -> None:
        """Write one message (whole lines only: a lock keeps concurrent writers apart)."""
        data = encode_message(message)
        async with self._send_lock:
            await self._send.send_all(data)

    async def _write_loop(self, from_session: MemoryObjectReceiveStream[SessionMessage]) -> None:
        async with from_session:
            async for item in from_session:
                message = item.message
                dumped = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    inner = dumped.get("id")
                    if isinstance(inner, int) and inner in self._outer:
                        dumped["id"] = self._forget(inner)
                try:
                    await self.write(dumped)
                except ValueError as exc:  # a NaN in a result: say so rather than send non-JSON
                    logger.error("dsh mcp serve: cannot encode a message as JSON: %s", exc)
                    if "id" in dumped:
                        await self.write(
                            _error(dumped["id"], INTERNAL_ERROR, f"result is not JSON: {exc}")
                        )
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    logger.info("dsh mcp serve: the client closed its input; dropping output")
                    self._give_up()
                    async for _ in from_session:  # keep the session from blocking on us
                        pass
                    return

    # -- input ---------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        parts: list[bytes | bytearray] = []
        size = 0
        skipping = False
        limit = self._max_line
        while True:
            chunk = await self._receive.receive_some(65536)
            if not chunk:
                break
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                if skipping:
                    skipping = False
                    await self.write(
                        _error(None, INVALID_REQUEST, f"message longer than {limit} bytes")
                    )
                elif size + end - start > limit:
                    await self.write(
                        _error(None, INVALID_REQUEST, f"message longer than {limit} bytes")
                    )
                else:
                    parts.append(chunk[start:end])
                    await self._line(b"".join(parts))
                parts.clear()
                size = 0
                start = end + 1
            if not skipping and start < len(chunk):
                parts.append(chunk[start:])
                size += len(chunk) - start
                if size > limit:
                    parts.clear()
                    size = 0
                    skipping = True
        if skipping:
            await self.write(_error(None, INVALID_REQUEST, f"message longer than {limit} bytes"))
        elif parts:
            await self._line(b"".join(parts))

    async def _line(self, line: bytes | bytearray) -> None:
        line = line.strip(b" \t\r")
        if not line:
            return
        try:
            text = line.decode()
        except UnicodeDecodeError as exc:
            await self.write(
                _error(None, PARSE_ERROR, f"Parse error: the line is not UTF-8 ({exc})")
            )
            return
        try:
            message = parse_json(text, max_depth=self._max_depth)
        except JsonInputError as exc:
            await self.write(_error(None, PARSE_ERROR, f"Parse error: {exc}"))
            return
        await self._message(message)

    async def _message(self, message: Any) -> None:
        refused = refusal(message)
        if refused is not None:
            if refused is not DROP:
                await self.write(refused)
            return
        assert isinstance(message, dict)
        if "method" not in message:
            await self._response(message, message.get("id"))
            return
        has_id = "id" in message
        raw_id = message.get("id")
        reply_id = raw_id
        method = message["method"]
        assert isinstance(method, str)
        if not has_id:
            await self._notification(method, message.get("params"))
            return
        inner = self._next_id = self._next_id + 1
        self._outer[inner] = raw_id
        self._inner[_id_key(raw_id)] = inner
        self._pending.add(inner)
        forward: dict[str, Any] = {"jsonrpc": "2.0", "id": inner, "method": method}
        if "params" in message:
            forward["params"] = message["params"]
        if method == "initialize" and isinstance(forward.get("params"), dict):
            # Lenient about what old clients leave out; the SDK requires both.
            forward["params"] = {**_INITIALIZE_DEFAULTS, **forward["params"]}
        await self._forward(forward, reply_id)

    async def notify(self, method: str) -> None:
        """Send the notification *method* (no params), once the client is initialized."""
        if self.initialized:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.write({"jsonrpc": "2.0", "method": method})

    async def _notification(self, method: str, params: Any) -> None:
        forward: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if method == "notifications/initialized":
            self.initialized = True
        if method == "notifications/cancelled":
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if not _valid_id(request_id):
                return  # the spec: an unknown or malformed cancellation is ignored
            inner = self._inner.get(_id_key(request_id))
            if inner is None or inner not in self._outer:
                return
            assert isinstance(params, dict)
            params = {**params, "requestId": inner}
            self._cancelled[inner] = None
            self._settled(inner)
            while len(self._cancelled) > _CANCELLED_KEEP:
                self._forget(next(iter(self._cancelled)))
        if params is not None:
            forward["params"] = params
        await self._forward(forward, None)

    async def _response(self, message: dict[str, Any], request_id: Any) -> None:
        """The client's answer to a request the SDK sent (e.g. an elicitation)."""
        await self._forward({**message, "jsonrpc": "2.0"}, None)

    async def _forward(self, message: dict[str, Any], reply_id: Any) -> None:
        try:
            parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValueError as exc:
            if "id" in message and "method" in message:
                self._forget(message["id"])
                first = str(exc).splitlines()[0]
                await self.write(_error(reply_id, INVALID_REQUEST, f"Invalid Request: {first}"))
            return
        await self._to_session.send(SessionMessage(parsed))
