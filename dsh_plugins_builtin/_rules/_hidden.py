"""Constructs that run code no rule can see: commands that evaluate their arguments, git options
and environment variables that name programs, and expansions that evaluate their operands.

A line holding one is never allowed by a rule, and every deny or ask rule that could apply to
it turns into an ask (see `_shell` and `_rules`); the reason names the construct. The lists
close classes, not examples: *every* builtin that evaluates a name, a subscript or a string as
code, *every* ``git -c`` (any configuration key may name a program: ``alias.*``,
``core.pager``, ``core.sshCommand``, ``core.fsmonitor``, ``core.hooksPath``, ``diff.external``,
filters, credential helpers, ...), *every* ``GIT_*`` variable.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

__all__ = ["hidden_in_command", "hidden_in_node", "runner_writes", "wrapped_write"]

# Builtins that evaluate an argument as code (a string, a subscript `a[$(...)]` in a variable
# name, or arithmetic): always, or only with one of the flags given.
_EVALUATING: dict[str, tuple[str, ...]] = {
    "eval": (), "source": (), ".": (), "trap": (), "alias": (), "exec": (), "builtin": (),
    "command": (), "enable": (), "shopt": (), "let": (), "declare": (), "typeset": (),
    "local": (), "readonly": (), "unset": (), "read": (), "compgen": (), "complete": (),
    "getopts": (), "bind": (), "hash": (), "fc": (),
    "printf": ("-v",), "test": ("-v",), "[": ("-v",), "mapfile": ("-C",),
    "readarray": ("-C",),
}  # fmt: skip
_GIT_CONFIG = frozenset({"-c", "--config-env", "--exec-path"})
_PROGRAM_VARIABLES = frozenset(
    {"PAGER", "EDITOR", "VISUAL", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV",
     "ENV", "PROMPT_COMMAND", "PS4", "SHELLOPTS", "BASHOPTS", "SSH_ASKPASS", "LESSOPEN",
     "LESSCLOSE", "MANPAGER", "PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "PERL5OPT",
     "RUBYOPT", "IFS", "PATH", "CDPATH", "GLOBIGNORE", "BASH_FUNC"}
)  # fmt: skip
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_%]*)\+?=")
_FIND_WRITES = frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})
_ARITHMETIC_TEST = re.compile(r"\s-(?:eq|ne|lt|le|gt|ge|v|R)\s")
_PLAIN_SUBSCRIPT = re.compile(r"\[(?:[0-9]+|[@*])\]")
_SUBSTRING = re.compile(r"\$\{#?[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?:(?![-=?+])")


def _variable(word: str) -> str | None:
    m = _ASSIGNMENT.match(word)
    if m is None:
        return None
    name = m.group(1)
    if name.startswith("GIT_") or name in _PROGRAM_VARIABLES or name.startswith("BASH_FUNC_"):
        return f"the variable {name}, which names a program or code"
    return None


def hidden_in_command(words: Sequence[str], assignments: Sequence[str] = ()) -> str | None:
    """Why this simple command (its words, after its ``NAME=value`` prefixes) runs hidden code."""
    for assignment in assignments:
        why = _variable(assignment)
        if why is not None:
            return why
    if not words:
        return None
    head = posixpath.basename(words[0])
    flags = _EVALUATING.get(head)
    if flags is not None:
        if not flags:
            return f"{head}, which evaluates its arguments as code"
        if any(w.startswith(f) for w in words[1:] for f in flags):
            return f"{head} {flags[0]}, which evaluates its arguments as code"
    if head in ("env", "sudo", "doas"):
        for word in words[1:]:
            why = _variable(word)
            if why is not None:
                return why
    if head == "git":
        for word in words[1:]:
            if not word.startswith("-") or word == "--":
                break
            if word.split("=", 1)[0] in _GIT_CONFIG:
                return f"git {word.split('=', 1)[0]}, whose configuration can name a program"
    return None


def hidden_in_node(kind: str, text: str) -> str | None:
    """Why a syntax node of *kind* spelled *text* evaluates code held in a variable's value."""
    if kind == "expansion":
        if text.startswith("${!") or "@" in text.split("}", 1)[0][2:]:
            return f"the expansion {text[:40]!r}, which evaluates a value"
        bracket = text.find("[")
        if bracket != -1 and not _PLAIN_SUBSCRIPT.match(text, bracket):
            return f"the subscript in {text[:40]!r}, which is evaluated as arithmetic"
        if _SUBSTRING.match(text):
            return f"the offset in {text[:40]!r}, which is evaluated as arithmetic"
        return None
    if kind == "arithmetic_expansion" and re.search(r"[A-Za-z_$]", text[3:]):
        return f"the arithmetic {text[:40]!r}, which evaluates variables' values as code"
    if kind == "compound_statement" and text.startswith("(("):
        return f"the arithmetic {text[:40]!r}, which evaluates variables' values as code"
    if kind == "test_command" and _ARITHMETIC_TEST.search(text):
        return f"the test {text[:40]!r}, which evaluates variables' values as code"
    if kind == "subscript" and not _PLAIN_SUBSCRIPT.search(text):
        return f"the subscript {text[:40]!r}, which is evaluated as arithmetic"
    return None


_ELSEWHERE_OPTIONS = {
    "env": ("-S", "--split-string", "-C", "--chdir"),
    "sudo": ("-D", "--chdir", "-s", "-i", "--shell", "--login"),
    "doas": ("-s",),
}


def wrapped_write(words: Sequence[str]) -> str | None:
    """Why *words* writes, deletes, runs a string or moves elsewhere through an option no
    prefix rule should reach (``find -delete``, ``env -S STRING``, ``env -C DIR``, chroot)."""
    head = posixpath.basename(words[0]) if words else ""
    if head == "find":
        found = next((w for w in words[1:] if w in _FIND_WRITES), None)
        if found is not None:
            return f"find {found}, which deletes or writes files"
    if head == "chroot":
        return "chroot, which runs its command in another root"
    for option in _ELSEWHERE_OPTIONS.get(head, ()):
        for word in words[1:]:
            if word == "--":
                break
            long = option.startswith("--")
            if word == option or word.startswith(option + "=" if long else option):
                return f"{head} {option}, which runs a string or in another directory"
    return None


# pytest (run as pytest, py.test or python -m pytest) options that write or delete a path:
# --basetemp=DIR deletes DIR first; the rest write (over) a file or a directory.
_RUNNER_WRITES = frozenset(
    {"--basetemp", "--junitxml", "--junit-xml", "--result-log", "--rootdir", "--debug"}
)
_PYTHON = re.compile(r"python(?:3(?:\.[0-9]+)?)?")


def runner_writes(words: Sequence[str]) -> list[tuple[str, str]]:
    """The paths a test runner's options make it write or delete: (option, path) pairs."""
    head = posixpath.basename(words[0]) if words else ""
    rest = list(words[1:])
    if _PYTHON.fullmatch(head):
        if rest[:2] != ["-m", "pytest"]:
            return []
        rest = rest[2:]
    elif head not in ("pytest", "py.test"):
        return []
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, value = word.partition("=")
        ini: str | None = None
        if name in _RUNNER_WRITES and (eq or name != "--debug"):
            if not eq and i + 1 < len(rest):
                i += 1
                value = rest[i]
            out.append((name, value))
        elif word in ("-o", "--override-ini") and i + 1 < len(rest):
            i += 1
            ini = rest[i]
        elif word.startswith("-o") and not word.startswith("--"):
            ini = word[2:]
        elif name == "--override-ini" and eq:
            ini = value
        if ini is not None and ini.partition("=")[0].strip() == "cache_dir":
            out.append(("-o cache_dir", ini.partition("=")[2]))
        i += 1
    return out
