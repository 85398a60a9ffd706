"""What ``tar`` writes through its options (a part of `._programs`): its side files, the
archive it creates or adds to, and, extracting, the files its archive names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._wrappers import DYNAMIC
from ._writes import option_words, option_writes

__all__ = ["tar_writes"]

_TAR_VALUES: Final = frozenset("bCfFgHIKLNTVX")
"""tar's short options that take a value (the rest of a cluster, or the next word)."""
_SIDE_FILES: Final[tuple[dict[str, bool | None], dict[str, bool | None], frozenset[str]]] = (
    {"--index-file": True, "--volno-file": True, "--listed-incremental": True},
    {"g": True},
    _TAR_VALUES,
)
_TAR_WRITING_MODES: Final = (frozenset("cruA"), ("--create", "--append", "--update", "--cat"))


def tar_writes(words: Sequence[str]) -> list[tuple[str, str]]:
    """What tar writes: its side files (`_SIDE_FILES`), the archive ``-f`` names when it
    creates, appends or updates one, and, extracting, files the archive names (known only at
    run time). An old-style first word (``tar cgf SNAP ARCHIVE``) is read as ``-c -g SNAP -f
    ARCHIVE``: each letter that takes a value takes the next word."""
    words = list(words)
    if len(words) > 1 and words[1][:1] not in ("-", "") and words[1].isalpha():
        letters, rest = words[1], words[2:]
        spelled: list[str] = []
        for letter in letters:
            spelled.append(f"-{letter}")
            if letter in _TAR_VALUES and rest:
                spelled.append(rest.pop(0))
        words = [words[0], *spelled, *rest]
    out = option_writes("tar", words, *_SIDE_FILES)
    short = {c for w in option_words(words) if not w.startswith("--") for c in w[1:]}
    longs = [w.split("=", 1)[0] for w in option_words(words) if w.startswith("--")]
    modes, long_modes = _TAR_WRITING_MODES
    if short & modes or any(w.startswith(m) for w in longs for m in long_modes):
        archive = option_writes("tar", words, {"--file": True}, {"f": True}, _TAR_VALUES)
        out += [(f"{o} (the archive)", p) for o, p in archive]
    if "x" in short or any(w.startswith(("--extract", "--get")) for w in longs):
        out.append(("tar -x (the files its archive names)", DYNAMIC))
    return out
