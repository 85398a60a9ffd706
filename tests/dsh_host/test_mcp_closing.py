"""Closing is cancellation: a client that goes away takes its running calls with it (issue 24 row 8)."""

from __future__ import annotations

import trio
import trio.testing

from dsh_host import hookimpl
from dsh_host._mcp._service import serve
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

from .mcp_support import Client


class _Observer:
    name = "observer"

    def __init__(self) -> None:
        self.codes: list[str] = []

    @hookimpl
    def dsh_tool_result(self, execution, result):
        self.codes.append(result.code)


async def test_end_of_input_aborts_a_running_bash_call_at_once(make_host, tmp_path):
    """stdin closes while `bash` runs: the call ends ABORTED at once (not 10 s later, not ok)."""
    observer = _Observer()
    host = make_host(
        ToolsPlugin(), SandboxPlugin(), observer, config={"host": {"workspace": str(tmp_path)}}
    )
    left, right = trio.testing.memory_stream_pair()
    client = Client(left)
    with trio.fail_after(8):  # the old drain waited 10 s
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: serve(host, right, right))
            await client.initialize()
            call = {"name": "bash", "arguments": {"command": "echo started; sleep 30"}}
            await client.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            await trio.sleep(0.5)  # the command is running
            await left.send_eof()
            reply = await client.receive()
    assert reply["result"]["isError"] is True, reply
    assert reply["result"]["_meta"]["dsh/code"].startswith("ABORTED")
    assert observer.codes == ["ABORTED"]


async def test_requests_read_before_end_of_input_are_still_answered(make_host):
    observer = _Observer()
    host = make_host(observer)
    left, right = trio.testing.memory_stream_pair()
    client = Client(left)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(host, right, right))
        await client.initialize()
        await client.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        await client.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        await left.send_eof()
        replies = {(await client.receive())["id"] for _ in range(2)}
    assert replies == {2, 3}
