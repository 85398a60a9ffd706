"""The audit writer's PostgreSQL store: the same rows as SQLite, for many hosts sharing one record.

`PostgresStore.commit` inserts one batch in one transaction (psycopg 3 sends an
``executemany`` as one pipeline) and retries it, reconnecting, for at most ``reconnect``
seconds when the connection is lost (a server restart, a network cut): only then are the rows
given up, and the writer counts and reports them lost. Every row carries a ``row_key`` (the
host run's id and a sequence number) that is unique in the table, and a batch is inserted with
``ON CONFLICT DO NOTHING``: a batch whose ``COMMIT`` was sent but not acknowledged before the
connection dropped is retried without being recorded twice.

The URL's password never appears in a message: `safe_url` shows it as ``***``, and every error
text is scrubbed of it before it is logged. psycopg is imported when a store is made (the
``postgres`` extra: ``pip install 'dsh-host[postgres]'``).
"""

from __future__ import annotations

import itertools
import logging
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Final

from ._schema import COLUMNS, HEALTH_COLUMNS, SCHEMA_VERSION

__all__ = ["PG_SCHEMA", "PostgresStore", "safe_url", "scrub"]

logger = logging.getLogger("dsh_plugins_builtin.audit")

PG_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS calls (
    id BIGSERIAL PRIMARY KEY,
    time TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    decision TEXT,
    decided_by TEXT,
    duration_ms DOUBLE PRECISION,
    scope TEXT,
    workspace TEXT,
    host_id TEXT,
    rule TEXT,
    approved_by TEXT,
    row_key TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS calls_tool ON calls (tool);
CREATE INDEX IF NOT EXISTS calls_workspace ON calls (workspace, id);
CREATE TABLE IF NOT EXISTS health (
    id BIGSERIAL PRIMARY KEY,
    time TEXT NOT NULL,
    host_id TEXT NOT NULL,
    workspace TEXT,
    event TEXT NOT NULL,
    rows INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS dsh_audit_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO dsh_audit_meta VALUES ('schema_version', '{SCHEMA_VERSION}') ON CONFLICT DO NOTHING
"""

_INSERT: Final = (
    f"INSERT INTO calls ({', '.join(COLUMNS)}, row_key) "
    f"VALUES ({', '.join(['%s'] * (len(COLUMNS) + 1))}) ON CONFLICT (row_key) DO NOTHING"
)
_INSERT_HEALTH: Final = (
    f"INSERT INTO health ({', '.join(HEALTH_COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(HEALTH_COLUMNS))})"
)


def safe_url(url: str) -> str:
    """*url* with its password (if any) shown as ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "postgresql://(a URL that does not parse)"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def scrub(text: str, url: str) -> str:
    """*text* with the password of *url* removed, wherever it appears."""
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return text
    for secret in filter(None, {password, password and urllib.parse.unquote(password)}):
        text = text.replace(secret, "***")
    return text


def _pg_text(value: Any) -> Any:
    """PostgreSQL text cannot hold NUL: store it as its escape (as a lone surrogate is)."""
    return value.replace("\x00", "\\x00") if type(value) is str and "\x00" in value else value


class PostgresStore:
    """One connection, (re)opened on demand; see the module docstring.

    Args:
        url: ``postgresql://user:password@host:port/database`` (libpq syntax).
        host_id: the host run's id: the prefix of every ``row_key``.
        connect_timeout: seconds one connection attempt may take.
        reconnect: seconds a batch is retried for after the connection is lost.
    """

    def __init__(
        self,
        url: str,
        *,
        host_id: str,
        connect_timeout: float = 5.0,
        reconnect: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import psycopg  # the postgres extra

        self._psycopg = psycopg
        self.url = url
        self.where = safe_url(url)
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect
        self._sleep = sleep
        self._host_id = host_id
        self._keys = itertools.count(1)
        self._connection: Any = None
        self._opened = False
        self.reconnects = 0
        """Connections opened after the first (a restart or cut survived)."""

    def commit(self, rows: Sequence[tuple[Any, ...]], health: Sequence[tuple[Any, ...]]) -> None:
        """Insert *rows* and *health* in one transaction, retrying a lost connection."""
        keyed = [(*map(_pg_text, row), f"{self._host_id}-{next(self._keys)}") for row in rows]
        health = [tuple(map(_pg_text, row)) for row in health]
        deadline = time.monotonic() + self.reconnect
        delay = 0.05
        while True:
            try:
                connection = self.connect()
                with connection.transaction(), connection.cursor() as cursor:
                    if keyed:
                        cursor.executemany(_INSERT, keyed)
                    if health:
                        cursor.executemany(_INSERT_HEALTH, health)
                return
            except (self._psycopg.OperationalError, self._psycopg.InterfaceError):
                self.close()
                if time.monotonic() + delay > deadline:
                    raise
                self._sleep(delay)
                delay = min(delay * 2, 1.0)

    def connect(self) -> Any:
        """The open connection, or a new one (with the schema made, once per database)."""
        if self._connection is not None and not self._connection.closed:
            return self._connection
        connection = self._psycopg.connect(
            self.url, connect_timeout=max(1, int(self.connect_timeout))
        )
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(hashtext('dsh audit schema'))")
                for statement in PG_SCHEMA.split(";"):
                    if statement.strip():
                        connection.execute(statement)
        except BaseException:
            connection.close()
            raise
        self.reconnects += self._opened
        self._connection, self._opened = connection, True
        return connection

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            connection.close()
