"""``write_file`` and ``edit_file``: whole-file writes and exact replacements.

Both run in a worker thread (`serialised`) that holds ``env.path_lock`` of the resolved path
from its read to its commit, and commit through a `CommitGate` (`commit_write`): a write is
either committed, and reported so even when a deadline passed meanwhile, or not made at all.
``edit_file`` replaces the file only if it is still the one it read (``EDIT_CONFLICT``).
"""

from __future__ import annotations

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
    printable,
)
from dsh_plugins_builtin._common._commit import CommitCancelled, CommitGate, record_commit
from dsh_plugins_builtin._sandbox._fence import FileStamp, WriteConflict
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._diff import diff_hunks
from dsh_plugins_builtin._tools._open import (
    display_path,
    open_file,
    os_failure,
    quoted,
    read_text_exact,
)
from dsh_plugins_builtin._tools._support import (
    PATH_DESCRIPTION,
    ToolEnv,
    bool_arg,
    guarded_async,
    os_arg,
    str_arg,
)

__all__ = ["edit_file_tool", "write_file_tool"]

MAX_EDIT_BYTES = 16 * 1024 * 1024
_MAX_LISTED_LINES = 20


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
    spelled = os_arg(args, "path")
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
    shown = display_path(real, env)
    created = not os.path.lexists(real)
    old = None if created else _existing(env, spelled)[0]
    if old == content:
        return ToolExecutionResult(
            content=f"{printable(shown)} already has this content; nothing was written",
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
    result = ToolExecutionResult(
        content=f"{verb} {printable(shown)} ({_count(content)})", meta=meta
    )
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
            f"{quoted(spelled)} changed while it was being read; nothing was written. Retry the edit",
            "EDIT_CONFLICT",
        )
    shown = display_path(real, env)
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
            f"old_text not found in {printable(shown)}; read the file again and copy the exact text "
            "(whitespace and indentation must match)",
            "EDIT_NO_MATCH",
        )
    if len(lines) > 1 and not replace_all:
        raise DshError(
            f"old_text matches {len(lines)} places in {printable(shown)} (lines {_listed(lines)}); "
            "add context to make it unique or pass replace_all",
            "EDIT_AMBIGUOUS",
        )
    times = text.count(old_text) if replace_all else 1
    if len(text) + times * (len(new_text) - len(old_text)) > MAX_EDIT_BYTES:  # before it is made
        raise DshError(
            f"the edit would make {printable(shown)} larger than {MAX_EDIT_BYTES >> 20} MiB "
            f"({times} replacements of {len(old_text)} characters by {len(new_text)}); edit "
            "fewer places at once, or write the file with write_file",
            "EDIT_TOO_LARGE",
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
        content=f"Edited {printable(shown)}: replaced {count} {noun} ({where})", meta=meta
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


def write_file_tool(env: ToolEnv) -> ToolDefinition:
    """The ``write_file`` tool, bound to *env*."""
    return define_tool(
        name="write_file",
        description=(
            "Create a file, or replace a file's whole content. Parent directories are created. "
            "The write is atomic. To change part of an existing file, prefer edit_file."
        ),
        parameters={
            "path": {"type": "string", "required": True, "description": PATH_DESCRIPTION},
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
    )


def edit_file_tool(env: ToolEnv) -> ToolDefinition:
    """The ``edit_file`` tool, bound to *env*."""
    return define_tool(
        name="edit_file",
        description=(
            "Replace an exact piece of text in a file. `old_text` must match the file exactly "
            "(including whitespace and indentation) and, unless `replace_all` is true, exactly "
            "once: include enough surrounding lines to make it unique. Copy it from read_file "
            "output without the line-number prefix."
        ),
        parameters={
            "path": {"type": "string", "required": True, "description": PATH_DESCRIPTION},
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
    )
