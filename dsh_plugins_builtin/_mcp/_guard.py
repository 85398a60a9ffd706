"""What a mounted server sends, checked before the SDK session sees it.

The SDK's client session validates a whole ``tools/list`` page at once (one bad tool rejects
every tool) and, given a malformed ``tools/call`` result, logs a validation error and leaves
the call waiting for its timeout. `Guard` sits between the transport and the session:

- it notes the method (and tool) of every request the session sends;
- a ``tools/list`` answer is checked tool by tool: a tool that is not a valid MCP tool, or whose
  name was already listed, whose definition is over `MAX_TOOL_BYTES` or whose input schema
  holds an unprintable character where it cannot be escaped (`_text.unsafe_in_schema`), is
  dropped and reported (`Guard.rejected`), the rest go on; one listing (all its pages) reads
  at most `MAX_TOOLS` tools and `MAX_LIST_BYTES` of definitions: there it stops (the page's
  cursor dropped), the tools that fit are mounted and the rest reported as not mounted;
- a ``tools/call`` answer that is not a valid result, a line over the bound (`Oversized`) and
  any other malformed answer become, at once, a JSON-RPC error for that request with code
  `BAD_RESULT`, naming the server and the tool;
- a line that is not JSON, or a message that answers nothing, is dropped and noted; an
  answer whose id is not spelt as dsh sent it (``"7"`` or ``" 7"`` for ``7``, which the SDK
  would take for ``7``) never reaches the session: it ends that request at once with
  ``BAD_RESULT`` (`Guard.answered`), so no answer the guard did not check is delivered; a
  request the session gives up on (``notifications/cancelled``) is forgotten;
- what the server sends unasked costs a bounded amount, whatever it sends: a notification never
  reaches the session (the SDK would start a task for each); ``tools/list_changed`` calls
  `Guard.on_list_changed` (the link's `_relist.Relister`, which folds any number into one
  re-listing), every other kind (log messages, progress, resources or prompts changed, ...) is
  dropped; at most `MAX_ASKED` requests of the server are unanswered at once, more are dropped,
  and so is a request whose id is one the session has not answered yet (each delivered
  request counts until its answer goes out, however its id is spelt again).

From an HTTP server the SDK's transport hands over parsed messages; the bound
(``max_result_bytes``) is kept while they are read (`_bounded`: a JSON body counted chunk by
chunk, each server-sent event by the SDK), and the error the transport then delivers for the
request is turned into the same refusal as an oversized stdio line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ._bounded import MARK
from ._stdio import Oversized, Raw
from ._text import printable, unsafe_in_schema

__all__ = ["BAD_RESULT", "Guard"]

from ._mount import BAD_RESULT

_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_NOTES = 20
MAX_ASKED = 8
"""The most requests of a server the session has not answered yet; more are dropped."""
MAX_TOOLS = 1000
"""The most tools one listing of a server reads (every page, mounted or not)."""
MAX_LIST_BYTES = 8 * 1024 * 1024
"""The most bytes of tool definitions (as JSON) one listing of a server reads."""
MAX_TOOL_BYTES = 256 * 1024
"""The longest tool definition (as JSON) mounted."""
DETAIL = 2000
"""The longest detail (what the server sent) an error carries for ``--trace``."""


def _shown(value: Any) -> str:
    """*value* (what a server sent) for a trace detail: JSON, escaped, at most `DETAIL` chars."""
    try:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        text = json.dumps(text, ensure_ascii=True, default=repr)
    except (TypeError, ValueError):
        text = ascii(value)
    except RecursionError:  # ascii() would recurse as deep
        text = "(nested too deeply to show)"
    return text if len(text) <= DETAIL else f"{text[:DETAIL]}... ({len(text)} chars)"


def _errors(exc: Exception) -> str:
    """Every error of *exc* (a validation error's each place and message), on one line."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'the message'}: {e['msg']}"
            for e in exc.errors()[:10]
        )
    return _first_line(exc)


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the message"
        return f"{where}: {error['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class Guard:
    """The checks between one server's transport and its session (module docstring)."""

    def __init__(self, server: str, *, limit: int | None = None) -> None:
        self.server = server
        self.limit = limit
        """``max_result_bytes``: to recognise the HTTP transport's error for an answer over it
        (a stdio transport bounds its lines itself)."""
        self.rejected: list[str] = []
        """Tools of the last listing that were not mounted, and why."""
        self.notes: list[str] = []
        """The last protocol errors of the server (at most 20)."""
        self._pending: dict[Any, tuple[str, str | None]] = {}
        self._listed: set[str] = set()
        self._read = (0, 0)
        """How many tools, and bytes of them, the listing under way has read."""
        self._asked: set[int | str] = set()
        """The ids of the server's requests the session has not answered yet."""
        self.on_list_changed: Callable[[], None] | None = None
        """Called for each ``notifications/tools/list_changed`` (nothing else is told of it)."""
        self.dropped = 0
        """How many notifications and requests of the server were dropped unseen."""

    def note(self, text: str) -> None:
        self.notes = [*self.notes[-(_NOTES - 1) :], printable(text)]

    def sent(self, message: Any) -> None:
        """Note a message the session sends: a request's method (and tool); forget a request
        the session gave up on."""
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            if message.id is not None:
                self._asked.discard(coerce_request_id(message.id))
        elif isinstance(message, types.JSONRPCNotification):
            if message.method == "notifications/cancelled" and message.params:
                self._pending.pop(message.params.get("requestId"), None)
        elif isinstance(message, types.JSONRPCRequest):
            params = message.params or {}
            tool = params.get("name") if message.method == "tools/call" else None
            if message.method == "tools/list" and not params.get("cursor"):
                self._listed, self.rejected, self._read = set(), [], (0, 0)
            self._pending[message.id] = (message.method, tool)

    async def outbound(
        self, messages: MemoryObjectReceiveStream[SessionMessage], out: MemoryObjectSendStream[Any]
    ) -> None:
        """Forward the session's messages, noting each request's method and tool."""
        async with messages, out:
            async for item in messages:
                self.sent(item.message)
                await out.send(item)

    async def inbound(
        self,
        raw: MemoryObjectReceiveStream[Raw] | MemoryObjectReceiveStream[SessionMessage | Exception],
        out: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        """Check each message from the server; deliver it, an error in its place, or nothing."""
        async with raw, out:
            async for item in raw:
                for message in self.check(item):
                    await out.send(SessionMessage(message))

    def _refuse(self, request_id: Any, what: str, detail: str | None = None) -> types.JSONRPCError:
        """The error that ends request *request_id*: *what* in one line for the model, and
        *detail* (what the server sent, bounded and escaped) for the operator's trace."""
        method, tool = self._pending.pop(request_id, ("?", None))
        about = f"tool {tool!r}" if tool else method
        text = f"MCP server {self.server!r} answered {about} with {what}"
        self.note(text)
        if detail is not None and len(detail) > 3 * DETAIL // 2:
            detail = f"{detail[: 3 * DETAIL // 2]}..."
        error = types.ErrorData(code=BAD_RESULT, message=text, data=detail)
        return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)

    def check(self, item: Raw | SessionMessage) -> list[types.JSONRPCMessage]:
        """What to deliver to the session for *item* from the server (see the module docstring)."""
        if isinstance(item, Exception):
            self.note(f"MCP server {self.server!r} sent {item}")
            return []
        if isinstance(item, Oversized):
            return self._oversized(item)
        if isinstance(item, SessionMessage):  # from the HTTP transport: parsed, not yet checked
            message = item.message
            if isinstance(message, types.JSONRPCError) and self._too_large(message):
                detail = f"the HTTP transport said: {_shown(message.error.message)}"
                return [self._refuse(message.id, self._over(), detail)]
            item = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        if "method" in item and not self._unasked(item):
            return []
        request_id, exact = self.answered(item.get("id"))
        if "method" not in item and not exact:
            return self._misspelt(item.get("id"), request_id)
        pending = self._pending.get(request_id) if "method" not in item else None
        if pending is not None and "method" not in item and "result" in item:
            try:
                item = {**item, "result": self._result(pending[0], item["result"])}
            except (ValidationError, ValueError, TypeError) as exc:
                detail = f"{_errors(exc)}; the result: {_shown(item['result'])}"
                what = f"a malformed result: {_first_line(exc)}"
                return [self._refuse(request_id, what, detail)]
        try:
            message = types.jsonrpc_message_adapter.validate_python(item, by_name=False)
        except ValidationError as exc:
            if pending is not None:
                detail = f"{_errors(exc)}; the answer: {_shown(item)}"
                what = f"a malformed answer: {_first_line(exc)}"
                return [self._refuse(request_id, what, detail)]
            self.note(f"MCP server {self.server!r} sent a malformed message: {_first_line(exc)}")
            return []
        if isinstance(message, types.JSONRPCError) and message.error.code == BAD_RESULT:
            # dsh's own refusal code, sent by the server: an ordinary server error, its data
            # (unchecked, unbounded) dropped, so it cannot pass for a refusal of the guard
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=message.error.message)
            message = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._pending.pop(message.id, None)
        elif isinstance(message, types.JSONRPCRequest):
            self._asked.add(coerce_request_id(message.id))
        return [message]

    def answered(self, request_id: Any) -> tuple[Any, bool]:
        """The pending request an answer with id *request_id* is taken for (by the SDK, which
        reads ``"7"`` as ``7``), or None; and whether the id is spelt exactly as it was sent."""
        if type(request_id) is int and request_id in self._pending:
            return request_id, True
        key: Any = None
        if isinstance(request_id, str):
            try:
                key = int(request_id)
            except ValueError:
                key = None
        elif isinstance(request_id, bool | float):
            key = request_id
        if key is not None and key in self._pending:
            return int(key), False
        return None, False

    def _misspelt(self, sent: Any, request_id: Any) -> list[types.JSONRPCMessage]:
        """For an answer whose id *sent* is not one dsh sent: end *request_id*, the request the
        SDK would take it for, at once; or drop it (it answers nothing)."""
        if request_id is None:
            self.note(
                f"MCP server {self.server!r} sent an answer to no request (id {_shown(sent)})"
            )
            return []
        what = f"an answer whose id {_shown(sent)} is not spelt as sent ({request_id})"
        return [self._refuse(request_id, what)]

    def _unasked(self, item: dict[str, Any]) -> bool:
        """Whether to deliver *item*, a notification or request from the server (bounded)."""
        if "id" not in item:  # a notification: never delivered
            if item["method"] == "notifications/tools/list_changed" and self.on_list_changed:
                self.on_list_changed()
            else:
                self.dropped += 1
            return False
        request_id = item["id"]
        again = isinstance(request_id, int | str) and coerce_request_id(request_id) in self._asked
        if not again and len(self._asked) < MAX_ASKED:
            return True
        self.dropped += 1
        if self.dropped % 1000 == 1:  # noted now and then, not per message
            why = "a request id still unanswered" if again else f"more than {MAX_ASKED} requests"
            self.note(
                f"MCP server {self.server!r} sent {why} at once; {self.dropped} messages dropped"
            )
        return False

    def _over(self, limit: int | None = None) -> str:
        return (
            f"a message over max_result_bytes ({limit or self.limit} bytes); raise "
            f"[plugin.mcp.servers.{self.server}] max_result_bytes to accept it"
        )

    def _too_large(self, error: types.JSONRPCError) -> bool:
        """Whether the HTTP transport's *error* for a pending request says its answer was cut
        off at the bound (`_bounded`, or the SDK's own bound on one server-sent event)."""
        text = error.error.message
        if error.id not in self._pending or self.limit is None:
            return False
        return MARK in text or f"exceeded the {self.limit} byte limit" in text

    def _oversized(self, item: Oversized) -> list[types.JSONRPCMessage]:
        what = self._over(item.limit)
        detail = f"its first {len(item.prefix)} bytes: {_shown(item.prefix)}"
        head = item.prefix.split(b'"result"', 1)[0].split(b'"error"', 1)[0]
        found = _ID.search(head)
        if found is not None:
            try:
                request_id = types.jsonrpc_message_adapter.validate_json(
                    b'{"jsonrpc":"2.0","id":' + found.group(1) + b',"result":{}}'
                ).id  # type: ignore[union-attr]
            except ValidationError:
                request_id = None
            request_id = self.answered(request_id)[0]
            if request_id is not None:
                return [self._refuse(request_id, what, detail)]
        calls = [key for key, (method, _) in self._pending.items() if method == "tools/call"]
        return [
            self._refuse(key, what, detail) for key in calls
        ]  # whose it was is unknown: every call

    def _result(self, method: str, result: Any) -> Any:
        """*result* checked for *method*: a ``tools/list`` page tool by tool, a call result whole."""
        if method == "tools/call":
            types.CallToolResult.model_validate(result, by_name=False)
            return result
        if method != "tools/list":
            return result
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            raise TypeError('"tools" must be a list')
        kept: list[Any] = []
        for index, tool in enumerate(result["tools"]):
            count, size = self._read
            length = _length(tool)
            if count >= MAX_TOOLS or size + min(length, MAX_TOOL_BYTES + 1) > MAX_LIST_BYTES:
                self.rejected.append(self._stopped(len(result["tools"]) - index))
                return {k: v for k, v in result.items() if k not in ("tools", "nextCursor")} | {
                    "tools": kept
                }
            self._read = (count + 1, size + min(length, MAX_TOOL_BYTES + 1))
            name = tool.get("name") if isinstance(tool, dict) else None
            shown = repr(name) if isinstance(name, str) else "without a name"
            if length > MAX_TOOL_BYTES:
                self.rejected.append(
                    f"tool {shown} not mounted: its definition is over {MAX_TOOL_BYTES} bytes"
                )
                continue
            try:
                types.Tool.model_validate(tool, by_name=False)
            except ValidationError as exc:
                self.rejected.append(f"tool {shown} not mounted: {_first_line(exc)}")
                continue
            unsafe = unsafe_in_schema(tool["inputSchema"])
            if unsafe is not None:
                self.rejected.append(
                    f"tool {shown} not mounted: its input schema has an unprintable character "
                    f"(control, format, private-use or unassigned) in {unsafe}"
                )
                continue
            if name in self._listed:
                self.rejected.append(f"tool {shown} is listed twice: the first is mounted")
                continue
            self._listed.add(str(name))
            kept.append(tool)
        return {**result, "tools": kept}

    def _stopped(self, left: int) -> str:
        over = (
            f"{MAX_TOOLS} tools"
            if self._read[0] >= MAX_TOOLS
            else f"{MAX_LIST_BYTES} bytes of tools"
        )
        return (
            f"the listing stopped at {over} (the most one server may list): {left} more tools "
            "on that page, and any later pages, not mounted"
        )


def _length(tool: Any) -> int:
    """The length of *tool* as compact JSON (a tool too deeply nested to write: no bound)."""
    try:
        return len(json.dumps(tool, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return MAX_TOOL_BYTES + 1


def guarded_pumps(
    guard: Guard,
    raw: MemoryObjectReceiveStream[Raw] | MemoryObjectReceiveStream[SessionMessage | Exception],
    to_server: MemoryObjectSendStream[Any],
    task_group: anyio.abc.TaskGroup,
) -> tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]:
    """Start *guard*'s two pumps in *task_group*; the streams the SDK session reads and writes."""
    to_session, session_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    session_writes, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    task_group.start_soon(guard.inbound, raw, to_session)
    task_group.start_soon(guard.outbound, from_session, to_server)
    return session_reads, session_writes
