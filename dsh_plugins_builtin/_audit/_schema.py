"""The audit database's schema, its version (``PRAGMA user_version``) and its migrations.

Version 1 is the first published schema (no ``user_version`` was set: it reads as 0). Version 2
adds the columns ``workspace``, ``host_id``, ``rule`` and ``approved_by`` to ``calls`` and the
``health`` table, where a writer records what it lost (and why) once it can write again, and
when it recreated a database that was deleted under it. A migration only adds: a database of an
older version stays readable by every ``dsh audit`` since, and its old rows read with the new
columns empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # sqlite3 is imported by the writer's first connection, not at start
    import sqlite3

__all__ = [
    "COLUMNS",
    "HEALTH_COLUMNS",
    "INSERT",
    "INSERT_HEALTH",
    "SCHEMA_VERSION",
    "V1_COLUMNS",
    "V1_SCHEMA",
    "migrate",
]

SCHEMA_VERSION: Final = 2

COLUMNS: Final = (
    "time", "call_id", "tool", "arguments", "is_error", "outcome", "decision", "decided_by",
    "duration_ms", "scope", "workspace", "host_id", "rule", "approved_by",
)  # fmt: skip
"""The columns of ``calls`` a writer fills, in order (``id`` is the row number)."""

V1_COLUMNS: Final = COLUMNS[:10]
"""The columns of version 1 (``user_version`` 0)."""

HEALTH_COLUMNS: Final = ("time", "host_id", "workspace", "event", "rows", "reason")

V1_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,          -- when the call ended, UTC ISO-8601
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,     -- canonical JSON, secrets redacted
    is_error INTEGER NOT NULL,
    outcome TEXT NOT NULL,       -- the error code, or "ok"
    decision TEXT,               -- the error message of an error
    decided_by TEXT,
    duration_ms REAL,
    scope TEXT
);
CREATE INDEX IF NOT EXISTS calls_tool ON calls (tool);
"""

_V2: Final = """
ALTER TABLE calls ADD COLUMN workspace TEXT;    -- the host's workspace directory
ALTER TABLE calls ADD COLUMN host_id TEXT;      -- one per host run
ALTER TABLE calls ADD COLUMN rule TEXT;         -- the rule or hook that decided, allows too
ALTER TABLE calls ADD COLUMN approved_by TEXT;  -- who answered an ask
CREATE INDEX IF NOT EXISTS calls_workspace ON calls (workspace, id);
CREATE TABLE IF NOT EXISTS health (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    host_id TEXT NOT NULL,
    workspace TEXT,
    event TEXT NOT NULL,         -- "lost" (rows not recorded) or "recreated"
    rows INTEGER NOT NULL,
    reason TEXT NOT NULL
);
"""

_STEPS: Final = (V1_SCHEMA, _V2)
"""``_STEPS[n]`` brings a database of version *n* to version *n + 1*."""

INSERT: Final = f"INSERT INTO calls ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
INSERT_HEALTH: Final = (
    f"INSERT INTO health ({', '.join(HEALTH_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(HEALTH_COLUMNS))})"
)


def migrate(connection: sqlite3.Connection) -> int:
    """Bring the database of *connection* (autocommit) to `SCHEMA_VERSION`; return its old version.

    Each step runs in one ``BEGIN IMMEDIATE`` transaction with its version bump, so two hosts
    opening one old database migrate it once. A database newer than this code is left alone
    (its extra columns are ignored; the ones written here are all still there).
    """
    version = _version(connection)
    if version >= SCHEMA_VERSION:
        return version
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = _version(connection)  # another host may have migrated it meanwhile
        for step in _STEPS[found:]:
            for statement in step.split(";"):
                if statement.strip():
                    connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return version


def _version(connection: sqlite3.Connection) -> int:
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    return int(version)
