"""What a mounted server sends unasked costs dsh a bounded amount, and delays only calls to it.

A flood of ``tools/list_changed`` makes at most one re-listing in flight and one pending, at
least a second apart, and tells dsh's own clients nothing when the tools stay the same; a
server that never answers its re-listing delays no other server's tool and none of dsh's own;
log, progress and other notifications never reach the session, and the server's own requests
are bounded (`_guard.MAX_ASKED`).
"""

from __future__ import annotations

import itertools

import mcp_types as types
import trio
import trio.testing

import dsh_host
from dsh_host import Host, define_tool
from dsh_plugins_builtin._mcp._guard import MAX_ASKED, Guard
from dsh_plugins_builtin._mcp._mount import Link, McpServerConfig
from dsh_plugins_builtin._mcp._relist import Relister
from dsh_plugins_builtin.mcp import McpPlugin

from ..dsh_host.mcp_support import sdk_session
from .test_mcp_isolation import mounted, raw  # noqa: F401 (a fixture)


def test_a_flood_of_list_changed_is_relisted_at_most_twice_and_told_to_no_client():
    plugin = McpPlugin()
    servers = {"f": raw("flood")}
    host = Host({"plugin": {"mcp": {"servers": servers}}}, plugins=[plugin], load_entrypoints=False)
    told = []

    async def on_message(message):
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            told.append(message)

    async def main():
        async with sdk_session(host, message_handler=on_message) as session:
            flooded = await session.call_tool("mcp__f__flood", {})  # 10,000 notices first
            counted = await session.call_tool("mcp__f__count", {})  # waits for its re-listing
            own = await session.call_tool("mcp__f__echo", {"text": "x"})
            return flooded, counted, own

    try:
        flooded, counted, own = trio.run(main)
    finally:
        plugin.close()
    assert flooded.content[0].text == "flood"
    assert own.content[0].text == "echo: x"
    assert 1 <= int(counted.content[0].text) <= 3  # the first listing, then at most 2 more
    assert plugin._mount.links["f"].relister.listings <= 2
    assert told == []  # the tools stayed the same: nothing to tell the client


def test_a_server_stuck_re_listing_delays_neither_dshs_tools_nor_another_servers(mounted):  # noqa: F811
    # its budget (10 minutes) is far longer than any test: a call that waited for it fails
    host, plugin = mounted(
        {"stuck": raw("stuck", timeout_ms=600_000), "ok": raw("plain")}, sandbox=None
    )

    async def me(args):  # async: a synchronous body would run in a thread
        return "me"

    host.registry.register(define_tool(name="own", description="own", parameters={}, execute=me))
    assert trio.run(host.call, "mcp__stuck__change", {}).text == "change"

    async def own():  # in virtual time: any wait for the stuck server's re-listing shows
        with trio.fail_after(5):
            return await host.call("own", {})

    assert trio.run(own, clock=trio.testing.MockClock(autojump_threshold=0)).text == "me"

    async def other():
        with trio.fail_after(60):  # a bound on a hang, not a pace
            return await host.call("mcp__ok__echo", {"text": "x"})

    assert trio.run(other).text == "echo: x"
    assert (
        plugin._mount.links["stuck"].relister.awaited() is not None
    )  # still re-listing: nobody waited for it


def test_a_relister_folds_any_number_of_notices_into_one_a_second():
    link = Link("s", McpServerConfig(command="x"))
    relister = Relister(link)
    asked = []

    class Session:
        async def list_tools(self, params=None):
            asked.append(trio.current_time())
            return types.ListToolsResult(tools=[])

    link.session = Session()  # type: ignore[assignment]

    async def main():
        async with trio.open_nursery() as nursery:
            relister.listed(nursery)
            for n in range(10_000):  # 10,000 notices over 10 seconds
                relister.notice()
                if n % 100 == 0:
                    await trio.sleep(0.1)
            await trio.sleep(5)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert 10 <= len(asked) <= 12  # about one a second, never one per notice
    assert all(b - a >= 1 for a, b in itertools.pairwise(asked))
    assert relister.awaited() is None
    link.close()


def test_notifications_never_reach_the_session_and_requests_are_bounded():
    guard = Guard("s")
    changed = []
    guard.on_list_changed = lambda: changed.append(1)
    noise = [
        "notifications/message", "notifications/progress", "notifications/resources/list_changed",
        "notifications/prompts/list_changed", "notifications/cancelled", "notifications/other",
    ]  # fmt: skip
    delivered = []
    for n in range(10_000):
        method = noise[n % len(noise)]
        delivered += guard.check({"jsonrpc": "2.0", "method": method, "params": {}})
        delivered += guard.check({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        delivered += guard.check({"jsonrpc": "2.0", "id": n, "method": "ping"})
    assert len(changed) == 10_000  # each told to the relister, which folds them (above)
    assert [m.id for m in delivered] == list(range(MAX_ASKED))  # the rest dropped
    guard.sent(types.JSONRPCResponse(jsonrpc="2.0", id=0, result={}))  # one answered
    assert len(guard.check({"jsonrpc": "2.0", "id": "again", "method": "ping"})) == 1
    assert guard.dropped == 2 * 10_000 - MAX_ASKED
    assert len(guard.notes) <= 20


def test_under_open_host_a_stuck_re_listing_delays_only_its_own_server():
    """The sessions in the host's own trio run: the same bounds."""
    plugin = McpPlugin()
    servers = {
        "stuck": raw("stuck", timeout_ms=600_000, sandbox=False),
        "ok": raw("plain", sandbox=False),
    }

    async def main():
        # a call to the stuck server waits for its re-listing within half the hook's bound
        config = {"host": {"hook_timeout": 2}, "plugin": {"mcp": {"servers": servers}}}
        async with dsh_host.open_host(config, plugins=[plugin], entry_points=False) as host:
            changed = await host.call("mcp__stuck__change", {})
            with trio.fail_after(60):  # a bound on a hang, not a pace
                other = await host.call("mcp__ok__echo", {"text": "x"})
                assert other.text == "echo: x"
                pending = plugin._mount.links["stuck"].relister.awaited()
                own = await host.call("mcp__stuck__echo", {"text": "y"})
            return changed, other, pending, own

    changed, other, pending, own = trio.run(main)
    assert (changed.text, other.text) == ("change", "echo: x")
    assert pending is not None  # still re-listing: the other server's call did not wait
    assert own.text == "echo: y"  # waited at most 1 s, then went on with the tools it had


def test_a_repeated_request_id_is_delivered_once_until_answered():
    """200,000 copies of one request reach the session once; the cap counts every delivered
    request, not every distinct id (a set of ids let the copies all through)."""
    guard = Guard("s")
    request = {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {}}
    delivered = []
    for _ in range(200_000):
        delivered += guard.check(dict(request))
    assert len(delivered) == 1
    assert guard.dropped == 200_000 - 1
    assert len(guard.notes) <= 20
    assert "still unanswered" in guard.notes[-1]
    guard.sent(types.JSONRPCResponse(jsonrpc="2.0", id=1, result={}))  # answered: may come again
    assert len(guard.check(dict(request))) == 1
    for n in range(2, 100):  # other ids and repeats: never more than MAX_ASKED unanswered
        delivered += guard.check({**request, "id": n})
        delivered += guard.check({**request, "id": n})
    assert len(delivered) == MAX_ASKED
