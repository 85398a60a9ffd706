"""``read_file``: numbered lines of a UTF-8 text file, read beneath the sandbox's roots.

A small regular file (at most `INLINE_READ_BYTES`, by ``fstat``) is fenced, opened and read
right on the event loop; a larger one (or one that grew past the limit while it was read) is
read again, fenced afresh, in a worker thread, in chunks (see `._files` for why).
"""

from __future__ import annotations

import codecs
import functools
import operator
import os
from collections.abc import Mapping
from typing import Any

import trio

from dsh_host import ToolArgsError, ToolDefinition, ToolExecutionResult, define_tool, printable
from dsh_plugins_builtin._sandbox._errors import SandboxError
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._open import (
    BINARY_SNIFF_BYTES,
    binary_error,
    display_path,
    open_file,
    open_regular_file,
    os_failure,
)
from dsh_plugins_builtin._tools._search_support import concurrency_safe
from dsh_plugins_builtin._tools._support import (
    PATH_DESCRIPTION,
    ToolEnv,
    int_arg,
    os_arg,
    sandbox_failure,
)

__all__ = ["INLINE_READ_BYTES", "read_file_tool"]

INLINE_READ_BYTES = 64 * 1024
"""``read_file`` reads a regular file up to this size on the event loop, larger ones in a thread."""
DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
_CHUNK = 1 << 20


# -- read_file -----------------------------------------------------------------------------------


class _Window:
    """Collects the lines ``[offset, offset + limit)`` of a stream; counts the rest."""

    def __init__(self, offset: int, limit: int) -> None:
        self.first, self.last = offset, offset + limit - 1
        self.lineno = 1  # the line the next text belongs to
        self.parts: list[str] = []
        self.size = 0
        self.lines: list[tuple[int, str]] = []
        self.ended_with_newline = True
        self.any = False

    def _add(self, text: str) -> None:
        if self.first <= self.lineno <= self.last and text:
            room = MAX_LINE_CHARS + 1 - self.size
            if room > 0:
                self.parts.append(text[:room])
            self.size += len(text)

    def _end_line(self) -> None:
        if self.first <= self.lineno <= self.last:
            line = "".join(self.parts).removesuffix("\r")
            if self.size > MAX_LINE_CHARS:
                line = (
                    f"{line[:MAX_LINE_CHARS]} [... line truncated: "
                    f"{self.size - MAX_LINE_CHARS} more characters]"
                )
            self.lines.append((self.lineno, line))
        self.parts, self.size = [], 0
        self.lineno += 1

    def feed(self, text: str) -> None:
        if not text:
            return
        self.any = True
        self.ended_with_newline = text.endswith("\n")
        newlines = text.count("\n")
        if self.lineno + newlines < self.first or self.lineno > self.last:
            self.lineno += newlines  # nothing of this chunk is shown
            return
        pieces = text.split("\n")
        whole = pieces[:-1]
        if (
            not self.size
            and self.first <= self.lineno
            and self.lineno + len(whole) - 1 <= self.last
            and max(map(len, pieces)) <= MAX_LINE_CHARS
        ):
            # The common case (a small file, a chunk inside the window): no per-line calls.
            start = self.lineno
            self.lines.extend(
                zip(
                    range(start, start + len(whole)),
                    [p.removesuffix("\r") for p in whole],
                    strict=True,
                )
            )
            self.lineno += len(whole)
        else:
            for piece in whole:
                self._add(piece)
                self._end_line()
        self._add(pieces[-1])

    def finish(self) -> int:
        """Close the last line; return the total number of lines."""
        if self.any and not self.ended_with_newline:
            self._end_line()
        return self.lineno - 1


def _whole_window(text: str, offset: int, limit: int) -> tuple[list[tuple[int, str]], int]:
    """`_Window` over a whole text at once: the lines ``[offset, offset + limit)`` and the total."""
    pieces = text.split("\n")
    if not pieces[-1]:
        pieces.pop()  # the text ended with a newline (or is empty)
    chosen = pieces[offset - 1 : offset - 1 + limit]
    if not chosen or max(map(len, chosen)) <= MAX_LINE_CHARS:  # no line to cut: no loop
        if "\r" in text:
            chosen = [raw.removesuffix("\r") for raw in chosen]
        return list(zip(range(offset, offset + len(chosen)), chosen, strict=True)), len(pieces)
    lines: list[tuple[int, str]] = []
    for number, raw in enumerate(chosen, offset):
        if len(raw) > MAX_LINE_CHARS:
            line = raw[: MAX_LINE_CHARS + 1].removesuffix("\r")
            line = (
                f"{line[:MAX_LINE_CHARS]} [... line truncated: "
                f"{len(raw) - MAX_LINE_CHARS} more characters]"
            )
        else:
            line = raw.removesuffix("\r")
        lines.append((number, line))
    return lines, len(pieces)


_NUMBERS: list[str] = ["%6d\t" % n for n in range(DEFAULT_LIMIT + 1)]  # noqa: UP031
"""The ``cat -n`` prefix (the number right-aligned in six columns, a tab) of lines 0 to
`DEFAULT_LIMIT`, made once: a small read numbers its lines by joining these to them."""


def _numbered_text(text: str, offset: int, limit: int) -> tuple[str, int, int] | None:
    """The numbered body of a whole small *text* (what `_read_result` writes for
    `_whole_window`'s lines), its last line number and the total, in one pass with no call per
    line; ``None`` when it cannot be made so (a line to cut, a carriage return, lines past
    `DEFAULT_LIMIT`, or none shown): the caller takes `_whole_window`."""
    if "\r" in text or offset >= len(_NUMBERS):
        return None
    pieces = text.split("\n")
    if not pieces[-1]:
        pieces.pop()  # the text ended with a newline (or is empty)
    chosen = pieces[offset - 1 : offset - 1 + limit]
    if not chosen or (len(text) > MAX_LINE_CHARS and max(map(len, chosen)) > MAX_LINE_CHARS):
        return None
    last = offset + len(chosen) - 1
    if last >= len(_NUMBERS):
        return None
    return "\n".join(map(operator.add, _NUMBERS[offset : last + 1], chosen)), last, len(pieces)


def _read_window(env: ToolEnv, spelled: str, offset: int, limit: int) -> tuple[str, _Window, int]:
    fd, real = open_file(env.sandbox(), spelled)
    window = _Window(offset, limit)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    consumed = 0
    try:
        with os.fdopen(fd, "rb") as handle:
            chunk = handle.read(_CHUNK)
            if b"\0" in chunk[:BINARY_SNIFF_BYTES]:
                raise binary_error(spelled, "it contains NUL bytes")
            while chunk:
                window.feed(decoder.decode(chunk))
                consumed += len(chunk)
                chunk = handle.read(_CHUNK)
            window.feed(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        where = consumed + exc.start
        raise binary_error(spelled, f"not valid UTF-8 at byte {max(where, 0)}") from None
    except OSError as exc:
        raise os_failure(exc, spelled, "read") from None
    total = window.finish()
    return display_path(real, env), window, total


def _read_at_most(fd: int, most: int, size: int) -> bytes | None:
    """The content of a file ``fstat`` said holds ``size`` bytes, or ``None`` past ``most``.

    A first read that returns exactly ``size`` bytes is the file as it was when checked (one
    read); a shorter one is read on to the end, a longer one (the file grew) up to ``most``.
    """
    first = os.read(fd, size + 1)
    if len(first) == size:
        return first
    parts = [first]
    room = most + 1 - len(first)
    while room > 0:
        chunk = os.read(fd, room)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        room -= len(chunk)
    return None


def _read_small(env: ToolEnv, spelled: str) -> tuple[str, str] | None:
    """Fence, open and read a small file on the event loop: ``(shown path, text)``.

    ``None`` when the file is larger than `INLINE_READ_BYTES` (by ``fstat``, or because it
    grew while it was read): the caller reads it in a worker thread instead.
    """
    fd, real, st = open_regular_file(env.sandbox(), spelled)
    try:
        size = st.st_size
        data = _read_at_most(fd, INLINE_READ_BYTES, size) if size <= INLINE_READ_BYTES else None
    except OSError as exc:
        raise os_failure(exc, spelled, "read") from None
    finally:
        os.close(fd)
    if data is None:
        return None
    if data.find(b"\0", 0, BINARY_SNIFF_BYTES) >= 0:  # no copy of the first bytes
        raise binary_error(spelled, "it contains NUL bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise binary_error(spelled, f"not valid UTF-8 at byte {exc.start}") from None
    return display_path(real, env), text


async def _read_file(env: ToolEnv, args: Mapping[str, Any]) -> ToolExecutionResult:
    try:  # `guarded_async`, inline: one coroutine per call
        spelled = os_arg(args, "path")
        offset = int_arg(args, "offset", 1, low=1)
        limit = int_arg(args, "limit", DEFAULT_LIMIT, low=1)
        small = _read_small(env, spelled)
        if small is None:
            shown, window, total = await trio.to_thread.run_sync(
                _read_window, env, spelled, offset, limit, abandon_on_cancel=True
            )
            return _read_result(shown, window.lines, total, offset)
    except SandboxError as exc:
        return sandbox_failure(exc)
    shown, text = small
    numbered = _numbered_text(text, offset, limit)
    if numbered is None:
        lines, total = _whole_window(text, offset, limit)
        return _read_result(shown, lines, total, offset)
    body, last, total = numbered
    return _body_result(shown, body, last, total, offset)


def _read_result(
    shown: str, lines: list[tuple[int, str]], total: int, offset: int
) -> ToolExecutionResult:
    if total == 0:
        meta = {"path": shown, "offset": offset, "count": 0, "total_lines": 0}
        return ToolExecutionResult(content=f"({printable(shown)} is empty)", meta=meta)
    if offset > total:
        raise ToolArgsError(
            [f'"offset" is {offset} but {printable(shown)} has only {total} line{"s" if total != 1 else ""}; '
             f"pass an offset from 1 to {total}"]
        )  # fmt: skip
    body = "\n".join(["%6d\t%s" % line for line in lines])  # noqa: UP031 - the fastest
    return _body_result(shown, body, lines[-1][0], total, offset)


def _body_result(shown: str, body: str, last: int, total: int, offset: int) -> ToolExecutionResult:
    """The result of lines *offset* to *last* (numbered in *body*) of *total*."""
    meta = {"path": shown, "offset": offset, "count": last - offset + 1, "total_lines": total}
    if last < total:
        body += (
            f"\n\n[showing lines {offset}-{last} of {total}; "
            f"call read_file with offset={last + 1} to read more]"
        )
    return ToolExecutionResult(content=body, meta=meta)


def read_file_tool(env: ToolEnv) -> ToolDefinition:
    """The ``read_file`` tool, bound to *env*."""
    return define_tool(
        name="read_file",
        description=(
            "Read a UTF-8 text file. Returns numbered lines like `cat -n` (line number, a tab, "
            f"the line). Reads up to {DEFAULT_LIMIT} lines from `offset`; lines longer than "
            f"{MAX_LINE_CHARS} characters are cut with a marker. Says how to read further "
            "when the file is longer. Refuses binary files (NUL bytes or invalid UTF-8)."
        ),
        parameters={
            "path": {"type": "string", "required": True, "description": PATH_DESCRIPTION},
            "offset": {
                "type": "integer",
                "description": "1-based line number to start reading at (default 1).",
            },
            "limit": {
                "type": "integer",
                "description": f"Maximum number of lines to return (default {DEFAULT_LIMIT}).",
            },
        },
        execute=functools.partial(_read_file, env),  # one coroutine a call: no wrapper
        is_concurrency_safe=concurrency_safe,
        present_call=present.read_call,
        present_result=present.read_result,
        paths={"path": "read"},
        claude_name="Read",
        claude_keys={"path": "file_path"},
    )
