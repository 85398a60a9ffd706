"""A streamable-HTTP server mounted by the ``mcp`` plugin: its answers pass the same guard."""

from __future__ import annotations

import threading
from functools import partial

import trio

from dsh_host import Host, define_tool
from dsh_host._mcp._auth import Tokens
from dsh_host._mcp._service import serve_http
from dsh_plugins_builtin.mcp import McpPlugin

TOKEN = "mount-test-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
"""What a mount of `_serving`'s server sends (``dsh mcp serve --http`` needs a token)."""


def _serving(host, bound, ready, stop):
    """Serve *host* over HTTP in this (other) thread until *stop* is set."""

    async def main():
        async with trio.open_nursery() as nursery:
            serving = partial(serve_http, tokens=Tokens.single(TOKEN))
            bound.append((await nursery.start(serving, host, "127.0.0.1:0"))[0])
            ready.set()
            await trio.to_thread.run_sync(stop.wait)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_an_http_server_is_mounted_and_its_tools_called():
    async def echo(args):
        return "echo: " + args["text"]

    remote = Host(load_entrypoints=False)
    remote.registry.register(
        define_tool(
            name="echo",
            description="echo",
            execute=echo,
            parameters={"text": {"type": "string", "required": True}},
        )
    )
    bound: list[str] = []
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=_serving, args=(remote, bound, ready, stop), daemon=True)
    thread.start()
    plugin = McpPlugin()
    try:
        assert ready.wait(60)  # a bound, not a pace: set as soon as it listens
        servers = {"remote": {"url": bound[0] + "/mcp", "headers": HEADERS}}
        host = Host(
            {"plugin": {"mcp": {"servers": servers}}}, plugins=[plugin], load_entrypoints=False
        )
        assert plugin.status()["remote"]["status"] == "running", plugin.status()
        result = trio.run(host.call, "mcp__remote__echo", {"text": "over http"})
        assert result.text == "echo: over http"
    finally:
        plugin.close()
        stop.set()
        thread.join(10)


def serving_huge_and_small() -> tuple[
    list[str], threading.Event, threading.Event, threading.Thread
]:
    """An HTTP MCP server, in a thread, with two tools: ``huge`` (20,000 characters) and
    ``small``; ``(bound, ready, stop, thread)`` as `_serving` takes them."""

    async def huge(args):
        return "x" * 20_000

    async def small(args):
        return "ok"

    remote = Host(load_entrypoints=False)
    for name, run in (("huge", huge), ("small", small)):
        remote.registry.register(
            define_tool(name=name, description=name, execute=run, parameters={})
        )
    bound: list[str] = []
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=_serving, args=(remote, bound, ready, stop), daemon=True)
    thread.start()
    return bound, ready, stop, thread


def test_an_http_servers_answer_over_max_result_bytes_ends_its_call():
    bound, ready, stop, thread = serving_huge_and_small()
    plugin = McpPlugin()
    try:
        assert ready.wait(60)  # a bound, not a pace: set as soon as it listens
        servers = {"h": {"url": bound[0] + "/mcp", "max_result_bytes": 10_000, "headers": HEADERS}}
        host = Host(
            {"plugin": {"mcp": {"servers": servers}}}, plugins=[plugin], load_entrypoints=False
        )
        assert plugin.status()["h"]["status"] == "running", plugin.status()
        result = trio.run(host.call, "mcp__h__huge", {})
        assert result.code == "MCP_BAD_RESULT"
        assert "max_result_bytes (10000 bytes)" in result.text
        assert "[plugin.mcp.servers.h]" in result.text
        assert trio.run(host.call, "mcp__h__small", {}).text == "ok"  # the session goes on
    finally:
        plugin.close()
        stop.set()
        thread.join(10)
