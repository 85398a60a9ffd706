"""Drive `dsh_host._mcp._service.serve` in process: raw JSON-RPC lines, or the official SDK client."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import trio
import trio.testing
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

from dsh_host import define_tool
from dsh_host._mcp._auth import Tokens
from dsh_host._mcp._service import serve

TOKEN = "test-token-0123456789abcdef"
"""The bearer token of the tests' HTTP servers (`serve_http` needs one)."""
TOKENS = Tokens.single(TOKEN)
AUTH = {"authorization": f"Bearer {TOKEN}"}
"""The header an HTTP test client sends."""

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


class Client:
    """Sends JSON-RPC lines to `serve` over an in-memory stream; reads its answers."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, message) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.stream.send_all(data + b"\n")

    async def receive_line(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(1 << 20)
            assert chunk, "the server closed its output"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    async def receive(self):
        line = await self.receive_line()
        line.decode("utf-8")  # strict: the server only writes UTF-8
        return json.loads(line, parse_constant=_no_constants)

    async def request(self, id, method, params=None):
        await self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}})
        return await self.receive()

    async def initialize(self, capabilities=None) -> dict:
        init = await self.request(0, "initialize", {**INIT, "capabilities": capabilities or {}})
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init


def _no_constants(name: str):
    raise AssertionError(f"the server wrote {name}, which is not JSON")


def host_with_tools(make_host, *plugins, **kwargs):
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
        **kwargs,
    )


async def run_session(host, body, **serve_kwargs):
    """Run `serve` against *body(client)*; close the input after it and wait for a clean end."""
    left, right = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(host, right, right, **serve_kwargs))
        client = Client(left)
        await body(client)
        await left.send_eof()


@asynccontextmanager
async def sdk_session(host, **client_kwargs):
    """The official SDK `ClientSession` talking JSON lines to `serve` (through the wire layer)."""
    left, right = trio.testing.memory_stream_pair()
    to_client_send, to_client = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    from_client, from_client_receive = anyio.create_memory_object_stream[SessionMessage](16)

    async def pump_out() -> None:
        async with from_client_receive:
            async for item in from_client_receive:
                dumped = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                await left.send_all(json.dumps(dumped).encode() + b"\n")

    async def pump_in() -> None:
        buffer = b""
        async with to_client_send:
            while chunk := await left.receive_some(1 << 20):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = types.jsonrpc_message_adapter.validate_json(line)
                    await to_client_send.send(SessionMessage(message))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(host, right, right))
        nursery.start_soon(pump_out)
        nursery.start_soon(pump_in)
        async with ClientSession(to_client, from_client, **client_kwargs) as session:
            await session.initialize()
            yield session
        nursery.cancel_scope.cancel()
