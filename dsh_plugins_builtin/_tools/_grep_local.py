"""What both grep engines share (the checked arguments, the listing, the matches found), and
the in-process engine: RE2 over the listed files in a worker thread (linear time, like
ripgrep's engine), used where there is no ``rg`` or the sandbox cannot run commands.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import attrs

from dsh_host import (
    DshError,
    ToolRunContext,
)
from dsh_plugins_builtin._tools._grep_tool import MAX_GREP_MATCHES
from dsh_plugins_builtin._tools._open import BINARY_SNIFF_BYTES
from dsh_plugins_builtin._tools._search_support import (
    abort_poll,
)
from dsh_plugins_builtin._tools._walk import (
    RegexError,
    linear_regex,
    open_real,
)
from dsh_plugins_builtin._tools._walk import regex_error as re2_error

__all__ = [
    "MAX_GREP_FILE_BYTES",
    "MAX_GREP_MATCHES",
    "Found",
    "Listing",
    "Search",
    "bad_regex",
    "local_regex",
    "local_search",
]

MAX_GREP_FILE_BYTES = 32 * 1024 * 1024  # the in-process engine reads whole files; rg streams
_LINE_ONLY = ("\\A", "\\z", "(?-")


def bad_regex(pattern: str, why: str, syntax: str) -> DshError:
    return DshError(
        f"invalid regular expression {pattern!r}: {why} ({syntax} syntax: like Python `re` "
        "without lookaround or backreferences)",
        "BAD_REGEX",
    )


@attrs.define
class Listing:
    """What the search will read: candidate files, after policy and the size cap."""

    files: list[tuple[str, str]] = attrs.Factory(list)  # (shown path, real path), sorted
    denied: list[str] = attrs.Factory(list)  # withheld, relative to the search directory
    too_large: int = 0


@attrs.frozen
class Search:
    """The grep arguments, checked."""

    pattern: str
    spelled: str
    glob: str | None
    ignore_case: bool
    include_ignored: bool


@attrs.define
class Found:
    """Matches gathered by either engine, in path order."""

    matches: list[tuple[str, int, str, bool]] = attrs.Factory(list)  # shown, line, text, long
    cut_short: bool = False  # stopped early by an output limit: more matches may exist


def local_regex(search: Search) -> Any:
    if "\n" in search.pattern or "\\n" in search.pattern:  # as ripgrep refuses them
        raise bad_regex(
            search.pattern, 'the literal "\\n" is not allowed (lines are matched one by one)', "RE2"
        )
    flags = "(?mi)" if search.ignore_case else "(?m)"
    try:
        return linear_regex(flags + search.pattern)
    except RegexError as exc:
        why = re2_error(exc).split(": ", 1)[0]  # RE2 appends the pattern (with our flags)
        raise bad_regex(search.pattern, why, "RE2") from None


def _search_file(regex: Any, line_only: bool, real: str, shown: str, found: Found) -> bool:
    """Add the matching lines of one file (binary files skipped); false once the cap is hit."""
    try:  # never follow a symlink (at any level) swapped in after the walk; never block on a FIFO
        fd = open_real(real, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return True
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_GREP_FILE_BYTES:
            return True
        with os.fdopen(fd, "rb", closefd=False) as handle:
            # Sized by the file, not the cap: a read(cap) would allocate the cap every time.
            data = handle.read(st.st_size + 1)
    except OSError:
        return True
    finally:
        os.close(fd)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return True
    text = data.decode("utf-8", errors="replace")
    search = regex.search
    if not line_only and search(text.replace("\r\n", "\n") if "\r" in text else text) is None:
        return True
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    for number, raw in enumerate(lines, 1):
        line = raw.removesuffix("\r")
        if search(line) is not None:
            if len(found.matches) > MAX_GREP_MATCHES:
                return False
            found.matches.append((shown, number, line, False))
    return True


def local_search(search: Search, listing: Listing, ctx: ToolRunContext | None) -> Found:
    """The in-process engine (worker thread): RE2, linear-time, over the listed files."""
    regex = local_regex(search)
    line_only = any(token in search.pattern for token in _LINE_ONLY)
    stop = abort_poll(ctx)
    found = Found()
    for shown, real in listing.files:
        if stop() or not _search_file(regex, line_only, real, shown, found):
            break
    return found
