"""A sorted directory walk that honours ``.gitignore`` files, and glob patterns for it.

The walk never follows a symlinked directory (so it cannot leave the fenced root), always skips
``.git``, and yields files in the order of their full paths, so results come out sorted without
a final sort. ``.gitignore`` files apply as git applies them: each one to the paths below its
directory, a deeper file overriding a shallower one, an ignored directory pruned whole. The
``.gitignore`` files of the directories between the workspace and the search root apply too,
unless the search root is itself ignored (a directory the caller names explicitly is searched).

Every pattern here comes from the model or from files it may have written (a ``.gitignore``), so
all matching runs on RE2 (``google-re2``), whose time is linear in the path whatever the pattern:
Python's backtracking ``re`` takes exponential time on ``**/**/...`` globs or ``*a*a*a*b``
ignore lines, and holds the interpreter lock while it does, freezing the host. ``pathspec`` is
asked for its RE2 backend explicitly, so a missing ``google-re2`` fails loudly instead of
silently falling back to ``re``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no stubs

if TYPE_CHECKING:  # imported by the first .gitignore read, not with the tools plugin (issue 27)
    import pathspec

from dsh_host import ToolArgsError
from dsh_plugins_builtin._sandbox._beneath import HAVE_OPENAT2, open_absolute, open_normal

__all__ = [
    "RegexError",
    "Spec",
    "compile_glob",
    "expand_braces",
    "gitignore_spec",
    "is_ignored",
    "linear_regex",
    "load_gitignore",
    "matchable",
    "open_real",
    "regex_error",
    "root_specs",
    "spec_matches",
    "walk_files",
]

RegexError: type[Exception] = re2.error  # what `linear_regex` raises

_MAX_EXPANSIONS = 256
Spec = tuple[str, "pathspec.GitIgnoreSpec"]  # (directory relative to the walk root, spec)


def expand_braces(pattern: str) -> list[str]:
    """``a.{py,pyi}`` -> ``["a.py", "a.pyi"]`` (nested braces too; at most 256 results)."""
    start = pattern.find("{")
    if start == -1:
        return [pattern]
    depth = 0
    parts: list[str] = []
    last = start + 1
    for index in range(start, len(pattern)):
        char = pattern[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[last:index])
                head, tail = pattern[:start], pattern[index + 1 :]
                out: list[str] = []
                for part in parts:
                    for expanded in expand_braces(head + part + tail):
                        out.append(expanded)
                        if len(out) > _MAX_EXPANSIONS:
                            raise ToolArgsError([f"pattern {pattern!r} expands to too many globs"])
                return out
        elif char == "," and depth == 1:
            parts.append(pattern[last:index])
            last = index + 1
    return [pattern]  # unbalanced: literal


def _segment(seg: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(seg):
        char = seg[index]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = seg.find(
                "]", index + 2 if seg[index + 1 : index + 2] in ("!", "^") else index + 1
            )
            if end == -1:
                out.append(re.escape(char))
            else:
                body = seg[index + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                index = end
        elif char == "\\" and index + 1 < len(seg):
            index += 1
            out.append(re.escape(seg[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def _one_glob(pattern: str) -> tuple[str, int | None]:
    segs = [s for s in pattern.split("/") if s not in ("", ".")]
    if not segs:
        raise ToolArgsError([f"pattern {pattern!r} matches nothing; try '**/*'"])
    out: list[str] = []
    for index, seg in enumerate(segs):
        last = index == len(segs) - 1
        if seg == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment(seg) + ("" if last else "/"))
    depth = None if "**" in segs else len(segs)
    return "".join(out), depth


def linear_regex(pattern: str) -> Any:
    """Compile ``pattern`` with RE2 (linear-time matching); raise `re2.error` if it is invalid.

    RE2 syntax is Python's minus backreferences and lookaround; it is also what ripgrep's Rust
    ``regex`` crate accepts, near enough. Errors are raised, not logged to stderr.
    """
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options=options)


def regex_error(exc: BaseException) -> str:
    """The text of a `re2.error` (which carries bytes)."""
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def gitignore_spec(lines: Iterable[str]) -> pathspec.GitIgnoreSpec:
    """A ``.gitignore``-style spec matched by RE2 (see the module docstring)."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")


def compile_glob(pattern: str) -> tuple[Any, int | None]:
    """A linear-time (RE2) regex over ``/``-separated relative paths, and its deepest level.

    ``*`` and ``?`` stay within one path segment, ``**`` as a whole segment spans any number of
    directories, ``[...]`` is a character class and ``{a,b}`` alternatives.

    Raises:
        ToolArgsError: An absolute pattern, a ``..`` segment, an empty pattern, or one RE2
            cannot compile (a reversed class range such as ``[z-a]``).
    """
    if pattern.startswith("/"):
        raise ToolArgsError(
            ["pattern must be relative (put the directory to search in `path`), e.g. '**/*.py'"]
        )
    if ".." in pattern.split("/"):
        raise ToolArgsError(["pattern must not contain '..'; put the directory in `path` instead"])
    regexes: list[str] = []
    depths: list[int | None] = []
    for expanded in expand_braces(pattern):
        regex, depth = _one_glob(expanded)
        regexes.append(regex)
        depths.append(depth)
    deepest = None if None in depths else max(d for d in depths if d is not None)
    try:
        regex = linear_regex("(?s)^(?:" + "|".join(regexes) + ")$")
    except re2.error as exc:
        raise ToolArgsError(
            [f"pattern {pattern!r} is not a valid glob: {regex_error(exc)}"]
        ) from None
    return regex, deepest


def load_gitignore(directory: str) -> pathspec.GitIgnoreSpec | None:
    """The ``.gitignore`` of the real ``directory`` compiled, or ``None`` (none there, or
    unreadable). A symlinked one is not followed (nor any symlink above it), as git does not:
    the host reads it unconfined and its lines steer what a search shows, so a link to
    ``~/.ssh/id_rsa`` would make the results an oracle on that file."""
    try:
        fd = open_real(os.path.join(directory, ".gitignore"), os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, encoding="utf-8", errors="surrogateescape") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            lines = [matchable(line) for line in f.read().splitlines()]
    except OSError:
        return None
    try:
        return gitignore_spec(lines)
    except Exception:  # a malformed pattern disables that file, as git would skip the line
        return None


def _ancestor_specs(root: str, top: str) -> list[Spec]:
    """Specs of the directories from ``top`` down to ``root``'s parent, re-based on ``root``."""
    if root == top or not root.startswith(top.rstrip("/") + "/"):
        return []
    rel_parts = root[len(top.rstrip("/")) + 1 :].split("/")
    found: list[tuple[int, pathspec.GitIgnoreSpec]] = []
    current = top
    for depth in range(len(rel_parts)):
        spec = load_gitignore(current)
        if spec is not None:
            found.append((depth, spec))
        current = os.path.join(current, rel_parts[depth])
    # Re-base: a spec at ``depth`` sees the root as ``rel_parts[depth:]``.
    out: list[Spec] = []
    for depth, spec in found:
        prefix = "/".join(rel_parts[depth:])
        out.append((f"\0{prefix}", spec))
    return out


def matchable(path: str) -> str:
    """``path`` as RE2 can match it: each byte that is not UTF-8 (which `os` decodes to a lone
    surrogate U+DC80..U+DCFF) as a private-use character of its own (U+F780..U+F7FF). RE2
    encodes what it matches to UTF-8, and a lone surrogate would raise: one planted name must
    not break a search. One character per byte, each byte its own: ``?`` matches one, and a
    ``.gitignore`` line naming ``conf\\xff.py`` matches that file and no ``conf\\xfe.py`` (as
    U+FFFD for every byte, it matched both)."""
    if path.isascii():
        return path
    return path.translate(_BYTES_AS_PRIVATE_USE)


_BYTES_AS_PRIVATE_USE = {code: code - 0xDC00 + 0xF700 for code in range(0xDC80, 0xDD00)}


def spec_matches(spec: pathspec.GitIgnoreSpec, rel: str) -> bool:
    """Whether ``spec`` matches the relative path ``rel``, whatever bytes its name holds."""
    try:
        return bool(spec.match_file(rel))
    except UnicodeEncodeError:
        return bool(spec.match_file(matchable(rel)))


def is_ignored(specs: list[Spec], rel: str) -> bool:
    """Whether ``specs`` ignore ``rel`` (relative to the walk root; a directory ends in ``/``)."""
    for base, spec in reversed(specs):
        if base.startswith("\0"):  # an ancestor spec: prefix the root's path below it
            sub = f"{base[1:]}/{rel}" if rel else base[1:] + "/"
        else:
            sub = rel[len(base) + 1 :] if base else rel
        try:
            decision = spec.check_file(sub).include
        except UnicodeEncodeError:  # a name that is not UTF-8: RE2 matches its decoded form
            decision = spec.check_file(matchable(sub)).include
        if decision is not None:
            return bool(decision)
    return False


def root_specs(root: str, top: Path | None, respect_ignore: bool) -> list[Spec]:
    """The ``.gitignore`` specs that apply to ``root`` itself (from ``top`` down to it)."""
    specs: list[Spec] = []
    if respect_ignore and top is not None:
        specs = _ancestor_specs(root, str(top))
        if specs and is_ignored(specs, ""):
            specs = []  # the caller named an ignored directory: search it anyway
    return specs


def walk_files(
    root: Path,
    *,
    top: Path | None,
    respect_ignore: bool = True,
    max_depth: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    prune: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Yield ``(path relative to root, entry)`` for every non-directory entry, sorted by path.

    ``root`` is opened from ``/`` following no symlink (`open_real`), each directory below it
    through its parent's descriptor with ``O_NOFOLLOW``, and listed through its own: a directory
    swapped for a symlink mid-walk is not followed. An entry's
    ``stat`` works only while the walk is at its directory (its descriptor is then open).

    Args:
        root: A real, fenced directory.
        top: The workspace (real); ``.gitignore`` files between it and ``root`` apply too.
        respect_ignore: Honour ``.gitignore`` files (``.git`` is skipped either way).
        max_depth: Do not descend past this many path segments (1 = only ``root``'s entries).
        stop: Polled once per directory; a true result ends the walk.
        prune: Asked about each directory's real path before any ``.gitignore`` applies; a
            true answer leaves it out whole, unread (`Policy.denied_dir`).
    """
    specs = root_specs(str(root), top, respect_ignore)
    walk = _Walk(respect_ignore, max_depth, stop, prune)
    yield from walk.walk(str(root), "", 1, specs)


def open_real(path: str, flags: int) -> int:
    """Open the real, normal path ``path`` following no symlink at any level (``ELOOP``):
    one ``openat2`` where the kernel has it, else a walk from ``/`` (`open_absolute`)."""
    return open_normal(path, flags) if HAVE_OPENAT2 else open_absolute(path, flags)


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class _Walk:
    def __init__(
        self,
        respect_ignore: bool,
        max_depth: int | None,
        stop: Callable[[], bool],
        prune: Callable[[str], bool] | None,
    ) -> None:
        self.respect_ignore = respect_ignore
        self.max_depth = max_depth
        self.stop = stop
        self.prune = prune

    def walk(
        self, directory: str, rel: str, depth: int, specs: list[Spec], parent: int | None = None
    ) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Yield the files below ``directory``; ``parent`` is its parent's descriptor (a
        subdirectory is opened through it, ``O_NOFOLLOW``: no symlink at any level)."""
        if self.stop():
            return
        try:
            if parent is None:
                fd = open_real(directory, _DIR)
            else:
                fd = os.open(directory.rpartition("/")[2], _DIR | os.O_NOFOLLOW, dir_fd=parent)
        except OSError:
            return
        try:  # the descriptor stays open while this directory's entries are out (their stat)
            keyed = self._listed(fd, directory)
            if keyed is None:
                return
            if keyed[1] is not None:
                specs = [*specs, (rel, keyed[1])]
            base = directory.rstrip("/") + "/"
            prune, max_depth = self.prune, self.max_depth
            for _key, entry, is_dir in keyed[0]:
                path = f"{rel}/{entry.name}" if rel else entry.name
                if is_dir and prune is not None and prune(base + entry.name):
                    continue  # before any .gitignore: the count must not depend on one
                if specs and is_ignored(specs, path + "/" if is_dir else path):
                    continue
                if not is_dir:
                    yield path, entry
                elif max_depth is None or depth < max_depth:
                    yield from self.walk(base + entry.name, path, depth + 1, specs, fd)
        finally:
            os.close(fd)

    def _listed(
        self, fd: int, directory: str
    ) -> tuple[list[tuple[str, os.DirEntry[str], bool]], Any] | None:
        """The directory's entries sorted as the walk goes, and its ``.gitignore`` compiled."""
        try:
            with os.scandir(fd) as it:
                entries = list(it)
        except OSError:
            return None
        # Only open a .gitignore that is there: a failed open per directory costs more than the
        # rest of the walk on some filesystems.
        spec = None
        if self.respect_ignore and any(entry.name == ".gitignore" for entry in entries):
            spec = load_gitignore(directory)
        keyed: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            if entry.name == ".git":
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            keyed.append((entry.name + "/" if is_dir else entry.name, entry, is_dir))
        keyed.sort(key=lambda item: item[0])
        return keyed, spec
