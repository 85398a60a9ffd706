"""Path spelling and resolution shared by the fence and the confinement (no policy here)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "PathArg",
    "abs_path",
    "abs_paths",
    "canonical",
    "check_spelling",
    "inside_any",
    "outermost",
    "resolve_abs",
    "resolve_target",
    "under",
    "within",
]

_MAX_SYMLINKS = 40  # the Linux MAXSYMLINKS

PathArg = str | os.PathLike[str]


def abs_path(value: PathArg) -> Path:
    return Path(os.path.abspath(os.fspath(value)))


def abs_paths(values: Iterable[PathArg]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for value in values:
        seen.setdefault(abs_path(value), None)
    return tuple(seen)


def inside_any(path: Path, roots: Iterable[Path]) -> bool:
    return any(under(path, root) for root in roots)


def under(path: Path, root: Path) -> bool:
    """Whether *path* is *root* or below it, by their normalised spellings (no file is read).

    Compared as strings, not through ``path.parents``: the bwrap command line and the fence
    ask this dozens of times per call (issue 27).
    """
    top, below = str(root), str(path)
    if top == below or top == "/":
        return True
    if top == ".":  # every relative path lies below the current directory
        return not below.startswith("/")
    return below.startswith(top if top.endswith("/") else top + "/")


def canonical(path: Path) -> Path:
    return Path(os.path.realpath(path))


def resolve_abs(path: str, start: str = "/", links: list[str] | None = None) -> str:
    """Resolve an absolute path component by component; missing components stay literal.

    With ``start`` (a real directory), ``path`` is taken relative to it. With *links*, each
    symbolic link followed on the way is appended to it, where it really is (whoever can write
    the directory holding it can point it elsewhere).
    """
    pending = list(reversed(path.split("/")))
    resolved = start
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            # ``resolved`` is always real (or a real prefix plus missing names), so its lexical
            # parent is its real parent.
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            resolved = candidate  # missing (or a file used as a directory): keep it literal
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(candidate)
            if links is not None:
                links.append(candidate)
            if target.startswith("/"):
                resolved = "/"
            pending.extend(reversed(target.split("/")))
        else:
            resolved = candidate
    return resolved


def check_spelling(spelled: str) -> str:
    """*spelled*, if some file name could be spelled so; else `ValueError` saying why.

    Every path the fence judges goes through this first, before any other reading of the
    spelling (``/tmp/\\0/../..`` is refused, not normalised into a path that is clean).

    Raises:
        ValueError: The path contains a NUL byte, or a lone surrogate it cannot be encoded with.
    """
    if "\0" in spelled:
        raise ValueError("path contains a NUL byte")
    try:
        os.fsencode(spelled)
    except UnicodeEncodeError as exc:
        char = spelled[exc.start]
        raise ValueError(
            f"the path holds a lone surrogate (U+{ord(char):04X} at character {exc.start}), "
            "which no file name can hold"
        ) from None
    return spelled


def outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """*paths* without those lying within another of them (first seen order, no repeats)."""
    found = tuple(dict.fromkeys(paths))
    return tuple(p for p in found if not any(o != p and within(str(p), str(o)) for o in found))


def resolve_target(path: PathArg, workspace: Path) -> Path:
    """Return the real location a path designates.

    Relative paths are taken relative to ``workspace``. Symlinks and ``..`` are resolved component
    by component; for a path that does not exist yet the result is the real path of its deepest
    existing ancestor plus the missing suffix.

    Args:
        path: The path as the model spelled it.
        workspace: The directory relative paths are resolved against.

    Returns:
        The canonical absolute path.

    Raises:
        ValueError: The path contains a NUL byte, or a lone surrogate it cannot be encoded with.
        OSError: A symlink loop, or an ancestor that cannot be inspected.
    """
    spelled = check_spelling(os.fspath(path))
    joined = os.path.join(os.path.abspath(os.fspath(workspace)), spelled)
    return Path(resolve_abs(joined))


def within(key: str, root: str) -> bool:
    return root == "/" or key == root or key.startswith(root + "/")
