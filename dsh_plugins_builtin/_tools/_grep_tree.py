"""The files ``grep``'s policy walk lists, each directory read again only when it changed.

The policy walk (`._grep._list_files`) lists every file ripgrep would read, to ask policy about
each. Listing is most of its cost (a directory read per directory, a ``.gitignore`` match per
entry, all in Python); policy is asked again on every call, nothing of it is kept.

What a directory contributes (its entries that no ``.gitignore`` excludes, in walk order) is
kept between calls and used while its stamp (device, inode, size, mtime and ctime) and the
stamps of every ``.gitignore`` that applies to it are the same: adding, removing or renaming an
entry changes its directory's stamp, editing a ``.gitignore`` changes its own, and no program
can set a ctime back (``tar`` and ``cp -p`` restore mtimes). Every directory is still
``lstat``-ed on every call, and one that changed is read again alone (so the sandbox making and
removing its mount points in the workspace costs one directory read). The filesystem's clock is
coarse, so a change within the same tick as a read could leave a stamp as it was: what a
directory holds is kept only when its stamps are older than `SLACK_NS` before the walk began.

This decides which files ripgrep is told to skip and the withheld count; it is not what keeps a
withheld file's lines out of the result: the re-check asks policy about every file ripgrep
reports that this call's walk did not put to it (`._grep_rg._keep_allowed`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from dsh_plugins_builtin._tools._walk import Spec, is_ignored, load_gitignore, root_specs

__all__ = ["SLACK_NS", "forget", "listed_files"]

SLACK_NS = 2_000_000_000  # stamps newer than this before the walk began are not trusted
_MAX_TREES = 4  # (root, top, respect_ignore) kept, the most recently walked
_MAX_ENTRIES = 100_000  # a tree with more files and directories is not kept (memory)

Stamp = tuple[int, int, int, int, int] | None  # dev, ino, size, mtime_ns, ctime_ns; None: absent


@attrs.frozen
class _Dir:
    """What one directory contributed when it was read."""

    stamp: Stamp  # its own (``lstat``)
    chain: tuple[Stamp, ...]  # the stamps of the ``.gitignore`` files above it that applied
    own: Stamp  # its ``.gitignore``'s (followed), ``None`` when it has none
    spec: Any  # that ``.gitignore`` compiled, or ``None``
    # (name, is a directory, ignored): no symlink; an ignored file is left out, an ignored
    # directory kept (policy may withhold it, which counts whatever .gitignore says)
    items: tuple[tuple[str, bool, bool], ...]


_trees: dict[tuple[str, str, bool], dict[str, _Dir]] = {}
_lock = threading.Lock()


def _now_ns() -> int:
    return time.time_ns()


def _stamp(path: str, follow: bool) -> Stamp:
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def forget() -> None:
    """Drop everything kept."""
    with _lock:
        _trees.clear()


def listed_files(
    root: Path,
    top: Path,
    respect_ignore: bool,
    stop: Callable[[], bool],
    prune: Callable[[str], bool] | None = None,
) -> list[str]:
    """`walk_files`'s files below ``root`` (symlinks left out), in its order.

    Args:
        root: A real, fenced directory.
        top: The real workspace (its ``.gitignore`` files down to ``root`` apply).
        respect_ignore: Honour ``.gitignore`` files.
        stop: Polled once per directory; a stopped walk keeps nothing new.
        prune: As `walk_files`'s: a directory it denies is left out whole, whatever
            ``.gitignore`` says (asked on every call; nothing of its answer is kept).
    """
    key = (str(root), str(top), respect_ignore)
    with _lock:
        kept = _trees.get(key, {})
    walker = _Walker(kept, _now_ns() - SLACK_NS, respect_ignore, stop, prune)
    base = _ancestors(key[0], key[1]) if respect_ignore else ()
    specs = root_specs(key[0], top, respect_ignore)
    out: list[str] = []
    if walker.walk(key[0], "", specs, base, out) and walker.entries <= _MAX_ENTRIES:
        with _lock:
            _trees.pop(key, None)
            _trees[key] = walker.seen
            while len(_trees) > _MAX_TREES:
                del _trees[next(iter(_trees))]
    return out


def _ancestors(root: str, top: str) -> tuple[Stamp, ...]:
    """The stamps of the ``.gitignore`` files from ``top`` down to ``root``'s parent."""
    if root == top or not root.startswith(top.rstrip("/") + "/"):
        return ()
    parts = root[len(top.rstrip("/")) + 1 :].split("/")
    dirs = [top] + [os.path.join(top, *parts[: i + 1]) for i in range(len(parts) - 1)]
    return tuple(_stamp(os.path.join(d, ".gitignore"), True) for d in dirs)


class _Walker:
    """One walk: reuses what ``kept`` holds for unchanged directories, collects ``seen``."""

    def __init__(
        self,
        kept: dict[str, _Dir],
        settled: int,
        respect: bool,
        stop: Callable[[], bool],
        prune: Callable[[str], bool] | None,
    ) -> None:
        self.prune = prune
        self.kept = kept
        self.seen: dict[str, _Dir] = {}
        self.entries = 0  # in ``seen``
        self.settled = settled
        self.respect = respect
        self.stop = stop

    def _old(self, stamp: Stamp) -> bool:
        return stamp is None or (stamp[3] < self.settled and stamp[4] < self.settled)

    def walk(
        self, directory: str, rel: str, specs: list[Spec], chain: tuple[Stamp, ...], out: list[str]
    ) -> bool:
        """Append the files below ``directory`` to ``out``; false when stopped."""
        if self.stop():
            return False
        stamp = _stamp(directory, False)
        known = self.kept.get(rel)
        if not (
            known is not None
            and stamp is not None
            and known.stamp == stamp
            and known.chain == chain
            and (known.own is None or _stamp(f"{directory}/.gitignore", True) == known.own)
        ):
            known = self._read(directory, rel, specs, chain, stamp)
            if known is None:
                return True  # unreadable: nothing below it, as the walk does
        if self._old(known.stamp) and self._old(known.own):
            self.seen[rel] = known
            self.entries += len(known.items)
        if known.own is not None:
            chain = (*chain, known.own)
            if known.spec is not None:
                specs = [*specs, (rel, known.spec)]
        prune = self.prune
        for name, is_dir, ignored in known.items:
            path = f"{rel}/{name}" if rel else name
            if not is_dir:
                out.append(path)
            elif prune is not None and prune(f"{directory}/{name}"):
                continue  # before .gitignore: the count must not depend on one
            elif not ignored and not self.walk(f"{directory}/{name}", path, specs, chain, out):
                return False
        return True

    def _read(
        self, directory: str, rel: str, specs: list[Spec], chain: tuple[Stamp, ...], stamp: Stamp
    ) -> _Dir | None:
        """What ``directory`` holds, as `walk_files` would walk it (``stamp`` taken before)."""
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            return None
        own: Stamp = None
        spec = None
        if self.respect and any(entry.name == ".gitignore" for entry in entries):
            own = _stamp(f"{directory}/.gitignore", True)
            spec = load_gitignore(directory)
            if spec is not None:
                specs = [*specs, (rel, spec)]
        keyed: list[tuple[str, str, bool]] = []
        for entry in entries:
            if entry.name == ".git":
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and entry.is_symlink():
                    continue
            except OSError:
                continue
            keyed.append((entry.name + "/" if is_dir else entry.name, entry.name, is_dir))
        keyed.sort()
        items = []
        for sort_key, name, is_dir in keyed:
            path = f"{rel}/{sort_key}" if rel else sort_key
            ignored = bool(specs) and is_ignored(specs, path)
            if is_dir or not ignored:
                items.append((name, is_dir, ignored))
        return _Dir(stamp, chain, own, spec, tuple(items))
