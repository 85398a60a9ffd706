"""What the audit row says about approval and cancellation is what the pipeline recorded (never
guessed from the result's text), and its short text columns hold no raw control character."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

import dsh_host.aio
from dsh_host import AbortSignal, define_tool, hookimpl
from dsh_plugins_builtin._audit._redact import arguments_json, safe_text
from dsh_plugins_builtin.audit import AuditPlugin
from tests.conftest import make_echo
from tests.dsh_host.pipeline.test_cancelled_calls import Approver, AskAlways


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "calls.sqlite3"


@pytest.fixture
def plugin():
    plugin = AuditPlugin()
    yield plugin
    plugin.close()


def config(db: Path, **host: Any) -> dict[str, Any]:
    return {"host": host, "plugin": {"audit": {"path": str(db), "durability": "sync"}}}


def rows(db: Path, *columns: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(db)
    try:
        query = f"SELECT {', '.join(columns)} FROM calls ORDER BY id"
        return list(connection.execute(query))
    finally:
        connection.close()


async def test_approved_by_is_what_the_approval_stage_recorded(make_host, db, plugin):
    host = make_host(plugin, AskAlways(), Approver(), tools=[make_echo()], config=config(db))
    await host.call("no_such_tool", {}, call_id="unknown")  # never put to an approver
    await host.call("echo", {"text": "crash"}, call_id="crashed")  # asked, no outcome
    await host.call("echo", {"text": "allowed-once"}, call_id="allowed")
    await host.call("echo", {"text": "rejected"}, call_id="rejected")
    await host.call("echo", {"text": "none"}, call_id="none")
    signal = AbortSignal()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: host.call("echo", {"text": "honour"}, call_id="aborted", signal=signal)
        )
        await trio.testing.wait_all_tasks_blocked()
        signal.abort("Esc")
    assert rows(db, "call_id", "outcome", "decided_by", "approved_by") == [
        ("unknown", "UNKNOWN_TOOL", None, None),
        ("crashed", "PLUGIN_FAILED", "approver", None),
        ("allowed", "ok", None, "approver"),
        ("rejected", "DENIED", "approver", "approver"),
        ("none", "DENIED", "asker", "unavailable"),
        ("aborted", "ABORTED_BEFORE_DISPATCH", None, "cancelled"),
    ]


async def forever(args: Any) -> str:
    await trio.sleep_forever()
    return "never"


class SlowGuard:
    name = "slow-guard"

    @hookimpl
    async def dsh_tool_guard(self, execution):
        if execution.arguments.get("slow"):
            await trio.sleep_forever()


async def test_a_trio_caller_that_cancels_still_leaves_a_row(make_host, db, plugin, autojump_clock):
    tool = define_tool(name="forever", description="", parameters={}, execute=forever)
    plugins = (plugin, SlowGuard(), Approver())
    host = make_host(*plugins, tools=[tool, make_echo()], config=config(db))
    with trio.move_on_after(1):
        await host.call("forever", {}, call_id="body")
    with trio.move_on_after(1):
        await host.call("echo", {"text": "x", "slow": True}, call_id="guard")
    host.pm.register(AskAlways())
    with trio.move_on_after(1):
        await host.call("echo", {"text": "ignore"}, call_id="approval")
    assert rows(db, "call_id", "outcome", "approved_by") == [
        ("body", "ABORTED", None),
        ("guard", "ABORTED_BEFORE_DISPATCH", None),
        ("approval", "ABORTED_BEFORE_DISPATCH", "cancelled"),
    ]


def test_cancelling_an_asyncio_caller_stops_a_deaf_approver_and_leaves_a_row(db, plugin):
    """The approval timeout (10 s) is only a backstop: ended by it, the call would be
    ``PLUGIN_FAILED``."""
    started: list[bool] = []

    class Deaf:
        name = "deaf"

        @hookimpl
        async def dsh_tool_approve(self, request):
            started.append(True)
            await trio.sleep_forever()

    async def main() -> None:
        plugins = [plugin, AskAlways(), Deaf(), make_echo_plugin()]
        async with dsh_host.aio.open_host(
            config(db, approval_timeout=10), plugins=plugins, entry_points=False
        ) as host:
            task = asyncio.ensure_future(host.call("echo", {"text": "x"}, call_id="a"))
            while not started:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert rows(db, "call_id", "outcome", "approved_by") == [
        ("a", "ABORTED_BEFORE_DISPATCH", "cancelled")
    ]


def make_echo_plugin() -> object:
    class Tools:
        name = "tools"

        @hookimpl
        def dsh_register_tools(self, register):
            register(make_echo())

    return Tools()


# -- the short text columns --------------------------------------------------------------------

FORGED = "write_file|ok|0\nbash|DENIED|0\n\x1b[1A\x1b[2K\x00hidden\u202e\x7f\x9b\u2028\U000e0041"


async def test_control_characters_are_stored_escaped_in_the_text_columns(make_host, db, plugin):
    host = make_host(plugin, config=config(db))
    await host.call(FORGED, {"text": FORGED}, call_id=FORGED)
    [(tool, call_id, decision, arguments)] = rows(db, "tool", "call_id", "decision", "arguments")
    for text in (tool, call_id, decision, arguments):
        assert text.isprintable(), repr(text)  # one line, nothing a terminal acts on
    assert (
        tool
        == call_id
        == (
            "write_file|ok|0\\u000abash|DENIED|0\\u000a\\u001b[1A\\u001b[2K\\u0000hidden"
            "\\u202e\\u007f\\u009b\\u2028\\U000e0041"
        )
    )  # a NUL cuts nothing off
    assert decision == f'unknown tool "{dsh_host.printable(FORGED)}"'  # escaped by the message
    assert json.loads(arguments) == {"text": FORGED}  # JSON, escaped, read back exactly


def test_printable_text_is_stored_as_it_is():
    for text in ("héllo wörld 日本 \\u001b", "a\u00a0b", "", None):
        assert safe_text(text) == text
    assert arguments_json({"k": "日本 é"}) == '{"k":"日本 é"}'
