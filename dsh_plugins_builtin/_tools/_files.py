"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``.

They touch paths only through the `Sandbox` their plugin hands out: every read is fenced and
opened beneath its root following no symlink, every write is fenced twice (once up front for a
clean error, once right before the atomic rename) and published by a rename in the held parent
directory.

``read_file`` is an async body that fences, opens and reads a small file (at most
`INLINE_READ_BYTES`, by ``fstat``) right on the event loop: a few syscalls on a descriptor
opened beneath a pinned root cost less than a worker-thread round trip, and a FIFO or device
is refused before any read (it is not a regular file; opened ``O_NONBLOCK``). A larger file
(or one that grew past the limit while it was read) is read again, fenced afresh, in a worker
thread, in chunks. ``list_dir`` is a synchronous body (the host runs it in a worker thread).
``write_file`` and ``edit_file`` are async bodies around a worker thread, so that:

* writes to one resolved path are serialised inside the host (``env.path_lock``), whichever
  entry point the calls came through;
* ``edit_file`` replaces the file only if it is still the one it read (device, inode, size,
  mtime and ctime): an edit from another process in between is ``EDIT_CONFLICT``;
* a write is either committed, and its result says so even when a deadline passed meanwhile
  (`dsh_plugins_builtin._common._commit`), or not made at all when the call reports an error.
"""

from __future__ import annotations

import codecs
import functools
import inspect
import os
import re
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import trio

from dsh_host import (
    DshError,
    ToolArgsError,
    ToolDefinition,
    ToolExecutionResult,
    ToolRunContext,
    define_tool,
)
from dsh_plugins_builtin._common._commit import CommitCancelled, CommitGate, record_commit
from dsh_plugins_builtin._sandbox._fence import FileStamp, WriteConflict, resolve_target
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._search_support import Policy
from dsh_plugins_builtin._tools._support import (
    BINARY_SNIFF_BYTES,
    ToolEnv,
    binary_error,
    bool_arg,
    diff_hunks,
    display_path,
    guarded,
    guarded_async,
    int_arg,
    open_file,
    open_regular_file,
    os_failure,
    read_text_exact,
    str_arg,
)

__all__ = ["INLINE_READ_BYTES", "make_file_tools"]

INLINE_READ_BYTES = 64 * 1024
"""``read_file`` reads a regular file up to this size on the event loop, larger ones in a thread."""
DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_EDIT_BYTES = 16 * 1024 * 1024
MAX_DIR_ENTRIES = 1000
_CHUNK = 1 << 20
_MAX_LISTED_LINES = 20


def _safe(args: Any) -> bool:
    return True


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
    return display_path(real, env.workspace), window, total


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
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise binary_error(spelled, "it contains NUL bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise binary_error(spelled, f"not valid UTF-8 at byte {exc.start}") from None
    return display_path(real, env.workspace), text


async def _read_file(env: ToolEnv, args: Mapping[str, Any]) -> ToolExecutionResult:
    spelled = str_arg(args, "path")
    offset = int_arg(args, "offset", 1, low=1)
    limit = int_arg(args, "limit", DEFAULT_LIMIT, low=1)
    small = _read_small(env, spelled)
    if small is None:
        shown, window, total = await trio.to_thread.run_sync(
            _read_window, env, spelled, offset, limit, abandon_on_cancel=True
        )
        lines = window.lines
    else:
        shown, text = small
        lines, total = _whole_window(text, offset, limit)
    return _read_result(shown, lines, total, offset)


def _read_result(
    shown: str, lines: list[tuple[int, str]], total: int, offset: int
) -> ToolExecutionResult:
    meta = {"path": shown, "offset": offset, "count": len(lines), "total_lines": total}
    if total == 0:
        return ToolExecutionResult(content=f"({shown} is empty)", meta=meta)
    if offset > total:
        raise ToolArgsError(
            [f'"offset" is {offset} but {shown} has only {total} line{"s" if total != 1 else ""}; '
             f"pass an offset from 1 to {total}"]
        )  # fmt: skip
    body = "\n".join(["%6d\t%s" % line for line in lines])  # noqa: UP031 - the fastest
    last = lines[-1][0]
    if last < total:
        body += (
            f"\n\n[showing lines {offset}-{last} of {total}; "
            f"call read_file with offset={last + 1} to read more]"
        )
    return ToolExecutionResult(content=body, meta=meta)


# -- write_file ----------------------------------------------------------------------------------


def _existing(env: ToolEnv, spelled: str) -> tuple[str | None, FileStamp | None]:
    """The current text (if a readable text file) and stamp of a file about to be replaced."""
    try:
        fd, _ = open_file(env.sandbox(), spelled)
    except DshError as exc:
        if exc.code == "FILE_NOT_FOUND":
            return None, None
        if exc.code == "NOT_A_FILE":
            raise
        return None, None  # unreadable: replaced, but no diff for it
    try:
        return read_text_exact(fd, spelled, MAX_EDIT_BYTES)
    except DshError:
        return None, None  # binary or too large: replaced, but no diff for it


def _utf8(text: str, name: str) -> None:
    """Refuse text that UTF-8 cannot encode (a lone surrogate) before anything is touched."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        raise ToolArgsError(
            [
                f'"{name}" holds a lone surrogate (U+{ord(char):04X} at character {exc.start}), '
                "which a UTF-8 file cannot hold; send valid text"
            ]
        ) from None


def _count(text: str) -> str:
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return f"{lines} line{'s' * (lines != 1)}, {len(text.encode())} bytes"


@functools.lru_cache(maxsize=8)
def _takes_commit(write_text: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(write_text).parameters
    except (TypeError, ValueError):
        return False
    return "commit" in parameters and "expect" in parameters


def _commit_write(
    env: ToolEnv,
    spelled: str,
    text: str,
    gate: CommitGate,
    result: ToolExecutionResult,
    expect: FileStamp | None = None,
) -> ToolExecutionResult:
    """Write ``text`` through the sandbox; ``result`` is what a committed write reports."""
    gate.result = result
    sandbox = env.sandbox()
    try:
        if _takes_commit(sandbox.write_text):
            sandbox.write_text(spelled, text, expect=expect, commit=gate.committing)
        else:
            # A third-party sandbox with the plain write_text(path, content): no compare-and-
            # swap, and a cancellation that lands during its write cannot stop it (holding the
            # gate around it would block the event loop for as long as the write takes).
            gate.check_open()
            sandbox.write_text(spelled, text)
            gate.mark_committed()
    except WriteConflict as exc:
        raise DshError(
            f"{exc}; nothing was written. Read the file again and redo the edit", "EDIT_CONFLICT"
        ) from None
    except CommitCancelled as exc:
        raise DshError(f"{exc}; nothing was written", "ABORTED") from None
    except OSError as exc:
        raise os_failure(exc, spelled, "write") from None
    return result


def _new_path(args: Mapping[str, Any]) -> str:
    """The ``path`` of a write: one that holds a control character (a line break, an escape) is
    refused, since no one means to create it and every listing of it would mislead."""
    spelled = str_arg(args, "path")
    bad = next((ch for ch in spelled if unicodedata.category(ch) == "Cc"), None)
    if bad is not None:
        raise ToolArgsError(
            [f'"path" must not contain control characters, found {bad!r} in {spelled!r}; '
             "give the file name on one line, without escapes"]
        )  # fmt: skip
    return spelled


def _write_file(env: ToolEnv, args: Mapping[str, Any], gate: CommitGate) -> ToolExecutionResult:
    spelled = _new_path(args)
    content = str_arg(args, "content")
    _utf8(content, "content")
    real = env.sandbox().check_write(spelled)
    with env.path_lock(str(real)):
        gate.check_open()
        return _write_locked(env, spelled, content, real, gate)


def _write_locked(
    env: ToolEnv, spelled: str, content: str, real: Path, gate: CommitGate
) -> ToolExecutionResult:
    shown = display_path(real, env.workspace)
    created = not os.path.lexists(real)
    old = None if created else _existing(env, spelled)[0]
    if old == content:
        return ToolExecutionResult(
            content=f"{shown} already has this content; nothing was written",
            meta={"path": shown, "created": False, "diffs": []},
        )
    diffs: list[dict[str, Any]] | None
    if created:
        diffs = [{"path": shown, "old_text": None, "new_text": content, "new_start": 1}]
        if len(content) > 256 * 1024:
            diffs = None
    else:
        diffs = None if old is None else diff_hunks(shown, old, content)
    verb = "Created" if created else "Overwrote"
    meta: dict[str, Any] = {"path": shown, "created": created}
    if diffs is not None:
        meta["diffs"] = diffs
    result = ToolExecutionResult(content=f"{verb} {shown} ({_count(content)})", meta=meta)
    return _commit_write(env, spelled, content, gate, result)


# -- edit_file -----------------------------------------------------------------------------------


def _match_lines(text: str, needle: str) -> list[int]:
    lines: list[int] = []
    start, line, scanned = 0, 1, 0
    while (index := text.find(needle, start)) != -1:
        line += text.count("\n", scanned, index)
        scanned = index
        lines.append(line)
        start = index + len(needle)
    return lines


_BARE_LF: Final = re.compile(r"(?<!\r)\n")


def _listed(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:_MAX_LISTED_LINES])
    return shown + (", ..." if len(lines) > _MAX_LISTED_LINES else "")


def _edit_file(env: ToolEnv, args: Mapping[str, Any], gate: CommitGate) -> ToolExecutionResult:
    spelled = _new_path(args)
    old_text = str_arg(args, "old_text")
    new_text = str_arg(args, "new_text")
    replace_all = bool_arg(args, "replace_all")
    if not old_text:
        raise ToolArgsError(['"old_text" must not be empty; use write_file to create a file'])
    if old_text == new_text:
        raise ToolArgsError(['"old_text" and "new_text" are identical; there is nothing to change'])
    _utf8(new_text, "new_text")
    real = env.sandbox().check_write(spelled)
    with env.path_lock(str(real)):
        gate.check_open()
        return _edit_locked(env, spelled, old_text, new_text, replace_all, real, gate)


def _edit_locked(
    env: ToolEnv,
    spelled: str,
    old_text: str,
    new_text: str,
    replace_all: bool,
    real: Path,
    gate: CommitGate,
) -> ToolExecutionResult:
    sandbox = env.sandbox()
    fd, read_real = open_file(sandbox, spelled)
    text, read_stamp = read_text_exact(fd, spelled, MAX_EDIT_BYTES)
    if read_real != real:
        raise DshError(
            f'"{spelled}" changed while it was being read; nothing was written. Retry the edit',
            "EDIT_CONFLICT",
        )
    shown = display_path(real, env.workspace)
    lines = _match_lines(text, old_text)
    if "\r\n" in text and text.count("\n") == text.count("\r\n"):
        new_text = _BARE_LF.sub("\r\n", new_text)  # a CRLF file stays CRLF
    if not lines and "\r\n" in text and "\r\n" not in old_text:
        # The model copied the text with \n; the file uses CRLF.
        crlf_old = old_text.replace("\n", "\r\n")
        if lines := _match_lines(text, crlf_old):
            old_text, new_text = crlf_old, _BARE_LF.sub("\r\n", new_text)
    if not lines:
        raise DshError(
            f"old_text not found in {shown}; read the file again and copy the exact text "
            "(whitespace and indentation must match)",
            "EDIT_NO_MATCH",
        )
    if len(lines) > 1 and not replace_all:
        raise DshError(
            f"old_text matches {len(lines)} places in {shown} (lines {_listed(lines)}); "
            "add context to make it unique or pass replace_all",
            "EDIT_AMBIGUOUS",
        )
    updated = text.replace(old_text, new_text, -1 if replace_all else 1)
    count = len(lines)
    where = f"line{'s' * (count != 1)} {_listed(lines)}"
    meta: dict[str, Any] = {"path": shown, "replacements": count}
    hunks = diff_hunks(shown, text, updated)
    if hunks is not None:
        meta["diffs"] = hunks
    noun = "occurrence" if count == 1 else "occurrences"
    result = ToolExecutionResult(
        content=f"Edited {shown}: replaced {count} {noun} ({where})", meta=meta
    )
    return _commit_write(env, spelled, updated, gate, result, read_stamp)


WriteBody = Callable[[ToolEnv, Mapping[str, Any], CommitGate], ToolExecutionResult]


def _serialised(env: ToolEnv, body: WriteBody) -> Callable[..., Any]:
    """An async body around ``body`` in a worker thread whose commit is gated (see `_commit`).

    The thread holds ``env.path_lock`` of the resolved path from its read to its commit.
    """

    async def run(args: Mapping[str, Any], ctx: ToolRunContext) -> ToolExecutionResult:
        gate = CommitGate()
        try:
            return await trio.to_thread.run_sync(
                functools.partial(body, env, args, gate), abandon_on_cancel=True
            )
        finally:
            # The host stops waiting for the thread when the call is cancelled: from here on
            # the thread cannot commit, and a commit it made is reported (the ledger).
            if gate.close() and gate.result is not None:
                record_commit(gate.result)

    return guarded_async(run)


# -- list_dir ------------------------------------------------------------------------------------


def _withheld(env: ToolEnv, policy: Policy, real: str, name: str, link: bool) -> bool:
    """Whether policy withholds the entry (or, for a symlink, where it leads)."""
    if not policy.active:
        return False
    path = os.path.join(real, name)
    if not link:
        return policy.denied(path)
    try:
        target = str(resolve_target(path, env.workspace))
    except (OSError, ValueError):
        return policy.denied(path)
    return policy.denied(path, target)


def _list_dir(
    env: ToolEnv, args: Mapping[str, Any], ctx: ToolRunContext | None = None
) -> ToolExecutionResult:
    spelled = str_arg(args, "path", ".")
    fd, real = open_file(env.sandbox(), spelled, directory=True)
    shown = display_path(real, env.workspace)
    policy = Policy(env, ctx)
    try:
        with os.scandir(fd) as it:
            entries = []
            for entry in it:
                link = entry.is_symlink()
                if _withheld(env, policy, str(real), entry.name, link):
                    continue
                if link:
                    entries.append(f"{entry.name}@")
                elif entry.is_dir(follow_symlinks=False):
                    entries.append(f"{entry.name}/")
                else:
                    entries.append(entry.name)
    except OSError as exc:
        raise os_failure(exc, spelled, "list") from None
    finally:
        os.close(fd)
    entries.sort()
    total = len(entries)
    meta: dict[str, Any] = {"path": shown, "count": min(total, MAX_DIR_ENTRIES), "total": total}
    note = ""
    withheld = policy.withheld
    if withheld:
        meta["withheld"] = withheld
        note = (
            f"\n\n[{withheld} entr{'y' if withheld == 1 else 'ies'} withheld by policy "
            "(a path rule denies reading them)]"
        )
    if not entries:
        return ToolExecutionResult(content=f"({shown} is an empty directory){note}", meta=meta)
    body = "\n".join(entries[:MAX_DIR_ENTRIES])
    if total > MAX_DIR_ENTRIES:
        body += f"\n\n[showing {MAX_DIR_ENTRIES} of {total} entries; use glob to narrow down]"
    return ToolExecutionResult(content=body + note, meta=meta)


# -- definitions ---------------------------------------------------------------------------------

_PATH = (
    "Path of the file, relative to the workspace root (absolute paths are allowed but must stay "
    "inside the sandbox's readable roots)."
)


def make_file_tools(env: ToolEnv) -> list[ToolDefinition]:
    """The four file tools, bound to ``env`` (the ``tools`` plugin)."""
    return [
        define_tool(
            name="read_file",
            description=(
                "Read a UTF-8 text file. Returns numbered lines like `cat -n` (line number, a tab, "
                f"the line). Reads up to {DEFAULT_LIMIT} lines from `offset`; lines longer than "
                f"{MAX_LINE_CHARS} characters are cut with a marker. Says how to read further "
                "when the file is longer. Refuses binary files (NUL bytes or invalid UTF-8)."
            ),
            parameters={
                "path": {"type": "string", "required": True, "description": _PATH},
                "offset": {
                    "type": "integer",
                    "description": "1-based line number to start reading at (default 1).",
                },
                "limit": {
                    "type": "integer",
                    "description": f"Maximum number of lines to return (default {DEFAULT_LIMIT}).",
                },
            },
            execute=guarded_async(lambda args, ctx: _read_file(env, args)),
            is_concurrency_safe=_safe,
            present_call=present.read_call,
            present_result=present.read_result,
            paths={"path": "read"},
            claude_name="Read",
            claude_keys={"path": "file_path"},
        ),
        define_tool(
            name="write_file",
            description=(
                "Create a file, or replace a file's whole content. Parent directories are created. "
                "The write is atomic. To change part of an existing file, prefer edit_file."
            ),
            parameters={
                "path": {"type": "string", "required": True, "description": _PATH},
                "content": {
                    "type": "string",
                    "required": True,
                    "description": "The complete new content of the file (UTF-8 text).",
                },
            },
            execute=_serialised(env, _write_file),
            present_call=present.write_call,
            present_result=present.diff_result,
            paths={"path": "write"},
            claude_name="Write",
            claude_keys={"path": "file_path"},
        ),
        define_tool(
            name="edit_file",
            description=(
                "Replace an exact piece of text in a file. `old_text` must match the file exactly "
                "(including whitespace and indentation) and, unless `replace_all` is true, exactly "
                "once: include enough surrounding lines to make it unique. Copy it from read_file "
                "output without the line-number prefix."
            ),
            parameters={
                "path": {"type": "string", "required": True, "description": _PATH},
                "old_text": {
                    "type": "string",
                    "required": True,
                    "description": "The exact text to replace (non-empty).",
                },
                "new_text": {
                    "type": "string",
                    "required": True,
                    "description": "The text to put in its place (may be empty to delete).",
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of exactly one (default false).",
                },
            },
            execute=_serialised(env, _edit_file),
            present_call=present.edit_call,
            present_result=present.diff_result,
            paths={"path": "write"},
            claude_name="Edit",
            claude_keys={"path": "file_path", "old_text": "old_string", "new_text": "new_string"},
        ),
        define_tool(
            name="list_dir",
            description=(
                "List a directory's entries, sorted by name: `name/` for a directory, `name@` for "
                f"a symlink, `name` for a file. At most {MAX_DIR_ENTRIES} entries are shown."
            ),
            parameters={
                "path": {
                    "type": "string",
                    "description": "Directory relative to the workspace root (default: the root).",
                },
            },
            execute=guarded(lambda args, ctx: _list_dir(env, args, ctx)),
            is_concurrency_safe=_safe,
            present_call=present.list_call,
            present_result=present.list_result,
            paths={"path": "read"},
            claude_name="LS",
        ),
    ]
