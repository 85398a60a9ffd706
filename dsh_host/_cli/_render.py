"""Terminal rendering for ``dsh``: call and result cards, decisions, trace lines.

Everything here is a pure function from values to lines of text; `Style` adds ANSI colour only
when asked to (``dsh`` asks when stdout is a terminal and ``NO_COLOR`` is unset).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import IO, Any, TypeAlias, final

import attrs

from .. import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    GenericCallView,
    GenericResultView,
    ImageBlock,
    PluginInfo,
    PluginStatus,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    TextBlock,
    ToolCallKind,
    ToolExecutionResult,
    ToolSchema,
    TraceEvent,
    printable,
    thaw,
)

# The cards a presenter returns (the unions `dsh_present_call` / `dsh_present_result` name).
CallView: TypeAlias = GenericCallView | TerminalCallView | DiffCallView
ResultView: TypeAlias = (
    GenericResultView | TerminalResultView | DiffResultView | ReadResultView | SearchResultView
)

__all__ = [
    "Style",
    "decision_line",
    "render_call",
    "render_plugins",
    "render_result",
    "render_tools",
    "style_for",
    "trace_line",
]

_CODES = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1", "dim": "2"}


@final
@attrs.frozen
class Style:
    """ANSI styling, or none; ``unicode`` picks ``●✓✗`` over ASCII marks."""

    color: bool = False
    unicode: bool = True

    def paint(self, text: str, *names: str) -> str:
        """*text* in the named styles (``red``, ``green``, ``yellow``, ``cyan``, ``bold``, ``dim``)."""
        if not self.color or not text:
            return text
        codes = ";".join(_CODES[name] for name in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    @property
    def bullet(self) -> str:
        return "●" if self.unicode else "*"

    @property
    def ok(self) -> str:
        return "✓" if self.unicode else "ok"

    @property
    def no(self) -> str:
        return "✗" if self.unicode else "x"


def style_for(stream: IO[str], environ: Mapping[str, str]) -> Style:
    """Colour when *stream* is a terminal and ``NO_COLOR`` is unset or empty; Unicode marks when
    the stream's encoding can write them."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "●✓✗│".encode(encoding)
        unicode = True
    except (LookupError, UnicodeEncodeError):
        unicode = False
    return Style(color=tty and not environ.get("NO_COLOR"), unicode=unicode)


def _indent(lines: Iterable[str], prefix: str = "  ") -> list[str]:
    return [f"{prefix}{line}" if line else prefix.rstrip() for line in lines]


def _lines(text: str) -> list[str]:
    """*text* split at line feeds only, each line `printable` (a carriage return is escaped; a
    tab is kept, as ``cat`` shows it: it moves the cursor, it cannot hide or overwrite text)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [printable(line, newlines=True) for line in lines]


def _tabbed(line: str) -> str:
    """One line of file or command text, `printable` but for its tabs (see `_lines`)."""
    return printable(line, newlines="\n" not in line)


def _json_lines(value: Any) -> list[str]:
    try:
        text = json.dumps(thaw(value), indent=2, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return [printable(line) for line in text.splitlines()]


def _content_lines(content: Iterable[TextBlock | ImageBlock]) -> list[str]:
    lines: list[str] = []
    for block in content:
        if isinstance(block, TextBlock):
            lines.extend(_lines(block.text) or [""])
        else:
            lines.append(f"[image: {block.mime_type}, {len(block.data)} base64 characters]")
    return lines


def render_diff(diff: FileDiff, style: Style) -> list[str]:
    """A unified diff of one file, coloured when *style* says so."""
    import difflib  # a diff to show: not every call's card

    old = (diff.old_text or "").splitlines()
    new = diff.new_text.splitlines()
    source = "/dev/null" if diff.old_text is None else f"a/{diff.path}"
    lines: list[str] = []
    for raw in difflib.unified_diff(old, new, source, f"b/{diff.path}", lineterm=""):
        line = _tabbed(raw)
        if line.startswith(("---", "+++")):
            lines.append(style.paint(line, "bold"))
        elif line.startswith("@@"):
            lines.append(style.paint(line, "cyan"))
        elif line.startswith("+"):
            lines.append(style.paint(line, "green"))
        elif line.startswith("-"):
            lines.append(style.paint(line, "red"))
        else:
            lines.append(line)
    if not lines:
        lines.append(style.paint(f"{printable(diff.path)}: no changes", "dim"))
    return lines


def render_call(view: CallView, style: Style) -> list[str]:
    """The pending card of a call."""
    if isinstance(view, TerminalCallView):
        title = printable(view.title, newlines=True).split("\n")
        lines = [f"{style.paint('$', 'bold')} {style.paint(title[0], 'bold')}"]
        lines.extend(f"  {style.paint(more, 'bold')}" for more in title[1:])
        if view.description:
            lines.append(style.paint(f"  # {printable(view.description)}", "dim"))
        if view.cwd:
            lines.append(style.paint(f"  (in {printable(view.cwd)})", "dim"))
        return lines
    if isinstance(view, DiffCallView):
        lines = [f"{style.bullet} {style.paint(printable(view.title), 'bold')}"]
        for diff in view.diffs:
            lines.extend(_indent(render_diff(diff, style)))
        return lines
    kind = ""
    if isinstance(view, GenericCallView) and view.kind is not ToolCallKind.OTHER:
        kind = style.paint(f"({view.kind.value})", "dim")
    lines = [f"{style.bullet} {style.paint(printable(view.title), 'bold')} {kind}".rstrip()]
    lines.extend(_indent(_content_lines(view.content)))
    for location in view.locations:
        where = f"{location.path}:{location.line}" if location.line else location.path
        where = printable(where)
        lines.append(style.paint(f"  @ {where}", "dim"))
    if view.raw_input is not None and view.raw_input != {}:
        lines.extend(_indent(_json_lines(view.raw_input)))
    return lines


def render_result(view: ResultView, style: Style) -> list[str]:
    """The completed card of a call, indented under its decision line."""
    if isinstance(view, TerminalResultView):
        lines = _indent(_lines(view.output or ""))
        if view.signal is not None:
            lines.append(style.paint(f"  killed by signal {view.signal}", "red"))
        elif view.exit_code is not None:
            colour = "green" if view.exit_code == 0 else "red"
            lines.append(style.paint(f"  exit status {view.exit_code}", colour))
        return lines
    if isinstance(view, DiffResultView):
        return [line for diff in view.diffs for line in _indent(render_diff(diff, style))]
    if isinstance(view, ReadResultView):
        width = len(str(max((n for n, _ in view.lines), default=1)))
        bar = "│" if style.unicode else "|"
        lines = [style.paint(f"  {printable(view.path)}", "bold")]
        lines.extend(
            f"  {style.paint(str(n).rjust(width), 'dim')} {bar} {_tabbed(t)}" for n, t in view.lines
        )
        if view.lines:
            first, last = view.lines[0][0], view.lines[-1][0]
            lines.append(style.paint(f"  (lines {first}-{last} of {view.total_lines})", "dim"))
        return lines
    if isinstance(view, SearchResultView):
        lines = [
            f"  {style.paint(f'{printable(p)}:{n}:', 'cyan')} {_tabbed(t)}"
            for p, n, t in view.matches
        ]
        lines.extend(f"  {printable(path)}" for path in view.paths)
        if view.truncated:
            lines.append(style.paint(f"  (truncated; {view.total} in all)", "dim"))
        return lines
    assert isinstance(view, GenericResultView)
    return _indent(_content_lines(view.content))


def result_title(view: ResultView, call_title: str | None, style: Style) -> list[str]:
    """The result card's title, when its presenter gave one of its own (not the call's title, nor
    the path a file card shows anyway)."""
    title = view.title
    if not title or title in (call_title, getattr(view, "path", None)):
        return []
    return [style.paint(f"  {printable(title)}", "bold")]


def context_lines(result: ToolExecutionResult, style: Style, indent: str = "  ") -> list[str]:
    """One dim line per line of each context note the model gets with *result*, with its source."""
    lines = []
    for context in result.additional_contexts:
        text = "\n".join(getattr(block, "text", "") for block in context.content)
        source = printable(context.source or "the tool")
        for line in text.split("\n"):
            lines.append(style.paint(f"{indent}(context from {source}) {printable(line)}", "dim"))
    return lines


def decision_line(result: ToolExecutionResult, events: Iterable[TraceEvent], style: Style) -> str:
    """Whether the call ran, and who decided: from the result and its trace events."""
    code = result.code
    who = printable(result.decided_by) if result.decided_by else None
    detail = printable(result.decision_detail) if result.decision_detail else None
    by = (f" by {who}" + (f" ({detail})" if detail else "")) if who else ""
    if code == "DENIED":
        return style.paint(f"{style.no} denied{by}", "red", "bold")
    if code == "PLUGIN_FAILED":
        return style.paint(f"{style.no} stopped: plugin {who} failed", "red", "bold")
    if code == "BLOCKED":
        return style.paint(f"{style.no} ran, then blocked{by}", "red", "bold")
    if code == "UNKNOWN_TOOL":
        return style.paint(f"{style.no} unknown tool", "red", "bold")
    if code in ("ABORTED", "ABORTED_BEFORE_DISPATCH"):
        return style.paint(f"{style.no} aborted", "yellow", "bold")
    notes = []
    for event in events:
        allowed = event.outcome == "allow" or event.outcome.startswith("allow: ")
        if event.stage == "dsh_tool_pre_execute" and allowed and event.plugin:
            why = event.outcome.removeprefix("allow").removeprefix(": ")
            notes.append(f"allowed by {event.plugin}" + (f": {why}" if why else ""))
        elif event.stage == "dsh_tool_approve" and event.outcome == "allowed-once":
            notes.append(f"approved by {event.plugin}")
    head = "; ".join(dict.fromkeys(notes)) or "allowed"
    if result.is_error:
        cause = f"{code} from {who}" + (f": {detail}" if detail else "") if who else code
        return style.paint(f"{style.no} {head}, then failed ({cause})", "red", "bold")
    if who:
        head += f"; result replaced by {who}"
    return style.paint(f"{style.ok} {head}", "green", "bold")


def plugin_origin(row: PluginInfo) -> str:
    """`` (distribution version)`` for a plugin from a distribution, else nothing."""
    if row.distribution is None:
        return ""
    return f" ({row.distribution} {row.version})" if row.version else f" ({row.distribution})"


_STATUS_COLOURS = {
    PluginStatus.ENABLED: "green",
    PluginStatus.FAILED: "red",
    PluginStatus.BLOCKED: "yellow",
    PluginStatus.DISABLED: "dim",
}


def render_plugins(rows: Iterable[PluginInfo], config: str, style: Style) -> list[str]:
    """The ``dsh plugins`` listing: one block per plugin, then a count by status."""
    lines = [style.paint(f"config: {config}", "dim")]
    counts = dict.fromkeys(PluginStatus, 0)
    for row in rows:
        counts[row.status] += 1
        status = style.paint(row.status.value, _STATUS_COLOURS[row.status], "bold")
        order = f"  #{row.order}" if row.order is not None else ""
        name = style.paint(row.name, "bold")
        lines.append(f"{name}  {status}{plugin_origin(row)}  [{row.source}]{order}")
        if row.hooks:
            lines.append(f"    hooks: {', '.join(row.hooks)}")
        if row.config_class:
            lines.append(f"    config: {row.config_class}  [plugin.{row.name}]")
        if row.error:
            label = "error" if row.status is PluginStatus.FAILED else "why"
            lines.append(f"    {label}: {row.error}")
        lines.extend(f"    status: {printable(line)}" for line in row.status_lines)
    if not any(counts.values()):
        lines.append("no plugins (install one, or pass --plugin MODULE)")
    else:
        summary = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
        lines.append(style.paint(summary, "dim"))
    return lines


def render_tools(
    schemas: Iterable[ToolSchema], owners: Mapping[str, str | None], style: Style
) -> list[str]:
    """The ``dsh tools`` listing: name, owner, first line of the description, parameters."""
    lines: list[str] = []
    for schema in schemas:
        owner = owners.get(schema.name)
        lines.append(style.paint(schema.name, "bold") + (f"  (plugin {owner})" if owner else ""))
        lines.extend(f"    {line}" for line in schema.description.strip().splitlines()[:1])
        props = schema.parameters.get("properties", {})
        required = set(schema.parameters.get("required", ()))
        for key, prop in props.items():
            kind = prop.get("type", "any")
            kind = "|".join(kind) if isinstance(kind, list) else kind
            extra = ", required" if key in required else ""
            if "enum" in prop:
                extra += f", one of {', '.join(json.dumps(v) for v in prop['enum'])}"
            if "default" in prop:
                extra += f", default {json.dumps(prop['default'])}"
            about = f"  {prop['description']}" if "description" in prop else ""
            lines.append(f"    {style.paint(key, 'cyan')} ({kind}{extra}){about}")
    if not lines:
        lines.append("no tools (install a tool plugin, or pass --plugin MODULE)")
    return lines


def trace_line(event: TraceEvent) -> str:
    """One ``--trace`` line: call, stage, plugin, outcome and time."""
    plugin = event.plugin or "-"
    ms = event.seconds * 1000
    return (
        f"trace {printable(event.call_id)} {event.stage} {plugin}: {printable(event.outcome)} "
        f"({ms:.2f} ms)"
    )
