"""The programs that run other commands, and the commands they run: `unwrap` gives what a
wrapper (``env``, ``sudo``, ``timeout``, ``xargs``, ``find -exec``, sed's ``e`` ...) runs;
`spellings` every way a rule may see a command (its path cut to the program name, its wrappers
taken off); `shell_string` the code of ``sh -c`` and ``eval``; `strip_git_globals` reads ``git
-C dir push`` as ``git push``."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence

from ._options import ENV, FLOCK, SUDO, WATCH, XARGS, read_options
from ._sed import read_sed

__all__ = [
    "DYNAMIC",
    "WRAPPERS",
    "git_globals",
    "glued",
    "shell_string",
    "spellings",
    "strip_git_globals",
    "unwrap",
    "xargs_replaces",
]

DYNAMIC = "\ue100"
"""Stands for a word whose value is only known at run time: no rule word can equal it."""

# Shells whose code the bash grammar reads as they do; the others' (zsh's glob qualifiers,
# ksh's ``${ cmd;}``, fish, csh ...) is code no rule can see.
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "rbash", "busybox"})
_OTHER_SHELLS = frozenset(
    {"zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "loksh", "yash", "posh", "hush", "fish",
     "csh", "tcsh", "pwsh", "nu", "elvish", "xonsh", "rc", "es", "scsh"}
)  # fmt: skip

# Wrappers that run the rest of their words as a command: the options that take a value as a
# separate word, and how many plain operands come before the command.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
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
    "doas": (frozenset({"-u", "-C"}), 0),
}
WRAPPERS = (
    frozenset(_WRAPPERS)
    | {"env", "xargs", "sudo", "watch", "flock", "tar"}
    | _SHELLS
    | _OTHER_SHELLS
)
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
        if DYNAMIC in words:  # a word known at run time may be (or split into) -exec ...
            yield (DYNAMIC,)
            return
        i = 1
        while i < len(words):
            if words[i] in _FIND_EXEC:
                end = i + 1
                while end < len(words) and words[end] not in (";", "+"):
                    end += 1
                if end > i + 1:  # `{}` as the program: whatever file find found
                    inner = words[i + 1 : end]
                    yield (DYNAMIC, *inner[1:]) if "{}" in inner[0] else inner
                i = end
            i += 1
        return
    if head == "!":
        yield words[1:]
        return
    if head == "env":
        yield from _env_command(words)
        return
    if head == "xargs":
        yield from _xargs_command(words)
        return
    if head == "sudo":
        yield from _sudo_command(words)
        return
    if head in ("sed", "gsed"):  # its e commands (run by sh -c), and s///e (the pattern space)
        yield from (_code(run) for run in read_sed(words).runs)
        return
    if head in ("flock", "tar"):
        yield from (_flock_command if head == "flock" else _tar_commands)(words)
        return
    if head == "watch":
        read = read_options(words, 1, WATCH)
        if read is None:
            yield (DYNAMIC,)
        elif any(name == "-x" for name, _ in read[0]):
            yield words[read[1] :]
        elif read[1] < len(words):  # joined with blanks and run by `sh -c`
            yield ("sh", "-c", " ".join(words[read[1] :]))
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


def _env_command(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The command ``env`` runs: after its options (as getopt reads them), a lone ``-`` (the
    old spelling of ``-i``) and the ``NAME=value`` words; with ``-S`` it is in the string."""
    read = read_options(words, 1, ENV)
    if read is None:
        yield (DYNAMIC,)  # getopt refuses it: no reading of the rest is sure
        return
    options, i = read
    if any(name == "-S" for name, _ in options):
        yield (DYNAMIC,)  # split by env itself (``\\_``, ``${VAR}``): no rule reads it
        return
    if i < len(words) and words[i] == "-":
        i += 1
    while i < len(words) and "=" in words[i]:  # env takes any NAME=VALUE (``a.b=1`` too)
        i += 1
    if i < len(words):
        yield words[i:]
        if words[i].startswith("-"):  # env would fail to run it; the deny view reads on too
            yield from _env_command(("env", *words[i:]))


def _code(value: str | None) -> tuple[str, ...]:
    """A string a program hands to ``sh -c``, as a command (`DYNAMIC` when it is not known)."""
    return ("sh", "-c", DYNAMIC if value is None else value)


def _flock_command(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """``flock [OPTIONS] LOCK -c STRING`` runs the string through ``sh -c``; ``flock [OPTIONS]
    LOCK CMD ...`` runs the command (options read as getopt reads them: ``-E 1``, ``-w 5``)."""
    read = read_options(words, 1, FLOCK)
    if read is None:
        yield (DYNAMIC,)
        return
    options, i = read
    code = [value for name, value in options if name == "-c"]
    after = read_options(words, i + 1, FLOCK) if i + 1 < len(words) else None
    if after is not None and after[0]:  # options after the lock file: -c STRING there
        code += [value for name, value in after[0] if name == "-c"]
        i = after[1] - 1
    if code:
        yield _code(code[0])
    elif i + 1 < len(words):  # the lock file, then the command
        yield words[i + 1 :]


_TAR_CODE = ("--checkpoint-action", "--to-command", "--use-compress-program", "--info-script",
             "--new-volume-script", "--rsh-command")  # fmt: skip
_TAR_VALUES = "bfgCHIKLNTVXF"  # old-style letters (``tar cIf PROG FILE``) that take the next word


def _tar_commands(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The strings GNU tar runs through ``sh -c``: ``--to-command``, ``--checkpoint-action=exec=``,
    ``-I``/``--use-compress-program``, ``-F``/``--info-script``, ``--rsh-command`` (any
    unambiguous abbreviation; ``-I`` and ``-F`` also in a cluster, and old-style ``cIf``)."""
    if len(words) > 1 and not words[1].startswith("-"):  # old style: letters, values after
        taking = [letter for letter in words[1] if letter in _TAR_VALUES]
        for k, letter in enumerate(taking):
            if letter in "IF":
                yield _code(words[2 + k] if 2 + k < len(words) else None)
    for i, word in enumerate(words[1:], 1):
        following = words[i + 1] if i + 1 < len(words) else None
        name, eq, value = word.partition("=")
        if word.startswith("--") and len(name) > 3 and any(c.startswith(name) for c in _TAR_CODE):
            value = value if eq else following or ""
            if "--checkpoint-action".startswith(name):
                if not value.startswith("exec"):
                    continue
                value = value.partition("=")[2]
            yield _code(value)
        elif word.startswith("-") and not word.startswith("--"):
            at = min((word.find(c) for c in "IF" if c in word), default=-1)
            if at > 0:
                yield _code(word[at + 1 :] or following)


def _sudo_command(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The command ``sudo`` runs: after its options (as getopt reads them) and ``NAME=value``."""
    read = read_options(words, 1, SUDO)
    if read is None:
        yield (DYNAMIC,)
        return
    i = read[1]
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    if i < len(words):
        yield words[i:]


def xargs_replaces(words: Sequence[str]) -> str | None:
    """``xargs``' replace string (``-I R``, ``-iR``, ``--replace``, ``--repl=R``... as getopt
    reads them; ``-i`` alone is ``{}``), ``""`` when its options cannot be read, else ``None``."""
    read = read_options(words, 1, XARGS)
    if read is None:
        return ""
    for name, value in read[0]:
        if name in ("-I", "-i"):
            return "{}" if value is None else value
    return None


def _xargs_command(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The command ``xargs`` runs (``echo`` if none): with the words it reads from stdin
    appended, or, in replace mode, each word holding the replace string read at run time."""
    read = read_options(words, 1, XARGS)
    if read is None:
        yield (DYNAMIC,)
        return
    command = words[read[1] :] or ("echo",)
    replace = xargs_replaces(words)
    if replace is None:
        yield command  # (nothing read from stdin: GNU xargs runs it once without -r)
        yield (*command, DYNAMIC)
    else:
        yield tuple(DYNAMIC if not replace or replace in w else w for w in command)


def shell_string(words: tuple[str, ...]) -> tuple[str | None, bool]:
    """For ``sh -c STRING`` and ``eval ...``: the code string, and whether code is unseen."""
    head = posixpath.basename(words[0]) if words else ""
    if head == "eval":
        return " ".join(words[1:]), True
    if head == "env":
        read = read_options(words, 1, ENV)
        if read is None:
            return None, True
        strings = [value or "" for name, value in read[0] if name == "-S"]
        # env splits the string itself (``\\_``, ``${VAR}``): code no rule reads for sure; read
        # as bash too, so that a deny rule still sees what it plainly names
        return (" ".join(strings), True) if strings else (None, False)
    if head in _OTHER_SHELLS:
        return None, True
    if head == "sudo":
        read = read_options(words, 1, SUDO)
        if read is None or any(name in ("-s", "-i") for name, _ in read[0]):
            return None, True  # a shell that reads its commands from stdin (or runs -c elsewhere)
        return None, False
    if head in ("su", "runuser") or (
        head == "doas" and any(w[:1] == "-" and w[1:2] != "-" and "s" in w[1:] for w in words[1:])
    ):
        return None, True  # a shell that reads its commands from stdin (or runs -c elsewhere)
    if head not in _SHELLS:
        return None, False
    i = 1
    if head == "busybox":
        applet = posixpath.basename(words[1]) if len(words) > 1 else ""
        if applet in _OTHER_SHELLS:
            return None, True
        if applet not in _SHELLS:
            return None, False
        i = 2
    if any(_startup_file(word) for word in words[i:]):
        return None, True  # it reads a startup file (stdin, say) before any -c code
    command_flag = False
    while i < len(words) and words[i].startswith(("-", "+")) and words[i] not in ("-", "--"):
        flag = words[i]
        if flag.startswith("--"):
            i += 1
            continue
        command_flag = command_flag or (flag[0] == "-" and "c" in flag[1:])
        i += 1 + sum(letter in "oO" for letter in flag[1:])  # -o NAME, -O NAME, also in -co
    if i < len(words) and words[i] in ("-", "--"):  # bash and dash read a lone - as --
        i += 1
    if command_flag:
        if i >= len(words):
            return None, True  # the code comes from elsewhere (xargs appends it from stdin)
        return words[i], False
    # no -c: the shell reads its commands from stdin (or a script file): unseen code
    return None, True


def _runs_a_shell(words: tuple[str, ...], i: int) -> bool:
    if posixpath.basename(words[i]) not in _SHELLS | _OTHER_SHELLS:
        return False
    return any(w[:1] == "-" and w[1:2] != "-" and "c" in w[1:] for w in words[i + 1 :])


def _startup_file(word: str) -> bool:
    """Whether a shell's option *word* makes it read code from a file before its ``-c``:
    ``--rcfile``, ``--init-file``, or ``-i`` (an interactive shell reads ``~/.bashrc``)."""
    if word.startswith("--"):
        return word.split("=", 1)[0] in ("--rcfile", "--init-file", "--interactive")
    return word.startswith("-") and "i" in word[1:]


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
        if base.startswith("git-") and len(base) > 4:  # git's own programs: git-push is git push
            queue.append(("git", base[4:], *current[1:]))
        if base == "busybox":  # busybox APPLET ...: the applet (busybox sed -i ...)
            queue.append(current[1:])
        queue.extend(unwrap(current))
        # a shell with -c among the arguments of a program no table knows (``taskset 1 sh -c``,
        # ``strace -f sh -c``): read as run from there
        queue.extend(current[i:] for i in range(1, len(current)) if _runs_a_shell(current, i))


def glued(word: str) -> list[tuple[str, ...]]:
    """The commands a word may carry besides being one (for deny and ask rules, which read
    an argument as a command a program may run): an option's value glued with ``=``
    (``--pre=rm``, ``--checkpoint-action=exec=rm -f v``) and a word holding blanks (``flock
    l -c 'rm -f v'``), each split on blanks (bounded: at most 8 readings of one word)."""
    values = [word]
    at = word.find("=")
    while at != -1 and len(values) < 8:
        values.append(word[at + 1 :])
        at = word.find("=", at + 1)
    out = [tuple(v.split()) for v in values if v and (v is not word or len(v.split()) > 1)]
    return [tokens for tokens in out if tokens]


def git_globals(words: Sequence[str]) -> list[str]:
    """The global option words of a ``git`` line (before its subcommand), values left out."""
    out: list[str] = []
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        out.append(words[i])
        name = words[i].split("=", 1)[0]
        i += 2 if name in _GIT_GLOBALS_WITH_VALUE and "=" not in words[i] else 1
    return out


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
