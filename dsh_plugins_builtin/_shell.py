"""Splitting a shell command into simple commands, for permission rules.

`parse_command` takes ``a && b | c $(d)`` apart into `SimpleCommand` word lists, as far as it
can tell for certain. Anything it cannot (an unterminated quote, a here-document, a redirection
without a target) makes the result *incomplete*, and an output redirection into a file is
flagged: an allow rule never covers such a command. This is lexical and conservative, not a
shell: it exists so that ``bash(git status:*)`` cannot be stretched over ``git status; rm -rf``.
"""

from __future__ import annotations

import re
import shlex
from typing import final

import attrs

__all__ = ["ASSIGNMENT", "ParsedCommand", "SimpleCommand", "parse_command"]

_OPERATOR_CHARS = "();<>|&\n"
_PLACEHOLDER = "\ue100"  # stands for a substitution's output: no rule word can equal it
_PRIVATE = re.compile("[\ue000-\ue1ff]")
_UNPROTECT = {0xE000 + ord(c): c for c in _OPERATOR_CHARS}
_SEPARATORS = frozenset({"&&", "||", ";", ";;", ";&", ";;&", "|", "|&", "&", "\n", "(", ")"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<&", "<>", "<<<", "<<"})
_OPERATORS = sorted(_SEPARATORS | _REDIRECTS, key=len, reverse=True)
_FILE_WRITES = frozenset({">", ">>", ">|", "&>", "&>>"})
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_ROUGH = re.compile(r"&&|\|\||\$\(|[<>]\(|[;&|()\n`]")
_MAX_DEPTH = 8


@final
@attrs.frozen
class SimpleCommand:
    """One simple command: its words, and whether it redirects output into a file."""

    words: tuple[str, ...]
    writes: bool = False


@final
@attrs.frozen
class ParsedCommand:
    """A command line split into simple commands; ``complete`` is ``False`` when unsure."""

    parts: tuple[SimpleCommand, ...]
    complete: bool = True
    problem: str | None = None


class _Unparsable(Exception):
    pass


def _protect(c: str) -> str:
    return chr(0xE000 + ord(c))


def _skip_single(s: str, i: int) -> int:
    end = s.find("'", i)
    if end < 0:
        raise _Unparsable("an unterminated quote")
    return end + 1


def _skip_double(s: str, i: int) -> int:
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _skip_backticks(s, i + 1)
        elif s.startswith("$(", i):
            i = _skip_parens(s, i + 2)
        else:
            i += 1
    raise _Unparsable("an unterminated quote")


def _skip_backticks(s: str, i: int) -> int:
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == "`":
            return i + 1
        else:
            i += 1
    raise _Unparsable("an unclosed backtick")


def _skip_parens(s: str, i: int) -> int:
    depth = 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            i = _skip_single(s, i + 1)
            continue
        if c == '"':
            i = _skip_double(s, i + 1)
            continue
        if c == "`":
            i = _skip_backticks(s, i + 1)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise _Unparsable("an unclosed $(")


def _prepass(s: str) -> tuple[str, list[str]]:
    """Cut out substitutions, join continued lines, and hide quoted operator characters."""
    if _PRIVATE.search(s):
        raise _Unparsable("characters from the private-use range")
    out: list[str] = []
    subs: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(s):
        c = s[i]
        if quote == "'":
            quote = None if c == "'" else quote
            out.append(_protect(c) if c in _OPERATOR_CHARS else c)
            i += 1
            continue
        if c == "\\" and i + 1 < len(s):
            following = s[i + 1]
            if following == "\n":
                pass  # a line continuation disappears, as in bash
            elif following in _OPERATOR_CHARS:
                out.append(("\\" if quote else "") + _protect(following))
            else:
                out.append(s[i : i + 2])
            i += 2
            continue
        if c == "`":
            end = _skip_backticks(s, i + 1)
            subs.append(re.sub(r"\\([`$\\])", r"\1", s[i + 1 : end - 1]))
        elif s.startswith("$(", i) or (quote is None and c in "<>" and s.startswith("(", i + 1)):
            end = _skip_parens(s, i + 2)
            subs.append(s[i + 2 : end - 1])
        else:
            if c == "'" and quote is None:
                quote = "'"
            elif c == '"':
                quote = None if quote else '"'
            elif quote and c in _OPERATOR_CHARS:
                c = _protect(c)
            out.append(c)
            i += 1
            continue
        out.append(_PLACEHOLDER)
        i = end
    if quote:
        raise _Unparsable("an unterminated quote")
    return "".join(out), subs


def _tokens(text: str) -> list[tuple[bool, str]]:
    """``(is_operator, token)`` pairs, with runs of operator characters split into operators."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_OPERATOR_CHARS)
    lexer.whitespace = " \t"  # as bash: a carriage return is part of a word
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[tuple[bool, str]] = []
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise _Unparsable(str(exc).lower()) from None
    for token in tokens:
        if token and all(c in _OPERATOR_CHARS for c in token):
            while token:
                op = next(op for op in _OPERATORS if token.startswith(op))
                out.append((True, op))
                token = token[len(op) :]
        elif any(c in _OPERATOR_CHARS for c in token):
            raise _Unparsable("an operator inside a word")
        else:
            out.append((False, token.translate(_UNPROTECT)))
    return out


def _writes(op: str, target: str) -> bool:
    if op in _FILE_WRITES:
        return target != "/dev/null"
    if op == ">&":
        return not (target.isdigit() or target == "-")
    return op == "<>"


def _rough(command: str) -> tuple[SimpleCommand, ...]:
    """A best-effort split of a command the parser gave up on (for deny and ask rules)."""
    parts = []
    for chunk in _ROUGH.split(command):
        words = tuple(w for w in (w.strip("'\"\\") for w in chunk.split()) if w)
        if words:
            parts.append(SimpleCommand(words))
    return tuple(parts)


def parse_command(command: str, _depth: int = 0) -> ParsedCommand:
    """Split a shell command line into its simple commands, substitutions included."""
    try:
        text, subs = _prepass(command)
        tokens = _tokens(text)
    except _Unparsable as exc:
        return ParsedCommand(_rough(command), complete=False, problem=str(exc))
    parts: list[SimpleCommand] = []
    words: list[str] = []
    writes = False
    problem: str | None = None
    i = 0
    while i < len(tokens):
        is_op, token = tokens[i]
        i += 1
        if not is_op:
            words.append(token)
        elif token in _SEPARATORS:
            if words or writes:  # a bare "> file" truncates the file: a command of its own
                parts.append(SimpleCommand(tuple(words), writes))
            words, writes = [], False
        elif i == len(tokens) or tokens[i][0]:
            problem = f"a {token} redirection without a target"
        else:
            target = tokens[i][1]
            i += 1
            if token == "<<":
                problem = "a here-document"
            writes = writes or _writes(token, target)
    if words or writes:
        parts.append(SimpleCommand(tuple(words), writes))
    if subs and _depth >= _MAX_DEPTH:
        problem = "substitutions nested too deeply"
        subs = []
    for sub in subs:
        inner = parse_command(sub, _depth + 1)
        parts.extend(inner.parts)
        problem = problem or inner.problem
    return ParsedCommand(tuple(parts), complete=problem is None, problem=problem)
