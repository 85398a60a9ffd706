"""A bwrap command line taken apart into a kept view and what each command does in it
(`dsh_plugins_builtin._sandbox._views`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = ["Split", "places", "split"]

_ARITY: Final = {
    "--unshare-all": 0, "--unshare-user-try": 0, "--as-pid-1": 0, "--share-net": 0,
    "--die-with-parent": 0, "--new-session": 0,
    "--dev": 1, "--proc": 1, "--tmpfs": 1, "--remount-ro": 1, "--size": 1, "--chdir": 1,
    "--cap-drop": 1,
    "--ro-bind": 2, "--bind": 2, "--ro-bind-try": 2, "--dev-bind": 2, "--bind-fd": 2,
}  # fmt: skip
"""The words `_bwrap.bwrap_argv` writes, and how many operands each takes (any other: no view)."""
_SPAWN_ARITY: Final = {**_ARITY, "--seccomp": 1, "--info-fd": 1, "--block-fd": 1}
"""With the words `_confine.confine_argv` adds for a process of its own (`places`)."""

_PLACED: Final = frozenset(
    ("--dev", "--proc", "--tmpfs", "--remount-ro", "--ro-bind", "--bind", "--ro-bind-try",
     "--dev-bind", "--bind-fd")
)  # fmt: skip
"""The words whose last operand is a place in the view."""

_MOUNTING: Final = frozenset(
    ("--dev", "--proc", "--tmpfs", "--ro-bind", "--bind", "--dev-bind", "--bind-fd")
)
"""The words that always mount on their place (``--ro-bind-try`` may not; ``--remount-ro``
changes a mount that is there)."""


@attrs.frozen
class Split:
    """A bwrap command line taken apart: the view (`head`, with the descriptors it binds,
    `fds`), what each command does in it (`plan`, `cwd`; the first steps of the plan, `early`,
    need nothing of the command, and a command forked ahead does them while it waits), and the
    view's `key`."""

    head: tuple[str, ...]
    fds: tuple[int, ...]
    early: tuple[tuple[Any, ...], ...]
    plan: tuple[tuple[Any, ...], ...]
    cwd: str
    key: tuple[Any, ...]
    mounted: frozenset[str] = frozenset()  # the places the view mounts on (`_viewtable.shows`)


def _options(
    argv: Sequence[str], known: dict[str, int] = _ARITY
) -> list[tuple[str, list[str]]] | None:
    """The options of *argv* (after bwrap itself, up to ``--``), each with its operands."""
    out: list[tuple[str, list[str]]] = []
    i = 1
    while i < len(argv) and argv[i] != "--":
        arity = known.get(argv[i])
        if arity is None or i + arity >= len(argv):
            return None
        out.append((argv[i], list(argv[i + 1 : i + 1 + arity])))
        i += 1 + arity
    return out


def places(argv: Sequence[str]) -> frozenset[str] | None:
    """The places a whole bwrap command line (`_confine.confine_argv`) always mounts on, for
    `_viewtable.shows`; ``None`` when it holds a word this does not know."""
    options = _options(argv, _SPAWN_ARITY)
    if options is None:
        return None
    return frozenset(operands[-1] for word, operands in options if word in _MOUNTING)


def _scratch(options: list[tuple[str, list[str]]], gone: set[str]) -> dict[str, int] | None:
    """The sized tmpfs directories in RAM (``/dev/shm``, the host's socket directories): each
    command gets fresh ones (what one wrote there is gone with it, as the memory it took), so
    they are not part of the view; ``None`` when something is mounted below one (a root in
    ``/var/tmp``, a working directory in a hidden one): no view then, as that directory would
    be the view's, shared by its commands."""
    places = [operands[-1] for word, operands in options if word in _PLACED]
    out: dict[str, int] = {}
    for (word, operands), (after, where) in itertools.pairwise(options):
        if word != "--size" or after != "--tmpfs" or where[0] in gone:
            continue
        below = where[0].rstrip("/") + "/"
        if any(place.startswith(below) for place in places):
            return None
        out[where[0]] = int(operands[0])
    return out


def split(argv: Sequence[str], missing: Collection[Path], *, network: bool) -> Split | None:
    """*argv* (a `_bwrap.bwrap_argv` line: bwrap, then its options up to ``--``) as a view
    and a per-command plan; ``None`` when it holds a word this does not know (no view then)."""
    options = _options(argv)
    if options is None:
        return None
    gone = {str(path) for path in missing}
    scratch = _scratch(options, gone)
    if scratch is None:
        return None
    read_only = {operands[0] for word, operands in options if word == "--remount-ro"}
    head: list[str] = [argv[0]]
    key: list[Any] = [argv[0]]
    early: list[tuple[Any, ...]] = [("proc",), ("devpts",)]  # its own, as under --dev
    seals: list[tuple[Any, ...]] = []  # after the host has taken their mount points
    fds: list[int] = []
    mounted: set[str] = set()
    cwd = "/"
    for i, (word, operands) in enumerate(options):
        step = [word, *operands]
        place = operands[-1] if operands else ""
        if word == "--chdir":
            cwd = place
        elif word == "--ro-bind-try" and place.startswith("/proc/"):
            early.append(("proc-ro", place))  # over each command's own /proc
        elif word == "--size" and options[i + 1 : i + 2] and options[i + 1][1][0] in scratch:
            pass  # the size of a scratch directory (`bwrap_argv` writes it before its --tmpfs)
        elif word == "--tmpfs" and place in scratch:
            early.append(("tmpfs", place, place in read_only, scratch[place]))
        elif word == "--tmpfs" and place in gone:
            seals.append(("seal", place))  # its --remount-ro is dropped below
        elif word == "--remount-ro" and (place in gone or place in scratch):
            pass
        elif word == "--bind-fd":
            st = os.fstat(int(operands[0]))
            fds.append(int(operands[0]))
            key += ["--bind-fd", (st.st_dev, st.st_ino), place]
            head += step
            mounted.add(place)
        else:
            key += step
            head += step
            if word in _MOUNTING:
                mounted.add(place)
    return Split(
        head=tuple(head), fds=tuple(fds), early=tuple(early), plan=(*early, *seals), cwd=cwd,
        key=(*key, network, tuple(sorted(gone)), tuple(early)), mounted=frozenset(mounted),
    )  # fmt: skip
