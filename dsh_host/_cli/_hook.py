"""``dsh hook claude``: dsh's policy as a Claude Code hook.

Claude Code runs the command with one hook payload on stdin (``PreToolUse``,
``PermissionRequest``, ``PostToolUse``, ``PostToolUseFailure``) and reads the answer from the
exit status and stdout. The hook starts in ``$CLAUDE_PROJECT_DIR`` (the project's config and
workspace decide, wherever Claude Code's shell ``cd``-ed), a relative path in a file tool's
input is taken from Claude Code's working directory, the payload's ``cwd`` (`anchored`,
`shell_dir`), and a ``Bash`` command is judged to run there.
The call is put to dsh's pre-execute hooks (permission rules, hook commands), approval and
guards as a dry run under Claude Code's own tool name and arguments; nothing runs. Then:

* ``PreToolUse``: a denial (a rule, a guard, a failing plugin) answers ``deny`` with dsh's reason;
  an ``Ask`` answers ``ask`` (Claude Code asks the user) once the guards passed; an explicit
  ``Allow`` answers ``allow``; no decision prints nothing, and Claude Code's own permission flow
  goes on.
* ``PermissionRequest``: a denial answers ``deny``, an explicit ``Allow`` answers ``allow``;
  anything else prints nothing (the dialog is shown).
* ``PostToolUse``: the call and Claude Code's ``tool_response`` are recorded by dsh's result
  observers (audit); ``PostToolUseFailure``: the call and its ``error``, as an error. Denials of
  ``PreToolUse`` and ``PermissionRequest`` are recorded too.

A ``Bash`` call with ``dangerouslyDisableSandbox`` is never answered ``allow``; nor is a call
whose input has a key Claude Code's tool does not take but dsh's stand-in reads, nor, while the
hook's policy is read from a file a command could rewrite, a tool whose writes it cannot judge
(`._hooktrust`).

A file tool's path is also put to the sandbox plugin's fence (`._hookfence`): what it refuses
is denied, a search over a ``deny_read`` entry, or over a path a plugin withholds from dsh's
own searches (``dsh_path_denied``: a deny or ask rule), is asked, never allowed.

A payload that cannot be read (too large, not JSON, too deep, missing fields) or any failure
fails closed: exit 2 (Claude Code blocks the call) and one line on stderr. So does a config file
``dsh config check`` rejects, the ``[plugin.*]`` tables of the plugins a hook does without
(`LEFT_OUT`) included: those of `CHECKED` are structured by a host of their own, which loads
only them, when the file has one (`check_left_out`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from dsh_host import (
    ApprovalOutcome,
    ApprovalRequest,
    Host,
    JsonInputError,
    PluginStatus,
    ToolExecution,
    ToolExecutionInput,
    define_tool,
    hookimpl,
    parse_json,
)
from dsh_host import ToolExecutionResult as Result

from ._common import HOOK_MAX_BYTES
from ._hookfence import PATHS, claude_path, fence_verdict, withheld_below
from ._hooktrust import doubt, shell_dir, untrusted_keys

if TYPE_CHECKING:  # annotations only: argparse loads with a parser
    import argparse

__all__ = ["MAX_PAYLOAD_BYTES", "cmd_hook_claude"]

MAX_PAYLOAD_BYTES: Final = HOOK_MAX_BYTES
"""The largest payload read; a larger one fails closed (``--max-bytes``' default)."""

EVENTS: Final = ("PreToolUse", "PermissionRequest", "PostToolUse", "PostToolUseFailure")

LEFT_OUT: Final = ("hook_commands", "mcp", "output_budget", "timeout", "approval")
"""The plugins a hook's host does without. Claude Code runs its own hooks and MCP servers:
dsh's would run them a second time (and a project's dsh.toml would start commands on every tool
call). Claude Code runs the tool too: no call of a hook reaches an execute wrapper (``timeout``)
or a post-execute link (``output_budget``), which decide nothing before a call; and Claude Code
asks the user (`ClaudeCode` answers every approval request first, and the first answer is the
only one), so the ``approval`` plugin is never asked. None of them is loaded (a cold start,
issue 27); the tables of `CHECKED` are still checked."""

CHECKED: Final = ("output_budget", "timeout", "approval")
"""The left-out plugins whose ``[plugin.*]`` table, when the config file has one, is checked
as ``dsh config check`` checks it (`check_left_out`): their start only keeps their config. The
tables of ``hook_commands`` and ``mcp`` are not (loading those would start commands and
servers); ``dsh config check`` checks them."""


ENV_SWITCHES: Final = ("DSH_PLUGINS", "DSH_DISABLE_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD")
"""The variables that switch plugins on and off, ignored here: Claude Code passes a project's
``.claude/settings.json`` ``env`` block to its hooks, so a project could switch the sandbox or
the rules off even under a ``--config`` of the user's own. The hook's plugins come from its
config file and the command line only."""


class HookFailure(Exception):
    """The payload cannot be judged: exit 2 with this one line."""


CLAUDE_TOOLS: Final = (
    "Bash", "BashOutput", "Edit", "ExitPlanMode", "Glob", "Grep", "KillShell", "LS", "MultiEdit",
    "NotebookEdit", "NotebookRead", "Read", "SlashCommand", "Task", "TodoWrite", "WebFetch",
    "WebSearch", "Write",
)  # fmt: skip
"""Claude Code's own tools: those dsh has no tool of stand in for it, so rules naming them match."""


class ClaudeCode:
    """Claude Code as a plugin of the hook's host: it is the approver (an ``Ask`` is noted and
    let on to the guards, so ``ask`` is answered only for a call the guards would allow), and it
    offers its tools by name (stand-ins that never run)."""

    name = "claude-code"

    def __init__(self, tool: str) -> None:
        self.asked: str | None = None
        self.tools = tuple(dict.fromkeys((*CLAUDE_TOOLS, tool)))

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        first = _stand_in(self.tools[0])
        for name in self.tools:  # one definition under each name (compiled once)
            key, access = PATHS.get(name, (None, None))  # so read and edit rules reach it
            paths = {key: "write" if access == "write" else "read"} if key else {}
            with contextlib.suppress(ValueError):  # dsh has its own (the built-in Bash, Read...)
                register(attrs.evolve(first, name=name, paths=paths))

    @hookimpl(tryfirst=True)
    def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome:
        self.asked = request.reason or f"dsh asks before {request.tool} runs"
        return ApprovalOutcome.ALLOWED_ONCE


def read_payload(stream: Any, limit: int = MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """The hook payload on *stream*, checked; `HookFailure` says what is wrong."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise HookFailure(f"the hook payload is larger than {limit} bytes")
    try:
        payload = parse_json(data)
    except JsonInputError as exc:
        raise HookFailure(f"the hook payload is {exc}") from None
    if not isinstance(payload, dict):
        raise HookFailure("the hook payload is not a JSON object")
    event = payload.get("hook_event_name")
    if event not in EVENTS:
        raise HookFailure(
            f"hook_event_name must be one of {', '.join(EVENTS)}, got {_short(event)}"
        )
    if not isinstance(payload.get("tool_name"), str) or not payload["tool_name"]:
        raise HookFailure("the hook payload has no tool_name")
    if "tool_input" not in payload:
        raise HookFailure("the hook payload has no tool_input")
    return payload


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


async def judge(
    host: Host,
    payload: dict[str, Any],
    asks: ClaudeCode,
    *,
    unusual: bool = False,
    shell: str | None = None,
) -> dict[str, Any] | None:
    """The answer to print for *payload* (``None``: print nothing); *unusual*: a path was
    spelled otherwise than it resolves (`anchored`), so no ``allow``; *shell*: where Claude
    Code's shell is (`shell_dir`), where a ``Bash`` command is judged to run."""
    event = payload["hook_event_name"]
    name, arguments = dsh_call(host, payload["tool_name"], payload["tool_input"])
    untrusted = untrusted_keys(host.registry.get(name), payload["tool_name"], payload["tool_input"])
    if payload["tool_name"] == "Bash" and shell is not None and isinstance(arguments, dict):
        # Claude Code runs a command where its shell is, whatever cwd the model wrote: the
        # model's is not judged (and, being there, keeps the call from being allowed).
        arguments = {**arguments, "cwd": shell}
    call_id = payload.get("tool_use_id")
    input = ToolExecutionInput(
        call_id=call_id if isinstance(call_id, str) and call_id else "claude-code",
        name=name,
        arguments=arguments,
    )
    prepared = await host.registry.dry_run(input)
    if event.startswith("PostToolUse"):  # PostToolUseFailure: the tool ran, and failed
        failed = event == "PostToolUseFailure"
        response = payload.get("error" if failed else "tool_response")  # checked: JSON
        text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
        await _observe(host, prepared.execution, Result(content=text, is_error=failed))
        return None
    if prepared.result is not None:
        await _observe(host, prepared.execution, prepared.result)
        error = prepared.result.error
        by = f" ({prepared.result.decided_by})" if prepared.result.decided_by else ""
        reason = f"dsh{by}: {error.message if error else 'refused'}"
        return _answer(event, "deny", reason)
    fenced = fence_verdict(host, payload["tool_name"], payload["tool_input"])
    if fenced is not None and fenced.result is not None:  # the sandbox's fence refuses it
        await _observe(host, prepared.execution, fenced.result)
        return _answer(event, "deny", fenced.reason)
    if asks.asked is not None:
        return _answer(event, "ask", f"dsh: {asks.asked}") if event == "PreToolUse" else None
    if fenced is not None:  # a search over what deny_read withholds: never allowed
        return _answer(event, "ask", fenced.reason) if event == "PreToolUse" else None
    held = withheld_below(host, prepared.execution, payload["tool_name"], payload["tool_input"])
    if held is not None:  # a search over what a rule withholds from dsh's own: never allowed
        return _answer(event, "ask", held) if event == "PreToolUse" else None
    if prepared.allowed_by is not None:
        why = doubt(host, payload, untrusted, unusual=unusual, shell=shell)
        if why is not None:
            return _answer(event, "ask", why) if event == "PreToolUse" else None
        detail = f": {prepared.detail}" if prepared.detail else ""
        return _answer(event, "allow", f"dsh ({prepared.allowed_by}){detail}")
    return None


def dsh_call(host: Host, name: str, arguments: Any) -> tuple[str, Any]:
    """Claude Code's tool and arguments as dsh's (``Read`` + ``file_path`` -> ``read_file`` +
    ``path``) when a dsh tool declares that Claude Code name; else unchanged."""
    for tool in host.registry.tools():  # (their definitions: no schema copied for a name)
        if tool.claude_name == name:
            if isinstance(arguments, dict):
                keys = {claude: ours for ours, claude in tool.claude_keys.items()}
                renamed = {keys.get(key, key): value for key, value in arguments.items()}
                if len(renamed) != len(arguments):  # {"file_path": A, "path": B}: which is read?
                    both = sorted(k for k in arguments if k in keys or k in keys.values())
                    raise HookFailure(f"tool_input of {name} has both of {', '.join(both)}")
                arguments = renamed
            return tool.name, arguments
    return name, arguments


def anchored(payload: dict[str, Any], here: str) -> tuple[dict[str, Any], bool]:
    """*payload* with each path a Claude Code file tool names resolved as Claude Code resolves
    it (`claude_path`: trimmed, NFC, ``~`` expanded, relative to *here*, Claude Code's working
    directory, where it runs the hook); a search without a path (or a null one) searches
    *here*. Also whether a path was spelled otherwise than it resolves (a space around it, a
    decomposed character): such a call is never answered ``allow``."""
    named = PATHS.get(payload["tool_name"])
    tool_input = payload["tool_input"]
    if named is None or not isinstance(tool_input, dict):
        return payload, False
    key, access = named
    given = dict(tool_input)
    if access == "search" and given.get(key) is None and given.get("path") is None:
        given[key] = here
    unusual = False
    for k in dict.fromkeys((key, "path")):
        value = given.get(k)
        if isinstance(value, str):
            given[k], odd = claude_path(value, here)
            unusual = unusual or odd
    return {**payload, "tool_input": given}, unusual


def _stand_in(name: str) -> Any:
    async def execute(args: Any) -> str:  # never runs: `dsh hook` only previews
        raise RuntimeError("a Claude Code tool runs in Claude Code")

    return define_tool(
        name=name,
        description="a Claude Code tool, judged by dsh and run by Claude Code",
        parameters={},
        execute=execute,
        strict_arguments=False,
    )


def _answer(event: str, decision: str, reason: str) -> dict[str, Any]:
    out: dict[str, Any]
    if event == "PreToolUse":
        out = {"permissionDecision": decision, "permissionDecisionReason": reason}
    else:
        out = {"decision": {"behavior": decision, "message": reason}}
    return {"hookSpecificOutput": {"hookEventName": event, **out}}


async def check_left_out(host: Host, disable: list[str]) -> None:
    """Structure the tables of the `CHECKED` plugins *host*'s config file has, in a host that
    loads only those plugins (the user's *disable* still applies), then close it: `ConfigError`
    for a table ``dsh config check`` rejects. Nothing is loaded when the file has none."""
    tables = host.config.tables
    if not any(name in tables for name in CHECKED):
        return  # the common case: nothing to check, nothing more loaded
    rows = [row.name for row in host.plugins() if row.source == "entry point"]
    configured = [name for name in CHECKED if name in tables and name in rows]
    if not configured:
        return  # no entry points (--no-entrypoints), or not installed: as `dsh config check`
    others = [name for name in rows if name not in configured]
    checking = Host(host.config, disable=[*disable, *others])
    try:
        for row in checking.plugins():
            if row.name in configured and row.status is PluginStatus.FAILED:
                raise HookFailure(f"plugin {row.name} failed to load: {row.error}")
    finally:
        await checking.aclose()


async def _observe(host: Host, execution: ToolExecution, result: Result) -> None:
    for impl in host.hooks.impls("dsh_tool_result"):
        await impl(execution=execution, result=result)


def _to_project(project: str | None) -> None:
    """Start where the project is: Claude Code runs its hooks where its shell last ``cd``-ed
    (``src/``), and sets ``CLAUDE_PROJECT_DIR`` to the project, whose ``dsh.toml`` (and
    workspace) must decide every call, wherever the model moved. Unset (a hook run by hand):
    the working directory, as ``dsh call``."""
    if not project:
        return
    try:
        os.chdir(project)
    except OSError as exc:
        raise HookFailure(
            f"CLAUDE_PROJECT_DIR {_short(project)} cannot be entered ({exc.strerror or exc})"
        ) from None


def cmd_hook_claude(args: argparse.Namespace, build_host: Callable[..., Host]) -> int:
    """``dsh hook claude``: exit 0 with the answer on stdout, or 2 with one line on stderr."""
    for name in ENV_SWITCHES:  # a project's .claude/settings.json "env" reaches this process
        os.environ.pop(name, None)
    here: str | None = None
    try:
        here = os.getcwd()
        given = read_payload(sys.stdin.buffer, args.max_bytes)
        shell = shell_dir(given, here)
        payload, unusual = anchored(given, shell)
        _to_project(os.environ.get("CLAUDE_PROJECT_DIR"))
        asks = ClaudeCode(payload["tool_name"])
        disable = [
            *(getattr(args, "disable", None) or []),
            *(getattr(args, "sub_disable", None) or []),
        ]
        args.sub_disable = [*(getattr(args, "sub_disable", None) or []), *LEFT_OUT]
        args.plugin_objects = [asks]
        args.require_trust = True  # a project's settings can set DSH_CONFIG: trusted files only
        host = build_host(args, quiet=True)

        async def run() -> dict[str, Any] | None:
            try:
                await check_left_out(host, disable)
                return await judge(host, payload, asks, unusual=unusual, shell=shell)
            finally:
                await host.aclose()

        answer = trio.run(run)
    except Exception as exc:  # fail closed: Claude Code blocks the call on exit 2
        message = exc.args[0] if isinstance(exc, HookFailure) else f"{type(exc).__name__}: {exc}"
        line = " ".join(str(message).split())[:500]
        line = line.encode("ascii", "backslashreplace").decode("ascii")
        sys.stderr.write(f"dsh hook claude: {line}; the call is blocked\n")
        return 2
    finally:
        if here is not None:  # called in-process (tests, embedding): back where it was
            with contextlib.suppress(OSError):
                os.chdir(here)
    if answer is not None:
        sys.stdout.write(json.dumps(answer, ensure_ascii=True) + "\n")
    return 0
