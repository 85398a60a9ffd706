"""A mounted HTTP server's answer is read with a bound: an endless body ends its call at once.

The server here is raw HTTP (no SDK): ``tools/call`` of ``flood`` is answered with a JSON body
(or, for ``flood-sse``, one server-sent event) that never ends. Without a bound kept while
reading, the SDK's transport would read it until the call's budget ran out.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trio

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin

SCHEMA = {"type": "object", "properties": {}}
TOOLS = [{"name": name, "inputSchema": SCHEMA} for name in ("flood", "flood-sse", "small")]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.send_header("mcp-session-id", "s1")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._reply(405)

    def do_DELETE(self) -> None:
        self._reply(200)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        rid, method = request.get("id"), request.get("method")
        if rid is None:
            return self._reply(202)
        if method == "initialize":
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-http", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call" and request["params"]["name"] != "small":
            return self._flood(rid, sse=request["params"]["name"] == "flood-sse")
        else:
            result = {"content": [{"type": "text", "text": "ok"}]}
        self._reply(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())

    def _flood(self, rid: int, sse: bool) -> None:
        """A body (or an event) that never ends, until the client stops reading."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if sse else "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        head = f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[{{"type":"text","text":"'
        chunks = [(("data: " if sse else "") + head).encode(), b"x" * 65536]
        try:
            while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                chunks = chunks[1:]
        except OSError:
            return


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the client hanging up on a flood is the point


@pytest.fixture
def raw_http_server():
    server = _Server(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.stopping = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.stopping.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("tool", ["flood", "flood-sse"])
def test_an_endless_http_answer_ends_its_call_at_the_bound(raw_http_server, tool):
    plugin = McpPlugin()
    # A long budget: without a bound kept while reading, the call would wait all of it out.
    servers = {"r": {"url": raw_http_server, "max_result_bytes": 100_000, "timeout_ms": 600_000}}
    try:
        host = Host(
            {"plugin": {"mcp": {"servers": servers}}}, plugins=[plugin], load_entrypoints=False
        )
        assert plugin.status()["r"]["status"] == "running", plugin.status()
        result = trio.run(host.call, f"mcp__r__{tool}", {})
        assert result.code == "MCP_BAD_RESULT", result
        assert "max_result_bytes (100000 bytes)" in result.text
        assert "[plugin.mcp.servers.r]" in result.text
        assert trio.run(host.call, "mcp__r__small", {}).text == "ok"  # the session goes on
    finally:
        plugin.close()
