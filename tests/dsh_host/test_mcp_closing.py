"""Closing is cancellation: a client that goes away takes its running calls with it (issue 24 row 8)."""

from __future__ import annotations

from functools import partial

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


async def test_deleting_an_http_session_aborts_its_running_calls(make_host):
    """The HTTP form of closing: DELETE of the session cancels its calls; they end ABORTED."""
    import threading

    import httpx2

    from dsh_host import define_tool
    from dsh_host._mcp._service import serve_http

    from .mcp_support import AUTH, INIT, TOKENS

    started, ended = threading.Event(), threading.Event()
    codes: list[str] = []

    class Recorder:
        name = "recorder"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            codes.append(result.code)
            ended.set()

    async def hang(args, ctx):
        started.set()
        await trio.sleep_forever()

    tool = define_tool(name="hang", description="", parameters={}, execute=hang)
    host = make_host(Recorder(), tools=[tool])
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    def client(url):
        with httpx2.Client(timeout=30, headers=AUTH) as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
            opened = http.post(url, headers=headers, json=init)
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            http.post(url, headers=session, json=note)
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "hang"}}

            def calling():
                with httpx2.Client(timeout=30, headers=AUTH) as other:
                    other.post(url, headers=session, json=call)

            caller = threading.Thread(target=calling, daemon=True)
            caller.start()
            assert started.wait(30)
            http.delete(url, headers=session)
            return ended.wait(30)

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, tokens=TOKENS), host, "127.0.0.1:0")
        finished = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    assert finished
    assert codes == ["ABORTED"]


def _hang_host(make_host):
    """A host with a ``hang`` tool; ``(host, started, ended, codes)``: threading events set when
    a call starts and when its result is final, and the codes of the results."""
    import threading

    from dsh_host import define_tool

    started, ended = threading.Event(), threading.Event()
    codes: list[str] = []

    class Recorder:
        name = "recorder"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            codes.append(result.code)
            ended.set()

    async def hang(args, ctx):
        started.set()
        await trio.sleep_forever()

    tool = define_tool(name="hang", description="", parameters={}, execute=hang)
    return make_host(Recorder(), tools=[tool]), started, ended, codes


async def test_a_dropped_http_connection_aborts_its_call(make_host):
    """The client of a ``tools/call`` closes the connection before the answer: nobody is left to
    read it, so the call is cancelled (as by ``notifications/cancelled``) and ends ABORTED."""
    import socket

    import httpx2

    from dsh_host._mcp._service import serve_http

    from .mcp_support import AUTH, INIT, TOKEN, TOKENS

    host, started, ended, codes = _hang_host(make_host)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    def client(url):
        with httpx2.Client(timeout=30, headers=AUTH) as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
            opened = http.post(url, headers=headers, json=init)
            session_id = opened.headers["mcp-session-id"]
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            http.post(url, headers={**headers, "mcp-session-id": session_id}, json=note)
        call = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hang"}}'
        where = url.split("//", 1)[1].split("/", 1)[0]
        head = (
            f"POST /mcp HTTP/1.1\r\nhost: {where}\r\naccept: {headers['accept']}\r\n"
            f"content-type: application/json\r\nauthorization: Bearer {TOKEN}\r\n"
            f"mcp-session-id: {session_id}\r\ncontent-length: {len(call)}\r\n\r\n"
        )
        address, port = where.rsplit(":", 1)
        with socket.create_connection((address, int(port)), timeout=30) as raw:
            raw.sendall(head.encode() + call)
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")  # the SSE stream is open
            assert started.wait(30)
        return ended.wait(30)  # a bound, not a pace: set as soon as the call ends

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, tokens=TOKENS), host, "127.0.0.1:0")
        finished = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    assert finished
    assert codes == ["ABORTED"]


async def test_cancelling_over_http_aborts_the_call_and_answers_32800(make_host):
    """``notifications/cancelled`` over HTTP: the call ends ABORTED; unlike stdio, the SDK's
    HTTP transport then answers the request's open stream with error -32800 (documented)."""
    import json
    import threading

    import httpx2

    from dsh_host._mcp._service import serve_http

    from .mcp_support import AUTH, INIT, TOKENS

    host, started, ended, codes = _hang_host(make_host)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    def client(url):
        with httpx2.Client(timeout=30, headers=AUTH) as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
            opened = http.post(url, headers=headers, json=init)
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            http.post(
                url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "hang"}}
            answers = []

            def calling():
                with httpx2.Client(timeout=30, headers=AUTH) as other:
                    answers.append(other.post(url, headers=session, json=call).text)

            caller = threading.Thread(target=calling)
            caller.start()
            assert started.wait(30)
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 2},
            }
            accepted = http.post(url, headers=session, json=cancel).status_code
            caller.join(30)
        data = [line[6:] for line in answers[0].splitlines() if line.startswith("data: ")]
        return accepted, ended.wait(30), [json.loads(d) for d in data if d]

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, tokens=TOKENS), host, "127.0.0.1:0")
        accepted, finished, events = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    assert accepted == 202
    assert finished
    assert codes == ["ABORTED"]
    assert [e.get("error", {}).get("code") for e in events] == [-32800]
