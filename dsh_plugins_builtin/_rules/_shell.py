"""Reading a shell command for permission rules, with the tree-sitter bash grammar.

`parse_command` parses a command line once (tree-sitter-bash, the grammar Codex decides its
"known safe" commands on) and gives permission rules two views of it:

* ``simple``, for **allow** rules: the command's simple commands as lists of literal words,
  *only* when the whole line is nothing but simple commands joined by ``;``, ``&&``, ``||``,
  ``|`` or newlines, every word literal (quotes decoded as bash decodes them, ``$'...'``
  included), with no expansion, substitution, redirection other than to ``/dev/null`` (or a
  descriptor copy such as ``2>&1``), subshell, function, background job or control structure.
  Otherwise ``simple`` is ``None`` and ``problem`` says why.
* ``commands``, for **deny** and **ask** rules: every command anywhere in the tree (inside
  substitutions, subshells, ``if``/``while``/``case`` bodies, functions, after ``time``,
  ``!``, ``coproc`` and redirections), each also spelled without the usual wrappers (``env``,
  ``command``, ``exec``, ``nice``, ``nohup``, ``timeout``, ``xargs``, ``sudo``, ``find -exec``,
  ...) and with ``sh -c``/``bash -c``/``eval`` strings parsed in turn (to a bounded depth).
  ``dynamic`` says why the line runs a command no rule can see (``$x``, ``eval``, ``$(...)`` as
  the command word, a shell reading its commands from stdin, a line that does not parse, or one
  too big to read); the rules then treat every deny and ask rule as an ask.

The work is bounded: lines over `MAX_COMMAND` characters are not parsed at all, the walk stops
after `MAX_NODES` nodes, and nested ``sh -c`` strings after `MAX_DEPTH` levels; each limit makes
the line ``dynamic`` and never allowable, so hostile input fails closed instead of hanging.
"""

from __future__ import annotations

import functools
import posixpath
import re
import threading
from collections.abc import Iterator, Sequence
from typing import final

import attrs
import tree_sitter
import tree_sitter_bash

from ._hidden import hidden_in_command, hidden_in_node, runner_writes
from ._words import strict_words

__all__ = [
    "DYNAMIC",
    "MAX_COMMAND",
    "MAX_DEPTH",
    "MAX_NODES",
    "WRAPPERS",
    "ParsedCommand",
    "parse_command",
    "strip_git_globals",
    "unwrap",
]

MAX_COMMAND = 64 * 1024
"""Longer command lines are not parsed: they are never allowed by a rule and ask instead."""
MAX_NODES = 20_000
"""The most syntax nodes one command line (with its nested ``sh -c`` strings) may have."""
MAX_DEPTH = 4
"""How deep ``sh -c '...'`` strings inside ``sh -c`` strings are followed."""
DYNAMIC = "\ue100"
"""Stands for a word whose value is only known at run time: no rule word can equal it."""

_CACHE_UP_TO = 4096  # longer lines are parsed every time rather than kept in the LRU cache
_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_LOCAL = threading.local()

_SEPARATORS = frozenset({";", "&&", "||", "|", "\n", "comment"})
_PLAIN = frozenset({"command", "list", "pipeline", "redirected_statement"})
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_GLOB = re.compile(r"[*?\[]")
_BRACE = re.compile(r"\{[^}]*(?:,|\.\.)[^}]*\}")
_FD = re.compile(r"[0-9]+-?|-")
_NULL_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<"})
_DUP_OPS = frozenset({">&", "<&"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_DYNAMIC_WORDS = frozenset({"eval", "source", "."})

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
_HIDING = frozenset(
    {"expansion", "arithmetic_expansion", "compound_statement", "test_command", "subscript",
     "declaration_command", "unset_command"}
)  # fmt: skip


@final
@attrs.frozen
class ParsedCommand:
    """One command line as the rules see it (see the module docstring).

    Attributes:
        simple: the simple commands' literal words, when the line is a plain list of them.
        problem: why ``simple`` is ``None``.
        commands: every command in the line, with each wrapper-free spelling, for deny/ask.
        dynamic: why some command cannot be known before it runs, or ``None``.
    """

    simple: tuple[tuple[str, ...], ...] | None
    problem: str | None
    commands: tuple[tuple[str, ...], ...]
    dynamic: str | None
    heads: frozenset[str] = frozenset()  # the program names of `commands`, without a path
    writes: tuple[tuple[str, str], ...] = ()  # a test runner's (option, path) writes
    arguments: frozenset[str] = frozenset()  # every argument word of `commands`, without a path


class _Budget:
    def __init__(self) -> None:
        self.nodes = MAX_NODES


class _NotPlain(Exception):
    pass


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


# -- decoding words --------------------------------------------------------------------------

_ANSI_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_ANSI = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})"
    r"|U([0-9A-Fa-f]{1,8})|c(.)|(.))",
    re.DOTALL,
)


def _ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` as bash does (a NUL ends the string)."""

    def one(m: re.Match[str]) -> str:
        simple, octal, hx, u4, u8, ctl, other = m.groups()
        if simple is not None:
            return _ANSI_SIMPLE[simple]
        if other is not None:
            return "\\" + other
        if ctl is not None:
            return chr(ord(ctl.upper()) ^ 0x40) if ctl != "?" else "\x7f"
        number = octal or hx or u4 or u8
        code = int(number, 8 if octal else 16)
        if octal:
            code &= 0xFF
        try:
            return chr(code)
        except (ValueError, OverflowError):
            return "\ufffd"

    return _ANSI.sub(one, body).split("\0", 1)[0]


def _blank_inside(text: str) -> bool:
    """Whether an unquoted word's source holds a blank no backslash escapes."""
    if " " not in text and "\t" not in text and "\n" not in text:
        return False
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in " \t\n":
            return True
        i += 1
    return False


_NO_NEWLINE = frozenset(
    {"command", "redirected_statement", "file_redirect", "variable_assignment", "concatenation",
     "negated_command"}
)  # fmt: skip


_NO_GAP = frozenset({"simple_expansion", "concatenation", "variable_assignment"})
_OPERATOR_BYTES = frozenset(b";&|()<> \t\n")


_TEXT_BETWEEN = frozenset({"heredoc_body", "heredoc_content", "string", "translated_string"})


def _misread(node: tree_sitter.Node, data: bytes) -> bool:
    """Whether *node*'s children are separated otherwise than bash separates them: by a newline
    no backslash continues (inside a simple command), or by nothing but a continuation between
    two words (bash joins ``a\\<newline>b`` into ``ab``), or an fd number glued to a word."""
    if node.type in _TEXT_BETWEEN:  # literal text lies between their expansions
        return False
    end = node.start_byte
    previous: tree_sitter.Node | None = None
    for i, child in enumerate(node.children):
        raw = data[end : child.start_byte]
        gap = raw.replace(b"\\\n", b"")
        if gap.strip(b" \t\n") or (b"\n" in gap and node.type in _NO_NEWLINE):
            return (
                True  # the grammar skipped a character (``echo \\ ``, ``-\\<nl>2>``) or a newline
            )
        if i and raw and node.type in _NO_GAP:
            return True  # ``$  rm``: bash reads no blank inside an expansion or a word
        if (
            previous is not None
            and (gap != raw or node.type == "command")  # (no blank at all: `'tim'\\eout`)
            and not gap
            and child.start_byte < len(data)
            and (previous.is_named or data[end - 1] not in _OPERATOR_BYTES)
            and (child.is_named or data[child.start_byte] not in _OPERATOR_BYTES)
        ):
            return True  # bash joins them into one word
        previous = child
        end = child.end_byte
    if node.child_count and data[end : node.end_byte].replace(b"\\\n", b"").strip(b" \t\n"):
        return True
    if node.type == "file_redirect" and {c.type for c in node.children} & _DUP_OPS:
        target = node.child_by_field_name("destination")
        text = _text(target) if target is not None else ""
        if re.fullmatch(r"[0-9]*-.+", text, re.DOTALL):
            return True  # bash reads `>&-rm` as `>&-` and a word `rm`
    if node.type == "file_descriptor":
        i = node.start_byte
        while i >= 2 and data[i - 2 : i] == b"\\\n":
            i -= 2
        before = data[i - 1] if i else ord(" ")
        return not _text(node).isdigit() or before not in _OPERATOR_BYTES
    return False


def _unquoted(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _double_quoted(body: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m[1] == "\n" else m[1], body)


def _text(node: tree_sitter.Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "surrogateescape") if raw is not None else ""


def _literal(node: tree_sitter.Node) -> str | None:
    """The value of a word node when it holds no expansion of any kind, else ``None``."""
    kind = node.type
    if kind in ("word", "number"):
        text = _text(node)
        if text.startswith("~") or _BRACE.search(text):
            return None
        return _unquoted(text)
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "ansi_c_string":
        return _ansi_c(_text(node)[2:-1])
    if kind == "string":
        text = _text(node)
        if not text.startswith('"') or any(c.type != "string_content" for c in node.named_children):
            return None
        return _double_quoted(text[1:-1])
    if kind == "concatenation":
        if _BRACE.search(_text(node)):
            return None
        parts = [_literal(child) for child in node.named_children]
        if any(p is None for p in parts) or len(node.children) != len(node.named_children):
            return None
        return "".join(p for p in parts if p is not None)
    if kind == "command_name":
        return _literal(node.named_children[0]) if node.named_child_count == 1 else None
    return None


def _globbed(node: tree_sitter.Node) -> bool:
    """Whether an unquoted part of the word is a pathname pattern (``*``, ``?``, ``[``)."""
    if node.type == "word":
        return bool(_GLOB.search(_text(node).replace("\\\\", "").replace("\\*", "")))
    return any(_globbed(child) for child in node.named_children if child.type == "word")


# -- the allow view --------------------------------------------------------------------------


def _command_parts(
    node: tree_sitter.Node, trailing: _Trailing
) -> tuple[
    list[tree_sitter.Node], tree_sitter.Node | None, list[tree_sitter.Node], list[tree_sitter.Node]
]:
    """A command node's assignments, name, arguments and redirections."""
    assignments: list[tree_sitter.Node] = []
    name: tree_sitter.Node | None = None
    arguments: list[tree_sitter.Node] = []
    redirects: list[tree_sitter.Node] = []
    for child in node.named_children:
        if child.type == "variable_assignment":
            assignments.append(child)
        elif child.type == "command_name" and name is None:
            name = child
        elif child.type.endswith("redirect"):
            redirects.append(child)
        else:
            arguments.append(child)
    arguments.extend(sorted(trailing.get(_key(node), ()), key=lambda n: n.start_byte))
    return assignments, name, arguments, redirects


_Trailing = dict[tuple[int, int], list[tree_sitter.Node]]


def _key(node: tree_sitter.Node) -> tuple[int, int]:
    return (node.start_byte, node.end_byte)


def _note_trailing(statement: tree_sitter.Node, trailing: _Trailing) -> None:
    """Words after a redirection that the grammar files under it (``git 2>&1 push``: it reads
    ``push`` as a second target) but bash passes to the command before it: the rightmost
    command of the redirected statement's body. (Found top-down: a node's parent costs
    tree-sitter a walk from the root.)"""
    extra: list[tree_sitter.Node] = []
    for redirect in statement.children_by_field_name("redirect"):
        if redirect.type == "file_redirect":
            extra.extend(redirect.children_by_field_name("destination")[1:])
        else:
            extra.extend(redirect.children_by_field_name("argument"))
    node = statement.child_by_field_name("body")
    while node is not None and node.type in ("redirected_statement", "pipeline", "list"):
        if node.type == "redirected_statement":
            node = node.child_by_field_name("body")
        else:
            named = node.named_children
            node = named[-1] if named else None
    if extra and node is not None and node.type == "command":
        trailing.setdefault(_key(node), []).extend(extra)


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _check_redirect(node: tree_sitter.Node) -> None:
    if node.type != "file_redirect":
        raise _NotPlain(_a(node.type.replace("_", " ")))
    ops = [c.type for c in node.children if not c.is_named]
    destination = node.child_by_field_name("destination")
    target = _literal(destination) if destination is not None else None
    op = ops[0] if len(ops) == 1 else None
    if op in _NULL_OPS and target == "/dev/null":
        return
    if op in _DUP_OPS and target is not None and _FD.fullmatch(target):
        return
    raise _NotPlain("a redirection other than to /dev/null")


def _plain_command(node: tree_sitter.Node, trailing: _Trailing) -> tuple[str, ...]:
    if any(not child.is_named for child in node.children):
        raise _NotPlain(f"the token {next(c.type for c in node.children if not c.is_named)!r}")
    assignments, name, arguments, redirects = _command_parts(node, trailing)
    for redirect in redirects:
        _check_redirect(redirect)
    if name is None:
        raise _NotPlain("a variable assignment without a command")
    words: list[str] = []
    for assignment in assignments:
        value = assignment.child_by_field_name("value")
        literal = "" if value is None else _literal(value)
        if literal is None or len(assignment.named_children) > 2:
            raise _NotPlain("an assignment with an expansion")
        words.append(_text(assignment.named_children[0]) + "=" + literal)
    command = _literal(name)
    if command is None or _globbed(name.named_children[0]):
        raise _NotPlain("a command word that is not literal")
    words.append(command)
    for argument in arguments:
        literal = _literal(argument)
        if literal is None:
            raise _NotPlain(f"an expansion or substitution ({_text(argument)[:40]!r})")
        words.append(literal)
    return tuple(words)


def _plain(node: tree_sitter.Node, out: list[tuple[str, ...]], trailing: _Trailing) -> None:
    for child in node.children:
        kind = child.type
        if not child.is_named:
            if kind not in _SEPARATORS:
                raise _NotPlain(f"the operator {kind!r}")
        elif kind == "comment":
            continue
        elif kind == "command":
            out.append(_plain_command(child, trailing))
        elif kind == "redirected_statement":
            for redirect in child.children_by_field_name("redirect"):
                _check_redirect(redirect)
            body = child.child_by_field_name("body")
            if body is None or body.type not in _PLAIN:
                raise _NotPlain("a redirected compound command")
            _plain_body(body, out, trailing)
        elif kind in ("list", "pipeline"):
            _plain(child, out, trailing)
        elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            continue  # checked with their redirected_statement
        else:
            raise _NotPlain(_a(kind.replace("_", " ")))


def _plain_body(node: tree_sitter.Node, out: list[tuple[str, ...]], trailing: _Trailing) -> None:
    if node.type == "command":
        out.append(_plain_command(node, trailing))
    else:
        _plain(node, out, trailing)


# -- the deny/ask view -----------------------------------------------------------------------


def _words(node: tree_sitter.Node, trailing: _Trailing) -> tuple[list[str], str | None]:
    """A command node's words (non-literal ones as `DYNAMIC`), and why its name is dynamic."""
    _, name, arguments, _ = _command_parts(node, trailing)
    if name is None:
        return [], None
    command = _literal(name)
    why: str | None = None
    if command is None:
        why = f"the command word {_text(name)[:40]!r} is only known at run time"
        command = DYNAMIC
    elif name.named_child_count == 1 and _globbed(name.named_children[0]) and command != "[":
        why = f"the command word {command[:40]!r} is a pathname pattern"
    words = [command]
    for argument in arguments:
        literal = _literal(argument)
        words.append(DYNAMIC if literal is None else literal)
    return words, why


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


def _shell_string(words: tuple[str, ...]) -> tuple[str | None, bool]:
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


def _spellings(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
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


# -- parsing ---------------------------------------------------------------------------------


def _spelled(
    spelling: tuple[str, ...], depth: int, budget: _Budget, commands: list[tuple[str, ...]]
) -> str | None:
    """Why one spelling of a command is dynamic; the commands of its ``sh -c`` / ``eval``
    string are added to *commands*."""
    why = hidden_in_command(spelling)
    head = posixpath.basename(spelling[0])
    if head in _DYNAMIC_WORDS:
        why = why or f"{head} runs code only known at run time"
    elif spelling[0] == DYNAMIC:
        why = why or "a wrapped command word is only known at run time"
    code, unseen = _shell_string(spelling)
    if unseen and head not in _DYNAMIC_WORDS:
        why = why or f"{head} reads commands that are not on the line"
    if code is not None:
        if DYNAMIC in code:
            why = why or f"the {head} code is only known at run time"
        elif depth >= MAX_DEPTH:
            why = why or "shell strings are nested too deeply"
        else:
            _, inner, why_inner, _ = _walk(code, depth + 1, budget)
            commands.extend(inner)
            why = why or why_inner
    return why


def _hidden_at(node: tree_sitter.Node, kind: str) -> str | None:
    """Why a syntax node runs code held in a string or a variable's value (see `_hidden`)."""
    if kind in ("declaration_command", "unset_command"):
        head = _text(node.children[0]) if node.child_count else kind
        if head == "export":
            return None  # export reads no subscript and no string as code
        return f"{head}, which evaluates its arguments as code"
    return hidden_in_node(kind, _text(node))


def _walk(
    source: str, depth: int, budget: _Budget
) -> tuple[tree_sitter.Node | None, list[tuple[str, ...]], str | None, _Trailing]:
    """Parse *source*; return its root, every command's spellings, and why it is dynamic."""
    data = source.encode("utf-8", "surrogatepass")
    tree = _parser().parse(data)
    root = tree.root_node
    commands: list[tuple[str, ...]] = []
    trailing: _Trailing = {}
    dynamic: str | None = None
    if root.has_error:
        dynamic = "the command does not parse as bash"
    elif _CONTROL.search(source):
        # bash reads \r, \v, \f (and other controls) as parts of words, the grammar as blanks
        dynamic = "the command holds control characters, which bash and the grammar read apart"
    stack = [root]
    while stack:
        node = stack.pop()
        budget.nodes -= 1
        if budget.nodes < 0:
            return root, commands, "the command is too complex to read", trailing
        kind = node.type
        if (
            (kind == "word" and _blank_inside(_text(node)))
            or (node.child_count and _misread(node, data))
            or (kind == "file_descriptor" and _misread(node, data))
        ):
            # bash ends a word at an unquoted blank and a command at an unquoted newline; the
            # grammar does not always (tree-sitter-bash reads a newline before a backslash as
            # a blank), and then it sees other commands than bash runs
            dynamic = dynamic or "the command does not parse reliably"
        if kind == "redirected_statement":
            _note_trailing(node, trailing)
        if kind in _HIDING:
            dynamic = dynamic or _hidden_at(node, kind)
        if kind == "command":
            words, why = _words(node, trailing)
            dynamic = dynamic or why
            assigned = [_text(c) for c in node.named_children if c.type == "variable_assignment"]
            dynamic = dynamic or hidden_in_command(words, assigned)
            for spelling in _spellings(tuple(words)) if words else ():
                commands.append(spelling)
                why = _spelled(spelling, depth, budget, commands)  # always: it adds commands
                dynamic = dynamic or why
        stack.extend(node.children)
    return root, commands, dynamic, trailing


def _parse(command: str) -> ParsedCommand:
    if len(command) > MAX_COMMAND:
        why = f"the command is longer than {MAX_COMMAND} characters"
        return ParsedCommand(None, why, (), why)
    root, commands, dynamic, trailing = _walk(command, 0, _Budget())
    simple: list[tuple[str, ...]] | None = []
    problem: str | None = None
    if root is None or root.has_error:
        simple, problem = None, "the command does not parse as bash"
    elif dynamic is not None:
        simple, problem = None, dynamic
    else:
        try:
            assert simple is not None
            _plain(root, simple, trailing)
        except _NotPlain as exc:
            simple, problem = None, f"the command holds {exc}"
        except RecursionError:
            simple, problem = None, "the command is nested too deeply to read"
        if simple is not None and not simple:
            simple, problem = None, "the command is empty"
    if simple is not None:
        # a second, independent reader must see the very same words (see `_words`)
        strict = strict_words(command)
        if isinstance(strict, str):
            simple, problem = None, strict
        elif list(strict) != simple:
            # tree-sitter misread a line bash reads plainly (`git 0>/dev/null push`): neither
            # view can trust it, so deny and ask rules ask
            simple = None
            problem = dynamic = "two readings of the line disagree on its words"
    unique = tuple(dict.fromkeys(commands))
    heads = frozenset(posixpath.basename(words[0]) for words in unique if words)
    writes = tuple(w for words in unique for w in runner_writes(words))
    arguments = frozenset(posixpath.basename(w) for words in unique for w in words[1:])
    return ParsedCommand(
        None if simple is None else tuple(simple), problem, unique, dynamic, heads, writes,
        arguments,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _parse_cached(command: str) -> ParsedCommand:
    return _parse(command)


def parse_command(command: str) -> ParsedCommand:
    """Parse *command* (a bash command line) for the rules; never raises, never hangs."""
    try:
        if len(command) <= _CACHE_UP_TO:
            return _parse_cached(command)
        return _parse(command)
    except Exception as exc:  # a fault in reading must never open the gate: fail closed
        why = f"the command could not be read ({type(exc).__name__})"
        return ParsedCommand(None, why, (), why)
