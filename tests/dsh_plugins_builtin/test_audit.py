"""The ``audit`` plugin (one SQLite row per call) and the ``dsh audit`` command."""

from __future__ import annotations

import collections.abc
import datetime
import json
import logging
import math
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from dsh_host import (
    ConfigError,
    Deny,
    DshError,
    Scope,
    ToolExecutionInput,
    define_tool,
    hookimpl,
)
from dsh_host._model._json import freeze
from dsh_plugins_builtin._audit import _redact
from dsh_plugins_builtin._audit._command import _json_printable
from dsh_plugins_builtin._audit._schema import V1_COLUMNS, V1_SCHEMA
from dsh_plugins_builtin._audit._writer import arguments_json
from dsh_plugins_builtin.audit import (
    AuditConfig,
    AuditPlugin,
    audit_command,
    default_audit_path,
    redact,
)
from dsh_plugins_builtin.output_budget import OutputBudgetPlugin
from dsh_plugins_builtin.timeout import TimeoutPlugin
from tests.conftest import make_echo

LOGGER = "dsh_plugins_builtin.audit"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    """Keep the default database out of the real user state and data directories."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "audit" / "calls.sqlite3"


def audited(db: Path, **table):
    return {"plugin": {"audit": {"path": str(db), **table}}}


_LIVE: list[AuditPlugin] = []
"""The plugins of the running test. ``durability = "async"`` is the default, so a call returns
once its row is queued: what a test reads is what those plugins committed after a flush."""


def _settle() -> None:
    for plugin in _LIVE:
        assert plugin.flush(30), "the audit writer did not commit within 30 s"


def rows(db: Path) -> list[dict]:
    _settle()
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute("SELECT * FROM calls ORDER BY id")]
    finally:
        connection.close()


def count(db: Path) -> int:
    _settle()
    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT count(*) FROM calls").fetchone()[0]
    finally:
        connection.close()


@pytest.fixture
def plugin():
    plugin = AuditPlugin()
    _LIVE.append(plugin)
    yield plugin
    _LIVE.remove(plugin)
    plugin.close()


# -- one row per call -------------------------------------------------------------------------


async def test_a_call_is_recorded_with_every_column(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    before = datetime.datetime.now(datetime.UTC)
    await host.call("echo", {"text": "hi"}, call_id="c1", scope=Scope("agent-1"))
    [row] = rows(db)
    recorded = datetime.datetime.fromisoformat(row.pop("time"))
    assert recorded.tzinfo == datetime.UTC
    assert before - datetime.timedelta(seconds=1) <= recorded <= datetime.datetime.now(datetime.UTC)
    assert row.pop("duration_ms") >= 0
    assert row.pop("host_id") == plugin._writer.host_id
    assert len(plugin._writer.host_id) == 12
    assert row == {
        "id": 1,
        "workspace": str(host.workspace),
        "rule": None,
        "approved_by": None,
        "call_id": "c1",
        "tool": "echo",
        "arguments": '{"text":"hi"}',
        "is_error": 0,
        "outcome": "ok",
        "decision": None,
        "decided_by": None,
        "scope": "agent-1",
    }


async def test_denials_and_failures_are_recorded_with_who_decided(make_host, db, plugin):
    class Denier:
        name = "denier"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("not this one") if execution.arguments.get("text") == "no" else None

    host = make_host(plugin, Denier(), tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "no"}, call_id="d")
    await host.call("nope", {}, call_id="u")
    await host.call("echo", {"text": {1, 2}}, call_id="j")  # not JSON: FINAL, no pre-execute
    denied, unknown, not_json = rows(db)
    assert denied["duration_ms"] is not None  # pre-execute is tryfirst: it saw the denied call
    assert (denied["outcome"], denied["decision"], denied["decided_by"], denied["is_error"]) == (
        "DENIED", "not this one", "denier", 1,
    )  # fmt: skip
    assert (unknown["outcome"], unknown["decision"]) == ("UNKNOWN_TOOL", 'unknown tool "nope"')
    assert (not_json["outcome"], not_json["arguments"], not_json["duration_ms"]) == (
        "INVALID_ARGS", "null", None,
    )  # fmt: skip


async def test_duration_is_measured_from_pre_execute_on_the_trio_clock(
    make_host, db, plugin, autojump_clock
):
    async def execute(args, ctx):
        await trio.sleep(math.inf)

    tool = define_tool(name="slow", description="", parameters={}, execute=execute, timeout_ms=250)
    host = make_host(plugin, TimeoutPlugin(), tools=[tool], config=audited(db))
    await host.call("slow", {})
    [row] = rows(db)
    assert (row["outcome"], row["decided_by"]) == ("TOOL_TIMEOUT", "timeout")
    assert row["decision"] == "tool call timed out after 250ms"
    assert row["duration_ms"] == pytest.approx(250)


async def test_the_run_clock_is_looked_up_once_per_call(
    make_host, db, plugin, autojump_clock, monkeypatch
):
    """The duration is read from the run's clock itself: ``trio.current_time``, which looks the
    clock up on every read, is not called on the per-call path (the MockClock still rules)."""

    async def execute(args, ctx):  # trio.sleep would read trio.current_time
        await trio.sleep_until(trio.lowlevel.current_clock().current_time() + 0.5)
        return "slept"

    tool = define_tool(name="nap", description="", parameters={}, execute=execute)
    host = make_host(plugin, tools=[tool], config=audited(db))

    def no(*args, **kwargs):
        raise AssertionError("trio.current_time() on the per-call path")

    monkeypatch.setattr(trio, "current_time", no)
    await host.call("nap", {})
    monkeypatch.undo()
    [row] = rows(db)
    assert row["duration_ms"] == pytest.approx(500)


async def test_a_bounded_output_is_recorded_as_decided_by_output_budget(
    make_host, db, plugin, tmp_path
):
    config = audited(db)
    config["plugin"]["output_budget"] = {"max_inline_bytes": 500, "spill_dir": str(tmp_path / "s")}
    host = make_host(plugin, OutputBudgetPlugin(), tools=[make_echo()], config=config)
    result = await host.call("echo", {"text": "x" * 2000})
    [row] = rows(db)
    assert (row["outcome"], row["decided_by"]) == ("ok", "output_budget")
    assert result.decided_by == "output_budget"


async def test_no_start_time_is_kept_after_the_call(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    for i in range(5):
        await host.call("echo", {"text": str(i)})
    assert plugin._started == {}


# -- redaction ----------------------------------------------------------------------------------


def test_secret_named_keys_are_redacted_at_any_depth():
    arguments = {
        "api_key": "sk-1",
        "command": "deploy",
        "headers": {"Authorization": "Bearer x", "Accept": "json"},
        "steps": [{"PASSWORD": "p"}, {"passwd": ["a"], "keep": 1}, "token"],
        "GitHubToken": {"nested": "x"},
        "client_secret": None,
        "Credentials": 1,
        "monkey": "a substring match, as documented",
    }
    assert redact(arguments) == {
        "api_key": "[REDACTED]",
        "command": "deploy",
        "headers": {"Authorization": "[REDACTED]", "Accept": "json"},
        "steps": [{"PASSWORD": "[REDACTED]"}, {"passwd": "[REDACTED]", "keep": 1}, "token"],
        "GitHubToken": "[REDACTED]",
        "client_secret": "[REDACTED]",
        "Credentials": "[REDACTED]",
        "monkey": "[REDACTED]",
    }


def test_arguments_json_redacts_deep_secrets_and_copies_nothing_without_one():
    deep = freeze({"a": [{"b": ({"x": 1},)}, {"c": {"MyToken": "t"}}]}, "arguments")
    assert arguments_json(deep) == '{"a":[{"b":[{"x":1}]},{"c":{"MyToken":"[REDACTED]"}}]}'
    plain = freeze({"text": "hi", "n": [1, {"k": "v"}], "z": None}, "arguments")
    assert _redact._redacted(plain) is plain  # nothing secret: the frozen value as it is
    assert arguments_json(plain) == '{"n":[1,{"k":"v"}],"text":"hi","z":null}'
    assert arguments_json(deep) == arguments_json(deep)  # the key cache answers the same


def test_a_mapping_class_is_checked_against_the_abc_once(monkeypatch):
    checks: list[type] = []

    class Counting(type):
        def __instancecheck__(cls, value: object) -> bool:
            checks.append(type(value))
            return isinstance(value, collections.abc.Mapping)

    class CountingMapping(metaclass=Counting):
        pass

    monkeypatch.setattr(_redact, "Mapping", CountingMapping)
    monkeypatch.setattr(_redact, "_MAPPINGS", {dict})
    value = freeze({"a": {"b": 1}, "c": [{"d": 2}]}, "arguments")
    for _ in range(3):
        assert arguments_json(value) == '{"a":{"b":1},"c":[{"d":2}]}'
        assert _redact._holds_secret(freeze({"x": {"api_key": "k"}}, "arguments"))
    assert checks.count(type(value)) == 1  # then known: no ABC check per object
    assert _redact._holds_secret(("no", "mapping")) is False


def test_the_secret_key_cache_stays_bounded_under_hostile_keys(monkeypatch):
    monkeypatch.setattr(_redact, "_secret_keys", {})
    for i in range(3 * _redact._SECRET_KEYS_KEPT):
        assert _redact._is_secret(f"k{i}") is False
        assert _redact._is_secret(f"TOKEN{i}") is True
    assert len(_redact._secret_keys) == _redact._SECRET_KEYS_KEPT


async def test_recorded_arguments_are_canonical_and_redacted(make_host, db, plugin):
    tool = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    host = make_host(plugin, tools=[tool], config=audited(db))
    await host.call("t", {"z": 1, "token": "abc", "a": {"secret": [1], "b": "é"}})
    [row] = rows(db)
    assert row["arguments"] == '{"a":{"b":"é","secret":"[REDACTED]"},"token":"[REDACTED]","z":1}'


# -- concurrency and the thread -----------------------------------------------------------------


async def test_a_thousand_concurrent_calls_make_a_thousand_rows(make_host, db, plugin):
    tool = make_echo(is_concurrency_safe=lambda args: True)
    host = make_host(plugin, tools=[tool], config=audited(db))
    inputs = [
        ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": str(i)})
        for i in range(1000)
    ]
    results = await host.registry.execute_batch(inputs, max_parallel=50)
    assert all(not r.is_error for r in results)
    assert count(db) == 1000
    assert sorted(r["call_id"] for r in rows(db)) == sorted(f"c{i}" for i in range(1000))


async def test_overlapping_observers_lose_no_rows(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    async with trio.open_nursery() as nursery:
        for i in range(300):
            nursery.start_soon(host.call, "echo", {"text": str(i)})
    assert count(db) == 300


async def test_no_worker_thread_round_trip_per_call(make_host, db, plugin, monkeypatch):
    offloaded = []
    real = trio.to_thread.run_sync

    async def spy(fn, *args, **kwargs):
        offloaded.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", spy)
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    for i in range(20):
        await host.call("echo", {"text": str(i)})
    assert offloaded == []
    assert count(db) == 20
    assert plugin._writer._queue._thread.name == f"dsh audit writer: {db}"


async def test_the_database_is_owner_only_and_in_wal_mode(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "hi"})
    _settle()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    connection = sqlite3.connect(db)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()


# -- a database that cannot be written ----------------------------------------------------------
# These watch each failure reported as the call returns: durability = "sync" (with the default
# "async" the same report comes when the writer commits, shortly after).


async def test_a_locked_database_is_reported_once_and_fails_no_call(make_host, db, plugin, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(
        plugin, tools=[make_echo()], config=audited(db, busy_timeout_ms=0, durability="sync")
    )
    await host.call("echo", {"text": "first"})
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        results = [await host.call("echo", {"text": str(i)}) for i in range(5)]
        assert [r.text for r in results] == ["0", "1", "2", "3", "4"]
        [error] = caplog.records
        assert error.levelno == logging.ERROR
        assert error.getMessage().startswith(f"audit: cannot record tool calls in {db} (locked): ")
        assert "database is locked" in error.getMessage()
        assert "reported once per kind of failure" in error.getMessage()
        assert "stop it or raise busy_timeout_ms" in error.getMessage()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await host.call("echo", {"text": "again"})
    assert [r["arguments"] for r in rows(db)] == ['{"text":"first"}', '{"text":"again"}']
    assert caplog.records[-1].getMessage() == (
        f"audit: recording tool calls in {db} works again; 5 call(s) were not recorded"
    )
    assert len(caplog.records) == 2


async def test_an_unusable_path_is_reported_once_and_fails_no_call(
    make_host, tmp_path, plugin, caplog
):
    caplog.set_level(logging.WARNING, LOGGER)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    host = make_host(
        plugin, tools=[make_echo()], config=audited(blocker / "audit.sqlite3", durability="sync")
    )
    for i in range(3):
        assert (await host.call("echo", {"text": str(i)})).text == str(i)
    assert len(caplog.records) == 1
    assert "(unwritable)" in caplog.records[0].getMessage()
    assert "set [plugin.audit] path to a file this user can write" in caplog.records[0].getMessage()


async def test_a_database_that_is_not_sqlite_is_reported_once(make_host, db, plugin, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    db.parent.mkdir()
    db.write_bytes(b"this is not a database" * 100)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="sync"))
    for i in range(3):
        assert not (await host.call("echo", {"text": str(i)})).is_error
    [error] = caplog.records
    assert "(corrupt): DatabaseError" in error.getMessage()


# -- configuration ------------------------------------------------------------------------------


async def test_disabled_records_nothing(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db, enabled=False))
    await host.call("echo", {"text": "hi"})
    assert not db.exists()
    assert plugin._started == {}


async def test_the_default_path_is_in_the_user_state_dir(make_host, tmp_path, plugin):
    assert default_audit_path() == tmp_path / "xdg-state" / "dsh" / "audit.sqlite3"
    host = make_host(plugin, tools=[make_echo()])
    await host.call("echo", {"text": "hi"})
    assert count(default_audit_path()) == 1


async def test_a_relative_path_is_in_the_workspace(make_host, tmp_path, plugin):
    config = tmp_path / "project" / "dsh.toml"
    config.parent.mkdir()
    config.write_text('[host]\nworkspace = "."\n\n[plugin.audit]\npath = "logs/audit.db"\n')
    host = make_host(plugin, tools=[make_echo()], config=str(config))
    await host.call("echo", {"text": "hi"})
    assert count(tmp_path / "project" / "logs" / "audit.db") == 1


def test_the_config_defaults():
    assert AuditConfig() == AuditConfig(
        path=None, enabled=True, busy_timeout_ms=5000, durability="async", required=False,
        queue_size=10_000,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"enabled": "yes"}, "key 'enabled': expected true or false"),
        ({"busy_timeout_ms": -1}, "busy_timeout_ms must be zero or more milliseconds, got -1"),
        ({"file": "x"}, "key 'file': unknown key"),
        ({"durability": "later"}, "durability"),
        ({"queue_size": 0}, "queue_size must be 1 or more, got 0"),
        ({"required": "no"}, "key 'required': expected true or false"),
    ],
)
def test_bad_config_is_refused_at_load(make_host, table, words):
    with pytest.raises(ConfigError, match=r"\[plugin\.audit\]") as info:
        make_host(AuditPlugin(), config={"plugin": {"audit": table}})
    assert words in str(info.value)


# -- dsh audit ----------------------------------------------------------------------------------


@pytest.fixture
async def recorded(make_host, db, plugin) -> Path:
    """A database holding four calls: echo a, other b, echo token, echo d."""
    host = make_host(plugin, tools=[make_echo(), make_echo("other")], config=audited(db))
    await host.call("echo", {"text": "a"}, call_id="c1")
    await host.call("other", {"text": "b"}, call_id="c2")
    await host.call("echo", {"text": "c", "token": "t"}, call_id="c3")
    await host.call("nope", {}, call_id="c4")
    _settle()
    return db


async def test_dsh_audit_json_prints_one_object_per_line(recorded, capsys):
    assert audit_command(["--json", "--db", str(recorded)]) == 0
    lines = capsys.readouterr().out.splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["call_id"] for o in objects] == ["c1", "c2", "c3", "c4"]
    assert objects[2]["arguments"] == {"text": "c", "token": "[REDACTED]"}
    assert objects[3]["is_error"] is True
    assert objects[3]["outcome"] == "UNKNOWN_TOOL"
    assert set(objects[0]) == {
        "time", "call_id", "tool", "arguments", "is_error", "outcome", "decision",
        "decided_by", "duration_ms", "scope", "workspace", "host_id", "rule", "approved_by",
    }  # fmt: skip


async def test_dsh_audit_filters_by_tool_and_keeps_the_last_n(recorded, capsys):
    assert audit_command(["--json", "--tool", "echo", "--last", "1", "--db", str(recorded)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["call_id"] == "c3"


async def test_dsh_audit_prints_a_table(recorded, capsys):
    assert audit_command(["--db", str(recorded), "--last", "2"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "TIME", "TOOL", "OUTCOME", "BY", "RULE", "MS", "CALL", "REASON", "ARGUMENTS"
    ]  # fmt: skip
    assert [line.split()[1:3] for line in lines] == [["echo", "ok"], ["nope", "UNKNOWN_TOOL"]]
    assert lines[0].endswith('{"text":"c","token":"[REDACTED]"}')
    assert lines[0].split()[6] == "c3"
    assert lines[1].split()[7:9] == ["unknown", "tool"]  # the reason is in the table


async def test_dsh_audit_reads_the_default_path(make_host, plugin, capsys):
    host = make_host(plugin, tools=[make_echo()])
    await host.call("echo", {"text": "hi"}, call_id="dflt")
    _settle()
    assert audit_command(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["call_id"] == "dflt"


def test_dsh_audit_without_a_database_says_so(tmp_path, capsys):
    missing = tmp_path / "none.sqlite3"
    assert audit_command(["--db", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"dsh audit: cannot read {missing}: no audit database there")
    assert not missing.exists()


def test_dsh_audit_rejects_unknown_options(capsys):
    assert audit_command(["--bogus"]) == 2
    assert "usage: dsh audit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "last", ["0", "-1", "x", "1.5", "", "99999999999999999999", "1000000001", "9" * 5000]
)
def test_dsh_audit_range_checks_last_in_one_line(last, capsys):
    assert audit_command(["--last", last]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("dsh audit: error: --last takes a whole number from 1 to 1000000000")
    assert len(line) < 200


# -- hostile text: lone surrogates, control characters, escape sequences ------------------------


async def test_a_lone_surrogate_in_an_argument_is_stored_losslessly(make_host, db, plugin, capsys):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    result = await host.call("echo", {"text": "a\udcffb", "note": "é"}, call_id="s1")
    assert not result.is_error
    [row] = rows(db)
    assert json.loads(row["arguments"]) == {"text": "a\udcffb", "note": "é"}
    assert audit_command(["--json", "--db", str(db)]) == 0
    line = capsys.readouterr().out
    assert line.isascii() or "é" in line
    assert "\\udcff" in line
    assert json.loads(line)["arguments"] == {"text": "a\udcffb", "note": "é"}


async def test_lone_surrogates_in_names_and_messages_are_kept_escaped(
    make_host, db, plugin, capsys
):
    host = make_host(plugin, config=audited(db))
    result = await host.call("tool\udcff", {}, call_id="id\ud800", scope=Scope("sc\udfff"))
    assert result.error.code == "UNKNOWN_TOOL"
    [row] = rows(db)
    assert (row["tool"], row["call_id"], row["scope"]) == ("tool\\udcff", "id\\ud800", "sc\\udfff")
    assert "\\udcff" in row["decision"]
    assert (
        audit_command(["--db", str(db), "--tool", "tool\udcff"]) == 0
    )  # argv as Python decodes it
    out = capsys.readouterr().out
    assert "tool\\udcff" in out
    out.encode()  # printable as UTF-8


HOSTILE = [
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "\x1b]0;owned\x07",  # set the terminal title
    "\r2026-01-01T00:00:00.000Z  read_file  ok",  # overwrite the line
    "\nforged row",  # a line of its own
    "\x08\x08\x7f",  # backspaces, DEL
    "\x9b31m",  # C1 CSI
    "\u202eevil\u202c",  # bidi override
    "a\u200bb\u2028c\ufeff",  # zero-width space, line separator, BOM
    "\U000e0041\U000e0042",  # tag characters (invisible)
]


@pytest.mark.parametrize("as_json", [False, True])
async def test_dsh_audit_escapes_every_control_character_from_the_model(
    make_host, db, plugin, capsys, as_json
):
    class Namer:
        name = "namer"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("reason " + "".join(HOSTILE))

    host = make_host(plugin, Namer(), tools=[make_echo()], config=audited(db))
    for i, text in enumerate(HOSTILE):
        await host.call("echo" + text, {"text": text, text: 1}, call_id=f"c{i}{text}")
    _settle()
    argv = ["--db", str(db), "--last", "100"] + (["--json"] if as_json else [])
    assert audit_command(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == len(HOSTILE) + (0 if as_json else 1)  # nothing forged a line
    for line in lines:
        assert line.isprintable(), repr(line)
    shown = (
        ("\\u001b", "\\u202e", "\\u2028", "\\u009b", "\\u007f", "\\udb40\\udc41")
        if as_json  # JSON escapes keep each line valid JSON
        else ("\\u001b", "\\u202e", "\\u2028", "\\u009b", "\\u007f", "\\U000e0041")  # as stored
    )
    for raw in shown:
        assert raw in out
    if as_json:
        objects = [json.loads(line) for line in lines]
        assert [o["arguments"]["text"] for o in objects] == HOSTILE  # still the exact values
        # the short text columns are stored escaped (`safe_text`), the arguments exactly
        assert objects[0]["decision"] == "reason " + "".join(map(_redact.safe_text, HOSTILE))


def test_the_json_escape_leaves_printable_text_alone():
    assert _json_printable('héllo wörld 日本 "x" \\') == 'héllo wörld 日本 "x" \\'
    assert _json_printable("a\tb\x00") == "a\\u0009b\\u0000"
    assert _json_printable("\U0001f600") == "\U0001f600"  # an emoji is printable


# -- dsh audit and pipes -----------------------------------------------------------------------


async def test_dsh_audit_into_a_closed_pipe_exits_quietly(recorded, monkeypatch, capsys):
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", closefd=True) as broken:
        monkeypatch.setattr(sys, "stdout", broken)
        assert audit_command(["--db", str(recorded)]) == 0
        monkeypatch.undo()
    assert capsys.readouterr().err == ""


def test_dsh_audit_piped_into_head_exits_quietly(tmp_path):
    db = tmp_path / "many.sqlite3"
    connection = sqlite3.connect(db)
    connection.executescript(V1_SCHEMA)  # a database of the first schema: still readable
    connection.executemany(
        f"INSERT INTO calls ({', '.join(V1_COLUMNS)}) VALUES ({', '.join('?' * 10)})",
        [("2026-01-01T00:00:00.000Z", f"c{i}", "echo", "{}", 0, "ok", None, None, 1.0, None)
         for i in range(5_000)],
    )  # fmt: skip
    connection.commit()
    connection.close()
    with subprocess.Popen(
        [sys.executable, "-m", "dsh_host", "audit", "--db", str(db), "--last", "5000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline().startswith(b"TIME")
        process.stdout.close()  # what `| head -1` does
        err = process.stderr.read()
        assert process.wait(timeout=60) == 0
    assert err == b""


def test_redaction_is_linear_in_the_arguments_however_deep_the_secret(monkeypatch):
    """A secret at the bottom of a deep chain is found in one walk and copied in one more (a
    model cannot make the writer thread do depth x size work with a nested argument)."""
    depth = 300
    value: object = {"token": "t"}
    for _ in range(depth):
        value = {"next": value, "pad": [1, 2, 3]}
    frozen = freeze(value, "arguments")
    looked = []
    is_secret = _redact._is_secret
    monkeypatch.setattr(_redact, "_is_secret", lambda key: looked.append(key) or is_secret(key))
    text = arguments_json(frozen)
    assert text.count('"[REDACTED]"') == 1
    assert len(looked) <= 4 * (depth + 1)  # each key looked at at most twice (was ~depth²/2)


def test_a_row_escapes_a_lone_surrogate_in_any_text_field_alone():
    """One ASCII check covers every text field: a surrogate in the rule (or who approved)
    alone is still escaped, and ASCII fields are kept as they are."""
    from dsh_host import ToolExecution, ToolExecutionResult
    from dsh_plugins_builtin._audit._row import build_row

    execution = ToolExecution(call_id="c1", name="echo", arguments={})
    result = ToolExecutionResult(content="ok")
    entry = (0.0, execution, result, 1.0, "rule \udcff", "person \ud800", None)
    row = build_row(entry, "/ws", "host", set())
    assert row[1:3] == ("c1", "echo")
    assert row[-2:] == ("rule \\udcff", "person \\ud800")
    plain = build_row((0.0, execution, result, 1.0, "rule", None, None), "/ws", "host", set())
    assert plain[-2:] == ("rule", None)


_ROW_TEXT_FIELDS = {  # row column -> (its index in the row, the entry that sets it alone)
    "call_id": 1, "tool": 2, "outcome": 5, "message": 6, "decided_by": 7, "scope": 9,
    "decision": 12, "approved_by": 13,
}  # fmt: skip


@pytest.mark.parametrize("field", sorted(_ROW_TEXT_FIELDS))
def test_a_row_escapes_a_control_character_in_any_text_field_alone(field):
    """Each text column is checked on its own: a control character in any one of them (the
    others printable, some ``None``) is escaped, and the other fields are kept as they are."""
    from dsh_host import Scope, ToolExecution, ToolExecutionResult, ToolFailure
    from dsh_plugins_builtin._audit._row import build_row

    bad = "x\x1b[2Jy"
    text = {name: bad if name == field else name for name in _ROW_TEXT_FIELDS}
    execution = ToolExecution(
        call_id=text["call_id"], name=text["tool"], arguments={}, scope=Scope(text["scope"])
    )
    failure = ToolFailure(text["message"], text["outcome"], "Error")
    result = ToolExecutionResult(
        content="Error: no", is_error=True, error=failure, decided_by=text["decided_by"]
    )
    entry = (0.0, execution, result, 1.0, text["decision"], text["approved_by"], None)
    row = build_row(entry, "/ws", "host", set())
    assert {name: row[i] for name, i in _ROW_TEXT_FIELDS.items()} == {
        name: "x\\u001b[2Jy" if name == field else name for name in _ROW_TEXT_FIELDS
    }


@pytest.mark.parametrize(
    "wall", [0.0, 0.0009, 0.001, 0.5, 0.9999, 1_778_312_125.123, 1_778_312_125.9995, 1e9 + 0.0415]
)
def test_a_row_time_is_utc_to_the_millisecond_truncated(wall):
    second = int(wall)
    expected = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    expected += f".{int((wall - second) * 1000):03d}Z"
    assert _redact.timestamp(wall) == expected


async def _closed_offloading(host, monkeypatch) -> list:
    offloaded: list = []
    real = trio.to_thread.run_sync

    async def spy(fn, *args, **kwargs):
        offloaded.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", spy)
    await host.aclose()
    return offloaded


async def test_an_idle_writer_closes_without_a_worker_thread(make_host, db, plugin, monkeypatch):
    # `dsh hook claude` answering ``ask`` records nothing: its close starts no thread
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    assert plugin._writer.idle
    assert await _closed_offloading(host, monkeypatch) == []
    assert plugin._writer.idle


async def test_a_writer_with_rows_closes_in_a_worker_thread(make_host, db, plugin, monkeypatch):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "hi"})
    assert not plugin._writer.idle
    assert await _closed_offloading(host, monkeypatch) == [plugin.close]
    assert plugin._writer.idle
    assert count(db) == 1


@pytest.mark.parametrize(("call_id", "recorded"), [(123, "123"), (1.5, "1.5")])
async def test_a_call_id_that_is_not_text_loses_no_row(make_host, db, plugin, call_id, recorded):
    """A caller's call id of another type (the pipeline takes it as given) is recorded as its
    text: neither its row nor the next call's, written in the same batch, is lost."""
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "a"}, call_id=call_id)
    await host.call("echo", {"text": "b"}, call_id="ok")
    plugin.close()
    assert [row["call_id"] for row in rows(db)] == [recorded, "ok"]


CREDENTIALS = {
    "a token in a command": (
        'curl -H "Authorization: Bearer ghp_0123456789abcdefABCDEF0123456789abcd" api',
        'curl -H "Authorization: Bearer [REDACTED]" api',
    ),
    "a URL's password": (
        "git clone https://bob:hunter2@github.com/o/r",
        "git clone https://bob:[REDACTED]@github.com/o/r",
    ),
    "an AWS key id": ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=[REDACTED]"),
    "a JWT": ("t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "t=[REDACTED]"),
    "a private key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK=\n-----END RSA PRIVATE KEY-----\nok",
        "[REDACTED]\nok",
    ),
    "a token starting a line of a .env": (
        "A=1\nghp_0123456789abcdefABCDEF0123456789abcd\n\tsk-0123456789abcdef0123",
        "A=1\n[REDACTED]\n\t[REDACTED]",
    ),
    "nothing (a word that ends in sk-)": (
        "task-list-abcdefghijklmnopqrstuvwxyz and https://example.com/a:b@c",
        "task-list-abcdefghijklmnopqrstuvwxyz and https://example.com/a:b@c",
    ),
}


@pytest.mark.parametrize("case", list(CREDENTIALS))
async def test_a_credential_in_a_text_is_redacted_whatever_its_key(make_host, db, plugin, case):
    """Redaction by key missed what a text holds: a ``bash`` command's token, a ``write_file``
    of a ``.env``, a URL's password. The row keeps the text's shape, and stays JSON."""
    given, kept = CREDENTIALS[case]
    tool = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    host = make_host(plugin, tools=[tool], config=audited(db))
    await host.call("t", {"command": given, "nested": [{"content": given}]})
    [row] = rows(db)
    assert json.loads(row["arguments"]) == {"command": kept, "nested": [{"content": kept}]}


async def test_an_error_message_loses_the_credentials_it_quotes(make_host, db, plugin):
    def fail(args: object) -> str:
        raise DshError("fatal: could not read from https://bob:hunter2@example.com/r", "GIT")

    tool = define_tool(name="t", description="", parameters={}, execute=fail)
    host = make_host(plugin, tools=[tool], config=audited(db))
    await host.call("t", {})
    [row] = rows(db)
    assert row["decision"] == "fatal: could not read from https://bob:[REDACTED]@example.com/r"


ADVERSARIAL = {
    "a run of letters, then ://": "'a' * 1_000_000 + '://'",
    "a URL's user, no @": "'://u:' + 'p' * 1_000_000",
    "prefixes in a row": "' ghp_abc' * 150_000",
    "JWT starts in a row": "' eyJaaaaaaaaa.eyJ' * 60_000",
    "key block starts in a row": "'-----BEGIN RSA PRIVATE KEY-----' * 40_000",
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_finding_credentials_is_linear_in_what_the_model_wrote(case):
    """The model writes the texts searched (a 1 MB write_file): a pattern tried from every
    letter of a run made the search quadratic (a MB of letters and a "://" took about a
    quarter of an hour, in the writer thread, and on the call's path for otel). Linear, each
    of these takes a fraction of a second; the bound only tells finished from stuck."""
    code = (
        "from dsh_plugins_builtin._audit._redact import scrub\n"
        f"text = {ADVERSARIAL[case]}\n"
        "assert scrub(text) == text or '[REDACTED]' in scrub(text)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=120, check=False)
    assert done.returncode == 0


TOKEN = "ghp_0123456789abcdefABCDEF0123456789abcd"


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": f"Bearer {TOKEN}", "pad": "\udcff"},  # a lone surrogate: written as ASCII
        {"command": f"\u00e9{TOKEN}", "pad": "\udcff"},  # é before it, written \u00e9
        {"command": f"\u202e{TOKEN}"},  # a bidi override before it, written \u202e
    ],
)
async def test_no_way_of_writing_the_text_keeps_a_credential(make_host, db, plugin, arguments):
    """The credential search ran before the text was written again as ASCII (arguments with a
    lone surrogate, which a model can always add) or its format characters escaped: that text
    came from the value as it was, credentials included."""
    tool = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    host = make_host(plugin, tools=[tool], config=audited(db))
    await host.call("t", arguments)
    [row] = rows(db)
    assert TOKEN not in row["arguments"]
    assert "[REDACTED]" in json.loads(row["arguments"])["command"]


async def test_a_urls_password_written_escaped_is_redacted(make_host, db, plugin):
    """In ASCII (arguments with a lone surrogate) a user or password with a non-ASCII letter
    is written with \\u escapes, which the URL's password search stopped at."""
    tool = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    host = make_host(plugin, tools=[tool], config=audited(db))
    await host.call("t", {"command": "git clone https://b\u00f6b:p\u00e4ss@h/r", "pad": "\udcff"})
    [row] = rows(db)
    assert json.loads(row["arguments"])["command"] == "git clone https://b\u00f6b:[REDACTED]@h/r"
