"""The audit writer: group commit, back-pressure, durability modes, failures, and the location.

Tests that need the writer held mid-batch gate its ``_commit`` on a `threading.Event` the test
sets: nothing here waits on the wall clock.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import types
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dsh_host import (
    ConfigError,
    Host,
    TextBlock,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    define_tool,
)
from dsh_plugins_builtin._audit import _queue as _audit_queue
from dsh_plugins_builtin._audit import _sqlite as _audit_sqlite
from dsh_plugins_builtin._audit._faults import Replaced as _Replaced
from dsh_plugins_builtin._audit._faults import classify as _classify
from dsh_plugins_builtin._audit._writer import AuditWriter
from dsh_plugins_builtin.audit import AuditPlugin, legacy_audit_path
from dsh_plugins_builtin.sandbox import SandboxPlugin
from tests.conftest import make_echo, soak_size

LOGGER = "dsh_plugins_builtin.audit"


@pytest.fixture(autouse=True)
def private_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "audit" / "calls.sqlite3"


@pytest.fixture
def plugin():
    plugin = AuditPlugin()
    yield plugin
    plugin.close()


def audited(db: Path, **table: Any) -> dict[str, Any]:
    """An audit table. These tests watch the writer commit (or fail) as each call returns, so
    they ask for ``durability = "sync"`` unless they name a mode (the default is ``"async"``)."""
    return {"plugin": {"audit": {"path": str(db), "durability": "sync", **table}}}


def count(db: Path) -> int:
    if not db.exists():
        return 0
    connection = sqlite3.connect(db)
    try:
        return int(connection.execute("SELECT count(*) FROM calls").fetchone()[0])
    except sqlite3.OperationalError:  # no table yet
        return 0
    finally:
        connection.close()


class Gate:
    """Hold the writer before each commit until `open` (records batch sizes)."""

    def __init__(self, writer: AuditWriter) -> None:
        self.opened = threading.Event()
        self.arrived = threading.Event()
        self.batches: list[int] = []
        real = writer._queue._commit

        def commit(entries: list[Any]) -> None:
            self.arrived.set()
            assert self.opened.wait(20), "the test never opened the gate"
            self.batches.append(len(entries))
            real(entries)

        writer._queue._commit = commit

    async def wait_arrived(self) -> None:
        await trio.to_thread.run_sync(self.arrived.wait)
        await trio.testing.wait_all_tasks_blocked()

    def open(self) -> None:
        self.opened.set()


# -- group commit and back-pressure --------------------------------------------------------------


async def test_concurrent_rows_are_committed_in_batches_with_one_wake_up_each(
    make_host, db, plugin, monkeypatch
):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    writer = plugin._writer
    gate = Gate(writer)
    wake_ups = []
    real_wake = _audit_queue._wake
    monkeypatch.setattr(
        _audit_queue, "_wake", lambda waiters: (wake_ups.append(len(waiters)), real_wake(waiters))
    )
    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(host.call, "echo", {"text": str(i)})
        await gate.wait_arrived()  # the writer holds its first batch; every call is queued
        held = writer._queue._busy
        assert held + len(writer._queue._rows) == 200
        gate.open()
    assert count(db) == 200
    assert gate.batches == [held, 200 - held]  # two commits for 200 calls
    assert [n for n in wake_ups if n] == [held, 200 - held]  # one wake-up call per batch


async def test_a_full_queue_makes_calls_wait_and_drops_nothing(make_host, db, plugin):
    config = audited(db, queue_size=3, durability="async")
    host = make_host(plugin, tools=[make_echo()], config=config)
    writer = plugin._writer
    start = writer._queue._start
    writer._queue._start = lambda: None  # type: ignore[method-assign]  # no writer: the queue fills
    returned = []

    async def call(i: int) -> None:
        returned.append(await host.call("echo", {"text": str(i)}))

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(call, i)
        await trio.testing.wait_all_tasks_blocked()
        assert len(returned) == 3  # three rows fit; seven calls wait, their rows queued
        assert len(writer._queue._rows) == 10
        with writer._lock:
            start()
    assert count(db) == 10
    assert len(returned) == 10


async def test_a_row_is_queued_even_if_the_observer_is_never_awaited(db, plugin, make_host):
    make_host(plugin, tools=[make_echo()], config=audited(db))  # starts the plugin
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    result = ToolExecutionResult(content=(TextBlock("x"),))
    waiter = plugin.dsh_tool_result(execution, result)
    assert waiter is not None
    del waiter  # as when a time limit or a cancellation struck before the first await
    assert plugin.flush(timeout=20)
    assert count(db) == 1


async def test_an_observer_time_limit_does_not_cut_a_row_off(make_host, db, plugin, autojump_clock):
    config = {**audited(db), "host": {"observer_timeout": 0.5}}
    host = make_host(plugin, tools=[make_echo()], config=config)
    gate = Gate(plugin._writer)
    returned = []

    async def call() -> None:
        returned.append(await host.call("echo", {"text": "x"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await gate.wait_arrived()
        await trio.sleep(60)  # mock clock: far past the observer time limit
        assert returned == []  # still waiting for its row: it was not cut off
        gate.open()
    assert count(db) == 1
    assert not returned[0].is_error


# -- durability ----------------------------------------------------------------------------------


async def test_sync_durability_returns_only_after_the_commit(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    gate = Gate(plugin._writer)
    done = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _record(done, host.call("echo", {"text": "x"})))
        await gate.wait_arrived()
        assert done == []
        gate.open()
    assert done
    assert count(db) == 1


async def _record(into: list[Any], awaitable: Any) -> None:
    into.append(await awaitable)


async def test_async_durability_returns_once_queued(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="async"))
    gate = Gate(plugin._writer)
    for i in range(5):
        assert not (await host.call("echo", {"text": str(i)})).is_error
    await gate.wait_arrived()
    assert count(db) == 0  # nothing committed yet, and every call has returned
    gate.open()
    assert plugin.flush()
    assert count(db) == 5


async def test_the_default_durability_is_async(make_host, db, plugin):
    """No ``durability`` key: a call returns once its row is queued, not committed."""
    host = make_host(plugin, tools=[make_echo()], config={"plugin": {"audit": {"path": str(db)}}})
    assert plugin.config.durability == "async"
    gate = Gate(plugin._writer)
    for i in range(3):
        assert not (await host.call("echo", {"text": str(i)})).is_error
    await gate.wait_arrived()
    assert count(db) == 0  # every call returned; the writer holds the rows
    gate.open()
    plugin.close()  # close commits what is queued
    assert count(db) == 3


async def test_async_rows_are_queued_without_waiting_or_a_thread_hop(make_host, db, plugin):
    """The fast path: the observer queues the row and returns nothing to await."""
    host = make_host(plugin, tools=[make_echo()], config={"plugin": {"audit": {"path": str(db)}}})
    await host.call("echo", {"text": "first"})  # starts the writer and the end-of-run flush
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    result = ToolExecutionResult(content=(TextBlock("x"),))
    assert plugin.dsh_tool_result(execution, result) is None
    plugin.close()
    assert count(db) == 2


@pytest.mark.soak
async def test_ten_thousand_concurrent_async_calls_leave_exactly_ten_thousand_rows(
    make_host, db, plugin
):
    size = soak_size(10_000, 50_000)
    tool = make_echo(is_concurrency_safe=lambda args: True)
    host = make_host(plugin, tools=[tool], config={"plugin": {"audit": {"path": str(db)}}})
    async with trio.open_nursery() as nursery:
        for i in range(size):
            call = ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": str(i)})
            nursery.start_soon(host.registry.execute, call)
    plugin.close()
    connection = sqlite3.connect(db)
    try:
        found = connection.execute("SELECT count(*), count(DISTINCT call_id) FROM calls")
        assert found.fetchone() == (size, size)
    finally:
        connection.close()


def test_async_rows_are_committed_before_the_trio_run_ends(db):
    plugin = AuditPlugin()
    host = Host(config=audited(db, durability="async"), plugins=[plugin], load_entrypoints=False)
    host.registry.register(make_echo())
    writer = plugin._writer
    flushing = threading.Event()
    real_commit, real_flush = writer._queue._commit, writer._queue.flush

    def commit(entries: list[Any]) -> None:  # held until the end of the run asks for a flush
        assert flushing.wait(20), "nothing flushed the queue when the trio run ended"
        real_commit(entries)

    def flush(timeout: float | None = None) -> bool:
        flushing.set()
        return real_flush(timeout)

    writer._queue._commit, writer._queue.flush = commit, flush  # type: ignore[method-assign]

    async def main() -> None:
        for i in range(100):
            await host.call("echo", {"text": str(i)})

    trio.run(main)
    assert count(db) == 100
    plugin.close()


def _writing(path: Path) -> sqlite3.Connection:
    """Another host's connection to the new database at *path*, about to write (it holds the
    reserved lock, as a host does while it puts the file in WAL mode)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_new_database_another_host_writes_is_opened_once_that_host_lets_go(tmp_path, monkeypatch):
    # SQLite fails the change to WAL mode at once while another connection is about to write,
    # without calling the busy handler (it would deadlock): two hosts starting on one new
    # database at the same moment lost rows to it ("database is locked").
    path = tmp_path / "audit.db"
    other = _writing(path)
    waits: list[float] = []

    def pause(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            other.execute("COMMIT")  # the other host's write ends

    monkeypatch.setattr(_audit_sqlite, "_pause", pause)
    connection, held, _ = _audit_sqlite.connect_database(path, 5.0)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert waits == [0.001, 0.002, 0.004]  # tried again after each pause, 1 ms doubling
    finally:
        connection.close()
        os.close(held)
        other.close()


def test_a_database_held_longer_than_the_busy_timeout_says_it_is_locked(tmp_path, monkeypatch):
    path = tmp_path / "audit.db"
    other = _writing(path)
    now = [0.0]
    waits: list[float] = []

    def pause(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(_audit_sqlite, "_pause", pause)
    connection = sqlite3.connect(path, timeout=0.0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            _audit_sqlite.write_ahead(connection, 0.5, clock=lambda: now[0])
        assert now[0] == pytest.approx(0.5)  # waited the whole timeout, no more
        assert max(waits) == 0.05  # in pauses of at most 50 ms
    finally:
        connection.close()
        other.close()


class _Locked:
    """A connection whose change to WAL mode fails with *codes*, one per attempt, then succeeds;
    an attempt advances *now* by *blocks* times its busy timeout (how long SQLite's busy handler
    waits while another connection holds the file exclusively)."""

    def __init__(self, codes: list[int], now: list[float], blocks: float) -> None:
        self.busy_ms = 1_234  # the connection's own timeout, longer than write_ahead's
        self.codes = codes
        self.now = now
        self.blocks = blocks
        self.tried: list[int] = []  # the busy timeout of each attempt, in ms

    def execute(self, sql: str) -> Any:
        if sql == "PRAGMA busy_timeout":
            return types.SimpleNamespace(fetchone=lambda: (self.busy_ms,))
        if sql.startswith("PRAGMA busy_timeout = "):
            self.busy_ms = int(sql.rpartition(" ")[2])
            return None
        assert sql == "PRAGMA journal_mode=WAL"
        self.tried.append(self.busy_ms)
        self.now[0] += self.blocks * self.busy_ms / 1000
        if self.codes:
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = self.codes.pop(0)  # type: ignore[attr-defined]
            raise error
        return None


def test_the_change_to_wal_mode_waits_only_the_time_left_in_the_busy_handler(monkeypatch):
    # Each attempt may wait in SQLite's busy handler for the connection's whole timeout: with
    # the connection's own timeout, a 0.5 s busy_timeout waited 1.234 s and more.
    now = [0.0]
    monkeypatch.setattr(
        _audit_sqlite, "_pause", lambda seconds: now.__setitem__(0, now[0] + seconds)
    )
    connection = _Locked([sqlite3.SQLITE_BUSY] * 100, now, blocks=0.5)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _audit_sqlite.write_ahead(connection, 0.5, clock=lambda: now[0])  # type: ignore[arg-type]
    assert now[0] <= 0.5 + 1e-9  # the whole wait, busy handler included
    assert connection.tried[:2] == [500, 249]  # the time left, in ms, before each attempt
    assert all(a > b for a, b in zip(connection.tried, connection.tried[1:], strict=False))
    assert connection.busy_ms == 1_234  # the connection's own timeout, restored


def test_the_change_to_wal_mode_is_tried_again_on_extended_busy_codes(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(_audit_sqlite, "_pause", waits.append)
    codes = [sqlite3.SQLITE_BUSY_RECOVERY, sqlite3.SQLITE_BUSY_SNAPSHOT]
    connection = _Locked(codes, [0.0], blocks=0.0)
    _audit_sqlite.write_ahead(connection, 5.0, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert connection.tried == [5_000, 5_000, 5_000]  # tried again after each, then set
    assert waits == [0.001, 0.002]
    assert connection.busy_ms == 1_234


def test_a_real_connection_gets_its_busy_timeout_back_after_the_change_to_wal_mode(tmp_path):
    connection = sqlite3.connect(tmp_path / "audit.db", timeout=1.5, isolation_level=None)
    try:
        _audit_sqlite.write_ahead(connection, 0.5)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA busy_timeout").fetchone() == (1_500,)
    finally:
        connection.close()


@pytest.mark.parametrize("busy_timeout", [float("nan"), float("inf"), -1.0])
def test_a_busy_timeout_that_is_not_a_finite_number_of_seconds_is_refused(tmp_path, busy_timeout):
    # NaN never passes the deadline: the change to WAL mode was tried again forever.
    with pytest.raises(ValueError, match="busy_timeout"):
        AuditWriter(tmp_path / "audit.db", busy_timeout=busy_timeout)
    connection = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
    try:
        with pytest.raises(ValueError, match="busy_timeout"):
            _audit_sqlite.write_ahead(connection, busy_timeout)
    finally:
        connection.close()


def test_several_hosts_and_trio_runs_share_one_database(db):
    plugins = [AuditPlugin(), AuditPlugin()]
    hosts = []
    for plugin, durability in zip(plugins, ["sync", "async"], strict=True):
        host = Host(audited(db, durability=durability), plugins=[plugin], load_entrypoints=False)
        host.registry.register(make_echo())
        hosts.append(host)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for host in hosts:
                for i in range(50):
                    nursery.start_soon(host.call, "echo", {"text": str(i)})

    for _ in range(3):
        trio.run(main)
    assert count(db) == 300
    for plugin in plugins:
        plugin.close()
        assert plugin._writer._queue._thread is None  # close() stopped the thread


async def test_close_flushes_and_a_later_row_reopens(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="async"))
    await host.call("echo", {"text": "a"})
    plugin.close()
    assert count(db) == 1
    assert plugin._writer._queue._thread is None
    assert plugin._writer._file.connection is None
    await host.call("echo", {"text": "b"})
    plugin.close()
    assert count(db) == 2


async def test_the_thread_starts_with_the_first_row_and_ends_when_idle(
    make_host, db, plugin, monkeypatch
):
    monkeypatch.setattr(_audit_queue, "IDLE_SECONDS", 0.0)
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    writer = plugin._writer
    assert writer._queue._thread is None  # no row yet, no thread
    for text in ("a", "b"):
        await host.call("echo", {"text": text})
        thread = writer._queue._thread
        if thread is not None:
            await trio.to_thread.run_sync(thread.join, 10)
            assert not thread.is_alive()
        assert writer._queue._thread is None
    assert count(db) == 2


async def test_close_from_the_writer_thread_itself_neither_deadlocks_nor_loses_rows(
    make_host, db, plugin
):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    writer = plugin._writer
    real = writer._queue._commit

    def commit(entries: list[Any]) -> None:
        # What a garbage collection in the writer thread, inside its lock, can do: finalise
        # the plugin, whose finaliser calls close().
        assert writer._lock.acquire(timeout=5), "the writer's lock is not re-entrant"
        try:
            writer.close()
        finally:
            writer._lock.release()
        real(entries)

    writer._queue._commit = commit
    await host.call("echo", {"text": "x"})
    assert count(db) == 1
    writer._queue._commit = real
    await host.call("echo", {"text": "y"})  # a stopped writer starts again
    assert count(db) == 2


# -- failures ------------------------------------------------------------------------------------


def _echo_counting(ran: list[str]) -> Any:
    async def execute(args: Any, ctx: Any) -> str:
        ran.append(args["text"])
        return str(args["text"])

    return define_tool(
        name="echo",
        description="",
        parameters={"text": {"type": "string", "required": True}},
        execute=execute,
    )


async def test_a_required_audit_refuses_calls_while_it_cannot_write(make_host, db, plugin, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    ran: list[str] = []
    config = audited(db, required=True, busy_timeout_ms=0)
    host = make_host(plugin, tools=[_echo_counting(ran)], config=config)
    assert not (await host.call("echo", {"text": "1"})).is_error
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        assert not (await host.call("echo", {"text": "2"})).is_error  # its row fails
        denied = await host.call("echo", {"text": "3"})
        assert denied.is_error
        assert denied.error.code == "DENIED"
        assert denied.decided_by == "audit"
        assert "required = true" in denied.error.message
        assert "locked" in denied.error.message
        assert str(db) in denied.error.message
        assert ran == ["1", "2"]  # the body of the refused call never ran
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The refusal holds until a row is committed again: the next call's row lifts it.
    assert (await host.call("echo", {"text": "4"})).is_error
    assert not (await host.call("echo", {"text": "5"})).is_error
    assert ran == ["1", "2", "5"]


async def test_a_required_async_audit_refuses_calls_once_a_commit_failed(
    make_host, db, plugin, caplog
):
    """With the default durability the refusal starts when the writer's commit has failed."""
    caplog.set_level(logging.WARNING, LOGGER)
    ran: list[str] = []
    config = audited(db, required=True, busy_timeout_ms=0, durability="async")
    host = make_host(plugin, tools=[_echo_counting(ran)], config=config)
    assert not (await host.call("echo", {"text": "1"})).is_error
    assert plugin.flush(30)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        assert not (await host.call("echo", {"text": "2"})).is_error  # queued; it will fail
        assert plugin.flush(30)  # the writer tried, and failed
        denied = await host.call("echo", {"text": "3"})
        assert (denied.code, denied.decided_by) == ("DENIED", "audit")
        assert "locked" in denied.error.message
        assert ran == ["1", "2"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # As with "sync", the first row that commits lifts the refusal: one more call is refused.
    assert (await host.call("echo", {"text": "4"})).is_error
    assert plugin.flush(30)
    assert not (await host.call("echo", {"text": "5"})).is_error
    assert ran == ["1", "2", "5"]


async def test_a_required_audit_that_cannot_open_its_database_refuses_from_the_start(
    make_host, tmp_path, plugin, caplog
):
    caplog.set_level(logging.WARNING, LOGGER)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    ran: list[str] = []
    config = audited(blocker / "audit.sqlite3", required=True)
    host = make_host(plugin, tools=[_echo_counting(ran)], config=config)
    result = await host.call("echo", {"text": "x"})
    assert (result.error.code, result.decided_by, ran) == ("DENIED", "audit", [])
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (sqlite3.OperationalError("database is locked"), "locked"),
        (sqlite3.OperationalError("database or disk is full"), "full"),
        (OSError(errno.ENOSPC, "No space left on device"), "full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "unwritable"),
        (sqlite3.OperationalError("unable to open database file"), "unwritable"),
        (PermissionError(errno.EACCES, "Permission denied"), "unwritable"),
        (sqlite3.DatabaseError("file is not a database"), "corrupt"),
        (_Replaced("moved"), "replaced"),
        (RuntimeError("?"), "other"),
    ],
)
def test_failures_are_classified_by_kind(exc, kind):
    assert _classify(exc) == kind


async def test_each_kind_of_failure_is_reported_once(make_host, db, plugin, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, busy_timeout_ms=0))
    await host.call("echo", {"text": "first"})
    writer = plugin._writer
    real = writer._file.connect
    failures = iter([sqlite3.OperationalError("database or disk is full")] * 3)

    def connect() -> sqlite3.Connection:
        error = next(failures, None)
        if error is not None:
            raise error
        return real()

    writer._file.connect = connect  # type: ignore[method-assign]
    writer._close_connection()
    holder = sqlite3.connect(db, isolation_level=None)
    for i in range(3):  # full, full, full
        await host.call("echo", {"text": str(i)})
    holder.execute("BEGIN EXCLUSIVE")
    for i in range(3):  # locked, locked, locked
        await host.call("echo", {"text": str(i)})
    holder.execute("ROLLBACK")
    holder.close()
    await host.call("echo", {"text": "last"})
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert "(full): OperationalError: database or disk is full" in messages[0]
    assert "free space" in messages[0]
    assert "(locked)" in messages[1]
    assert messages[2].endswith("works again; 6 call(s) were not recorded")


def test_a_row_that_cannot_be_encoded_keeps_a_placeholder(db, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    writer = AuditWriter(db)
    execution = types.SimpleNamespace(
        call_id="c", name="t", arguments={"n": 10**5000}, scope=None
    )  # more digits than Python writes as text
    result = types.SimpleNamespace(
        error=None, is_error=False, decided_by=None, decision_detail=None
    )

    async def main() -> None:
        for _ in range(2):
            waiter = writer.submit((0.0, execution, result, None, None, None, None), wait=True)
            assert waiter is not None
            await waiter

    trio.run(main)
    writer.close()
    connection = sqlite3.connect(db)
    arguments = [row[0] for row in connection.execute("SELECT arguments FROM calls")]
    connection.close()
    assert arguments == ['"[not recordable: ValueError]"'] * 2
    [error] = caplog.records
    assert 'the arguments of call c to tool "t" cannot be recorded' in error.getMessage()


# -- where the database lives --------------------------------------------------------------------


def _sandboxed(ws: Path, audit: dict[str, Any], **sandbox: Any) -> dict[str, Any]:
    return {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": {"writable_roots": ["."], **sandbox}, "audit": audit},
    }


@pytest.fixture
def ws(tmp_path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.mark.parametrize("sandbox_first", [False, True])
def test_a_path_inside_a_writable_root_is_a_config_error(make_host, ws, sandbox_first):
    plugins = [AuditPlugin(), SandboxPlugin()]
    if sandbox_first:
        plugins.reverse()
    with pytest.raises(ConfigError) as info:
        make_host(*plugins, config=_sandboxed(ws, {"path": "logs/audit.sqlite3"}))
    message = str(info.value)
    assert "[plugin.audit], key 'path'" in message
    assert f'"{ws}/logs/audit.sqlite3" lies inside the sandbox\'s writable root "{ws}"' in message
    assert "symbolic link" in message
    assert f'"{ws}/.dsh/audit.sqlite3"' in message  # what to do instead


def test_a_symlink_into_a_writable_root_is_refused_too(make_host, ws, tmp_path):
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "audit.sqlite3"
    link.symlink_to(ws / "audit.sqlite3")
    with pytest.raises(ConfigError, match="writable root"):
        make_host(AuditPlugin(), SandboxPlugin(), config=_sandboxed(ws, {"path": str(link)}))


def test_the_default_writable_roots_include_tmp(make_host, ws, tmp_path):
    config = _sandboxed(ws, {"path": str(tmp_path / "elsewhere" / "a.sqlite3")})
    del config["plugin"]["sandbox"]["writable_roots"]  # workspace, /tmp and the temp dir
    config["plugin"]["sandbox"]["private_tmp"] = False  # (with a private tmp: not /tmp)
    with pytest.raises(ConfigError, match="writable root"):
        make_host(AuditPlugin(), SandboxPlugin(), config=config)


@pytest.mark.parametrize(
    ("path", "sandbox"),
    [
        (".dsh/audit.sqlite3", {}),  # a protected path: read-only to every tool
        ("audit.sqlite3", {"mode": "read-only"}),
        ("audit.sqlite3", {"mode": "danger-full-access"}),  # nothing is confined anyway
        ("../outside/audit.sqlite3", {}),
    ],
)
async def test_locations_the_sandboxed_side_cannot_write_are_accepted(make_host, ws, path, sandbox):
    plugin = AuditPlugin()
    host = make_host(
        plugin,
        SandboxPlugin(),
        tools=[make_echo()],
        config=_sandboxed(ws, {"path": path}, **sandbox),
    )
    await host.call("echo", {"text": "x"})
    plugin.close()
    assert count(Path(os.path.realpath(ws / path))) == 1


async def test_the_default_path_inside_a_writable_root_is_a_warning_or_with_required_an_error(
    make_host, ws, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, LOGGER)
    monkeypatch.setenv("XDG_STATE_HOME", str(ws / "state"))
    plugin = AuditPlugin()
    host = make_host(plugin, SandboxPlugin(), tools=[make_echo()], config=_sandboxed(ws, {}))
    assert caplog.records == []  # commands that record nothing say nothing
    for _ in range(2):
        await host.call("echo", {"text": "x"})
    [warning] = caplog.records
    assert "lies inside the sandbox's writable root" in warning.getMessage()
    assert "XDG_STATE_HOME" in warning.getMessage()
    plugin.close()
    with pytest.raises(ConfigError, match=r"\[plugin\.audit\]: the audit database"):
        make_host(AuditPlugin(), SandboxPlugin(), config=_sandboxed(ws, {"required": True}))


@pytest.mark.parametrize("swap", ["symlink", "directory"])
async def test_a_directory_swapped_after_start_is_never_written_through(
    make_host, tmp_path, plugin, caplog, swap
):
    caplog.set_level(logging.WARNING, LOGGER)
    home = tmp_path / "auditdir"
    db = home / "audit.sqlite3"
    outside = tmp_path / "outside"
    outside.mkdir()
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "before"})
    home.rename(tmp_path / "moved")
    if swap == "symlink":
        home.symlink_to(outside)
    else:
        home.mkdir()
    # The open database is no longer the file at the path: not written (to a file nobody reads)
    await host.call("echo", {"text": "open connection"})
    assert count(tmp_path / "moved" / "audit.sqlite3") == 1
    for i in range(3):
        await host.call("echo", {"text": str(i)})
    assert list(outside.iterdir()) == []
    assert list(home.iterdir()) == []
    assert plugin._writer.lost_total == 4
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "(replaced)" in error.getMessage()
    why = "is no longer a directory" if swap == "symlink" else "is not the directory it was"
    assert f"{home} {why}" in error.getMessage()


async def test_a_database_file_swapped_for_a_symlink_is_never_written_through(
    make_host, tmp_path, plugin, caplog
):
    caplog.set_level(logging.WARNING, LOGGER)
    db = tmp_path / "auditdir" / "audit.sqlite3"
    outside = tmp_path / "outside"
    outside.mkdir()
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.call("echo", {"text": "before"})
    plugin.close()
    for suffix in ("", "-wal", "-shm"):
        target = Path(f"{db}{suffix}")
        target.unlink(missing_ok=True)
        target.symlink_to(outside / f"planted{suffix}")
    await host.call("echo", {"text": "after"})
    assert list(outside.iterdir()) == []
    assert "is not a regular file" in caplog.records[0].getMessage()


async def test_an_existing_database_at_the_old_default_keeps_being_used(make_host, tmp_path):
    legacy = legacy_audit_path()
    assert legacy == tmp_path / "xdg-data" / "dsh" / "audit.sqlite3"
    first = AuditPlugin()
    host = make_host(
        first, tools=[make_echo()], config={"plugin": {"audit": {"path": str(legacy)}}}
    )
    await host.call("echo", {"text": "old"})
    first.close()
    second = AuditPlugin()
    host = make_host(second, tools=[make_echo()])
    await host.call("echo", {"text": "new"})
    second.close()
    assert second.path == legacy
    assert count(legacy) == 2
    assert not (tmp_path / "xdg-state" / "dsh" / "audit.sqlite3").exists()


# -- cost ----------------------------------------------------------------------------------------


async def test_a_disabled_audit_registers_no_per_call_hook(make_host, db):
    plugin = AuditPlugin()
    host = make_host(plugin, tools=[make_echo()], config=audited(db, enabled=False))
    for hook in ("dsh_tool_pre_execute", "dsh_tool_result"):
        assert getattr(host.pm.hook, hook).get_hookimpls() == []
    assert [row.name for row in host.plugins()] == ["audit"]
    await host.call("echo", {"text": "x"})
    assert not db.exists()


async def test_a_preview_leaves_no_start_time_behind(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db))
    await host.registry.preview(
        ToolExecutionInput(call_id="p", name="echo", arguments={"text": "x"})
    )
    assert plugin._started == {}


# -- soak ----------------------------------------------------------------------------------------

BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]


@pytest.mark.soak
def test_concurrent_calls_through_the_default_stack_leave_exactly_one_row_each(tmp_path):
    size = soak_size(20_000, 100_000)
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "db" / "audit.sqlite3"
    config = {
        "host": {"workspace": str(ws)},
        "plugins": {"enable": [*BUILTINS, "audit"]},
        "plugin": {
            "sandbox": {"writable_roots": ["."]},
            "permissions": {"allow": ["echo"]},
            "output_budget": {"spill_dir": str(tmp_path / "spill")},
            "audit": {"path": str(db)},
        },
    }
    host = Host(config, environ={})
    host.registry.register(make_echo())
    errors: list[Any] = []

    async def one(i: int) -> None:
        result = await host.call("echo", {"text": str(i)}, call_id=f"c{i}")
        if result.is_error:
            errors.append(result.error)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(size):
                nursery.start_soon(one, i)

    trio.run(main)
    assert errors == []
    connection = sqlite3.connect(db)
    try:
        assert connection.execute(
            "SELECT count(*), count(DISTINCT call_id) FROM calls"
        ).fetchone() == (
            size,
            size,
        )
    finally:
        connection.close()
    host.pm.get_plugin("audit").close()
