"""Reading the options of a program line that name a file it writes (`._programs`, `._tar`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._wrappers import DYNAMIC

__all__ = ["option_words", "option_writes"]

_EXACT_OTHER: Final = frozenset({"--cookie"})  # options whose names begin a writing one's


def option_words(words: Sequence[str]) -> list[str]:
    """The option words of *words*: those before ``--`` that start with ``-``."""
    out = []
    for word in words[1:]:
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1:
            out.append(word)
    return out


def option_writes(
    head: str,
    words: Sequence[str],
    long: dict[str, bool | None],
    short: dict[str, bool | None],
    values: frozenset[str],
) -> list[tuple[str, str]]:
    """The files *words* (a line of program *head*) writes through the options that name one:
    *long* and *short* map each to whether its value is the file (``None``: a file known
    only at run time, `DYNAMIC`); *values* are the short options that take a value (they end
    a cluster). Long options may be abbreviated."""
    out: list[tuple[str, str]] = []
    for i, word in enumerate(words[1:], 1):
        following = words[i + 1] if i + 1 < len(words) else DYNAMIC
        name, eq, value = word.partition("=")
        if word.startswith("--") and len(name) > 3 and name not in _EXACT_OTHER:
            found = [o for o in long if o.startswith(name)]
            if found:
                path = (value if eq else following) if long[found[0]] else DYNAMIC
                out.append((f"{head} {found[0]}", path))
        elif word.startswith("-") and not word.startswith("--"):
            for at, letter in enumerate(word[1:], 2):
                if letter in short:
                    path = (word[at:] or following) if short[letter] else DYNAMIC
                    out.append((f"{head} -{letter}", path))
                if letter in values:
                    break
    return out
