"""The narrowest allow rules that cover one call: what a denial hint or an "always allow" answer
suggests, instead of the whole tool.

* ``bash``: one ``bash(<command>:*)`` per simple command of the line, naming the command and,
  for tools whose second word is a subcommand (``git status``, ``npm test``), that word too.
  A command that runs another command or code given in its words (``sudo``, ``env``,
  ``xargs``, ``sh -c``, ``python``, ...), or a subcommand tool whose second word is an option
  (``git -c core.pager=x log``), gets the exact line instead (``bash(sudo ls)``): a prefix rule
  for it would allow everything.
  A line that is not a plain list of simple commands (``$(...)``, redirections, a variable as
  the command) has no rule narrower than the tool: `narrowest_rules` returns ``None``.
* path tools (``read_file``, ``write_file``, ``edit_file``, ``list_dir``, ``glob``, ``grep``):
  ``tool(./the/path)`` for a path in the workspace, ``tool(//the/path)`` for an absolute one.
  A path holding glob characters or ``..`` has none (``None``).
* any other tool: its name (a rule for a tool that takes no path or command is the tool).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ._rules import Anchors, RuleSet, parse_rule
from ._shell import parse_command
from ._wrappers import unwrap

__all__ = ["narrowest_rules"]

_PATH_TOOLS: Final = frozenset({"read_file", "write_file", "edit_file", "list_dir", "glob", "grep"})
_SUBCOMMANDS: Final = frozenset({
    "git", "npm", "pnpm", "yarn", "cargo", "go", "docker", "kubectl", "pip", "uv", "poetry",
    "make", "gh", "dotnet", "mvn", "gradle", "bundle", "rake", "nox", "tox",
})  # fmt: skip
_RUNNERS: Final = frozenset({
    "sudo", "doas", "su", "env", "nice", "nohup", "timeout", "time", "xargs", "exec", "eval",
    "command", "builtin", "sh", "bash", "zsh", "dash", "ksh", "fish", "python", "python3",
    "node", "perl", "ruby", "php", "lua", "awk", "gawk", "find", "ssh", "watch", "strace",
    "chroot", "unshare", "nsenter", "setsid", "stdbuf", "busybox", "npx", "uvx", "pipx",
    "deno", "bun", "docker", "kubectl", "parallel", "script", "flock", "ionice", "taskset",
})  # fmt: skip
"""Commands whose later words are a command or code to run: never a prefix rule."""
_COMMAND: Final = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_.+@%,/-]*")  # no VAR=value
_WORD: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+@%=,/-]*")
_ARG: Final = re.compile(r"[A-Za-z0-9_.+@%=,/-]+")  # a word an exact rule spells as it is
_PLAIN_PATH: Final = re.compile(r"[A-Za-z0-9_.+@%=,~ /-]+")


def narrowest_rules(tool: str, arguments: Any) -> tuple[str, ...] | None:
    """The allow rules, narrowest first, that together cover this call; ``None`` if none
    narrower than the whole tool can (see the module docstring)."""
    if not isinstance(arguments, Mapping):
        return None
    if tool == "bash":
        return _shell_rules(arguments.get("command"))
    if tool in _PATH_TOOLS:
        rule = _path_rule(tool, arguments.get("path", "."))
        return None if rule is None else (rule,)
    return (tool,)


def _shell_rules(command: object) -> tuple[str, ...] | None:
    """The rules for *command*, checked against the rule engine: a wrapper's rule needs the
    rule of what it runs too (``bash(sudo ls)`` with ``bash(ls)``); a line the engine never
    allows (``git -c ...``, a wrapper fed words from stdin) has none."""
    rules = _candidate_rules(command)
    if rules is None or not isinstance(command, str):
        return None
    if _allows(command, rules):
        return rules
    inner = [
        f"bash({' '.join(words)})"
        for simple in parse_command(command).simple or ()
        for words in unwrap(simple)
        if words and all(_ARG.fullmatch(word) for word in words)
    ]
    rules = tuple(dict.fromkeys((*rules, *inner)))
    return rules if inner and _allows(command, rules) else None


def _allows(command: str, rules: tuple[str, ...]) -> bool:
    """Whether *rules* alone allow *command* (in the working directory)."""
    here = os.getcwd()
    anchors = Anchors(workspace=here, project=here, home=os.path.expanduser("~"))
    allow = [parse_rule(text, "allow", anchors, "the suggestion") for text in rules]
    decision = RuleSet(allow=allow, workspace=Path(here)).decide("bash", None, {"command": command})
    return decision.effect == "allow"


def _candidate_rules(command: object) -> tuple[str, ...] | None:
    if not isinstance(command, str) or not command.strip():
        return None
    parsed = parse_command(command)
    if parsed.simple is None or parsed.dynamic is not None:
        return None
    rules: list[str] = []
    for words in parsed.simple:
        if not words or not _COMMAND.fullmatch(words[0]):
            return None
        name = words[0].rsplit("/", 1)[-1]
        subcommand = len(words) > 1 and _WORD.fullmatch(words[1]) is not None
        if name in _RUNNERS or (name in _SUBCOMMANDS and len(words) > 1 and not subcommand):
            if not all(_ARG.fullmatch(word) for word in words[1:]):
                return None  # an exact rule cannot spell these words
            rules.append(f"bash({' '.join(words)})")
        elif name in _SUBCOMMANDS and subcommand:
            rules.append(f"bash({words[0]} {words[1]}:*)")
        else:
            rules.append(f"bash({words[0]}:*)")
    return tuple(dict.fromkeys(rules)) or None


def _path_rule(tool: str, path: object) -> str | None:
    if not isinstance(path, str) or not _PLAIN_PATH.fullmatch(path):
        return None
    segments = [s for s in path.split("/") if s not in ("", ".")]
    if ".." in segments or path.startswith("~"):
        return None
    if path.startswith("/"):
        return f"{tool}(//{'/'.join(segments)})" if segments else None
    return f"{tool}(./{'/'.join(segments)})" if segments else f"{tool}(./**)"
