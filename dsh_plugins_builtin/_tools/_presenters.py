"""Cards for the built-in tools: pure functions of ``(args)`` and ``(args, result)``.

Each returns a ``dsh_host`` view or ``None`` (the host then shows its generic card). None of them
raises, whatever it is given: every function is wrapped by `_pure`, and checks the type of each
value it reads. A result card is built from ``result.meta`` (written by the tool) and the
result's text; an error result, a missing or malformed meta, or text that does not have the
shape the meta announces gives ``None``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from dsh_host import printable

if TYPE_CHECKING:  # the cards load when a presenter first makes one (a hook makes none)
    from dsh_host import (
        DiffCallView,
        DiffResultView,
        GenericCallView,
        GenericResultView,
        ReadResultView,
        SearchResultView,
        TerminalCallView,
        TerminalResultView,
    )

__all__ = [
    "NO_OUTPUT",
    "UNCONFINED_NOTE",
    "bash_call",
    "bash_result",
    "denial_marker",
    "diff_result",
    "edit_call",
    "glob_call",
    "glob_result",
    "grep_call",
    "grep_result",
    "list_call",
    "list_result",
    "read_call",
    "read_result",
    "write_call",
]

UNCONFINED_NOTE = "[sandbox: danger-full-access, unconfined]"
NO_OUTPUT = "(no output)"
_STATUS_MARKER = re.compile(r"\[(?:killed by signal: [^\n]+|exit code: -?\d+)\]")
_READ_LINE = re.compile(r" *(\d+)\t(.*)", re.DOTALL)
_MATCH_LINE = re.compile(r"(.*?):(\d+):(.*)", re.DOTALL)

F = TypeVar("F", bound=Callable[..., Any])


def denial_marker(mode: str) -> str:
    """The line ``bash`` adds when the sandbox refused a file access (the reference's marker)."""
    return f"[sandbox: file access denied under {mode} mode]"


def _pure(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None

    return wrapper  # type: ignore[return-value]


def _str(mapping: Any, key: str) -> str | None:
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    return value if isinstance(value, str) else None


def _int(mapping: Any, key: str) -> int | None:
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _meta(result: Any) -> Mapping[str, Any] | None:
    """The meta of a successful result, or ``None``."""
    if getattr(result, "is_error", True) is not False:
        return None
    meta = getattr(result, "meta", None)
    return meta if isinstance(meta, Mapping) else None


def _text(result: Any) -> str | None:
    text = getattr(result, "text", None)
    return text if isinstance(text, str) else None


def _first_lines(result: Any, count: int | None) -> list[str] | None:
    text = _text(result)
    if text is None or count is None or count < 0:
        return None
    if count == 0:
        return []
    lines = text.split("\n")
    return lines[:count] if len(lines) >= count else None


def _raw(args: Mapping[str, Any]) -> dict[str, Any]:
    return dict(args)


# -- read_file -----------------------------------------------------------------------------------


@_pure
def read_call(args: Any) -> GenericCallView | None:
    """``Read <path> (a - b)`` with the file's location."""
    from dsh_host import FileLocation, GenericCallView, ToolCallKind

    path = _str(args, "path")
    offset, limit = _int(args, "offset"), _int(args, "limit")
    if path is None or (offset is None and args.get("offset") is not None):
        return None
    if limit is None and args.get("limit") is not None:
        return None
    start = offset if offset is not None else 1
    if limit is not None and limit > 0:
        window = f" ({start} - {start + limit - 1})"
    elif offset is not None:
        window = f" (from line {offset})"
    else:
        window = ""
    return GenericCallView(
        title=f"Read {printable(path)}{window}",
        kind=ToolCallKind.READ,
        raw_input=_raw(args),
        locations=tuple([FileLocation(path, start)]),
    )


@_pure
def read_result(args: Any, result: Any) -> ReadResultView | None:
    """The numbered lines that were read."""
    from dsh_host import ReadResultView

    meta = _meta(result)
    path, offset = _str(meta, "path"), _int(meta, "offset")
    total, count = _int(meta, "total_lines"), _int(meta, "count")
    if path is None or offset is None or total is None or count is None:
        return None
    texts = _first_lines(result, count)
    if texts is None:
        return None
    lines: list[tuple[int, str]] = []
    for raw in texts:
        match = _READ_LINE.fullmatch(raw)
        if match is None:
            return None
        lines.append((int(match.group(1)), match.group(2)))
    return ReadResultView(
        path=path, offset=offset, lines=tuple(lines), total_lines=total, title=printable(path)
    )


# -- write_file / edit_file ----------------------------------------------------------------------


@_pure
def write_call(args: Any) -> DiffCallView | None:
    """``Write <path>`` with the whole new content."""
    from dsh_host import DiffCallView, FileDiff, FileLocation

    path, content = _str(args, "path"), _str(args, "content")
    if path is None or content is None:
        return None
    return DiffCallView(
        title=f"Write {printable(path)}",  # one line, whatever the path holds
        diffs=tuple([FileDiff(path, None, content)]),
        locations=tuple([FileLocation(path)]),
    )


@_pure
def edit_call(args: Any) -> DiffCallView | None:
    """``Edit <path>`` with the text to replace and its replacement."""
    from dsh_host import DiffCallView, FileDiff, FileLocation

    path, old, new = _str(args, "path"), _str(args, "old_text"), _str(args, "new_text")
    if path is None or old is None or new is None:
        return None
    return DiffCallView(
        title=f"Edit {printable(path)}",
        diffs=tuple([FileDiff(path, old or None, new)]),
        locations=tuple([FileLocation(path)]),
    )


@_pure
def diff_result(args: Any, result: Any) -> DiffResultView | None:
    """The applied hunks (3 lines of context), or the whole file when it was created."""
    from dsh_host import DiffResultView, FileDiff

    meta = _meta(result)
    path, hunks = _str(meta, "path"), meta.get("diffs") if meta is not None else None
    if path is None or not isinstance(hunks, tuple | list):
        return None
    diffs: list[FileDiff] = []
    for hunk in hunks:
        old, new = (
            (hunk.get("old_text"), _str(hunk, "new_text"))
            if isinstance(hunk, Mapping)
            else (0, None)
        )
        if new is None or not (old is None or isinstance(old, str)):
            return None
        diffs.append(FileDiff(_str(hunk, "path") or path, old, new))
    if meta is not None and meta.get("created") is True:
        title = f"Created {path}"
    elif meta is not None and meta.get("created") is False:
        title = f"Wrote {path}"
    else:
        title = f"Edited {path}"
    return DiffResultView(title=title, diffs=tuple(diffs))


# -- list_dir ------------------------------------------------------------------------------------


@_pure
def list_call(args: Any) -> GenericCallView | None:
    """``List <path>``."""
    from dsh_host import FileLocation, GenericCallView, ToolCallKind

    if not isinstance(args, Mapping):
        return None
    path = args.get("path", ".")
    if not isinstance(path, str):
        return None
    return GenericCallView(
        title=f"List {printable(path)}", kind=ToolCallKind.READ, raw_input=_raw(args),
        locations=tuple([FileLocation(path)]),
    )  # fmt: skip


@_pure
def list_result(args: Any, result: Any) -> GenericResultView | None:
    """The listing, titled with the directory."""
    from dsh_host import GenericResultView

    meta = _meta(result)
    path, count, total = _str(meta, "path"), _int(meta, "count"), _int(meta, "total")
    if path is None or count is None or total is None:
        return None
    return GenericResultView(title=f"List {printable(path)}", content=result.content)


# -- glob / grep ---------------------------------------------------------------------------------


def _search_title(verb: str, args: Any, key: str) -> str | None:
    pattern, path = _str(args, key), args.get("path") if isinstance(args, Mapping) else None
    if pattern is None or not (path is None or isinstance(path, str)):
        return None
    return f"{verb} {pattern}" + (f" in {path}" if path else "")


@_pure
def glob_call(args: Any) -> GenericCallView | None:
    """``Glob <pattern> in <path>``."""
    from dsh_host import GenericCallView, ToolCallKind

    title = _search_title("Glob", args, "pattern")
    if title is None:
        return None
    return GenericCallView(title=title, kind=ToolCallKind.SEARCH, raw_input=_raw(args))


@_pure
def glob_result(args: Any, result: Any) -> SearchResultView | None:
    """The matching paths."""
    from dsh_host import SearchResultView

    meta = _meta(result)
    count, total = _int(meta, "count"), _int(meta, "total")
    paths = _first_lines(result, count)
    if paths is None or total is None or meta is None:
        return None
    truncated = meta.get("truncated") is True
    return SearchResultView(title=_search_title("Glob", args, "pattern"), paths=tuple(paths),
                            truncated=truncated, total=total)  # fmt: skip


@_pure
def grep_call(args: Any) -> GenericCallView | None:
    """``Grep <pattern> in <path>``."""
    from dsh_host import GenericCallView, ToolCallKind

    title = _search_title("Grep", args, "pattern")
    if title is None:
        return None
    return GenericCallView(title=title, kind=ToolCallKind.SEARCH, raw_input=_raw(args))


@_pure
def grep_result(args: Any, result: Any) -> SearchResultView | None:
    """The matching lines as ``(path, line, text)``."""
    from dsh_host import SearchResultView

    meta = _meta(result)
    lines = _first_lines(result, _int(meta, "count"))
    if lines is None or meta is None:
        return None
    matches: list[tuple[str, int, str]] = []
    for line in lines:
        found = _MATCH_LINE.fullmatch(line)
        if found is None:
            return None
        matches.append((found.group(1), int(found.group(2)), found.group(3)))
    truncated = meta.get("truncated") is True
    return SearchResultView(title=_search_title("Grep", args, "pattern"), matches=tuple(matches),
                            truncated=truncated, total=len(matches))  # fmt: skip


# -- bash ----------------------------------------------------------------------------------------


@_pure
def bash_call(args: Any) -> TerminalCallView | None:
    """The command as the title, and its ``cwd`` when one was given."""
    from dsh_host import TerminalCallView

    command = _str(args, "command")
    cwd = args.get("cwd") if isinstance(args, Mapping) else None
    if command is None or not (cwd is None or isinstance(cwd, str)):
        return None
    return TerminalCallView(title=command, cwd=cwd)


@_pure
def bash_result(args: Any, result: Any) -> TerminalResultView | None:
    """The output (without the tool's marker lines), the exit code or the killing signal."""
    from dsh_host import TerminalResultView

    meta = _meta(result)
    text = _text(result)
    if meta is None or text is None:
        return None
    exit_code, signal = _int(meta, "exit_code"), _str(meta, "signal")
    if (exit_code is None) == (signal is None):
        return None
    lines = text.split("\n")
    if meta.get("confined") is False and lines and lines[0] == UNCONFINED_NOTE:
        lines.pop(0)
    # the card shows the exit code or the signal itself: that marker goes; why the command
    # ended so (a timeout) or was refused a file stays in the output, for the reader to see
    if (signal is not None or bool(exit_code)) and lines and _STATUS_MARKER.fullmatch(lines[-1]):
        lines.pop()
    if lines and lines[0] == NO_OUTPUT and _int(meta, "total_bytes") == 0:
        lines.pop(0)
    output = "\n".join(lines)
    return TerminalResultView(output=output, exit_code=exit_code, signal=signal)
