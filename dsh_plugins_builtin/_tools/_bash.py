"""The ``bash`` tool: one ``bash -c`` command, confined by the sandbox plugin.

The model reads the command's output (stdout and stderr interleaved, a head and a tail kept when
it is long) followed by one marker line per fact: ``[timed out after <ms>ms; ...]``,
``[killed by signal: SIGKILL]`` or ``[exit code: N]`` (omitted for exit 0). A non-zero exit is
an ordinary result, not an error; only the sandbox refusing to run is. A failed run whose output
shows the backend's denial message (``Read-only file system`` under bwrap, ``Permission denied``
under Landlock) gets ``[sandbox: file access denied under <mode> mode]`` first. Under
``danger-full-access`` the first line is ``[sandbox: danger-full-access, unconfined]``.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dsh_host import ToolArgsError, ToolDefinition, ToolExecutionResult, define_tool
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._presenters import NO_OUTPUT, UNCONFINED_NOTE, denial_marker
from dsh_plugins_builtin._tools._support import ToolEnv, guarded_async, int_arg, os_arg

if TYPE_CHECKING:  # the sandbox's command runner loads with the first command
    from dsh_plugins_builtin._sandbox._confine import ProcessResult

__all__ = ["MAX_TIMEOUT_MS", "UNCONFINED_NOTE", "make_bash_tool", "signal_name"]

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
# What a write refused by each backend prints (case-insensitive), as in the reference.
_DENIAL_SIGNATURES = {"bwrap": ("read-only file system",), "landlock": ("permission denied",)}


def signal_name(number: int) -> str:
    """``9`` -> ``"SIGKILL"``; an unknown number stays a number."""
    try:
        return _signal.Signals(number).name
    except ValueError:
        return str(number)


def denied(result: ProcessResult) -> bool:
    """Whether a failed confined run shows the backend's file-denial message."""
    if result.exit_code in (0, None):
        return False
    text = result.output.lower()
    return any(sig in text for sig in _DENIAL_SIGNATURES.get(result.backend, ()))


def render(result: ProcessResult, timeout_ms: int, mode: str) -> str:
    """The model-facing text of one run."""
    lines: list[str] = []
    if result.backend == "none":
        lines.append(UNCONFINED_NOTE)
    output = result.output.removesuffix("\n")
    lines.append(output if result.total_bytes else NO_OUTPUT)
    if denied(result):
        lines.append(denial_marker(mode))
    if result.timed_out:
        lines.append(
            f"[timed out after {timeout_ms}ms; the command and its child processes were killed]"
        )
    if result.signal is not None:
        lines.append(f"[killed by signal: {signal_name(result.signal)}]")
    elif result.exit_code:
        lines.append(f"[exit code: {result.exit_code}]")
    return "\n".join(lines)


async def _bash(env: ToolEnv, args: Mapping[str, Any]) -> ToolExecutionResult:
    command = os_arg(args, "command", what="command line")
    if not command.strip():
        raise ToolArgsError(['"command" must not be empty'])
    timeout_ms = int_arg(args, "timeout_ms", DEFAULT_TIMEOUT_MS, low=1, high=MAX_TIMEOUT_MS)
    cwd = os_arg(args, "cwd") if isinstance(args.get("cwd"), str) else None
    sandbox = env.sandbox()
    mode = sandbox.mode
    result = await sandbox.run(command, cwd=cwd, timeout=timeout_ms / 1000)
    meta = {
        "exit_code": result.exit_code,
        "signal": None if result.signal is None else signal_name(result.signal),
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "total_bytes": result.total_bytes,
        "backend": result.backend,
        "mode": mode,
        "confined": result.backend != "none",
        "denied": denied(result),
    }
    return ToolExecutionResult(content=render(result, timeout_ms, mode), meta=meta)


def make_bash_tool(env: ToolEnv) -> ToolDefinition:
    """The ``bash`` tool, bound to ``env`` (the ``tools`` plugin)."""

    @guarded_async
    async def execute(args: Any, ctx: Any) -> ToolExecutionResult:
        return await _bash(env, args)

    return define_tool(
        name="bash",
        description=(
            "Run a shell command with `bash -c` in the workspace (or `cwd`), inside the sandbox: "
            "depending on its mode, writes outside the workspace and the temp dir, or all "
            "writes, fail, and the network may be unreachable. Returns stdout and stderr "
            "interleaved; long output keeps its beginning and end. A final line gives a non-zero "
            "exit code, a killing signal or a timeout. Each call is a fresh shell (no state "
            "carries over) with no stdin; background processes are killed when the command ends. "
            "Prefer read_file, grep, glob and edit_file over cat, grep, find and sed."
        ),
        parameters={
            "command": {
                "type": "string",
                "required": True,
                "description": "The command line to run, e.g. 'pytest -q tests/test_x.py'.",
            },
            "timeout_ms": {
                "type": "integer",
                "description": (
                    f"Kill the command after this many milliseconds (default {DEFAULT_TIMEOUT_MS}, "
                    f"at most {MAX_TIMEOUT_MS})."
                ),
            },
            "cwd": {
                "type": "string",
                "description": "Working directory, relative to the workspace root (default: the root).",
            },
        },
        execute=execute,
        # Above the longest run the tool allows itself (plus the sandbox's drain grace), so a
        # command's own timeout reports first, with its output, before the timeout wrapper's.
        timeout_ms=MAX_TIMEOUT_MS + 5_000,
        present_call=present.bash_call,
        present_result=present.bash_result,
        claude_name="Bash",
        claude_keys={"timeout_ms": "timeout"},
    )
