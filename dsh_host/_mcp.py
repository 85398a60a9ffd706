"""``dsh mcp serve``: the host's gated tools as a Model Context Protocol server over stdio.

Newline-delimited JSON-RPC 2.0 (the MCP stdio transport). Every ``tools/call`` goes through the
whole pipeline, so permissions, approval, the sandbox and audit apply to MCP clients exactly as
to ``dsh call``. Requests are served concurrently; ``notifications/cancelled`` aborts the call's
`AbortSignal`. Nothing but protocol messages is written to stdout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import trio

from ._signal import AbortSignal
from ._values import ImageBlock, TextBlock, ToolExecutionResult

if TYPE_CHECKING:
    from ._host import Host

__all__ = ["McpServer", "serve_stdio"]

logger = logging.getLogger("dsh_host.mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
MAX_LINE = 64 * 1024 * 1024


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _version() -> str:
    try:
        return version("dsh-host")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def content_to_mcp(result: ToolExecutionResult) -> list[dict[str, Any]]:
    """MCP content blocks for a result (text and image blocks)."""
    out: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, TextBlock):
            out.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            out.append({"type": "image", "data": block.data, "mimeType": block.mime_type})
    return out


class McpServer:
    """One MCP session: reads requests with `receive_line`, answers with `send`."""

    def __init__(self, host: Host, send: Callable[[bytes], Awaitable[None]]) -> None:
        self.host = host
        self._send_bytes = send
        self._send_lock = trio.Lock()
        self._inflight: dict[Any, AbortSignal] = {}
        self._ids = 0

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._send_lock:
            await self._send_bytes(data)

    async def _reply(
        self, request_id: Any, result: Any = None, error: _RpcError | None = None
    ) -> None:
        if error is not None:
            message = {"code": error.code, "message": error.message}
            await self.send({"jsonrpc": "2.0", "id": request_id, "error": message})
        else:
            await self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def handle_line(self, line: bytes, nursery: trio.Nursery) -> None:
        """Dispatch one line; requests that call tools run in *nursery*."""
        try:
            message = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            await self._reply(None, error=_RpcError(PARSE_ERROR, f"parse error: {exc}"))
            return
        batch = message if isinstance(message, list) else [message]
        for item in batch:
            await self._handle(item, nursery)

    async def _handle(self, message: Any, nursery: trio.Nursery) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            await self._reply(None, error=_RpcError(INVALID_REQUEST, "not a JSON-RPC 2.0 message"))
            return
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if method is None:
            return  # a response to something we never sent
        if "id" not in message:
            self._notification(method, params)
            return
        if method == "tools/call":
            nursery.start_soon(self._call_tool, request_id, params)
            return
        try:
            result = self._request(method, params)
        except _RpcError as exc:
            await self._reply(request_id, error=exc)
        else:
            await self._reply(request_id, result)

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            signal = self._inflight.get(params.get("requestId"))
            if signal is not None:
                signal.abort(params.get("reason") or "cancelled by the MCP client")

    def _request(self, method: str, params: Any) -> Any:
        if method == "initialize":
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            chosen = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            return {
                "protocolVersion": chosen,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "dsh", "version": _version()},
                "instructions": "Tools served by dsh; every call passes its policy pipeline.",
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [s.to_mcp() for s in self.host.registry.schemas()]}
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _call_tool(self, request_id: Any, params: Any) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            await self._reply(
                request_id, error=_RpcError(INVALID_PARAMS, "tools/call needs a tool name")
            )
            return
        arguments = params.get("arguments")
        signal = AbortSignal()
        self._inflight[request_id] = signal
        self._ids += 1
        try:
            result = await self.host.call(
                params["name"],
                {} if arguments is None else arguments,
                call_id=f"mcp-{request_id if request_id is not None else self._ids}",
                signal=signal,
            )
        finally:
            self._inflight.pop(request_id, None)
        reply: dict[str, Any] = {"content": content_to_mcp(result), "isError": result.is_error}
        if result.is_error and result.error is not None:
            reply["_meta"] = {"dsh/code": result.error.code, "dsh/decided_by": result.decided_by}
        await self._reply(request_id, reply)


async def serve(
    host: Host,
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
) -> None:
    """Serve one MCP session until *receive* reaches end of file."""
    server = McpServer(host, send.send_all)
    buffer = b""
    async with trio.open_nursery() as nursery:
        while True:
            chunk = await receive.receive_some(65536)
            if not chunk:
                break
            buffer += chunk
            if len(buffer) > MAX_LINE and b"\n" not in buffer:
                await server._reply(None, error=_RpcError(INVALID_REQUEST, "message too large"))
                buffer = b""
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    await server.handle_line(line, nursery)
        if buffer.strip():
            await server.handle_line(buffer, nursery)


async def serve_stdio(host: Host) -> None:
    """Serve MCP on this process's stdin and stdout."""
    import os

    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    async with receive, send:
        await serve(host, receive, send)
