"""What an ``awk`` line (``gawk``, ``mawk``, ``nawk``, ``busybox awk``) runs and writes beyond
its words (a part of `._programs`).

The program text (the first operand, or gawk's ``-e``/``--source`` pieces) is split into tokens
(strings, regular expression literals and comments skipped), and read conservatively: any
``system(``, any ``|`` that is no ``||`` (``print | "cmd"``, ``"cmd" | getline``, ``|&``) runs a
command; a ``>`` or ``>>`` in a ``print``/``printf`` statement writes the file it names (one
not a plain string: a file only known at run time); any ``@`` (``@include``, ``@load``) and any
option the rules do not know (``-f``, ``-i``, ``-l``, ``-E``, mawk's ``-W`` ...) is code from
elsewhere.
"""

from __future__ import annotations

import attrs

from ._wrappers import DYNAMIC

__all__ = ["AwkCall", "read_awk"]

_FLAGS = frozenset("bcCgkhMnNOPrsStV")  # gawk's short options that neither run nor write
_VALUES = frozenset("Fv")
_LONG_FLAGS = frozenset(
    {"--posix", "--traditional", "--re-interval", "--characters-as-bytes", "--sandbox",
     "--csv", "--bignum", "--use-lc-numeric", "--non-decimal-data", "--optimize",
     "--no-optimize", "--help", "--version", "--copyright", "--lint", "--gen-pot"}
)  # fmt: skip
_LONG_VALUES = frozenset({"--field-separator", "--assign", "--source"})
_KEYWORDS = frozenset(
    {"print", "printf", "return", "if", "while", "for", "do", "else", "in", "getline",
     "delete", "exit", "case", "BEGIN", "END"}
)  # fmt: skip
_QUIET = frozenset({"/dev/stdout", "/dev/stderr", "/dev/null", "-"})
_OPERATORS = ("||", "&&", ">>", "|&", "++", "--", "==", "!=", "<=", ">=", "**", "^=")


@attrs.frozen
class AwkCall:
    """What one awk command line runs and writes: ``why`` it runs a command (``None``: it
    runs none), and ``(option, path)`` for each file it writes."""

    why: str | None = None
    writes: tuple[tuple[str, str], ...] = ()


def read_awk(words: tuple[str, ...]) -> AwkCall:
    """What the awk line *words* runs and writes."""
    pieces: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, eq, value = word.partition("=")
        if word.startswith("--"):
            if name in _LONG_VALUES and not eq:
                value = words[i + 1] if i + 1 < len(words) else ""
                i += 1
            elif name not in _LONG_VALUES and (
                name not in _LONG_FLAGS or (eq and name != "--lint")
            ):
                return AwkCall(f"awk {name}, which the rules do not read (code from elsewhere?)")
            if name == "--source":
                pieces.append(value)
            i += 1
            continue
        for at, letter in enumerate(word[1:], 2):
            if letter in _VALUES or letter == "e":
                value = word[at:] or (words[i + 1] if i + 1 < len(words) else "")
                i += 0 if word[at:] else 1
                if letter == "e":
                    pieces.append(value)
                break
            if letter == "L":
                break  # --lint's optional value, glued
            if letter not in _FLAGS:
                return AwkCall(f"awk -{letter}, which reads code from a file or writes one")
        i += 1
    if not pieces and i < len(words):
        pieces.append(words[i])
    return _program("\n".join(pieces))


def _program(text: str) -> AwkCall:
    tokens = _tokens(text)
    if tokens is None:
        return AwkCall("an awk program the rules cannot read, which may run commands")
    writes: list[tuple[str, str]] = []
    printing, depth = False, 0
    for k, (kind, value) in enumerate(tokens):
        following = tokens[k + 1] if k + 1 < len(tokens) else ("op", ";")
        if kind == "op" and value in ("|", "|&"):
            return AwkCall("a pipe in an awk program, which runs a shell command")
        if kind == "op" and value == "@":
            return AwkCall("an awk @include or @load, which reads code from elsewhere")
        if (kind, value) == ("id", "system") and following == ("op", "("):
            return AwkCall("awk's system(), which runs a shell command")
        if kind == "id" and value in ("print", "printf"):
            printing, depth = True, 0
        elif kind == "op" and value in "([":
            depth += 1
        elif kind == "op" and value in ")]":
            depth -= 1
            printing = printing and depth >= 0
        elif kind == "op" and value in (";", "{", "}", "\n"):
            printing = False
        elif printing and depth == 0 and kind == "op" and value in (">", ">>"):
            after = tokens[k + 2] if k + 2 < len(tokens) else ("op", ";")
            plain = following[0] == "str" and after[0] == "op" and after[1] in (";", "}", "\n")
            path = following[1] if plain else DYNAMIC
            if path not in _QUIET:
                writes.append((f"awk {value}", path))
    return AwkCall(writes=tuple(writes))


def _tokens(text: str) -> list[tuple[str, str]] | None:
    """The tokens of an awk program: ``("str", value)``, ``("re", "")``, ``("id", name)``,
    ``("num", "")``, ``("op", text)``; ``None`` when a string or a literal does not end."""
    out: list[tuple[str, str]] = []
    operand = False  # whether the last token ends an operand (then ``/`` divides)
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if char in " \t\r" or (char == "\\" and text[i + 1 : i + 2] == "\n"):
            i += 1 if char != "\\" else 2
            continue
        if char == "#":
            stop = text.find("\n", i)
            i = end if stop == -1 else stop
            continue
        if char == '"' or (char == "/" and not operand):
            close = _closing(text, i + 1, char)
            if close is None:
                return None
            out.append(("str", text[i + 1 : close]) if char == '"' else ("re", ""))
            i, operand = close + 1, True
            continue
        if char.isalpha() or char == "_":
            j = i
            while j < end and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(("id", text[i:j]))
            i, operand = j, text[i:j] not in _KEYWORDS
            continue
        if char.isdigit() or char == ".":
            while i < end and (text[i].isalnum() or text[i] == "."):
                i += 1
            out.append(("num", ""))
            operand = True
            continue
        op = next((o for o in _OPERATORS if text.startswith(o, i)), char)
        out.append(("op", op))
        i += len(op)
        operand = op in (")", "]", "++", "--")
    return out


def _closing(text: str, i: int, quote: str) -> int | None:
    """The index of the *quote* that ends a string or a regular expression from *i*."""
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == quote:
            return i
        if char == "\n":
            return None
        if char == "[" and quote == "/":
            close = text.find("]", i + 2)
            if close == -1:
                return None
            i = close
        i += 1
    return None
