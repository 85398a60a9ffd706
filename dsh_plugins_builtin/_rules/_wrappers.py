"""The programs that run other commands, and the commands they run.

`unwrap` gives the command a wrapper (``env``, ``sudo``, ``timeout``, ``xargs``, ``find -exec``,
...) runs; `spellings` gives every way a rule may see a command (its path cut to the program
name, its wrappers taken off); `shell_string` finds the code of ``sh -c`` and ``eval``; and
`strip_git_globals` reads ``git -C dir push`` as ``git push``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence

__all__ = ["WRAPPERS", "shell_string", "spellings", "strip_git_globals", "unwrap"]

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})

# Wrappers that run the rest of their words as a command: the options that take a value as a
# separate word, and how many plain operands come before the command.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "coproc": (frozenset(), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "xargs": (
        frozenset(
            {
                "-I",
                "-E",
                "-L",
                "-n",
                "-P",
                "-s",
                "-d",
                "-a",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-lines",
                "--max-chars",
                "--replace",
                "--eof",
                "--process-slot-var",
            }
        ),
        0,
    ),
    "sudo": (
        frozenset(
            {
                "-u",
                "-g",
                "-C",
                "-D",
                "-h",
                "-p",
                "-r",
                "-t",
                "-T",
                "-U",
                "-R",
                "--user",
                "--group",
                "--chdir",
                "--host",
                "--prompt",
                "--role",
                "--type",
                "--other-user",
                "--chroot",
                "--close-from",
                "--command-timeout",
            }
        ),
        0,
    ),
    "doas": (frozenset({"-u", "-C"}), 0),
    "watch": (frozenset({"-n", "--interval", "-d", "--differences", "-q"}), 0),
}
WRAPPERS = frozenset(_WRAPPERS) | _SHELLS
"""Programs that run (part of) their arguments as a command."""
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_GIT_GLOBALS_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env",
     "--super-prefix", "--list-cmds", "--attr-source"}
)  # fmt: skip
_MAX_SPELLINGS = 64  # per command, so a wrapper chain cannot blow up the work


def _option_skip(words: Sequence[str], start: int, with_value: frozenset[str]) -> Iterator[int]:
    """Where the wrapped command may start: after the options (and `ASSIGNMENT`s for env/sudo)."""
    i = start
    while i < len(words):
        word = words[i]
        if word == "--":
            yield i + 1
            return
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name in with_value and "=" not in word:
                i += 2
            elif name in with_value or any(word.startswith(o) for o in with_value if len(o) == 2):
                i += 1
            else:
                # an option this table does not know might take a value: try both readings
                if i + 1 < len(words):
                    yield from _option_skip(words, i + 2, with_value)
                i += 1
            continue
        if _ASSIGNMENT.match(word):
            i += 1
            continue
        yield i
        return


def unwrap(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The commands a wrapper in front of *words* runs (nothing when *words* is no wrapper)."""
    head = posixpath.basename(words[0]) if words else ""
    if head == "find":
        i = 1
        while i < len(words):
            if words[i] in _FIND_EXEC:
                end = i + 1
                while end < len(words) and words[end] not in (";", "+"):
                    end += 1
                if end > i + 1:
                    yield words[i + 1 : end]
                i = end
            i += 1
        return
    if head == "!":
        yield words[1:]
        return
    wrapper = _WRAPPERS.get(head)
    if wrapper is None:
        return
    with_value, operands = wrapper
    for start in _option_skip(words, 1, with_value):
        start += operands
        if start < len(words):
            yield words[start:]
    if head == "coproc" and len(words) > 2:
        yield words[2:]  # coproc NAME command


def shell_string(words: tuple[str, ...]) -> tuple[str | None, bool]:
    """For ``sh -c STRING`` and ``eval ...``: the code string, and whether code is unseen."""
    head = posixpath.basename(words[0]) if words else ""
    if head == "eval":
        return " ".join(words[1:]), True
    if head == "env":
        for i, word in enumerate(words[:-1]):
            if word in ("-S", "--split-string"):
                return words[i + 1], False
        return None, False
    if head == "su" or (
        head in ("sudo", "doas")
        and any(
            w in ("--shell", "--login")
            or (w[:1] == "-" and w[1:2] != "-" and set(w[1:]) & {"s", "i"})
            for w in words[1:]
        )
    ):
        return None, True  # a shell that reads its commands from stdin (or runs -c elsewhere)
    if head not in _SHELLS:
        return None, False
    i = 1
    if head == "busybox":
        if len(words) < 2 or posixpath.basename(words[1]) not in _SHELLS:
            return None, False
        i = 2
    command_flag = False
    while i < len(words) and words[i].startswith(("-", "+")) and words[i] not in ("-", "--"):
        flag = words[i]
        if flag in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 1
        elif not flag.startswith("--") and "c" in flag[1:]:
            command_flag = True
        i += 1
    if i < len(words) and words[i] == "--":
        i += 1
    if command_flag:
        return (words[i] if i < len(words) else ""), False
    # no -c: the shell reads its commands from stdin (or a script file): unseen code
    return None, True


def spellings(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """*words*, then *words* with a path on the program cut to its name, then unwrapped."""
    seen: set[tuple[str, ...]] = set()
    queue = [words]
    while queue and len(seen) < _MAX_SPELLINGS:
        current = queue.pop(0)
        if not current or current in seen:
            continue
        seen.add(current)
        yield current
        base = posixpath.basename(current[0])
        if base and base != current[0]:
            queue.append((base, *current[1:]))
        queue.extend(unwrap(current))


def strip_git_globals(words: Sequence[str]) -> tuple[str, ...] | None:
    """``git -C dir --no-pager push`` as ``git push``; ``None`` when *words* is not git."""
    if not words or words[0] != "git":
        return None
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        name = words[i].split("=", 1)[0]
        i += 2 if name in _GIT_GLOBALS_WITH_VALUE and "=" not in words[i] else 1
    if i < len(words) and words[i] == "--":
        i += 1
    return ("git", *words[i:])
