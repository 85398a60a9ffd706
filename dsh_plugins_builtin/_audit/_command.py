"""``dsh audit``: the command line over `._query` (arguments, table and JSON output)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from dsh_host import ConfigError, Host, printable

from ._off import audit_off, configured_store, found_host
from ._postgres import safe_url, scrub
from ._query import Filter, health, is_url, parse_time, read
from ._redact import json_escape

__all__ = ["MAX_LAST", "run"]

MAX_LAST: Final = 1_000_000_000
"""The largest ``dsh audit --last``."""


def _parser(default_path: Path) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh audit",
        description="Show the tool calls the audit plugin recorded (by default: the last 20 "
        "in the current workspace).",
    )
    add = parser.add_argument
    add("--json", action="store_true", help="one JSON object per line")
    add("--tool", metavar="NAME", help="only calls of this tool")
    add("--outcome", metavar="CODE", help="only calls with this outcome (ok, DENIED, ...)")
    add("--denied", action="store_true", help="only denied calls (--outcome DENIED)")
    add("--call", metavar="ID", help="only the call with this call id")
    add("--since", metavar="TIME", help="only calls since TIME (2026-05-09, 2026-05-09T07:35, 2h)")
    add("--until", metavar="TIME", help="only calls until TIME")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workspace", metavar="DIR", help="only calls of hosts in DIR "
                       "(default: the current directory or the one above it that a host "
                       "ran in)")  # fmt: skip
    where.add_argument("--all", action="store_true", help="calls of every workspace")
    add("--last", metavar="N", default="20", help="how many calls (default 20)")
    add("--health", action="store_true",
        help="how many calls were lost (and why), and when the database was recreated")  # fmt: skip
    add("--db", metavar="PATH|URL", default=None,
        help="the audit database: an SQLite file or a postgresql:// URL (default: "
        "$DSH_AUDIT_URL when set, else [plugin.audit] url or path of the configuration, "
        f"else {default_path})")  # fmt: skip
    add("--config", metavar="PATH", default=None,
        help="the dsh config whose [plugin.audit] url or path is read (default: the one "
        "dsh finds here, as `dsh call` does)")  # fmt: skip
    return parser


def run(argv: Sequence[str] | None, default_path: Path) -> int:
    """See `dsh_plugins_builtin.audit.audit_command`."""
    parser = _parser(default_path)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    host = None
    if not (args.db or os.environ.get("DSH_AUDIT_URL")) or args.config:
        try:
            host = found_host(args.config)
        except ConfigError as exc:
            if args.config:  # named: it must be read; found: `dsh call` says what is wrong
                _say(f"dsh audit: config error: {exc}")
                return 2
    configured = configured_store(host) if host is not None else None
    path: Path | str = args.db or os.environ.get("DSH_AUDIT_URL") or configured or default_path
    if host is not None and configured is not None and path is configured:
        # A project's own dsh.toml chose it: say which database this is, and whose choice.
        shown = safe_url(str(path)) if is_url(path) else str(path)
        _say(f"dsh audit: reading {printable(shown)} ([plugin.audit] in {host.config.describe()})")
    if not is_url(path):
        path = Path(path)
    if args.health:
        return _health(path, as_json=args.json)
    try:
        where = _filter(args)
    except ValueError as exc:
        _say(f"dsh audit: error: {exc}")
        return 2
    try:
        rows = read(path, where)
        if not rows and where.workspace is not None and read(path, Filter(last=1)):
            _say(f"dsh audit: no calls recorded in workspace {where.workspace}; --all shows "
                 "every workspace, --workspace DIR another")  # fmt: skip
    except Exception as exc:
        _say_if_off(host)
        return _unreadable(path, exc)
    if not rows:
        _say_if_off(host)
    lines = [_json_line(row) for row in rows] if args.json else _table(rows)
    return _print_lines(lines)


def _say_if_off(host: Host | None) -> None:
    """Nothing was found: say so when the configuration here records no call at all."""
    why = audit_off(host=host)
    if why is not None:
        _say(
            f"dsh audit: note: the audit plugin is off here ({printable(why)}), so no call "
            "made under this configuration is recorded; turn it on to record them"
        )


def _filter(args: argparse.Namespace) -> Filter:
    last = _last(args.last)
    if last is None:
        shown = args.last if len(args.last) <= 30 else args.last[:30] + "..."
        raise ValueError(f"--last takes a whole number from 1 to {MAX_LAST}, got {shown!r}")
    if args.denied and args.outcome not in (None, "DENIED"):
        raise ValueError(f"--denied and --outcome {args.outcome} contradict each other")
    workspace, within = None, args.workspace is None
    if not args.all:
        workspace = os.path.realpath(args.workspace if args.workspace is not None else ".")
    return Filter(
        last=last,
        workspace=workspace,
        within=within,
        tool=args.tool,
        outcome="DENIED" if args.denied else args.outcome,
        call_id=args.call,
        since=None if args.since is None else parse_time(args.since),
        until=None if args.until is None else parse_time(args.until),
    )


def _unreadable(target: Path | str, exc: Exception) -> int:
    """Say why *target* cannot be read (a URL's password never shown); exit status 1."""
    psycopg = sys.modules.get("psycopg")
    known = (sqlite3.Error, OSError, ValueError, ImportError)
    if not isinstance(exc, known + ((psycopg.Error,) if psycopg is not None else ())):
        raise exc
    if is_url(target):
        shown, why = safe_url(str(target)), scrub(str(exc), str(target))
        if isinstance(exc, ImportError):
            why = "psycopg is not installed: pip install 'dsh-host[postgres]'"
    else:
        shown, why = str(target), str(exc)
    _say(f"dsh audit: cannot read {printable(shown)}: {printable(why.strip())}")
    return 1


def _health(path: Path | str, *, as_json: bool) -> int:
    try:
        found = health(path)
    except Exception as exc:
        return _unreadable(path, exc)
    if as_json:
        return _print_lines([_json_line(found)])
    lines = [
        f"database: {printable(found['path'])} (schema version {found['schema_version']})",
        f"calls recorded: {found['rows']}",
        f"calls lost: {found['lost']}",
    ]
    for event in found["events"]:
        what = f"{event['rows']} call(s) lost" if event["event"] == "lost" else "recreated"
        lines.append(
            f"  {event['time']}  host {printable(str(event['host_id']))}  {what}: "
            f"{printable(str(event['reason']))}"
        )
    return _print_lines(lines)


def _last(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:  # not a number, or more digits than Python converts
        return None
    return value if 1 <= value <= MAX_LAST else None


def _json_printable(text: str) -> str:
    """JSON *text* with every character Python does not call printable as a JSON escape.

    For ``--json`` lines, which must stay valid JSON (the table uses `dsh_host.printable`).

    Control characters (C0, DEL, C1, so every terminal escape sequence), format characters
    (bidirectional overrides, zero-width characters, tag characters), separators other than the
    ASCII space, private-use, unassigned and lone surrogate code points become ``\\uXXXX``
    (a surrogate pair above U+FFFF), which keeps a JSON text valid JSON.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else json_escape(ch) for ch in text)


def _json_line(row: dict[str, Any]) -> str:
    return _json_printable(json.dumps(row, ensure_ascii=False, separators=(",", ":")))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    header = ("TIME", "TOOL", "OUTCOME", "BY", "RULE", "MS", "CALL", "REASON", "ARGUMENTS")
    table = [header]
    for row in rows:
        arguments = printable(
            json.dumps(row["arguments"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        )
        ms = row["duration_ms"]
        by = row["decided_by"] or row["approved_by"]
        table.append(
            (
                printable(str(row["time"])),
                printable(str(row["tool"])),
                printable(str(row["outcome"])),
                printable(str(by or "-")),
                _cut(printable(str(row["rule"] or "-")), 30),
                "-" if ms is None else f"{ms:.0f}",
                printable(str(row["call_id"])),
                _cut(printable(str(row["decision"] or "-")), 50),
                _cut(arguments, 60),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
        for line in table
    ]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


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
