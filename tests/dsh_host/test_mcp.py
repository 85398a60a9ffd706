"""``dsh mcp serve``: the MCP protocol over the gated tools, on the official SDK (issue 12 item 2)."""

from __future__ import annotations

import sys
import textwrap

import mcp_types as types
import trio
import trio.testing

from dsh_host import Accept, ApprovalOutcome, Ask, Deny, define_tool, hookimpl
from dsh_host._mcp._service import annotations_for, serve
from tests.dsh_host.mcp_support import INIT, Client, host_with_tools, run_session, sdk_session


async def test_initialize_list_and_call(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        init = await client.request(
            1,
            "initialize",
            {**INIT, "protocolVersion": "2025-06-18"},
        )
        assert init["result"]["protocolVersion"] == "2025-06-18"
        assert init["result"]["serverInfo"]["name"] == "dsh"
        assert init["result"]["capabilities"]["tools"] == {"listChanged": True}
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = await client.request(2, "tools/list")
        assert [t["name"] for t in tools["result"]["tools"]] == ["echo", "hang"]
        assert tools["result"]["tools"][0]["inputSchema"]["required"] == ["text"]
        called = await client.request(
            3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
        )
        assert called["id"] == 3
        assert called["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
        assert called["result"]["isError"] is False
        bad = await client.request(4, "tools/call", {"name": "echo", "arguments": {}})
        assert bad["result"]["isError"] is True
        assert bad["result"]["_meta"]["dsh/code"] == "INVALID_ARGS"
        assert (await client.request(5, "ping"))["result"] == {}

    await run_session(host, body)


async def test_protocol_errors_are_json_rpc_errors(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        missing = await client.request(2, "resources/list")
        assert missing["error"]["code"] == -32601
        await client.send(b"{not json")
        parse = await client.receive()
        assert (parse["id"], parse["error"]["code"]) == (None, -32700)
        assert parse["error"]["message"].startswith("Parse error: not valid JSON")
        await client.send({"id": 3, "method": "ping"})
        assert (await client.receive())["error"]["code"] == -32600
        no_name = await client.request(4, "tools/call", {"arguments": {}})
        assert no_name["error"]["code"] == -32602
        assert (await client.request(5, "ping"))["result"] == {}

    await run_session(host, body)


async def test_requests_before_initialize_get_an_error(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        early = await client.request(1, "tools/list")
        assert "error" in early
        assert early["id"] == 1
        call = await client.request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert "error" in call
        assert (await client.request(3, "ping"))["result"] == {}  # ping is allowed any time
        await client.initialize()
        assert "result" in await client.request(4, "tools/list")

    await run_session(host, body)


async def test_hostile_ids_are_echoed_exactly_or_refused_with_id_null(make_host):
    host = host_with_tools(make_host)
    echoed = ["7", 7, 1.5, 10**60, -3, "\ud800", "", "é"]

    async def body(client):
        await client.initialize()
        for request_id in echoed:
            reply = await client.request(request_id, "ping")
            assert reply == {"jsonrpc": "2.0", "id": request_id, "result": {}}
        for bad, kind in (
            ({"a": 1}, "an object"),
            ([1], "an array"),
            (None, "null"),
            (True, "a boolean"),
        ):
            reply = await client.request(bad, "ping")
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            assert reply["error"]["message"] == f"the id must be a string or a number, not {kind}"
        # NaN is not JSON: a parse error, never an echo of "NaN"
        await client.send(b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}')
        reply = await client.receive()
        assert (reply["id"], reply["error"]["code"]) == (None, -32700)
        # an object requestId in a cancellation is ignored, not a crash
        await client.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {}}}
        )
        assert (await client.request(99, "ping"))["id"] == 99

    await run_session(host, body)


async def test_malformed_messages_get_the_prescribed_error(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        cases = [
            (b"[]", None, -32600),
            (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None, -32600),
            (b'{"jsonrpc":"2.0","id":5,"method":null}', 5, -32600),
            (b'{"jsonrpc":"1.0","id":6,"method":"ping"}', 6, -32600),
            (b'{"jsonrpc":"2.0","id":8,"method":"ping","params":3}', 8, -32600),
            (b"42", None, -32600),
            (b'{"jsonrpc":"2.0","id":9,"id":10,"method":"ping"}', None, -32700),
            (b"\xff\xfe", None, -32700),
            (b"[" * 100_000 + b"]" * 100_000, None, -32700),
            (b'{"a":' * 1_000 + b"1" + b"}" * 1_000, None, -32700),
        ]
        for line, reply_id, code in cases:
            await client.send(line)
            reply = await client.receive()
            assert (reply["id"], reply["error"]["code"]) == (reply_id, code), line[:40]
        # malformed notifications get nothing: the next answer is the ping's
        await client.send(b'{"jsonrpc":"2.0","method":null}')
        await client.send(b'{"jsonrpc":"2.0","method":"notifications/x","params":"p"}')
        assert (await client.request(11, "ping"))["id"] == 11

    await run_session(host, body)


async def test_lone_surrogates_in_methods_and_tool_names_never_crash(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        reply = await client.request("\udcff", "x\ud800")
        assert reply["id"] == "\udcff"
        assert reply["error"]["code"] == -32601
        reply = await client.request(2, "tools/call", {"name": "\ud800", "arguments": {}})
        assert reply["error"]["code"] == -32602
        reply = await client.request(
            3, "tools/call", {"name": "echo", "arguments": {"text": "a\udcffb"}}
        )
        assert reply["result"]["content"][0]["text"] == "echo: a\udcffb"

    await run_session(host, body)


async def test_a_line_over_the_bound_is_refused_and_the_session_goes_on(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        huge = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * 300_000 + b'"}}'
        await client.send(huge)
        reply = await client.receive()
        assert (reply["id"], reply["error"]["code"]) == (None, -32600)
        assert "longer than 100000 bytes" in reply["error"]["message"]
        assert (await client.request(2, "ping"))["id"] == 2

    await run_session(host, body, max_line=100_000)


async def test_a_60_mb_line_is_read_in_linear_time(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        started = trio.current_time()
        await client.send(b'{"x":"' + b"a" * 60_000_000 + b'"}')
        reply = await client.receive()
        assert reply["error"]["code"] == -32600
        assert trio.current_time() - started < 10  # quadratic reading took 52 s
        assert (await client.request(2, "ping"))["id"] == 2

    await run_session(host, body)


async def test_unknown_tool_is_the_protocols_unknown_tool_error(make_host):
    host = host_with_tools(make_host)

    async def body(client):
        await client.initialize()
        reply = await client.request(1, "tools/call", {"name": "nope", "arguments": {}})
        assert reply["error"]["code"] == -32602
        assert "nope" in reply["error"]["message"]

    await run_session(host, body)


async def test_errors_carry_code_decider_and_detail_in_meta(make_host):
    class NoEcho:
        name = "no-echo"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            if execution.name == "echo" and execution.arguments.get("text") == "x":
                return Deny("echo is off")
            return None

    host = host_with_tools(make_host, NoEcho())

    async def body(client):
        await client.initialize()
        result = (
            await client.request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        )["result"]
        assert result["isError"] is True
        assert result["content"] == [{"type": "text", "text": "Error: echo is off"}]
        assert result["_meta"] == {
            "dsh/code": "DENIED",
            "dsh/decided_by": "no-echo",
            "dsh/decision_detail": None,
        }

    await run_session(host, body)


async def test_context_notes_follow_the_content(make_host):
    class Note:
        name = "note"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(additional_contexts=("remember the note",))

    host = host_with_tools(make_host, Note())

    async def body(client):
        await client.initialize()
        reply = await client.request(1, "tools/call", {"name": "echo", "arguments": {"text": "y"}})
        assert reply["result"]["content"] == [
            {"type": "text", "text": "echo: y"},
            {"type": "text", "text": "remember the note"},
        ]
        assert list(reply["result"]["_meta"]) == ["dsh/context_sources"]

    await run_session(host, body)


async def test_cancelled_request_gets_no_response_and_its_signal_aborts(make_host):
    seen = []
    observed = trio.Event()

    class Observer:
        name = "observer"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            seen.append((execution.name, result.code, execution.signal.aborted))
            observed.set()

    host = host_with_tools(make_host, Observer())

    async def body(client):
        await client.initialize()
        await client.send(
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "hang"}}
        )
        assert (await client.request(8, "ping"))["id"] == 8  # served while 7 hangs
        await client.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 7, "reason": "user"},
            }
        )
        await observed.wait()
        assert (await client.request(9, "ping"))["id"] == 9  # not a response to 7
        assert seen == [("hang", "ABORTED", True)]

    await run_session(host, body)


def _tool(name, **kwargs):
    async def run(args):
        return name

    return define_tool(name=name, description=name, parameters={}, execute=run, **kwargs)


def test_annotations_follow_the_definition():
    reader = _tool("r", paths={"path": "read"}, is_concurrency_safe=lambda a: True)
    writer = _tool("w", paths={"path": "write"}, is_concurrency_safe=lambda a: True)
    shell = _tool("s")
    unsafe_reader = _tool("u", paths={"path": "read"})
    assert annotations_for(reader) == types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    assert annotations_for(writer) == types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
    )
    assert annotations_for(shell).open_world_hint is True
    assert annotations_for(shell).read_only_hint is False
    assert annotations_for(unsafe_reader).read_only_hint is False


async def test_tools_denied_outright_are_not_listed_unless_list_all(make_host):
    class Policy:
        name = "policy"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            if execution.name == "hang":
                return Deny("hang is never allowed")
            if execution.name == "echo":
                return Ask("echo asks")
            return None

    asked = []

    class Approver:
        name = "approver"

        @hookimpl
        def dsh_tool_approve(self, request):
            asked.append(request.execution.dry_run)
            return None

    host = host_with_tools(make_host, Policy(), Approver())

    async def listed(**kwargs):
        names = []

        async def body(client):
            await client.initialize()
            reply = await client.request(1, "tools/list")
            names.extend(t["name"] for t in reply["result"]["tools"])

        await run_session(host, body, **kwargs)
        return names

    assert await listed() == ["echo"]
    assert await listed(list_all=True) == ["echo", "hang"]


async def test_ask_goes_to_the_client_through_elicitation(make_host):
    class Asker:
        name = "asker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask("echo is sensitive")

    host = host_with_tools(make_host, Asker())
    messages = []

    def answering(action):
        async def callback(context, params):
            messages.append(params.message)
            return types.ElicitResult(action=action, content={} if action == "accept" else None)

        return callback

    async with sdk_session(host, elicitation_callback=answering("accept")) as session:
        result = await session.call_tool("echo", {"text": "ok"})
    assert result.is_error is False
    assert result.content[0].text == "echo: ok"
    assert "echo is sensitive" in messages[0]
    assert "'echo'" in messages[0]

    async with sdk_session(host, elicitation_callback=answering("decline")) as session:
        result = await session.call_tool("echo", {"text": "ok"})
    assert result.is_error is True
    assert result.meta["dsh/code"] == "DENIED"
    assert result.meta["dsh/decided_by"] == "mcp_client"

    async with sdk_session(host, elicitation_callback=answering("cancel")) as session:
        result = await session.call_tool("echo", {"text": "ok"})
    assert result.is_error is True
    assert "cancelled" in result.content[0].text

    async with sdk_session(host) as session:  # no elicitation capability: unavailable
        result = await session.call_tool("echo", {"text": "ok"})
    assert result.is_error is True
    assert "no approval channel" in result.content[0].text


async def test_elicitation_outcomes_map_to_approval_outcomes(make_host):
    outcomes = []

    class Asker:
        name = "asker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask()

    class Recorder:
        name = "recorder"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            outcomes.append(result.decided_by)

    host = host_with_tools(make_host, Asker(), Recorder())

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async with sdk_session(host, elicitation_callback=decline) as session:
        await session.call_tool("echo", {"text": "ok"})
    assert outcomes == ["mcp_client"]
    assert ApprovalOutcome.REJECTED.value == "rejected"


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
            from dsh_host._mcp._service import serve_stdio

            async def echo(args):
                print("stray output from a tool")  # must not reach the protocol
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


async def test_end_of_input_aborts_the_calls_it_left_and_answers_them(make_host):
    """A client that writes a call and closes stdin is gone: the call is aborted, and answered."""
    gate = trio.Event()

    async def slow(args):
        await gate.wait()
        return "done"

    host = make_host(tools=[define_tool(name="slow", description="", parameters={}, execute=slow)])
    left, right = trio.testing.memory_stream_pair()
    client = Client(left)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(host, right, right))
        # an old client: initialize without capabilities or clientInfo is accepted
        await client.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert "result" in await client.receive()
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await client.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow"}}
        )
        await trio.testing.wait_all_tasks_blocked()
        await left.send_eof()
        reply = await client.receive()
    assert reply["id"] == 2
    assert reply["result"]["isError"] is True
    assert reply["result"]["_meta"]["dsh/code"] == "ABORTED"


async def test_the_listing_probe_runs_once_per_set_of_tools_not_per_request(make_host):
    probes = []

    class Counter:
        name = "counter"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            if execution.dry_run:
                probes.append(execution.name)

    host = host_with_tools(make_host, Counter())

    async def body(client):
        await client.initialize()
        for request_id in (1, 2, 3):
            assert len((await client.request(request_id, "tools/list"))["result"]["tools"]) == 2
        assert sorted(probes) == ["echo", "hang"]
        host.registry.register(_tool("late"))
        told = await client.receive()  # the client is told the list changed
        assert told == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        names = [t["name"] for t in (await client.request(4, "tools/list"))["result"]["tools"]]
        assert names == ["echo", "hang", "late"]
        assert len(probes) == 5

    await run_session(host, body)


async def test_cancelling_during_elicitation_cancels_the_question_and_the_call(make_host):
    results = []
    observed = trio.Event()
    asked = trio.Event()

    class Asker:
        name = "asker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask("sure?")

    class Observer:
        name = "observer"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            results.append(result.code)
            observed.set()

    host = host_with_tools(make_host, Asker(), Observer())

    async def never_answers(context, params):
        asked.set()
        await trio.sleep_forever()

    async with sdk_session(host, elicitation_callback=never_answers) as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.call_tool, "echo", {"text": "x"})
            await asked.wait()
            nursery.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
        await observed.wait()
        assert (await session.send_ping()) is not None
    assert results == ["ABORTED_BEFORE_DISPATCH"]


async def test_a_host_that_raises_is_an_internal_error_not_a_dead_server(make_host, monkeypatch):
    host = host_with_tools(make_host)

    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(host, "call", broken)

    async def body(client):
        await client.initialize()
        reply = await client.request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert reply["error"]["code"] == -32603
        assert "RuntimeError: boom" in reply["error"]["message"]
        assert (await client.request(2, "ping"))["result"] == {}

    await run_session(host, body)


async def test_calls_still_running_at_end_of_input_are_aborted_at_once(make_host, autojump_clock):
    results = []

    class Observer:
        name = "observer"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            results.append(result.code)

    host = host_with_tools(make_host, Observer())
    left, right = trio.testing.memory_stream_pair()
    client = Client(left)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(host, right, right, drain_timeout=5))
        await client.initialize()
        await client.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "hang"}}
        )
        await trio.testing.wait_all_tasks_blocked()
        await left.send_eof()
        started = trio.current_time()
    assert trio.current_time() - started == 0  # not after the drain timeout
    assert results == ["ABORTED"]
