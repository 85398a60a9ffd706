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
from typing import final

import attrs
import tree_sitter
import tree_sitter_bash

from ._decode import (
    blank_inside,
    globbed,
    literal_value,
    misread,
    node_text,
    unread_substitution,
)
from ._hidden import (
    hidden_assignment,
    hidden_in_command,
    hidden_in_node,
    hidden_in_source,
    runner_writes,
)
from ._plain import NotPlain, Trailing, command_parts, note_trailing, plain
from ._programs import script_tokens
from ._words import strict_words
from ._wrappers import DYNAMIC, glued, shell_string, spellings

__all__ = [
    "DYNAMIC",
    "MAX_COMMAND",
    "MAX_DEPTH",
    "MAX_NODES",
    "ParsedCommand",
    "parse_command",
]

MAX_COMMAND = 64 * 1024
"""Longer command lines are not parsed: they are never allowed by a rule and ask instead."""
MAX_NODES = 20_000
"""The most syntax nodes one command line (with its nested ``sh -c`` strings) may have."""
MAX_DEPTH = 4
"""How deep ``sh -c '...'`` strings inside ``sh -c`` strings are followed."""

_CACHE_UP_TO = 4096  # longer lines are parsed every time rather than kept in the LRU cache
_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_LOCAL = threading.local()

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_DYNAMIC_WORDS = frozenset({"eval", "source", "."})
_NAMING = frozenset({"declaration_command", "for_statement"})  # a bare name there is assigned
_HIDING = frozenset(
    {"expansion", "arithmetic_expansion", "compound_statement", "test_command", "subscript",
     "declaration_command", "unset_command", "c_style_for_statement"}
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
    """What one line may cost its reading: syntax nodes, bytes of code parsed (each ``sh -c``
    string once: a string met again in another spelling of its command is not read again)."""

    def __init__(self) -> None:
        self.nodes = MAX_NODES
        self.bytes = 4 * MAX_COMMAND
        self.read: dict[str, tuple[list[tuple[str, ...]], str | None]] = {}


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


# -- the deny/ask view -----------------------------------------------------------------------


def _words(node: tree_sitter.Node, trailing: Trailing) -> tuple[list[str], str | None]:
    """A command node's words (non-literal ones as `DYNAMIC`), and why its name is dynamic."""
    _, name, arguments, _ = command_parts(node, trailing)
    if name is None:
        return [], None
    command = literal_value(name)
    why: str | None = None
    if command is None:
        why = f"the command word {node_text(name)[:40]!r} is only known at run time"
        command = DYNAMIC
    elif name.named_child_count == 1 and globbed(name.named_children[0]) and command != "[":
        why = f"the command word {command[:40]!r} is a pathname pattern"
    words = [command]
    for argument in arguments:
        literal = literal_value(argument)
        # a pathname pattern becomes whatever names match it (``git p[u]sh``)
        words.append(DYNAMIC if literal is None or globbed(argument) else literal)
    return words, why


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
    elif spelling[0].startswith(("/proc/", "/dev/")):
        why = why or f"the program {spelling[0][:40]!r}, which may be any program (bash itself)"
    elif spelling[0] not in ("[", "[[") and any(c in spelling[0] for c in "*?["):
        why = why or f"the program {spelling[0][:40]!r}, which may be a pathname pattern"
    code, unseen = shell_string(spelling)
    if unseen and head not in _DYNAMIC_WORDS:
        why = why or f"{head} reads commands that are not on the line"
    if code is not None:
        if DYNAMIC in code:
            why = why or f"the {head} code is only known at run time"
        elif depth >= MAX_DEPTH:
            why = why or "shell strings are nested too deeply"
        else:
            if code not in budget.read:
                budget.bytes -= len(code)
                if budget.bytes < 0:
                    budget.read[code] = ([], "the command's shell strings are too large to read")
                else:
                    budget.read[code] = _walk(code, depth + 1, budget)[1:3]
            inner, why_inner = budget.read[code]
            commands.extend(inner)
            why = why or why_inner
    return why


def _hidden_at(node: tree_sitter.Node, kind: str) -> str | None:
    """Why a syntax node runs code held in a string or a variable's value (see `_hidden`)."""
    if kind in ("declaration_command", "unset_command"):
        head = node_text(node.children[0]) if node.child_count else kind
        if head == "export":
            return None  # export reads no subscript and no string as code
        return f"{head}, which evaluates its arguments as code"
    return hidden_in_node(kind, node_text(node))


def _walk(
    source: str, depth: int, budget: _Budget
) -> tuple[tree_sitter.Node | None, list[tuple[str, ...]], str | None, Trailing]:
    """Parse *source*; return its root, every command's spellings, and why it is dynamic."""
    data = source.encode("utf-8", "surrogatepass")
    tree = _parser().parse(data)
    root = tree.root_node
    commands: list[tuple[str, ...]] = []
    trailing: Trailing = {}
    dynamic: str | None = None
    if root.has_error:
        dynamic = "the command does not parse as bash"
    elif _CONTROL.search(source):
        # bash reads \r, \v, \f (and other controls) as parts of words, the grammar as blanks
        dynamic = "the command holds control characters, which bash and the grammar read apart"
    else:
        dynamic = hidden_in_source(source)
    stack = [root]
    while stack:
        node = stack.pop()
        budget.nodes -= 1
        if budget.nodes < 0:
            return root, commands, "the command is too complex to read", trailing
        kind = node.type
        if (
            (kind == "word" and blank_inside(node_text(node)))
            or (node.child_count and misread(node, data))
            or (kind == "file_descriptor" and misread(node, data))
        ):
            # bash ends a word at an unquoted blank and a command at an unquoted newline; the
            # grammar does not always (tree-sitter-bash reads a newline before a backslash as
            # a blank), and then it sees other commands than bash runs
            dynamic = dynamic or "the command does not parse reliably"
        if kind == "redirected_statement":
            note_trailing(node, trailing)
        if kind in _HIDING:
            dynamic = dynamic or _hidden_at(node, kind)
        if kind == "variable_assignment" and (node.parent is None or node.parent.type != "command"):
            export = node.parent is not None and node.parent.type == "declaration_command"
            dynamic = dynamic or hidden_assignment(node_text(node), plain=not export)
        elif kind == "variable_name" and node.parent is not None and node.parent.type in _NAMING:
            # ``export NAME`` (its value set out of sight: ``${NAME:=...}``), ``for NAME in``
            export = node.parent.type == "declaration_command"
            dynamic = dynamic or hidden_assignment(node_text(node) + "=", plain=not export)
        if kind == "command":
            words, why = _words(node, trailing)
            dynamic = dynamic or why
            assigned = [
                node_text(c) for c in node.named_children if c.type == "variable_assignment"
            ]
            dynamic = dynamic or hidden_in_command(words, assigned)
            for spelling in spellings(tuple(words)) if words else ():
                commands.append(spelling)
                why = _spelled(spelling, depth, budget, commands)  # always: it adds commands
                dynamic = dynamic or why
        stack.extend(node.children)
    if dynamic is None:
        dynamic = unread_substitution(root, data)
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
            plain(root, simple, trailing)
        except NotPlain as exc:
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
    arguments = frozenset(posixpath.basename(w) for words in unique for w in words[1:]) | {
        posixpath.basename(tokens[0]) for words in unique for w in words[1:] for tokens in glued(w)
    }  # and every word of a script an argument may be (``awk 'BEGIN{system("rm v")}'``)
    arguments |= {name for words in unique for w in words[1:] for name in script_tokens(w)[1]}
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
