"""``deny_read`` globs, matched again before each command, as the file tools match them.

The file tools match a glob against each path they are asked for (``fnmatch``: ``*`` also
crosses ``/``, and a leading ``.`` is a character like any other); a command is shown the
filesystem whole, so what a glob covers must be found before it starts: every path under the
glob's literal directory (the part before its first ``*``, ``?`` or ``[``) whose real path the
glob matches, dot-names included, and what was made since the last command too. A matched
directory is hidden whole (not walked further); a link is never followed (what it leads to is
hidden where it lies, if a glob matches it there). A walk that meets more than `WALK_LIMIT`
entries, matches more than `MATCH_LIMIT`, or meets a directory it cannot list for any reason
but its absence (a command's ``chmod 0311`` or ``000``, which it can undo, or a path longer
than the kernel names: each would keep names from the walk, not from ``cat``), refuses the
command (`SandboxUnavailable`) rather than show it what it could not check.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from dsh_plugins_builtin._sandbox._deny import GLOB_CHARACTERS
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._paths import within

__all__ = ["MATCH_LIMIT", "WALK_LIMIT", "matching"]

WALK_LIMIT: Final = 200_000
MATCH_LIMIT: Final = 2_000


def matching(patterns: Iterable[str], keep: Iterable[Path]) -> list[tuple[Path, bool]]:
    """The existing paths *patterns* (canonical absolute globs) cover: ``(path, is a
    directory)``; never one that holds a root of *keep*."""
    roots = [str(root) for root in keep]
    out: list[tuple[Path, bool]] = []
    for pattern in patterns:
        match = re.compile(fnmatch.translate(pattern)).match  # as `fnmatch.fnmatchcase`
        for path, is_dir in _walk(pattern, match):
            if any(within(root, path) for root in roots):
                continue  # it holds a root: refused at start when it existed then
            out.append((Path(path), is_dir))
            if len(out) > MATCH_LIMIT:
                raise SandboxUnavailable(
                    f"[plugin.sandbox] deny_read {pattern!r} matches more than {MATCH_LIMIT} "
                    "paths: too many to hide from a command one by one; name their directory",
                    mode="workspace-write",
                )
    return out


def _walk(pattern: str, match: Callable[[str], object]) -> Iterator[tuple[str, bool]]:
    base = _literal_dir(pattern)
    stack, seen = [base], 0
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                found = list(entries)
        except (FileNotFoundError, NotADirectoryError):  # nothing there to hide
            continue
        except OSError as exc:  # unlistable (chmod 0311, 000, a path too long to name): a
            # command may make it listable again, or open a name in it it already knows
            raise SandboxUnavailable(
                f"[plugin.sandbox] deny_read {pattern!r}: {directory} cannot be listed "
                f"({exc.strerror or exc}), so what the glob covers in it cannot be hidden; "
                "make it listable again (chmod u+r) or name it in deny_read",
                mode="workspace-write",
            ) from None
        seen += len(found)
        if seen > WALK_LIMIT:
            raise SandboxUnavailable(
                f"[plugin.sandbox] deny_read {pattern!r}: more than {WALK_LIMIT} paths under "
                f"{base} to match before each command; narrow the glob",
                mode="workspace-write",
            )
        for entry in found:
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if match(entry.path):
                yield entry.path, is_dir
            elif is_dir:
                stack.append(entry.path)


def _literal_dir(pattern: str) -> str:
    """The directory before the first glob character of *pattern* (``/ws`` of ``/ws/*.key``)."""
    cut = min((pattern.index(c) for c in GLOB_CHARACTERS if c in pattern), default=len(pattern))
    return os.path.dirname(pattern[:cut]) or "/"
