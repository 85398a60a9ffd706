"""Audit under faults: no row is lost silently (issue 26, point 1).

Each fault is made while a host runs: the database deleted (with its ``-wal``/``-shm``), replaced
by another file, its directory removed, the disk full, the database locked, read-only. Deleted,
replaced and removed databases are recreated (said once) and every later call is on record;
failures that cannot be worked around are counted, reported on stderr and, once writing works
again, recorded in the ``health`` table that ``dsh audit --health`` shows. Disk full and
read-only are injected at the SQLite layer (``PRAGMA max_page_count``, ``PRAGMA query_only``):
SQLite then fails exactly as it does on a full or read-only filesystem (``SQLITE_FULL``,
``SQLITE_READONLY``), with no mount or privilege needed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._audit._schema import SCHEMA_VERSION, V1_COLUMNS, V1_SCHEMA
from dsh_plugins_builtin.audit import AuditPlugin, audit_command
from tests.conftest import make_echo

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
    return {"plugin": {"audit": {"path": str(db), **table}}}


def texts(db: Path) -> list[str]:
    connection = sqlite3.connect(db)
    try:
        found = connection.execute("SELECT arguments FROM calls ORDER BY id").fetchall()
    finally:
        connection.close()
    return [json.loads(arguments)["text"] for (arguments,) in found]


def remove_database(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def warnings(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def run_calls(host: Any, plugin: AuditPlugin, names: list[str]) -> None:
    for name in names:
        assert not (await host.call("echo", {"text": name})).is_error
    assert plugin.flush(30)


# -- gone or replaced: recreated, said once, nothing lost ----------------------------------------


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_deleted_database_is_recreated_and_every_later_call_recorded(
    make_host, db, plugin, caplog, durability
):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability=durability))
    await run_calls(host, plugin, ["before"])
    remove_database(db)
    await run_calls(host, plugin, [str(i) for i in range(10)])
    assert texts(db) == [str(i) for i in range(10)]
    [said] = warnings(caplog)
    assert f"audit: the database {db} is gone (its file was deleted) while the host ran" in said
    remove_database(db)  # again: said once per cause, and still recorded
    await run_calls(host, plugin, ["again"])
    assert texts(db) == ["again"]
    assert len(warnings(caplog)) == 1
    assert plugin._writer.lost_total == 0
    assert plugin._writer.losses.recreated == 2


async def test_a_database_replaced_by_another_file_records_into_the_file_at_the_path(
    make_host, db, tmp_path, plugin, caplog
):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="sync"))
    await run_calls(host, plugin, ["before"])
    other = tmp_path / "other.sqlite3"
    sqlite3.connect(other).close()
    os.replace(other, db)  # same path, another inode (st_nlink of the old one drops to 0)
    await run_calls(host, plugin, ["after"])
    assert texts(db) == ["after"]
    [said] = warnings(caplog)
    assert "(its file was replaced by another file)" in said


async def test_a_removed_directory_is_recreated(make_host, db, plugin, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="sync"))
    await run_calls(host, plugin, ["before"])
    shutil.rmtree(db.parent)
    await run_calls(host, plugin, ["after"])
    assert texts(db) == ["after"]
    assert oct(db.parent.stat().st_mode & 0o777) == "0o700"
    [said] = warnings(caplog)
    assert "(its directory was removed)" in said


async def test_a_database_deleted_during_a_commit_gets_the_rows_again(make_host, db, plugin):
    """The file vanishes between the check and the commit: the rows went to a dead file, so they
    are committed again into the new one."""
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="sync"))
    await run_calls(host, plugin, ["before"])
    writer = plugin._writer
    real = writer._file.same_file
    calls = []

    def same_file() -> bool:
        calls.append(1)
        if len(calls) == 2:  # the check after the commit: delete it just before
            remove_database(db)
        return real()

    writer._file.same_file = same_file  # type: ignore[method-assign]
    await run_calls(host, plugin, ["during"])
    assert texts(db) == ["during"]
    assert writer.lost_total == 0


# -- failures: counted, reported, and shown by --health -----------------------------------------


def inject(
    plugin: AuditPlugin, pragma: Callable[[sqlite3.Connection], object]
) -> Callable[[], None]:
    """Run *pragma* on every connection the writer opens; returns the undo."""
    writer = plugin._writer
    real = writer._file.connect

    def connect() -> sqlite3.Connection:
        connection = real()
        pragma(connection)
        return connection

    writer._close_connection()
    writer._file.connect = connect  # type: ignore[method-assign]

    def undo() -> None:
        with writer._lock:
            writer._close_connection()
            writer._file.connect = real  # type: ignore[method-assign]

    return undo


def full(connection: sqlite3.Connection) -> None:
    (pages,) = connection.execute("PRAGMA page_count").fetchone()
    connection.execute(f"PRAGMA max_page_count = {pages}")


def read_only(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA query_only = ON")


def locked(db: Path) -> Callable[[sqlite3.Connection], None]:
    def hold(connection: sqlite3.Connection) -> None:
        if HELD:  # one holder: the writer reconnects after each failure
            return
        holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")
        HELD.append(holder)

    return hold


HELD: list[sqlite3.Connection] = []


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ("full", "full", "database or disk is full"),
        ("read-only", "unwritable", "readonly"),
        ("locked", "locked", "database is locked"),
    ],
)
async def test_a_failure_loses_rows_loudly_and_health_counts_them(
    make_host, db, plugin, caplog, capsys, fault, kind, words
):
    caplog.set_level(logging.WARNING, LOGGER)
    config = audited(db, durability="sync", busy_timeout_ms=0)
    host = make_host(plugin, tools=[make_echo()], config=config)
    await run_calls(host, plugin, ["x" * 5000 for _ in range(3)])  # some pages to fill
    pragma = {"full": full, "read-only": read_only, "locked": locked(db)}[fault]
    undo = inject(plugin, pragma)
    await run_calls(host, plugin, ["y" * 100_000 for _ in range(4)])  # run, and are not recorded
    for holder in HELD:
        holder.execute("ROLLBACK")
        holder.close()
    HELD.clear()
    undo()
    [error] = warnings(caplog, logging.ERROR)
    assert f"audit: cannot record tool calls in {db} ({kind}): " in error
    assert words in error
    assert plugin._writer.lost_total == 4
    await run_calls(host, plugin, ["back"])
    assert texts(db)[-1] == "back"
    assert len(texts(db)) == 4
    assert warnings(caplog)[-1].endswith("works again; 4 call(s) were not recorded")
    capsys.readouterr()
    assert audit_command(["--health", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "calls recorded: 4" in out
    assert "calls lost: 4" in out
    assert f"4 call(s) lost: {kind}: " in out


async def test_a_required_audit_refuses_calls_while_the_disk_is_full(make_host, db, plugin):
    host = make_host(plugin, tools=[make_echo()], config=audited(db, required=True))
    await run_calls(host, plugin, ["x" * 5000])
    undo = inject(plugin, full)
    assert not (await host.call("echo", {"text": "y" * 100_000})).is_error  # its row is lost
    assert plugin.flush(30)
    refused = await host.call("echo", {"text": "z"})
    assert refused.error is not None
    assert refused.error.code == "DENIED"
    assert "database or disk is full" in refused.error.message
    undo()


async def test_a_required_audit_refuses_calls_when_the_database_cannot_be_recreated(
    make_host, db, tmp_path, plugin
):
    host = make_host(plugin, tools=[make_echo()], config=audited(db, required=True))
    await run_calls(host, plugin, ["before"])
    shutil.rmtree(db.parent)
    db.parent.write_text("a file where the directory was")
    assert not (await host.call("echo", {"text": "lost"})).is_error
    assert plugin.flush(30)
    refused = await host.call("echo", {"text": "refused"})
    assert refused.error is not None
    assert refused.error.code == "DENIED"
    assert plugin._writer.lost_total >= 1


# -- the schema: versioned, migrated, old databases readable -------------------------------------


def old_database(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.executescript(V1_SCHEMA)
    connection.execute(
        f"INSERT INTO calls ({', '.join(V1_COLUMNS)}) VALUES ({', '.join('?' * 10)})",
        ("2026-01-01T00:00:00.000Z", "old", "echo", '{"text":"old"}', 0, "ok", None, None,
         1.0, None),
    )  # fmt: skip
    connection.commit()
    connection.close()


def test_an_old_database_reads_with_the_new_columns_empty(db, capsys):
    old_database(db)
    assert audit_command(["--json", "--db", str(db)]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["call_id"] == "old"
    assert row["workspace"] is None
    assert row["rule"] is None
    assert row["host_id"] is None
    assert audit_command(["--health", "--db", str(db)]) == 0
    assert "schema version 0" in capsys.readouterr().out


async def test_an_old_database_is_migrated_in_place_and_keeps_its_rows(make_host, db, plugin):
    old_database(db)
    host = make_host(plugin, tools=[make_echo()], config=audited(db, durability="sync"))
    await run_calls(host, plugin, ["new"])
    connection = sqlite3.connect(db)
    try:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        found = connection.execute("SELECT call_id, workspace FROM calls ORDER BY id").fetchall()
    finally:
        connection.close()
    assert found[0] == ("old", None)
    assert found[1][1] == os.path.realpath(host.workspace)
    assert texts(db) == ["old", "new"]
