"""``audit``: record every tool call in an SQLite database, and ``dsh audit`` to read it back.

A `dsh_tool_result` observer: one row per call, whatever its outcome (successes, denials,
timeouts, plugin failures). Secrets in the arguments are redacted before anything is written:
the value of every key whose name contains ``key``, ``token``, ``secret``, ``password``,
``passwd``, ``auth`` or ``credential`` (any case, at any depth) becomes ``"[REDACTED]"``.

Rows go through `~dsh_plugins_builtin._audit._writer.AuditWriter`: a bounded queue and one writer
thread that builds them and commits them in batches (group commit), in WAL journal mode. With
``durability = "async"`` (the default) a call returns once its row is queued: the observer
appends it under an uncontended lock and returns nothing to await (no thread hop); the writer
commits it within about 10 ms, and whatever is queued is committed before the trio run ends, on
`close`, and at interpreter exit. A process killed without running its exit handlers
(``kill -9``) loses the rows still queued. With ``"sync"`` a call returns once its row is
committed, so every returned call is on record, at about 20 times the per-call cost of the
rest of the pipeline; that is why ``"async"`` became the default. A full queue makes calls wait;
no row is dropped for want of room. A
database that cannot be written is reported once per kind of failure; with ``required = true``
calls are refused (``DENIED``, decided by ``audit``) while it fails.

``duration_ms`` is measured from the moment the call reached pre-execute (a ``tryfirst``
`dsh_tool_pre_execute` that abstains) to its result, on the trio clock; it is empty for calls
that never reached pre-execute (arguments that are not JSON, a caller that had already aborted).

The database defaults to the user's state directory. A location inside a writable root of the
sandbox policy is refused at start (a tool could swap it for a symbolic link, or rewrite the
record), unless it lies under one of the sandbox's protected paths.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sqlite3
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, final

import attrs
import platformdirs
import trio

from dsh_host import (
    ConfigError,
    Deny,
    Host,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
    printable,
)

from ._audit._writer import COLUMNS, AuditWriter, redact, safe_text

__all__ = [
    "AuditConfig",
    "AuditPlugin",
    "audit_command",
    "default_audit_path",
    "legacy_audit_path",
    "redact",
]

logger = logging.getLogger("dsh_plugins_builtin.audit")

Durability = Literal["sync", "async"]


def default_audit_path() -> Path:
    """``audit.sqlite3`` in the user state directory of ``dsh`` (``~/.local/state/dsh`` on Linux).

    Earlier versions kept it in the user data directory (`legacy_audit_path`); while no database
    exists at the new place and one exists at the old, the old one is used, so no record is
    split or lost. Move the file to switch.
    """
    path = platformdirs.user_state_path("dsh") / "audit.sqlite3"
    if not os.path.lexists(path):
        legacy = legacy_audit_path()
        if os.path.lexists(legacy):
            return legacy
    return path


def legacy_audit_path() -> Path:
    """Where earlier versions kept the database: ``~/.local/share/dsh/audit.sqlite3`` on Linux."""
    return platformdirs.user_data_path("dsh") / "audit.sqlite3"


def _not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be zero or more milliseconds, got {value}")


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be 1 or more, got {value}")


@final
@attrs.frozen
class AuditConfig:
    """``[plugin.audit]``.

    Attributes:
        path: the SQLite database; relative to the workspace (``[host] workspace``).
            Default: `default_audit_path`. Must not lie inside a writable root of the sandbox
            (unless under one of its protected paths).
        enabled: ``false`` records nothing and registers no per-call hook.
        busy_timeout_ms: how long a commit waits for another writer's lock before its rows
            are counted lost (and reported).
        durability: ``"async"`` (default): a call returns once its row is queued (committed
            within about 10 ms, and on close, at the end of the trio run and at exit);
            ``"sync"``: once it is committed.
        required: refuse calls (``DENIED``) while rows cannot be written.
        queue_size: rows queued before calls wait for the writer (back-pressure).
    """

    path: Path | None = None
    enabled: bool = True
    busy_timeout_ms: int = attrs.field(default=5_000, validator=_not_negative)
    durability: Durability = attrs.field(
        default="async", validator=attrs.validators.in_(("sync", "async"))
    )
    required: bool = False
    queue_size: int = attrs.field(default=10_000, validator=_positive)


class AuditPlugin:
    """Record every call; see the module docstring."""

    name = "audit"

    def __init__(self) -> None:
        self.config = AuditConfig()
        self.path = default_audit_path()
        self._started: dict[object, float] = {}
        self._writer: AuditWriter | None = None
        self._async = False
        self._required = False
        self._warning: str | None = None
        # The root task of the trio run whose end flushes the queue (weakly: a run that is over
        # is not kept alive by it).
        self._flushing: Callable[[], object] = _nobody

    @hookimpl
    def dsh_plugin_config(self) -> type[AuditConfig]:
        return AuditConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = config = host.config_for(self)
        if not config.enabled:
            host.pm.unregister(self)  # no per-call hook left to cost anything
            return
        configured = config.path is not None
        path = host.workspace / config.path.expanduser() if config.path is not None else None
        self.path = Path(os.path.realpath(path if path is not None else default_audit_path()))
        self._warning = _check_location(
            host, self.path, configured=configured, required=config.required
        )
        self._async = config.durability == "async"
        self._required = config.required
        self._writer = writer = AuditWriter(
            self.path, busy_timeout=config.busy_timeout_ms / 1000, capacity=config.queue_size
        )
        weakref.finalize(self, writer.close)  # also runs at interpreter exit: flushes
        with contextlib.suppress(OSError):  # reported (once) by the first write
            writer.pin()
        if config.required:
            writer.probe()

    @hookimpl
    async def dsh_host_stopping(self) -> None:
        await trio.to_thread.run_sync(self.close)  # `Host.aclose`: every queued row committed

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the database."""
        if self._writer is not None:
            self._writer.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every row queued so far is committed (or failed); ``False`` on timeout."""
        return self._writer.flush(timeout) if self._writer is not None else True

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: ToolExecution) -> Deny | None:
        writer = self._writer
        if writer is None:
            return None
        if not execution.dry_run:  # a preview has no observer round to take the time back
            self._started[execution.token] = trio.current_time()
        if self._required and writer.failing is not None:
            return Deny(
                f"audit is required ([plugin.audit] required = true) but cannot record calls "
                f"in {writer.path} ({writer.failing}); no tool runs until it can. Fix the "
                "database (the error on stderr says how) or set required = false"
            )
        return None

    @hookimpl
    def dsh_tool_result(
        self, execution: ToolExecution, result: ToolExecutionResult
    ) -> Awaitable[None] | None:
        started = self._started.pop(execution.token, None)
        writer = self._writer
        if writer is None:
            return None
        duration = None if started is None else (trio.current_time() - started) * 1000
        if self._warning is not None:  # once, when there is something to record
            logger.warning("%s", self._warning)
            self._warning = None
        if self._async:
            # Queued, not awaited: the row is built and committed by the writer thread.
            root = trio.lowlevel.current_root_task()
            if self._flushing() is not root:  # once per trio run: its end flushes the queue
                self._flushing = weakref.ref(root)
                writer.flush_when_run_ends()
            return writer.submit((time.time(), execution, result, duration), wait=False)
        return writer.submit((time.time(), execution, result, duration), wait=True)


def _nobody() -> None:
    return None


def _check_location(host: Host, path: Path, *, configured: bool, required: bool) -> str | None:
    """Refuse a database inside a writable root of the sandbox policy (see the module docs).

    Returns the warning to give, before the first row is written, for the default location
    inside a writable root (an error only with ``required``).
    """
    root = _writable_root_holding(host, path.parent)
    if root is None:
        return None
    why = (
        f'the audit database "{path}" lies inside the sandbox\'s writable root "{root}": a tool '
        "could replace it or its directory with a symbolic link and make the host write "
        "elsewhere, or rewrite the record"
    )
    fix = (
        "set [plugin.audit] path to a file outside every writable root (the default is in the "
        "user state directory), or under a protected path of [plugin.sandbox] protected "
        f'(such as "{root}/.dsh/audit.sqlite3")'
    )
    if configured or required:
        key = "path" if configured else None
        raise ConfigError(f"{why}; {fix}", path=host.config.source, plugin="audit", key=key)
    return f"audit: {why}; {fix} (XDG_STATE_HOME moves the default)."


def _writable_root_holding(host: Host, directory: Path) -> Path | None:
    """The writable root of the sandbox policy that holds *directory*, unless protected."""
    from ._sandbox._config import SandboxConfig, build_policy
    from ._sandbox._errors import SandboxUnavailableError
    from ._sandbox._plugin import SandboxPlugin

    sandbox = host.pm.get_plugin("sandbox")
    if not isinstance(sandbox, SandboxPlugin):
        return None
    try:
        policy = sandbox.policy
    except SandboxUnavailableError:  # not started yet: build the same policy it will
        config = host.config_for(sandbox)
        if not isinstance(config, SandboxConfig):
            config = SandboxConfig()
        try:
            policy = build_policy(config, host.workspace, host.config.source)
        except ConfigError:
            raise
        except Exception:  # the sandbox plugin reports it when it starts; nothing to check
            return None
    from ._sandbox._fence import protected_paths, writable_roots

    roots = writable_roots(policy)
    if roots == (Path("/"),):
        return None  # danger-full-access: nothing is confined, nothing to protect from
    for root in roots:
        if directory == root or root in directory.parents:
            for protected in protected_paths(policy):
                if directory == protected or protected in directory.parents:
                    return None
            return root
    return None


# -- dsh audit ---------------------------------------------------------------------------------


MAX_LAST: Final = 1_000_000_000
"""The largest ``dsh audit --last``."""


def audit_command(argv: Sequence[str] | None = None) -> int:
    """``dsh audit [--json] [--tool NAME] [--last N] [--db PATH]``: show recorded calls.

    Prints the last *N* calls (default 20), oldest first, as a table, or as one JSON object per
    line with ``--json``. Every character that is not printable (control characters, escape
    sequences, bidirectional overrides, lone surrogates, ...) is shown as a ``\\uXXXX`` escape,
    so a recorded value cannot move the cursor, recolour or hide text on the screen. Returns the
    exit status: 0 (also when the reader of a pipe went away), 1 when the database cannot be
    read, 2 for bad arguments.
    """
    parser = argparse.ArgumentParser(
        prog="dsh audit", description="Show the tool calls the audit plugin recorded."
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--tool", metavar="NAME", help="only calls of this tool")
    parser.add_argument("--last", metavar="N", default="20", help="how many calls (default 20)")
    parser.add_argument(
        "--db", metavar="PATH", type=Path, default=None,
        help=f"the audit database (default: {default_audit_path()})",
    )  # fmt: skip
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    last = _last(args.last)
    if last is None:
        shown = args.last if len(args.last) <= 30 else args.last[:30] + "..."
        _say(f"dsh audit: error: --last takes a whole number from 1 to {MAX_LAST}, got {shown!r}")
        return 2
    path: Path = args.db if args.db is not None else default_audit_path()
    try:
        rows = _read(path, args.tool, last)
    except (sqlite3.Error, OSError, ValueError) as exc:
        _say(f"dsh audit: cannot read {path}: {exc}")
        return 1
    lines = [_json_line(row) for row in rows] if args.json else _table(rows)
    return _print_lines(lines)


def _last(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:  # not a number, or more digits than Python converts
        return None
    return value if 1 <= value <= MAX_LAST else None


def _read(path: Path, tool: str | None, last: int) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(
            "no audit database there (nothing recorded yet? pass --db PATH or set "
            "[plugin.audit] path)"
        )
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        where, params = "", list[object]([last])
        if tool is not None:  # names are stored with lone surrogates escaped; match that
            where, params = "WHERE tool = ?", [safe_text(tool), last]
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


def _json_escape(text: str) -> str:
    """JSON *text* with every character Python does not call printable as a JSON escape.

    For ``--json`` lines, which must stay valid JSON (the table uses `dsh_host.printable`).

    Control characters (C0, DEL, C1, so every terminal escape sequence), format characters
    (bidirectional overrides, zero-width characters, tag characters), separators other than the
    ASCII space, private-use, unassigned and lone surrogate code points become ``\\uXXXX``
    (a surrogate pair above U+FFFF), which keeps a JSON text valid JSON.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _json_line(row: dict[str, Any]) -> str:
    return _json_escape(json.dumps(row, ensure_ascii=False, separators=(",", ":")))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    header = ("TIME", "TOOL", "OUTCOME", "BY", "MS", "CALL", "ARGUMENTS")
    table = [header]
    for row in rows:
        arguments = printable(
            json.dumps(row["arguments"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        )
        ms = row["duration_ms"]
        table.append(
            (
                printable(str(row["time"])),
                printable(str(row["tool"])),
                printable(str(row["outcome"])),
                printable(str(row["decided_by"] or "-")),
                "-" if ms is None else f"{ms:.0f}",
                printable(str(row["call_id"])),
                arguments if len(arguments) <= 60 else arguments[:59] + "\u2026",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
        for line in table
    ]


def _print_lines(lines: list[str]) -> int:
    """Write *lines* to stdout; a reader that went away (``| head``) ends the output quietly."""
    out = sys.stdout
    encoding = getattr(out, "encoding", None) or "utf-8"
    try:
        for line in lines:
            out.write(line.encode(encoding, "backslashreplace").decode(encoding) + "\n")
        out.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so that the interpreter's final flush does not fail too.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
    return 0


def _say(message: str) -> None:
    print(message, file=sys.stderr)
