"""What a GNU ``sed`` line runs and writes beyond its words (a part of `._programs`).

sed's options are read as its getopt reads them (``-ni``, ``-i.bak``, ``--in-place=.b``,
``--in`` ...); its script (the ``-e``/``--expression`` pieces, or the first operand) is read
command by command, as GNU sed 4 reads it: addresses (``/re/`` with bracket expressions,
``\\cREc``, ``N~S``, ``+N``), ``a``/``i``/``c`` text and labels skipped, so that the commands
``e`` (runs a shell command, or the pattern space), ``w``/``W`` (write a file) and the ``s``
flags ``e`` and ``w`` are found wherever they are. A script read any other way than sed reads
it, or one from a file (``-f``), is unknown: it may run or write anything.
"""

from __future__ import annotations

import attrs

from ._options import Spec, read_permuted

__all__ = ["SedCall", "read_sed"]

_SED = Spec(
    frozenset("nrEsuzb"),
    frozenset("efl"),
    frozenset("i"),
    {
        "in-place": ("-i", None), "expression": ("-e", True), "file": ("-f", True),
        "line-length": ("-l", True), "quiet": ("-n", False), "silent": ("-n", False),
        "regexp-extended": ("-E", False), "separate": ("-s", False),
        "unbuffered": ("-u", False), "null-data": ("-z", False), "zero-terminated": ("-z", False),
        "binary": ("-b", False), "posix": ("--posix", False), "debug": ("--debug", False),
        "sandbox": ("--sandbox", False), "follow-symlinks": ("--follow-symlinks", False),
        "help": ("--help", False), "version": ("--version", False),
    },
)  # fmt: skip
_PLAIN = frozenset("=dDgGhHnNpPxzF{}")  # commands that take nothing
_SPECIAL = frozenset({"/dev/stdout", "/dev/stderr"})  # GNU sed writes these to its own fds


@attrs.frozen
class SedCall:
    """What one sed command line runs and writes.

    Attributes:
        runs: each shell command the script's ``e`` commands run (``None``: the pattern space,
            a script file's or one not read for sure: any command).
        writes: ``(option, path)`` for each file written (``-i``: every input file).
        why: why the line runs a command, for the reason of a verdict (``None``: it runs none).
    """

    runs: tuple[str | None, ...] = ()
    writes: tuple[tuple[str, str], ...] = ()
    why: str | None = None


def read_sed(words: tuple[str, ...]) -> SedCall:
    """What the sed line *words* runs and writes."""
    read = read_permuted(words, 1, _SED)
    if read is None:
        return SedCall((None,), why="sed with options the rules cannot read")
    options, operands = read
    if any(name == "--sandbox" for name, _ in options):
        return SedCall()  # sed refuses a script with e, r or w
    if any(name == "-f" for name, _ in options):
        return SedCall((None,), why="sed -f, whose script file may run any command")
    pieces = [value or "" for name, value in options if name == "-e"]
    if not pieces:
        if not operands:
            return SedCall()
        pieces, operands = [operands[0]], operands[1:]
    runs, writes, readable = _script("\n".join(pieces))
    if not readable:
        return SedCall((None,), why="a sed script the rules cannot read, which may run commands")
    in_place = [("sed -i", path) for path in operands] if any(n == "-i" for n, _ in options) else []
    why = None
    if runs:
        why = "sed's e command or s///e flag, which runs a shell command"
    return SedCall(tuple(runs), (*in_place, *writes), why)


def _script(text: str) -> tuple[list[str | None], list[tuple[str, str]], bool]:
    """The commands a script's ``e`` commands run, the files its ``w`` commands and flags write,
    and whether it was read as sed reads it."""
    runs: list[str | None] = []
    writes: list[tuple[str, str]] = []
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if char in " \t\n;":
            i += 1
            continue
        if char == "#":
            i = _line_end(text, i)
            continue
        at = _addresses(text, i)
        if at is None:
            return runs, writes, False
        i = _skip_blanks(text, at)
        if i < end and text[i] == "!":
            i = _skip_blanks(text, i + 1)
        if i >= end:
            return runs, writes, False
        command, i = text[i], i + 1
        if command in _PLAIN:
            continue
        if command in "aic":  # text to the end of the line, a backslash joins the next
            while i < end and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
        elif command in ":btTv":  # a label (v: a version) ends at a blank, as GNU sed reads it
            i = _skip_blanks(text, i)
            while i < end and text[i] not in " \t;\n":
                i += 1
        elif command in "rR":
            i = _line_end(text, i)
        elif command in "wWe":
            stop = _line_end(text, i)
            argument = text[i:stop].strip(" \t")
            if command == "e":
                runs.append(argument or None)
            elif argument not in _SPECIAL:
                writes.append((f"sed {command}", argument))
            i = stop
        elif command in "qQlL":  # a number: the next command may follow at once
            i = _skip_blanks(text, i)
            while i < end and text[i].isdigit():
                i += 1
        elif command in "sy":
            after = _substitute(text, i, command, runs, writes)
            if after is None:
                return runs, writes, False
            i = after
        else:
            return runs, writes, False
    return runs, writes, True


def _substitute(
    text: str, i: int, command: str, runs: list[str | None], writes: list[tuple[str, str]]
) -> int | None:
    """Read ``s/re/new/flags`` or ``y/a/b/`` from its delimiter at *i*; the end, or ``None``."""
    if i >= len(text) or text[i] in "\n\\":
        return None
    delimiter = text[i]
    at = _delimited(text, i + 1, delimiter, brackets=command == "s")
    at = None if at is None else _delimited(text, at, delimiter, brackets=False)
    if at is None or command == "y":
        return at
    while at < len(text) and text[at] not in ";\n}#":
        flag = text[at]
        if flag == "w":
            stop = _line_end(text, at + 1)
            path = text[at + 1 : stop].strip(" \t")
            if path not in _SPECIAL:
                writes.append(("sed s///w", path))
            return stop
        if flag == "e":
            runs.append(None)  # the pattern space, as the substitution left it
        elif flag not in "gpiImM0123456789 \t":
            return None
        at += 1
    return at


def _delimited(text: str, i: int, delimiter: str, *, brackets: bool) -> int | None:
    """The index after the *delimiter* that ends the part starting at *i* (``None``: none)."""
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == delimiter:
            return i + 1
        if char == "[" and brackets:
            close = _bracket_end(text, i)
            if close is None:
                return None
            i = close
        i += 1
    return None


def _bracket_end(text: str, i: int) -> int | None:
    """The index of the ``]`` that closes the bracket expression opened at *i*."""
    j = i + 1
    if j < len(text) and text[j] == "^":
        j += 1
    if j < len(text) and text[j] == "]":
        j += 1
    while j < len(text):
        if text[j] == "[" and text[j + 1 : j + 2] in (":", "=", "."):
            close = text.find(text[j + 1] + "]", j + 2)
            if close == -1:
                return None
            j = close + 2
            continue
        if text[j] == "]":
            return j
        j += 1
    return None


def _addresses(text: str, i: int) -> int | None:
    """The index after the addresses at *i* (none, one, or two joined by ``,``)."""
    at = _address(text, i)
    if at is None:
        return None
    j = _skip_blanks(text, at)
    if j < len(text) and text[j] == "," and at != i:
        j = _skip_blanks(text, j + 1)
        if j < len(text) and text[j] in "+~":
            j += 1
        second = _address(text, j)
        return None if second is None or second == j else second
    return at


def _address(text: str, i: int) -> int | None:
    end = len(text)
    if i < end and text[i].isdigit():
        while i < end and (text[i].isdigit() or text[i] == "~"):
            i += 1
        return i
    if i < end and text[i] == "$":
        return i + 1
    if i < end and text[i] in "/\\":
        if text[i] == "\\":
            i += 1
            if i >= end or text[i] in "\n\\":
                return None
        at = _delimited(text, i + 1, text[i], brackets=True)
        if at is None:
            return None
        while at < end and text[at] in "IM":
            at += 1
        return at
    return i


def _line_end(text: str, i: int) -> int:
    stop = text.find("\n", i)
    return len(text) if stop == -1 else stop


def _skip_blanks(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i
