"""What ``dsh hook claude`` must not trust when it would answer ``allow``.

* A key of a call's ``tool_input`` that dsh's stand-in for the tool reads but Claude Code's
  tool does not take (`untrusted_keys`): Bash's ``cwd`` say. Claude Code ignores (or rejects)
  it, so judging it would judge a call Claude Code does not make: a model could name a
  harmless ``cwd`` and have the command run where its shell is. The hook judges the call
  without it (Bash's ``cwd`` is always Claude Code's shell directory, the payload's ``cwd``)
  and never answers ``allow`` while it is there: an ``ask`` with the key named. (Asking,
  rather than dropping it silently, also keeps a key Claude Code may take in a newer version
  from being judged wrongly without anyone noticing.)
* A policy a call could rewrite (`policy_in_reach`): the hook reads its config file (and the
  permissions ``import`` files) on every call. Writes by Claude Code's file tools to such a
  file are fenced (`._hookfence`); a Bash command, an MCP tool or a tool the hook does not
  know writes where it likes. So while any file the policy was read from lies in the project
  (or below Claude Code's shell directory), such a tool is never answered ``allow``: a
  ``PreToolUse`` is asked, a ``PermissionRequest`` left to Claude Code. Pin the policy
  outside the project (``dsh hook claude --config /abs/path.toml``) to have them allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ._hookfence import PATHS, claude_path

if TYPE_CHECKING:
    from dsh_host import Host, ToolDefinition

__all__ = [
    "CLAUDE_KEYS", "JUDGED_WRITES", "doubt", "policy_files", "policy_in_reach", "shell_dir",
    "unsandboxed", "untrusted_keys",
]  # fmt: skip

CLAUDE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "Bash": frozenset(
        {"command", "timeout", "description", "run_in_background", "dangerouslyDisableSandbox"}
    ),
    "Read": frozenset({"file_path", "offset", "limit", "pages"}),
    "Write": frozenset({"file_path", "content"}),
    "Edit": frozenset({"file_path", "old_string", "new_string", "replace_all"}),
    "MultiEdit": frozenset({"file_path", "edits"}),
    "LS": frozenset({"path", "ignore"}),
    "Glob": frozenset({"pattern", "path"}),
    "Grep": frozenset(
        {"pattern", "path", "glob", "type", "output_mode", "multiline", "head_limit", "offset"}
        | {"-i", "-n", "-A", "-B", "-C"}
    ),
    "WebFetch": frozenset({"url", "prompt"}),
}
"""The keys of Claude Code's tools that a dsh tool may stand in for (``claude_name``)."""

JUDGED_WRITES: Final = frozenset(
    {
        # the file tools: their one path is judged by the fence (a config file is never allowed)
        "Read", "NotebookRead", "Write", "Edit", "MultiEdit", "NotebookEdit", "Grep", "Glob", "LS",
        # no file of the project written: fetches, searches, the todo list, a plan, a background
        # shell's output or its end; a subagent's calls come to the hook one by one
        "WebFetch", "WebSearch", "TodoWrite", "ExitPlanMode", "BashOutput", "KillShell", "Task",
    }
)  # fmt: skip
"""Claude Code's tools whose writes the hook can judge (or that write none). Every other tool
(``Bash``, ``SlashCommand``, ``mcp__*``, one it does not know) may rewrite the policy."""


def untrusted_keys(tool: ToolDefinition | None, name: str, tool_input: Any) -> list[str]:
    """The keys of *tool_input* (Claude Code's *name* call) that *tool*, dsh's stand-in, reads
    but Claude Code's tool does not take."""
    accepted = CLAUDE_KEYS.get(name)
    if tool is None or accepted is None or not isinstance(tool_input, dict):
        return []
    properties = tool.parameters.get("properties")
    reads = set(properties) if isinstance(properties, Mapping) else set()
    reads |= set(tool.paths)
    renamed = {claude: ours for ours, claude in tool.claude_keys.items()}
    return sorted(
        key for key in tool_input if key not in accepted and renamed.get(key, key) in reads
    )


def policy_files(host: Host) -> list[Path]:
    """The files the hook's policy is read from: the config file (with none, the
    ``dsh.toml`` the next call would find where this one looked) and each permissions
    ``import`` file, found as the permissions plugin finds it, present or not (the next call
    reads one that a command wrote)."""
    source = host.config.source
    found = [Path(source) if source else Path(os.getcwd(), "dsh.toml")]
    if host.pm.get_plugin("permissions") is not None:
        imports = getattr(host.config_for("permissions"), "imports", ())
        for spelled in imports if isinstance(imports, Iterable) else ():
            found.append(Path(host.workspace, os.path.expanduser(str(spelled))))
    return found


def policy_in_reach(host: Host, places: Iterable[str], *, within: bool = True) -> Path | None:
    """The first policy file inside one of *places* (the project, Claude Code's shell
    directory), or with *within* false, that is one of them; each compared as spelled and
    where links lead. ``None``: none is."""
    roots = {p for place in places for p in _spellings(place)}
    for path in policy_files(host):
        for spelled in _spellings(str(path)):
            if any(spelled.is_relative_to(r) if within else spelled == r for r in roots):
                return path
    return None


def _spellings(path: str) -> tuple[Path, Path]:
    return Path(os.path.abspath(path)), Path(os.path.realpath(path))


def doubt(
    host: Host,
    payload: dict[str, Any],
    untrusted: list[str],
    *,
    unusual: bool = False,
    shell: str | None = None,
) -> str | None:
    """Why a call the rules allow is asked all the same (``None``: it is allowed)."""
    tool = payload["tool_name"]
    if untrusted:
        return (
            f"dsh: the tool_input of {tool} has {', '.join(untrusted)}, which Claude Code's "
            f"{tool} does not take (dsh's stand-in would judge it): not allowed while it is there"
        )
    if unusual:
        return (
            "dsh: a path is spelled otherwise than it resolves (a space around it, a "
            "decomposed character)"
        )
    if unsandboxed(payload):
        return "dsh: Bash asks to run outside Claude Code's sandbox (dangerouslyDisableSandbox)"
    written = _written(payload)
    if written is not None:  # Write, Edit ... of the policy itself (with no sandbox fence too)
        policy = policy_in_reach(host, [written], within=False)
        if policy is not None:
            return f"dsh: {tool} would write {policy}, which the hook reads its policy from"
    if tool not in JUDGED_WRITES:
        places = [str(host.workspace), os.getcwd(), *([shell] if shell else [])]
        policy = policy_in_reach(host, places)
        if policy is not None:
            return (
                f"dsh: {tool} may write files the hook cannot judge, and the hook's policy is "
                f"read from {policy}, inside the project (or Claude Code's working directory): "
                "a call could rewrite the rules that judge the next one. Pin the policy "
                "outside the project: dsh hook claude --config /abs/path/outside/project.toml "
                "(and keep commands from writing there with Claude Code's sandbox)"
            )
    return None


def _written(payload: dict[str, Any]) -> str | None:
    """The path a Claude Code file tool writes (already resolved: `anchored`), if any."""
    key, access = PATHS.get(payload["tool_name"], (None, None))
    tool_input = payload["tool_input"]
    if access != "write" or not isinstance(tool_input, dict):
        return None
    path = tool_input.get(key)
    return path if isinstance(path, str) and "\0" not in path else None


def shell_dir(payload: dict[str, Any], here: str) -> str:
    """Where Claude Code's shell is: the payload's ``cwd`` (resolved as a file tool's path,
    a relative one from the project, ``CLAUDE_PROJECT_DIR``), else *here*, where the hook
    was started."""
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd.strip() or "\0" in cwd:
        return here
    return os.path.normpath(claude_path(cwd, os.environ.get("CLAUDE_PROJECT_DIR") or here)[0])


def unsandboxed(payload: dict[str, Any]) -> bool:
    """Whether a ``Bash`` call asks Claude Code to run it outside its sandbox: never allowed
    here, so Claude Code asks (a rule allows a command, not a command set loose)."""
    tool_input = payload["tool_input"]
    return (
        payload["tool_name"] == "Bash"
        and isinstance(tool_input, dict)
        and tool_input.get("dangerouslyDisableSandbox", False) is not False
    )
