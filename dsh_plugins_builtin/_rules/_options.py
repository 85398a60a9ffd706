"""A program's options read as GNU ``getopt_long`` reads them, for the programs whose options
change what runs (``env -S``, ``env -C``, ``xargs -I``).

getopt takes short options in clusters (``-iS'rm x'`` is ``-i``, then ``-S`` with the value
``rm x``), a value glued to its option or in the next word, and long options by any unambiguous
prefix (``--spl=x`` is ``--split-string=x``); ``--`` ends the options, and so does the first
operand for these programs. A rule that looked for the word ``-S`` alone missed every other
spelling. `read_options` gives each option under one name (a long option with a short twin as
the short one), or ``None`` when getopt would refuse the line (an unknown or ambiguous option:
the program does not run its command, and the rules do not guess which reading holds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

__all__ = ["ENV", "FLOCK", "SUDO", "WATCH", "XARGS", "Spec", "read_options", "read_permuted"]


@attrs.frozen
class Spec:
    """One program's options.

    Attributes:
        flags: Short options that take no value.
        values: Short options that take a value (glued or the next word).
        optional: Short options whose value, if any, is glued (``xargs -i{}``).
        long: Each long option: its canonical name (a short twin, or ``--name``) and whether it
            takes a value (``True``), may take one glued with ``=`` (``None``), or none.
    """

    flags: frozenset[str]
    values: frozenset[str]
    optional: frozenset[str]
    long: Mapping[str, tuple[str, bool | None]]


def _spec(flags: str, values: str, optional: str, long: dict[str, tuple[str, bool | None]]) -> Spec:
    return Spec(frozenset(flags), frozenset(values), frozenset(optional), long)


ENV: Final = _spec(
    "0iv",
    "uCSa",
    "",
    {
        "ignore-environment": ("-i", False), "null": ("-0", False), "unset": ("-u", True),
        "chdir": ("-C", True), "split-string": ("-S", True), "argv0": ("-a", True),
        "block-signal": ("--block-signal", None), "default-signal": ("--default-signal", None),
        "ignore-signal": ("--ignore-signal", None),
        "list-signal-handling": ("--list-signal-handling", False), "debug": ("-v", False),
        "help": ("--help", False), "version": ("--version", False),
    },
)  # fmt: skip
"""GNU coreutils ``env``."""

XARGS: Final = _spec(
    "0oprtx",
    "adEILnPs",
    "eil",
    {
        "arg-file": ("-a", True), "delimiter": ("-d", True), "eof": ("-e", None),
        "replace": ("-i", None), "max-lines": ("-l", None), "max-args": ("-n", True),
        "open-tty": ("-o", False), "interactive": ("-p", False),
        "no-run-if-empty": ("-r", False), "null": ("-0", False), "max-chars": ("-s", True),
        "show-limits": ("--show-limits", False), "verbose": ("-t", False),
        "exit": ("-x", False), "max-procs": ("-P", True),
        "process-slot-var": ("--process-slot-var", True), "help": ("--help", False),
        "version": ("--version", False),
    },
)  # fmt: skip
"""GNU findutils ``xargs``."""

WATCH: Final = _spec(
    "bcCegptwxrhv",
    "nq",
    "d",
    {
        "beep": ("-b", False), "color": ("-c", False), "no-color": ("-C", False),
        "differences": ("-d", None), "errexit": ("-e", False), "chgexit": ("-g", False),
        "interval": ("-n", True), "precise": ("-p", False), "no-title": ("-t", False),
        "no-wrap": ("-w", False), "exec": ("-x", False), "equexit": ("-q", True),
        "no-rerun": ("-r", False), "help": ("-h", False), "version": ("-v", False),
    },
)  # fmt: skip
"""procps ``watch`` (without ``-x`` it runs its words joined, through ``sh -c``)."""

SUDO: Final = _spec(
    "ABbEeHiKklnPSsVv",
    "aCcDgpRrTtUu",
    "h",
    {
        "askpass": ("-A", False), "auth-type": ("-a", True), "background": ("-b", False),
        "bell": ("-B", False), "close-from": ("-C", True), "login-class": ("-c", True),
        "chdir": ("-D", True), "preserve-env": ("-E", None), "edit": ("-e", False),
        "group": ("-g", True), "set-home": ("-H", False), "help": ("--help", False),
        "host": ("-h", True), "login": ("-i", False), "remove-timestamp": ("-K", False),
        "reset-timestamp": ("-k", False), "list": ("-l", False),
        "non-interactive": ("-n", False), "preserve-groups": ("-P", False),
        "prompt": ("-p", True), "chroot": ("-R", True), "role": ("-r", True),
        "stdin": ("-S", False), "shell": ("-s", False), "type": ("-t", True),
        "command-timeout": ("-T", True), "other-user": ("-U", True), "user": ("-u", True),
        "version": ("-V", False), "validate": ("-v", False),
    },
)  # fmt: skip
"""``sudo``."""

FLOCK: Final = _spec(
    "sexnoFuh",
    "wEc",
    "",
    {
        "shared": ("-s", False), "exclusive": ("-x", False), "unlock": ("-u", False),
        "nonblock": ("-n", False), "nb": ("-n", False), "timeout": ("-w", True),
        "wait": ("-w", True), "close": ("-o", False), "conflict-exit-code": ("-E", True),
        "no-fork": ("-F", False), "verbose": ("--verbose", False), "command": ("-c", True),
        "help": ("-h", False), "version": ("--version", False),
    },
)  # fmt: skip
"""util-linux ``flock``."""

Options = list[tuple[str, str | None]]


def read_options(words: Sequence[str], start: int, spec: Spec) -> tuple[Options, int] | None:
    """The options of ``words[start:]`` as ``(name, value)`` pairs and the index of the first
    operand, or ``None`` when getopt would refuse a word."""
    out: Options = []
    i = start
    while i < len(words):
        word = words[i]
        if word == "--":
            return out, i + 1
        if word.startswith("--"):
            one = _long(word[2:], words, i, spec.long)
            if one is None:
                return None
            out.append(one[0])
            i = one[1]
        elif word.startswith("-") and len(word) > 1:
            several = _cluster(word, words, i, spec)
            if several is None:
                return None
            out += several[0]
            i = several[1]
        else:
            break
    return out, i


def _long(
    body: str, words: Sequence[str], i: int, table: Mapping[str, tuple[str, bool | None]]
) -> tuple[tuple[str, str | None], int] | None:
    name, eq, value = body.partition("=")
    found = [full for full in table if full.startswith(name)] if name else []
    if name in table:
        found = [name]
    if len(found) != 1:
        return None  # unknown or ambiguous: getopt refuses it
    canonical, takes = table[found[0]]
    if eq:
        return ((canonical, value), i + 1) if takes is not False else None
    if takes is True:
        return ((canonical, words[i + 1]), i + 2) if i + 1 < len(words) else None
    return (canonical, None), i + 1


def _cluster(word: str, words: Sequence[str], i: int, spec: Spec) -> tuple[Options, int] | None:
    out: Options = []
    for j in range(1, len(word)):
        letter = word[j]
        rest = word[j + 1 :]
        if letter in spec.values:
            if rest:
                return [*out, (f"-{letter}", rest)], i + 1
            if i + 1 >= len(words):
                return None
            return [*out, (f"-{letter}", words[i + 1])], i + 2
        if letter in spec.optional:
            return [*out, (f"-{letter}", rest or None)], i + 1
        if letter not in spec.flags:
            return None
        out.append((f"-{letter}", None))
    return out, i + 1


def read_permuted(words: Sequence[str], start: int, spec: Spec) -> tuple[Options, list[str]] | None:
    """Options and operands of ``words[start:]`` as GNU getopt reads them by default: options
    anywhere before ``--`` (it permutes them to the front), a lone ``-`` an operand; ``None``
    when getopt would refuse a word."""
    out: Options = []
    operands: list[str] = []
    i = start
    while i < len(words):
        word = words[i]
        if word == "--":
            return out, [*operands, *words[i + 1 :]]
        if word.startswith("-") and len(word) > 1:
            if word.startswith("--"):
                one = _long(word[2:], words, i, spec.long)
                if one is None:
                    return None
                out.append(one[0])
                i = one[1]
            else:
                several = _cluster(word, words, i, spec)
                if several is None:
                    return None
                out += several[0]
                i = several[1]
            continue
        operands.append(word)
        i += 1
    return out, operands
