"""``dsh run CALLS.jsonl``: a batch of model tool calls, or a dry run of their policy.

A calls file has one call per line, the way models emit them: ``{"id", "name", "arguments"}``
with ``arguments`` an object or a JSON string; OpenAI's ``{"id", "type": "function", "function":
{"name", "arguments"}}`` and Anthropic's ``{"type": "tool_use", "id", "name", "input"}`` work too.
A bad line is reported with its number and skipped; the others still run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import pathlib
import sys
from typing import Any, final

import attrs
import trio

from .. import (
    DryRun,
    Host,
    ToolExecutionInput,
    ToolExecutionResult,
    TraceEvent,
    printable,
    validate_args,
)
from ._common import (
    CALL_EXAMPLE,
    UsageError,
    build_host,
    dump,
    json_object,
    out,
    parse_json,
    stdout_style,
    unknown_tool,
    warn,
)
from ._render import Style, context_lines, decision_line, trace_line

__all__ = ["add_run_parser", "cmd_run"]

_CALL_KEYS = ("id", "name", "arguments", "type", "function", "input")


@final
@attrs.frozen
class _Line:
    """One line of a calls file: a call to run, or why it cannot run."""

    number: int
    id: str | None = None
    name: str | None = None
    arguments: Any = None
    error: str | None = None


def _parse_line(number: int, text: str) -> _Line:
    found: dict[str, Any] = {}  # what was read before a problem, for the report
    try:
        call = json_object(parse_json(text, "the line is"), "the line", CALL_EXAMPLE)
        if isinstance(call.get("id"), str):
            found["id"] = call["id"]
        if isinstance(call.get("function"), dict):  # OpenAI: {"id", "type", "function": {...}}
            call = {**call, **call["function"]}
        if isinstance(call.get("name"), str):
            found["name"] = call["name"]
        unknown = [key for key in call if key not in _CALL_KEYS]
        if unknown:
            hint = difflib.get_close_matches(unknown[0], _CALL_KEYS, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise UsageError(
                f"unknown key {unknown[0]!r}{did_you_mean}; a call is "
                '{"id": ..., "name": ..., "arguments": {...}}'
            )
        call_id = call.get("id", f"line-{number}")
        if not isinstance(call_id, str):
            raise UsageError(f"'id' must be a string, not {json.dumps(call_id)}")
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise UsageError(f"call {call_id!r}: 'name' must be the tool's name, a string")
        arguments = call.get("arguments", call.get("input", {}))
        if isinstance(arguments, str):  # how models emit them
            arguments = parse_json(arguments, f"call {call_id!r}: the 'arguments' string is")
        json_object(arguments, f"call {call_id!r}: 'arguments'")
    except UsageError as exc:
        return _Line(number, found.get("id"), found.get("name"), error=str(exc))
    return _Line(number, call_id, name, arguments)


def _read_calls(path: str) -> list[_Line]:
    try:
        data = _read_stdin() if path == "-" else pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    lines: list[_Line] = []
    seen: dict[str, int] = {}
    for number, raw_bytes in enumerate(data.split(b"\n"), 1):
        try:  # line by line: one line that is not UTF-8 is that line's problem only
            raw = raw_bytes.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as exc:
            lines.append(_Line(number, error=f"not UTF-8 text (byte {exc.start + 1} of the line)"))
            continue
        if not raw.strip():
            continue
        line = _parse_line(number, raw)
        if line.error is None and line.id in seen:
            first = seen[line.id or ""]
            line = attrs.evolve(line, error=f"duplicate id {line.id!r} (first on line {first})")
        elif line.error is None:
            seen[line.id or ""] = number
        lines.append(line)
    return lines


def _read_stdin() -> bytes:
    stream = sys.stdin
    if hasattr(stream, "buffer"):
        return bytes(stream.buffer.read())
    return stream.read().encode("utf-8", "surrogateescape")  # a text stream (tests, embedders)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


_PREVIEW = 160  # characters of a call's arguments shown in the listing


class _Progress:
    """Counts finished calls on a terminal, for ``dsh run``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0

    def __call__(self, index: int, result: ToolExecutionResult) -> None:
        self.done += 1
        sys.stderr.write(f"\r[{self.done}/{self.total}] calls finished")
        sys.stderr.flush()


def _dispatch_problem(host: Host, line: _Line) -> str | None:
    """What stage I would say of an allowed call in a dry run (unknown tool, bad arguments)."""
    tool = host.registry.get(line.name or "")
    if tool is None:
        return f"UNKNOWN_TOOL: {unknown_tool(host, line.name or '')}"
    violations = validate_args(tool, line.arguments)
    return f"INVALID_ARGS: {'; '.join(violations)}" if violations else None


async def _dry_run(host: Host, inputs: list[ToolExecutionInput], trace: Any) -> list[DryRun]:
    return [await host.registry.dry_run(input, trace=trace) for input in inputs]


def cmd_run(args: argparse.Namespace) -> int:
    """``dsh run``: exit 2 if a line was bad, else 1 if a call failed (or would), else 0."""
    lines = _read_calls(args.calls)
    host = build_host(args)
    calls = [line for line in lines if line.error is None]
    inputs = [
        ToolExecutionInput(call_id=line.id or "", name=line.name or "", arguments=line.arguments)
        for line in calls
    ]
    events: dict[str, list[TraceEvent]] = {}

    def trace(event: TraceEvent) -> None:
        events.setdefault(event.call_id, []).append(event)
        if args.trace:
            warn(trace_line(event))

    progress = None
    if not args.dry_run and not args.trace and sys.stderr.isatty():
        progress = _Progress(len(inputs))
    allowed: dict[int, DryRun] = {}
    if args.dry_run:
        prepared = trio.run(_dry_run, host, inputs, trace)
        allowed = {line.number: p for line, p in zip(calls, prepared, strict=True)}
        outcomes: list[Any] = [p.result for p in prepared]
    else:
        run = host.registry.execute_batch
        outcomes = trio.run(
            lambda: run(inputs, max_parallel=args.max_parallel, trace=trace, on_result=progress)
        )
    if progress is not None:
        sys.stderr.write("\r\x1b[K")
    by_line = dict(zip((line.number for line in calls), outcomes, strict=True))
    style = stdout_style()
    failed = bad = 0
    for line in lines:
        if line.error is not None:
            bad += 1
            warn(f"dsh run: {printable(args.calls)}:{line.number}: {printable(line.error)}")
            if args.json:
                dump({"id": line.id, "line": line.number, "name": line.name, **_bad(line)}, None)
            else:  # the error itself is on stderr just above (file:line:), said once
                out(style.paint(f"{style.no} line {line.number}: not run (bad line)", "red"))
            continue
        failed += _report(
            args, host, line, by_line[line.number], events.get(line.id or ""), style,
            allowed.get(line.number),
        )  # fmt: skip
    if not args.json:
        verb = "would fail" if args.dry_run else "failed"
        summary = f"{_count(len(calls), 'call')}, {failed} {verb}"
        if bad:
            summary += f", {_count(bad, 'bad line')}"
        out(style.paint(summary, "dim"))
    return 2 if bad else 1 if failed else 0


def _bad(line: _Line) -> dict[str, Any]:
    """A bad line in the shape of an error result (it never reached the pipeline)."""
    return {
        "content": [{"type": "text", "text": f"Error: {line.error}"}],
        "is_error": True,
        "error": {"message": line.error, "code": "INVALID_CALL", "name": None},
        "additional_contexts": [],
        "meta": None,
        "decided_by": None,
    }


def _report(
    args: argparse.Namespace,
    host: Host,
    line: _Line,
    result: ToolExecutionResult | None,
    events: list[TraceEvent] | None,
    style: Style,
    prepared: DryRun | None = None,
) -> bool:
    """Show one call's outcome; whether it failed (or, in a dry run, would fail)."""
    head = {"id": line.id, "line": line.number, "name": line.name}
    if args.dry_run:
        problem = _dispatch_problem(host, line) if result is None else None
        decision = "allow" if result is None else "deny" if result.code == "DENIED" else "error"
        error = None if result is None or result.error is None else result.error.to_json()
        if result is None:
            by = prepared.allowed_by if prepared is not None else None
            detail = prepared.detail if prepared is not None else None
        else:
            by, detail = result.decided_by, result.decision_detail
        if args.json:
            record = {**head, "decision": decision, "error": error, "dispatch": problem}
            dump({**record, "decided_by": by, "decision_detail": detail}, None)
            return result is not None or problem is not None
    elif args.json:
        assert result is not None
        dump({**head, **result.to_json()}, None)
        return result.is_error
    arguments = json.dumps(line.arguments, ensure_ascii=False)
    if len(arguments) > _PREVIEW:
        size = len(arguments.encode("utf-8", "surrogatepass"))
        arguments = f"{arguments[:_PREVIEW]}... ({size} bytes)"
    call_id, name = printable(line.id or ""), printable(line.name or "")
    out(f"{style.bullet} {style.paint(call_id, 'bold')} {name} {printable(arguments)}")
    if result is None:
        verdict = f"{style.ok} would run"
        if prepared is not None and prepared.allowed_by is not None:
            verdict += f", allowed by {printable(prepared.allowed_by)}"
            if prepared.detail:
                verdict += f" ({printable(prepared.detail)})"
        out(f"  {style.paint(verdict, 'green', 'bold')}")
        if problem:
            out(style.paint(f"    but dispatch would fail: {problem}", "yellow"))
        return problem is not None
    out(f"  {decision_line(result, events or (), style)}")
    text = [printable(text_line, newlines=True) for text_line in result.text.split("\n")]
    for text_line in text[:10]:
        out(f"    {style.paint(text_line, 'red') if result.is_error else text_line}")
    if len(text) > 10:
        out(style.paint(f"    ... ({len(text) - 10} more lines)", "dim"))
    for context in context_lines(result, style, indent="    "):
        out(context)
    return result.is_error


def _parallel(text: str) -> int:
    """``--max-parallel``: an integer from 1 to `MAX_PARALLEL`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{printable(text)!r} is not an integer") from None
    if not 1 <= value <= MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_PARALLEL}, not {value}")
    return value


MAX_PARALLEL = 10_000
"""The most calls ``dsh run --max-parallel`` lets run at once."""


def add_run_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``dsh run`` to the subcommands *sub*."""
    p = sub.add_parser(
        "run", parents=parents, help="run a batch of model tool calls",
        description='Run CALLS.jsonl: one {"id", "name", "arguments"} per line (arguments an '
        "object or a JSON string), as one model step.",
    )  # fmt: skip
    p.add_argument("calls", metavar="CALLS.jsonl", help="the calls file ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="print one JSON result per line")
    p.add_argument("--dry-run", action="store_true",
                   help="only evaluate pre-execute, approval and guards; run no tool")  # fmt: skip
    p.add_argument("--trace", action="store_true", help="print every pipeline step to stderr")
    p.add_argument("--max-parallel", type=_parallel, default=10, metavar="N",
                   help="concurrency-safe calls run at most N at a time (default: 10)")  # fmt: skip
    p.set_defaults(handler=cmd_run)
