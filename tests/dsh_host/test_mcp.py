"""``dsh mcp serve``: the MCP stdio protocol over the gated tools."""

from __future__ import annotations

import json
import sys
import textwrap

import trio
import trio.testing

from dsh_host import Deny, define_tool, hookimpl
from dsh_host._mcp import serve


class Client:
    """Drives `serve` over in-memory streams, one JSON-RPC line at a time."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, message) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.stream.send_all(data + b"\n")

    async def receive(self):
        while b"\n" not in self.buffer:
            self.buffer += await self.stream.receive_some(65536)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    async def request(self, id, method, params=None):
        await self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}})
        return await self.receive()


def host_with_tools(make_host, *plugins):
    async def echo(args):
        return "echo: " + args["text"]

    async def hang(args, ctx):
        await trio.sleep_forever()

    return make_host(
        *plugins,
        tools=[
            define_tool(
                name="echo",
                description="Echo text",
                parameters={"text": {"type": "string", "required": True}},
                execute=echo,
            ),
            define_tool(name="hang", description="Never returns", parameters={}, execute=hang),
        ],
    )


async def run_session(host, body):
    left, right = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:

        async def server():
            await serve(host, right, right)

        nursery.start_soon(server)
        await body(Client(left))
        await left.send_eof()


async def test_initialize_list_and_call(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        init = await client.request(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        assert init["result"]["protocolVersion"] == "2025-06-18"
        assert init["result"]["capabilities"] == {"tools": {"listChanged": False}}
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = await client.request(2, "tools/list")
        assert [t["name"] for t in tools["result"]["tools"]] == ["echo", "hang"]
        assert tools["result"]["tools"][0]["inputSchema"]["required"] == ["text"]
        called = await client.request(
            3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
        )
        assert called == {
            "jsonrpc": "2.0",
            "id": 3,
            "result": {"content": [{"type": "text", "text": "echo: hi"}], "isError": False},
        }
        bad = await client.request(4, "tools/call", {"name": "echo", "arguments": {}})
        assert bad["result"]["isError"] is True
        assert bad["result"]["_meta"]["dsh/code"] == "INVALID_ARGS"
        assert (await client.request(5, "ping"))["result"] == {}

    await run_session(host, body)


async def test_unknown_version_gets_our_latest_and_errors_are_json_rpc(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        init = await client.request(1, "initialize", {"protocolVersion": "1999-01-01"})
        assert init["result"]["protocolVersion"] == "2025-11-25"
        missing = await client.request(2, "resources/list")
        assert missing["error"]["code"] == -32601
        await client.send(b"{not json")
        assert (await client.receive())["error"]["code"] == -32700
        await client.send({"id": 3, "method": "ping"})
        assert (await client.receive())["error"]["code"] == -32600
        no_name = await client.request(4, "tools/call", {"arguments": {}})
        assert no_name["error"]["code"] == -32602

    await run_session(host, body)


async def test_policy_applies_to_mcp_calls(make_host):
    class NoEcho:
        name = "no-echo"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("echo is off") if execution.name == "echo" else None

    host = host_with_tools(make_host, NoEcho())

    async def body(client):
        result = (
            await client.request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        )["result"]
        assert result["content"] == [{"type": "text", "text": "Error: echo is off"}]
        assert result["_meta"] == {"dsh/code": "DENIED", "dsh/decided_by": "no-echo"}

    await run_session(host, body)


async def test_cancelled_notification_aborts_the_call_and_other_requests_keep_flowing(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "hang", "arguments": {}},
            }
        )
        assert (await client.request(8, "ping"))["id"] == 8  # served while 7 hangs
        await client.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 7, "reason": "user"},
            }
        )
        reply = await client.receive()
        assert reply["id"] == 7
        assert reply["result"]["_meta"]["dsh/code"] == "ABORTED"

    await run_session(host, body)


async def test_official_mcp_client_interoperates(tmp_path):
    """The reference SDK's client, over a real subprocess and stdio."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = tmp_path / "server.py"
    server.write_text(
        textwrap.dedent(
            """
            import trio
            from dsh_host import Host, define_tool
            from dsh_host._mcp import serve_stdio

            async def echo(args):
                return "echo: " + args["text"]

            host = Host(load_entrypoints=False)
            host.registry.register(define_tool(name="echo", description="Echo", parameters={"text": {"type": "string", "required": True}}, execute=echo))
            trio.run(serve_stdio, host)
            """
        )
    )

    async def client():
        params = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            called = await session.call_tool("echo", {"text": "hi"})
            failed = await session.call_tool("echo", {})
            return init.server_info.name, [t.name for t in tools.tools], called, failed

    name, tools, called, failed = await trio.to_thread.run_sync(anyio.run, client)
    assert name == "dsh"
    assert tools == ["echo"]
    assert called.content[0].text == "echo: hi"
    assert called.is_error is False
    assert failed.is_error is True
    assert "missing required property" in failed.content[0].text
