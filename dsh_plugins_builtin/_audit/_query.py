"""Reading the audit database back: the filters of ``dsh audit`` and its ``--health`` summary.

The database is opened read-only and never migrated from here: a database of an older schema
reads with the columns it lacks empty (``None``).
"""

from __future__ import annotations

import datetime
import json
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, final

import attrs

from ._schema import COLUMNS, HEALTH_COLUMNS
from ._writer import safe_text

__all__ = ["Filter", "health", "parse_time", "read"]


@final
@attrs.frozen
class Filter:
    """Which rows ``dsh audit`` shows; ``None`` means any."""

    last: int = 20
    workspace: str | None = None
    within: bool = False  # the workspace is the directory holding the current one (or it)
    tool: str | None = None
    outcome: str | None = None
    call_id: str | None = None
    since: str | None = None  # UTC ISO-8601 text, compared as text (the stored form)
    until: str | None = None


_RELATIVE: Final = re.compile(r"(\d{1,9})([smhd])")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str, now: datetime.datetime | None = None) -> str:
    """``--since``/``--until``: an ISO date or time (UTC unless it says), or ``30m``, ``2h``, ``7d`` ago.

    Returns the stored form (``2026-05-09T07:35:25.123Z``). Raises ValueError with what is
    accepted.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None:
        when = now - datetime.timedelta(seconds=int(relative[1]) * _UNITS[relative[2]])
    else:
        try:
            when = datetime.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"{text[:40]!r} is not a time: give an ISO date or time such as 2026-05-09 or "
                "2026-05-09T07:35 (UTC unless it has an offset), or an age such as 30m, 2h, 7d"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
    when = when.astimezone(datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def read(path: Path | str, where: Filter) -> list[dict[str, Any]]:
    """The last ``where.last`` rows of *path* (or a PostgreSQL URL) that pass *where*, oldest
    first."""
    connection = _open(path)
    try:
        present = connection.columns("calls")
        clauses, params = _clauses(where, present)
        selected = ", ".join(c if c in present else "NULL" for c in COLUMNS)
        sql = f"SELECT {selected} FROM calls"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        found = connection.execute(f"{sql} ORDER BY id DESC LIMIT ?", [*params, where.last])
        values = found.fetchall()
    finally:
        connection.close()
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in reversed(values)]
    for row in rows:
        row["arguments"] = json.loads(row["arguments"])
        row["is_error"] = bool(row["is_error"])
    return rows


def _ancestors(directory: str) -> tuple[str, ...]:
    """*directory* and every directory above it: a host's workspace may hold the current one."""
    path = Path(directory)
    return tuple(str(p) for p in (path, *path.parents))


def _clauses(where: Filter, present: set[str]) -> tuple[list[str], list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if where.workspace is not None and "workspace" in present:  # rows from before version 2
        places = _ancestors(where.workspace) if where.within else (where.workspace,)
        marks = ", ".join("?" * len(places))
        clauses.append(f"(workspace IN ({marks}) OR workspace IS NULL)")  # rows without one
        params.extend(safe_text(place) for place in places)  # show everywhere
    exact = (("tool", where.tool), ("outcome", where.outcome), ("call_id", where.call_id))
    for column, value in exact:
        if value is None:
            continue
        if column not in present:  # an old database: no row has it
            clauses.append("0")
            continue
        clauses.append(f"{column} = ?")
        params.append(safe_text(value))  # stored with lone surrogates escaped; match that
    if where.since is not None:
        clauses.append("time >= ?")
        params.append(where.since)
    if where.until is not None:
        clauses.append("time <= ?")
        params.append(where.until)
    return clauses, params


def health(path: Path | str) -> dict[str, Any]:
    """What ``dsh audit --health`` prints: version, row counts, and every loss recorded."""
    connection = _open(path)
    try:
        version = connection.version()
        (rows,) = connection.execute("SELECT count(*) FROM calls").fetchone()
        events: list[dict[str, Any]] = []
        if "event" in connection.columns("health"):
            found = connection.execute(
                f"SELECT {', '.join(HEALTH_COLUMNS)} FROM health ORDER BY id"
            ).fetchall()
            events = [dict(zip(HEALTH_COLUMNS, row, strict=True)) for row in found]
    finally:
        connection.close()
    lost = sum(e["rows"] for e in events if e["event"] == "lost")
    return {"path": connection.where, "schema_version": version, "rows": rows, "lost": lost,
            "events": events}  # fmt: skip


def is_url(target: Path | str) -> bool:
    """Whether ``--db`` names a PostgreSQL database rather than an SQLite file."""
    return str(target).startswith(("postgresql://", "postgres://"))


class _Reader:
    """One read-only connection to either store, with the little SQL that differs."""

    def __init__(self, target: Path | str) -> None:
        self.url = is_url(target)
        if self.url:
            import psycopg  # the postgres extra

            from ._postgres import safe_url

            self.where = safe_url(str(target))
            self._connection: Any = psycopg.connect(str(target), connect_timeout=10)
            self._connection.read_only = True
            return
        path = Path(target)
        self.where = str(path)
        if not path.is_file():
            raise FileNotFoundError(
                "no audit database there (nothing recorded yet? pass --db PATH or set "
                "[plugin.audit] path)"
            )
        self._connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        if self.url:
            sql = sql.replace("?", "%s")
        return self._connection.execute(sql, params)

    def columns(self, table: str) -> set[str]:
        if self.url:
            sql = "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
        else:
            sql = "SELECT name FROM pragma_table_info(?)"
        return {name for (name,) in self.execute(sql, (table,)).fetchall()}

    def version(self) -> int:
        if not self.url:
            return int(self.execute("PRAGMA user_version").fetchone()[0])
        if "value" not in self.columns("dsh_audit_meta"):
            return 0
        found = self.execute("SELECT value FROM dsh_audit_meta WHERE key = 'schema_version'")
        row = found.fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._connection.close()


def _open(target: Path | str) -> _Reader:
    return _Reader(target)
