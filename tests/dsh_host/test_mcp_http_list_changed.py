"""``dsh mcp serve --http``: an open session hears ``notifications/tools/list_changed`` (issue 24)."""

from __future__ import annotations

import anyio
import httpx2
import mcp_types as types
import trio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from dsh_host import define_tool
from dsh_host._mcp._service import serve_http
from dsh_host._mcp._sessions import HttpSessions

from .mcp_support import AUTH, TOKENS, host_with_tools


def _tool(name):
    async def run(args):
        return name

    return define_tool(name=name, description=name, parameters={}, execute=run)


async def test_an_open_http_session_is_told_when_the_tools_change(make_host):
    host = host_with_tools(make_host)

    trio_token = trio.lowlevel.current_trio_token()

    async def session(url):
        told = anyio.Event()
        streaming = anyio.Event()

        async def on_message(message):
            if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
                told.set()

        async def on_response(response):
            if response.request.method == "GET" and response.status_code == 200:
                streaming.set()  # the standalone stream server-initiated messages go on

        async with (
            httpx2.AsyncClient(headers=AUTH, event_hooks={"response": [on_response]}) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write, message_handler=on_message) as client,
        ):
            init = await client.initialize()
            before = [t.name for t in (await client.list_tools()).tools]
            with anyio.fail_after(30):
                await streaming.wait()
                await client.list_tools()
                trio.from_thread.run_sync(
                    host.registry.register, _tool("late"), trio_token=trio_token
                )
                await told.wait()
            after = [t.name for t in (await client.list_tools()).tools]
            return init.capabilities.tools.list_changed, before, after

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            lambda task_status: serve_http(
                host, "127.0.0.1:0", tokens=TOKENS, task_status=task_status
            )
        )
        out = await trio.to_thread.run_sync(anyio.run, session, f"{bound[0]}/mcp")
        nursery.cancel_scope.cancel()
    listed_changed, before, after = out
    assert listed_changed is True  # announced, as over stdio
    assert before == ["echo", "hang"]
    assert after == ["echo", "hang", "late"]


class _Session:
    def __init__(self, gone=False):
        self.gone = gone
        self.told = 0

    async def send_tool_list_changed(self):
        if self.gone:
            raise anyio.ClosedResourceError
        self.told += 1


class _Ctx:
    def __init__(self, session_id, session):
        self.request = (
            None
            if session_id is None
            else httpx2.Request(
                "POST", "http://127.0.0.1/mcp", headers={"mcp-session-id": session_id}
            )
        )
        self.session = session


async def test_sessions_are_bounded_and_a_closed_one_is_forgotten():
    sessions = HttpSessions(limit=2)
    live, gone, oldest = _Session(), _Session(gone=True), _Session()
    sessions.remember(_Ctx(None, _Session()))  # stdio: no session id, nothing kept
    sessions.remember(_Ctx("a", oldest))
    sessions.remember(_Ctx("b", gone))
    sessions.remember(_Ctx("c", live))  # over the limit: "a", the least recently active, goes
    assert len(sessions) == 2
    await sessions.tools_changed()
    assert (live.told, oldest.told) == (1, 0)
    assert len(sessions) == 1  # "b" could not be told: forgotten
    await sessions.tools_changed()
    assert live.told == 2
