"""``audit``: record every tool call in an SQLite database, and ``dsh audit`` to read it back.

A `dsh_tool_result` observer: one row per call, whatever its outcome (successes, denials,
timeouts, plugin failures). Secrets in the arguments are redacted before anything is written:
the value of every key whose name contains ``key``, ``token``, ``secret``, ``password``,
``passwd``, ``auth`` or ``credential`` (any case, at any depth) becomes ``"[REDACTED]"``.

Writes run in a worker thread (``trio.to_thread.run_sync``) on one connection guarded by a lock,
in WAL journal mode, so the trio loop never waits on the disk and concurrent calls lose no rows.
A database that cannot be written (locked, read-only, a bad path) is reported once, as a warning
on ``dsh_plugins_builtin.audit``, and never fails a call; when writing works again, a second
warning says how many rows were lost.

``duration_ms`` is measured from the moment the call reached pre-execute (a ``tryfirst``
`dsh_tool_pre_execute` that always abstains) to its result, on the trio clock; it is empty
for calls that never reached pre-execute (arguments that are not JSON, a caller that had
already aborted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, final

import attrs
import platformdirs
import trio

from dsh_host import Host, ToolExecution, ToolExecutionResult, canonical_json, hookimpl, thaw

__all__ = ["AuditConfig", "AuditPlugin", "audit_command", "default_audit_path", "redact"]

logger = logging.getLogger("dsh_plugins_builtin.audit")

REDACTED = "[REDACTED]"
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "auth", "credential")
COLUMNS = (
    "time", "call_id", "tool", "arguments", "is_error", "outcome", "decision", "decided_by",
    "duration_ms", "scope",
)  # fmt: skip

_SCHEMA = """
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
_INSERT = f"INSERT INTO calls ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


def default_audit_path() -> Path:
    """``audit.sqlite3`` in the user data directory of ``dsh`` (``~/.local/share/dsh`` on Linux)."""
    return platformdirs.user_data_path("dsh") / "audit.sqlite3"


def redact(value: Any) -> Any:
    """A plain copy of the JSON *value* with the values of secret-named keys replaced, at any depth."""
    if isinstance(value, Mapping):
        return {key: REDACTED if _is_secret(key) else redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def _is_secret(key: object) -> bool:
    folded = str(key).casefold()
    return any(word in folded for word in SECRET_WORDS)


def _not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be zero or more milliseconds, got {value}")


@final
@attrs.frozen
class AuditConfig:
    """``[plugin.audit]``.

    Attributes:
        path: the SQLite database; relative to the workspace (``[host] workspace``).
            Default: `default_audit_path`.
        enabled: ``false`` records nothing.
        busy_timeout_ms: how long a write waits for another writer's lock before the row is
            dropped (and reported).
    """

    path: Path | None = None
    enabled: bool = True
    busy_timeout_ms: int = attrs.field(default=5_000, validator=_not_negative)


class AuditPlugin:
    """Record every call; see the module docstring."""

    name = "audit"

    def __init__(self) -> None:
        self.config = AuditConfig()
        self.path = default_audit_path()
        self._started: dict[object, float] = {}
        self._writer: _Writer | None = None

    @hookimpl
    def dsh_plugin_config(self) -> type[AuditConfig]:
        return AuditConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = config = host.config_for(self)
        if config.path is not None:
            self.path = host.workspace / config.path.expanduser()
        if config.enabled:
            self._writer = _Writer(self.path, config.busy_timeout_ms / 1000)

    def close(self) -> None:
        """Close the database connection (it is also closed when the plugin is collected)."""
        if self._writer is not None:
            self._writer.close()

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: ToolExecution) -> None:
        if self._writer is not None:
            self._started[execution.token] = trio.current_time()

    @hookimpl
    async def dsh_tool_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        started = self._started.pop(execution.token, None)
        if self._writer is None:
            return
        duration = None if started is None else (trio.current_time() - started) * 1000
        error = result.error
        row = (
            datetime.datetime.now(datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            execution.call_id,
            execution.name,
            canonical_json(redact(thaw(execution.arguments))),
            int(result.is_error),
            (error.code or "error")
            if error is not None
            else ("error" if result.is_error else "ok"),
            error.message if error is not None else None,
            result.decided_by,
            duration,
            execution.scope.name if execution.scope is not None else None,
        )
        await trio.to_thread.run_sync(self._writer.write, row)


class _Writer:
    """One SQLite connection, used by one worker thread at a time."""

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._held: list[sqlite3.Connection] = []  # the open connection, if any
        self._failing = False
        self._lost = 0
        weakref.finalize(self, _close_all, self._held)

    def write(self, row: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                connection = self._connect()
                with connection:
                    connection.execute(_INSERT, row)
            except (sqlite3.Error, OSError) as exc:
                _close_all(self._held)  # reconnect next time: the file may be fixed meanwhile
                self._lost += 1
                if not self._failing:
                    self._failing = True
                    logger.warning(
                        "audit: cannot record tool calls in %s: %s: %s. Calls go on unrecorded "
                        "(this is reported once). Set [plugin.audit] path to a writable file, "
                        "or stop the process holding the database lock.",
                        self.path, type(exc).__name__, exc,
                    )  # fmt: skip
                return
            if self._failing:
                logger.warning(
                    "audit: recording tool calls in %s works again; %d call(s) were not recorded",
                    self.path, self._lost,
                )  # fmt: skip
                self._failing, self._lost = False, 0

    def _connect(self) -> sqlite3.Connection:
        if self._held:
            return self._held[0]
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.path.exists():  # owner-only: the arguments may be sensitive even redacted
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.executescript(_SCHEMA)
        except BaseException:
            connection.close()
            raise
        self._held.append(connection)
        return connection

    def close(self) -> None:
        with self._lock:
            _close_all(self._held)


def _close_all(held: list[sqlite3.Connection]) -> None:
    while held:
        held.pop().close()


# -- dsh audit ---------------------------------------------------------------------------------


def audit_command(argv: Sequence[str] | None = None) -> int:
    """``dsh audit [--json] [--tool NAME] [--last N] [--db PATH]``: show recorded calls.

    Prints the last *N* calls (default 20), oldest first, as a table, or as one JSON object per
    line with ``--json``. Returns the exit status: 0, 1 when the database cannot be read, 2 for
    bad arguments.
    """
    parser = argparse.ArgumentParser(
        prog="dsh audit", description="Show the tool calls the audit plugin recorded."
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--tool", metavar="NAME", help="only calls of this tool")
    parser.add_argument(
        "--last", metavar="N", type=_positive_int, default=20, help="how many calls (default 20)"
    )
    parser.add_argument(
        "--db", metavar="PATH", type=Path, default=None,
        help=f"the audit database (default: {default_audit_path()})",
    )  # fmt: skip
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    path: Path = args.db if args.db is not None else default_audit_path()
    try:
        rows = _read(path, args.tool, args.last)
    except (sqlite3.Error, OSError) as exc:
        print(f"dsh audit: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    else:
        _print_table(rows)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _read(path: Path, tool: str | None, last: int) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(
            "no audit database there (nothing recorded yet? pass --db PATH or set "
            "[plugin.audit] path)"
        )
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        where, params = ("WHERE tool = ?", (tool, last)) if tool is not None else ("", (last,))
        found = connection.execute(
            f"SELECT {', '.join(COLUMNS)} FROM calls {where} ORDER BY id DESC LIMIT ?", params
        ).fetchall()
    finally:
        connection.close()
    rows = [dict(zip(COLUMNS, values, strict=True)) for values in reversed(found)]
    for row in rows:
        row["arguments"] = json.loads(row["arguments"])
        row["is_error"] = bool(row["is_error"])
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("TIME", "TOOL", "OUTCOME", "BY", "MS", "CALL", "ARGUMENTS")
    lines = [header]
    for row in rows:
        arguments = canonical_json(row["arguments"])
        ms = row["duration_ms"]
        lines.append(
            (
                row["time"],
                row["tool"],
                row["outcome"],
                row["decided_by"] or "-",
                "-" if ms is None else f"{ms:.0f}",
                row["call_id"],
                arguments if len(arguments) <= 60 else arguments[:59] + "…",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]).rstrip())
