"""`dsh_host.open_host` and `Host.aclose`: plugins stopped once, audit flushed, failures contained."""

from __future__ import annotations

import logging
import sqlite3

import pytest
import trio

import dsh_host
from dsh_host import Host, hookimpl
from dsh_plugins_builtin.audit import AuditPlugin
from tests.conftest import make_echo


class Tools:
    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())


class Stops:
    def __init__(self, name, log, fail=False):
        self.name, self.log, self.fail = name, log, fail

    @hookimpl
    async def dsh_host_stopping(self, host):
        await trio.lowlevel.checkpoint()
        self.log.append((self.name, host))
        if self.fail:
            raise RuntimeError("boom")


async def test_open_host_stops_every_plugin_once_even_after_one_fails(caplog):
    log = []
    plugins = [Tools(), Stops("a", log), Stops("b", log, fail=True), Stops("c", log)]
    with caplog.at_level(logging.WARNING, logger="dsh_host"):
        async with dsh_host.open_host(plugins=plugins, entry_points=False) as host:
            assert isinstance(host, Host)
            assert (await host.call("echo", {"text": "hi"})).content[0].text == "hi"
            await host.aclose()  # explicit close, then the context's: once in all
    assert sorted(name for name, _ in log) == ["a", "b", "c"]
    assert all(seen is host for _, seen in log)
    assert "'b': dsh_host_stopping failed: RuntimeError: boom" in caplog.text


async def test_open_host_closes_when_the_body_is_cancelled():
    log = []
    with trio.CancelScope() as scope:
        async with dsh_host.open_host(plugins=[Stops("a", log)], entry_points=False):
            scope.cancel()
            await trio.sleep_forever()
    assert [name for name, _ in log] == ["a"]  # the shielded close still ran


async def test_workspace_overrides_the_config(tmp_path):
    config = {"host": {"workspace": "/nonexistent"}}
    async with dsh_host.open_host(config, workspace=tmp_path, entry_points=False) as host:
        assert host.workspace == tmp_path.resolve()


async def test_aclose_commits_queued_audit_rows_before_the_run_ends(tmp_path):
    db = tmp_path / "audit.sqlite3"
    config = {"plugin": {"audit": {"path": str(db)}}, "host": {"workspace": str(tmp_path)}}
    async with dsh_host.open_host(
        config, plugins=[AuditPlugin(), Tools()], entry_points=False
    ) as host:
        for i in range(50):
            await host.call("echo", {"text": str(i)})
    # Still inside the trio run: without the close, rows could still be queued.
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM calls").fetchone()[0]
    assert rows == 50


def test_stopping_is_a_documented_hook():
    assert "dsh_host_stopping" in dsh_host.hookspecs.__all__


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{", "got a string that is not one (not valid JSON: Expecting property name"),
        ('{"a": 1, "a": 2}', 'duplicate object key "a"'),
        ("[1]", '"arguments" must be an object; got an array'),
        ('"x"', '"arguments" must be an object; got a string whose JSON is a string'),
        (7, '"arguments" must be an object; got a number'),
        (None, '"arguments" must be an object; got null'),
    ],
)
async def test_call_takes_json_text_and_says_what_is_wrong_otherwise(arguments, message):
    async with dsh_host.open_host(plugins=[Tools()], entry_points=False) as host:
        ok = await host.call("echo", '{"text": "hi"}')
        assert ok.content[0].text == "hi"
        bad = await host.call("echo", arguments)
    assert bad.error is not None
    assert bad.error.code == "INVALID_ARGS"
    assert message in bad.error.message


async def test_a_closed_trio_host_refuses_calls_as_the_asyncio_host_does():
    async with dsh_host.open_host(plugins=[Tools()], entry_points=False) as host:
        assert (await host.call("echo", {"text": "open"})).content[0].text == "open"
        await host.aclose()
        with pytest.raises(RuntimeError, match="this dsh host is closed"):
            await host.call("echo", {"text": "late"})
        calls = [{"type": "tool_use", "id": "t", "name": "echo", "input": {"text": "x"}}]
        with pytest.raises(RuntimeError, match="this dsh host is closed"):
            await host.run_tool_calls(calls, format="anthropic")
    with pytest.raises(RuntimeError, match="open a new one"):
        await host.call("echo", {"text": "later"})


async def test_a_host_whose_open_host_ended_refuses_calls():
    async with dsh_host.open_host(plugins=[Tools()], entry_points=False) as host:
        pass
    with pytest.raises(RuntimeError, match="this dsh host is closed"):
        await host.call("echo", {"text": "later"})
