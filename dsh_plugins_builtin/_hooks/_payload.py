"""What a hook command reads on stdin: Claude Code's hook payload, for dsh's tools.

A tool that declares a Claude Code name (`ToolDefinition.claude_name`) is presented to hooks as
Claude Code presents it: ``tool_name`` is that name (``Bash``, ``Read``, ``Write``, ``Edit``,
``Glob``, ``Grep``, ``LS``), ``tool_input`` uses its Claude Code keys
(`ToolDefinition.claude_keys`; unmapped keys keep their names) with relative path arguments
made absolute against the workspace, as Claude Code's are; a successful ``PostToolUse`` result
gets a ``tool_response`` in the shape Claude Code gives that tool. Other tools keep their dsh
name and arguments, and every other result is ``{"content": <text>, "is_error": <bool>}``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from dsh_host import ToolDefinition, ToolExecution, ToolExecutionResult, thaw

__all__ = ["call_payload", "hook_names", "tool_input", "tool_response"]

_GREP_LINE = re.compile(r"^(.*?):(\d+):")
_READ_LINE = re.compile(r"^ *\d+\t")


def hook_names(tool: ToolDefinition | None, name: str) -> tuple[str, ...]:
    """The names a matcher may use for a call: dsh's and, if declared, Claude Code's."""
    if tool is None or not tool.claude_name or tool.claude_name == name:
        return (name,)
    return (tool.claude_name, name)


def call_payload(
    event: str, execution: ToolExecution, tool: ToolDefinition | None, workspace: Path
) -> dict[str, Any]:
    """The payload a hook of *event* reads for *execution* (without a ``tool_response``)."""
    return {
        "session_id": None,
        "transcript_path": None,
        "cwd": str(workspace),
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": hook_names(tool, execution.name)[0],
        "tool_input": tool_input(tool, execution.arguments, workspace),
        "tool_use_id": execution.call_id,
    }


def _absolute(value: Any, workspace: Path) -> Any:
    if isinstance(value, str) and value and not os.path.isabs(value):
        return os.path.join(str(workspace), value)
    return value


def tool_input(tool: ToolDefinition | None, arguments: Any, workspace: Path) -> Any:
    """``tool_input``: the call's arguments, in Claude Code's keys when the tool declares them."""
    args = thaw(arguments)
    if tool is None or not tool.claude_name or not isinstance(args, dict):
        return args
    keys: Mapping[str, str] = tool.claude_keys
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key in tool.paths:
            value = _absolute(value, workspace)
        out[keys.get(key, key)] = value
    return out


def _lines(text: str, count: int) -> list[str]:
    return text.split("\n")[:count] if count > 0 else []


def tool_response(
    tool: ToolDefinition | None, arguments: Any, result: ToolExecutionResult, workspace: Path
) -> dict[str, Any]:
    """``tool_response`` for ``PostToolUse``: Claude Code's shape for a successful built-in.

    A result whose ``meta`` does not have the built-in's shape (a plugin tool that borrowed a
    Claude Code name) gets the generic ``{"content", "is_error"}``.
    """
    generic = {"content": result.text, "is_error": result.is_error}
    try:
        return _shaped(tool, arguments, result, workspace) or generic
    except (TypeError, ValueError, AttributeError):
        return generic


def _shaped(
    tool: ToolDefinition | None, arguments: Any, result: ToolExecutionResult, workspace: Path
) -> dict[str, Any] | None:
    name = tool.claude_name if tool is not None else None
    args = thaw(arguments)
    if result.is_error or name is None or not isinstance(args, dict):
        return None
    meta = thaw(result.meta) if isinstance(thaw(result.meta), dict) else {}
    shape = _SHAPES.get(name)
    return shape(_Done(args, meta, result.text, workspace)) if shape is not None else None


@attrs.frozen
class _Done:
    """A successful call, as a shape reads it: its arguments, its result's meta and text."""

    args: dict[str, Any]
    meta: dict[str, Any]
    text: str
    workspace: Path

    def path(self, default: str = ".") -> str:
        """The ``path`` argument, made absolute against the workspace."""
        value = self.args.get("path", default)
        return str(_absolute(value if isinstance(value, str) else default, self.workspace))

    def lines(self) -> list[str]:
        """The result's first ``meta["count"]`` lines."""
        return _lines(self.text, int(self.meta.get("count", 0)))


def _bash(done: _Done) -> dict[str, Any]:
    return {
        "stdout": done.text,
        "stderr": "",
        "interrupted": bool(done.meta.get("timed_out")),
        "isImage": False,
    }


def _read(done: _Done) -> dict[str, Any]:
    count = int(done.meta.get("count", 0))
    lines = [_READ_LINE.sub("", line, count=1) for line in _lines(done.text, count)]
    return {
        "type": "text",
        "file": {
            "filePath": done.path(),
            "content": "\n".join(lines),
            "numLines": count,
            "startLine": int(done.meta.get("offset", 1)),
            "totalLines": int(done.meta.get("total_lines", count)),
        },
    }


def _write(done: _Done) -> dict[str, Any]:
    created = done.meta.get("created")
    return {
        "type": "create" if created else "update",
        "filePath": done.path(),
        "content": done.args.get("content"),
        "success": True,
    }


def _edit(done: _Done) -> dict[str, Any]:
    args = done.args
    return {
        "filePath": done.path(),
        "oldString": args.get("old_text"),
        "newString": args.get("new_text"),
        "replaceAll": bool(args.get("replace_all", False)),
        "userModified": False,
        "success": True,
    }


def _glob(done: _Done) -> dict[str, Any]:
    found = done.lines()
    return {
        "filenames": [os.path.join(str(done.workspace), f) for f in found],
        "numFiles": len(found),
        "truncated": bool(done.meta.get("truncated")),
        "durationMs": 0,
    }


def _grep(done: _Done) -> dict[str, Any]:
    matches = done.lines()
    files: dict[str, None] = {}
    for line in matches:
        if hit := _GREP_LINE.match(line):
            files.setdefault(os.path.join(str(done.workspace), hit.group(1)), None)
    return {
        "mode": "content",
        "content": "\n".join(matches),
        "numLines": len(matches),
        "numFiles": len(files),
        "filenames": list(files),
    }


def _ls(done: _Done) -> dict[str, Any]:
    return {"path": done.path(), "entries": done.lines(), "content": done.text}


_SHAPES: dict[str, Callable[[_Done], dict[str, Any]]] = {
    "Bash": _bash,
    "Read": _read,
    "Write": _write,
    "Edit": _edit,
    "Glob": _glob,
    "Grep": _grep,
    "LS": _ls,
}
"""Claude Code's ``tool_response`` shape, by Claude Code tool name."""
