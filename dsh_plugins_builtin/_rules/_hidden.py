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

from ._git import GIT_PROGRAM_OPTIONS, GIT_WRITING, git_runs, git_writes
from ._options import ENV, SUDO, XARGS, read_options
from ._programs import CHECKED, program_runs, program_writes
from ._wrappers import DYNAMIC, strip_git_globals

__all__ = [
    "hidden_assignment",
    "hidden_in_command",
    "hidden_in_node",
    "hidden_in_source",
    "options_matter",
    "runner_writes",
    "wrapped_write",
]

# Builtins that evaluate an argument as code (a string, a subscript `a[$(...)]` in a variable
# name, or arithmetic): always, or only with one of the flags given.
_EVALUATING: dict[str, tuple[str, ...]] = {
    "eval": (), "source": (), ".": (), "trap": (), "alias": (), "exec": (), "builtin": (),
    "command": (), "enable": (), "shopt": (), "let": (), "declare": (), "typeset": (),
    "local": (), "readonly": (), "unset": (), "read": (), "compgen": (), "complete": (),
    "getopts": (), "bind": (), "hash": (), "fc": (),
    "printf": ("-v",), "test": ("-v",), "[": ("-v",), "mapfile": ("-C",),
    "readarray": ("-C",), "wait": ("-p",),
}  # fmt: skip
# Variables a prefix, an ``export`` or (for environment-style names) a plain assignment may set:
# none names a program, a file of configuration or code, or options. Any other may (``HOME``
# moves ~/.gitconfig, ``XDG_CONFIG_HOME`` too, ``PYTHONWARNINGS`` imports a module...).
_SAFE_VARIABLES = frozenset(
    {"LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
     "CLICOLOR", "CLICOLOR_FORCE", "COLORTERM", "CI", "NODE_ENV", "RUST_LOG", "RUST_BACKTRACE",
     "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONHASHSEED",
     "PYTHONUTF8", "DEBUG", "VERBOSE", "NODE_NO_WARNINGS"}
)  # fmt: skip
# Lower-case names programs read from the environment (a plain ``x=1`` sets a shell variable).
_LOWER_ENVIRONMENT = re.compile(r"(?i:npm_config_.*|(?:http|https|ftp|all|no)_proxy)")
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
_SUBSTRING = re.compile(
    r"\$\{#?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[*@#?$!-])(?:\[[^]]*\])?:(?![-=?+])"
)  # ${name:offset}, ${1:x}, ${*:x}, ${@:x}: the offset is arithmetic
# ``a=([x]=1)``: the index of a compound array assignment is arithmetic too
_ARRAY_INDEX = re.compile(r"(?:^|[\s(])\[[^\]\n]*\]\+?=")


def _variable(word: str, *, plain: bool = False) -> str | None:
    """Why the assignment *word* may change what a program runs; with *plain*, a ``NAME=value``
    command of its own (only names in the environment's style count: ``x=1`` does not)."""
    m = _ASSIGNMENT.match(word)
    if m is None:
        return None
    name = m.group(1)
    if name.startswith("GIT_") or name in _PROGRAM_VARIABLES or name.startswith("BASH_FUNC_"):
        return f"the variable {name}, which names a program or code"
    if name in _SAFE_VARIABLES or name.startswith("LC_"):
        return None
    if plain and name != name.upper() and not _LOWER_ENVIRONMENT.fullmatch(name):
        return None
    return f"the variable {name}, which may name where a program reads configuration or code"


def _make_reads_the_line(word: str, following: str) -> bool:
    """``make --eval=TEXT`` / ``-E TEXT`` (also in a cluster), ``-f -`` / ``--file=/dev/stdin``
    (code on the line or stdin rather than in a makefile), and a variable defined on the line
    that runs or expands code at once (``X!=cmd``, ``X:=$(shell cmd)``)."""
    name, eq, value = word.partition("=")
    short = word.startswith("-") and not word.startswith("--")
    if name.startswith("--ev") or (short and "E" in word[1:]):
        return True
    if short and "f" in word[1:]:
        value = word[word.index("f", 1) + 1 :] or following
    elif name in ("--file", "--makefile"):
        value = value if eq else following
    elif not word.startswith("-") and eq:
        return "$" in value or name.endswith(("!", ":"))
    else:
        return False
    return value in ("-", "/dev/stdin") or value.startswith(("/dev/", "/proc/"))


def hidden_assignment(text: str, *, plain: bool) -> str | None:
    """Why an assignment outside a command's prefix (``NAME=value`` alone: *plain*; or an
    ``export`` / ``readonly`` argument) may change what a later program runs."""
    return _variable(text, plain=plain)


def _flagged(words: Sequence[str], flags: tuple[str, ...]) -> bool:
    """Whether one of the single-letter *flags* is among the options of *words*, alone or in a
    cluster (``mapfile -tC``, ``wait -np``: bash's builtins take them so)."""
    letters = {flag[1] for flag in flags}
    for word in words[1:]:
        if word == "--" or not word.startswith("-"):
            return False
        if not word.startswith("--") and letters & set(word[1:]):
            return True
    return False


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
        if head in ("test", "[", "printf"):
            if any(w.startswith(f) for w in words[1:] for f in flags):
                return f"{head} {flags[0]}, which evaluates its arguments as code"
        elif _flagged(words, flags):
            return f"{head} {flags[0]}, which evaluates its arguments as code"
    if head in ("env", "sudo", "doas"):
        for word in words[1:]:
            why = _variable(word)
            if why is not None:
                return why
    if head in ("test", "[", "printf") and words[1:2] == (DYNAMIC,):
        # its first word may be -v, whose NAME[subscript] is evaluated (`test $x`)
        return f"{head} with a first word known only at run time, which may be -v"
    if head == "git":
        return git_runs(words)
    if head in CHECKED:  # sed's e, awk's system(), sort --compress-program, rg --pre ...
        return program_runs(words)
    following = (*words[1:], "")
    if head == "make" and any(map(_make_reads_the_line, words[1:], following[1:])):
        return "make --eval, a makefile from stdin or a variable that runs code at once"
    if head == "make":  # NAME=value overrides the makefile's (CC, SHELL ...): as a prefix would
        for word in words[1:]:
            why = None if word.startswith("-") else _variable(word)
            if why is not None:
                return why
    if head in ("npm", "pnpm"):  # any --key=value on the line is configuration, as npm_config_*
        for word in words[1:]:
            if word == "--":
                break
            if word.startswith("-") and word.split("=", 1)[0] not in _NPM_SAFE:
                return (
                    f"{head} {word.split('=', 1)[0]}, which sets configuration (a program, a place)"
                )
    if head in ("mapfile", "readarray"):  # the array it fills: element 0 is the variable
        for word in words[1:]:
            why = _variable(word + "=", plain=True) if _NAME.fullmatch(word) else None
            if why is not None:
                return why
    if head == "xargs":
        read = read_options(words, 1, XARGS)
        for name, value in read[0] if read is not None else ():
            if name == "--process-slot-var":
                return _variable(f"{value}=0") or f"xargs {name}, which sets a variable"
    return None


def options_matter(words: Sequence[str]) -> bool:
    """Whether options appended to *words* (by ``xargs``, from stdin) could make it run a
    program or write a file the rules check only when they are on the line (git's, a test
    runner's)."""
    head = posixpath.basename(words[0]) if words else ""
    if head in CHECKED:
        return True
    if head == "git":
        sub = (strip_git_globals(words) or ("git",))[1:2]
        return not sub or sub[0] in GIT_PROGRAM_OPTIONS or sub[0] in GIT_WRITING
    return bool(runner_writes([*words, "--basetemp=x"]))


# Where bash evaluates text as arithmetic, a subscript runs any command substitution in it:
# a name with a subscript (``'a[$(cmd)]'``) is code wherever it ends up (``wait -p``, a
# ``{name}>`` redirection, ``OPTIND=``, ``$[b]``, ``((b))`` ...), quoted or not.
_NPM_SAFE = frozenset(
    {"-s", "--silent", "-q", "--quiet", "-d", "--verbose", "--if-present", "--json", "--color",
     "--no-color", "--no-fund", "--no-audit", "--no-progress"}
)  # fmt: skip
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFAULT_ASSIGN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")
_NAMED = frozenset("_\"'\\")  # what a name, or a quoted part glued to one, may end with
_FD_VARIABLE = re.compile(r"(?<!\$)\{[A-Za-z_][A-Za-z0-9_]*\[")  # {a[..]}>, not ${a[0]}


def _expands(after: str) -> bool:
    """Whether a ``$`` followed by *after* (one character) starts an expansion."""
    return after in ("(", "{", "[", "_") or after.isalpha()


def hidden_in_source(text: str) -> str | None:
    """Why a command line's text holds a subscript that expands something (linear in *text*)."""
    opened = False
    for index, char in enumerate(text):
        if char == "[":  # a subscript follows a name (``a[``, ``b"["``), a test does not
            opened = opened or (
                index > 0 and (text[index - 1].isalnum() or text[index - 1] in _NAMED)
            )
        elif char in "]\n":
            opened = False
        elif opened and (char == "`" or (char == "$" and _expands(text[index + 1 : index + 2]))):
            return "a subscript holding an expansion, which bash evaluates as arithmetic"
    if "$[" in text:
        return "the arithmetic $[...], which evaluates variables' values as code"
    if _FD_VARIABLE.search(text):
        return "a {name[...]} redirection, whose subscript is evaluated as arithmetic"
    if _ARRAY_INDEX.search(text):
        return "an array index ([i]=...), which is evaluated as arithmetic"
    return None


def hidden_in_node(kind: str, text: str) -> str | None:
    """Why a syntax node of *kind* spelled *text* evaluates code held in a variable's value."""
    if kind == "expansion" and (default := _DEFAULT_ASSIGN.match(text)) is not None:
        why = _variable(default.group(1) + "=", plain=True)  # ${NAME:=value} assigns NAME
        if why is not None:
            return why
    if kind == "expansion":
        if text.startswith("${!") or "@" in text.split("}", 1)[0][2:]:
            return f"the expansion {text[:40]!r}, which evaluates a value"
        bracket = text.find("[")
        if bracket != -1 and not _PLAIN_SUBSCRIPT.match(text, bracket):
            return f"the subscript in {text[:40]!r}, which is evaluated as arithmetic"
        if _SUBSTRING.match(text):
            return f"the offset in {text[:40]!r}, which is evaluated as arithmetic"
        return None
    if kind == "arithmetic_expansion" and re.search(r"[A-Za-z_$]", text[2:]):
        return f"the arithmetic {text[:40]!r}, which evaluates variables' values as code"
    if kind == "compound_statement" and text.startswith("(("):
        return f"the arithmetic {text[:40]!r}, which evaluates variables' values as code"
    if kind == "c_style_for_statement":
        start = text.find("((") + 2
        if re.search(r"[A-Za-z_$]", text[start : text.find("))", start)]):
            return f"the arithmetic {text[:40]!r}, which evaluates variables' values as code"
    if kind == "test_command" and re.match(r"\[\s+[$`]", text):
        return f"the test {text[:40]!r}, whose first word may be -v (evaluated)"
    if kind == "test_command" and _ARITHMETIC_TEST.search(text):
        return f"the test {text[:40]!r}, which evaluates variables' values as code"
    if kind == "subscript" and not _PLAIN_SUBSCRIPT.search(text):
        return f"the subscript {text[:40]!r}, which is evaluated as arithmetic"
    return None


_ELSEWHERE_OPTIONS = {"doas": ("-s",)}
_GETOPT_ELSEWHERE = {
    "env": (ENV, ("-S", "-C")),
    "sudo": (SUDO, ("-D", "-R", "-s", "-i")),
    "xargs": (XARGS, ("--process-slot-var",)),  # sets a variable for the command it runs
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
    spec, elsewhere = _GETOPT_ELSEWHERE.get(head, (None, ()))
    if spec is not None:
        read = read_options(words, 1, spec)
        if read is None:
            return f"{head} with options it would refuse, whose reading is not sure"
        for name, _ in read[0]:
            if name in elsewhere:
                return f"{head} {name}, which runs a string, a shell or in another directory"
        return None
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
    {"--basetemp", "--junitxml", "--junit-xml", "--result-log", "--rootdir", "--debug",
     "--log-file", "--report-log", "--resultlog"}
)  # fmt: skip
_INI_WRITES = frozenset(
    {"cache_dir", "log_file"}
)  # ini keys (-o KEY=PATH) that name a path written
_PYTHON = re.compile(r"python(?:3(?:\.[0-9]+)?)?")


def runner_writes(words: Sequence[str]) -> list[tuple[str, str]]:
    """The paths a test runner's options make it write or delete: (option, path) pairs; git's
    ``--output`` files; and the files other programs' options or scripts write (`CHECKED`)."""
    head = posixpath.basename(words[0]) if words else ""
    if head == "git":
        return git_writes(words)
    if head in CHECKED:  # sed -i, sort -o, tee, awk's print > "f", curl -o ...
        return program_writes(words)
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
        if name in _RUNNER_WRITES:
            # --debug's value is optional: the next word is it unless it is an option
            if not eq and i + 1 < len(rest) and not (name == "--debug" and rest[i + 1][:1] == "-"):
                i += 1
                value = rest[i]
            if eq or value or name != "--debug":
                out.append((name, value))
        elif name in ("-c", "--config-file"):  # the cache goes beside the file it names
            if not eq and i + 1 < len(rest):
                i += 1
                value = rest[i]
            out.append((name, posixpath.join(posixpath.dirname(value), ".pytest_cache")))
        elif word in ("-o", "--override-ini") and i + 1 < len(rest):
            i += 1
            ini = rest[i]
        elif word.startswith("-") and not word.startswith("--") and ("o" in word or "c" in word):
            at = min(word.find(c) for c in "oc" if c in word)  # -qo KEY=V, -qc FILE
            value = word[at + 1 :].removeprefix("=") or (rest[i + 1] if i + 1 < len(rest) else "")
            i += 0 if word[at + 1 :] else 1
            if word[at] == "o":
                ini = value
            else:
                out.append(("-c", posixpath.join(posixpath.dirname(value), ".pytest_cache")))
        elif name == "--override-ini" and eq:
            ini = value
        if ini is not None:
            key, _, path = ini.partition("=")
            if key.strip() in _INI_WRITES:
                out.append((f"-o {key.strip()}", path))
            elif key.strip() == "addopts":  # options no rule reads: as if any path were written
                out.append(("-o addopts", "/"))
        i += 1
    return out
