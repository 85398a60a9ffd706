"""The installed entry points of a group, without `importlib.metadata` when a cache may answer.

`importlib.metadata` costs a cold ``dsh`` more than most plugins do: its import, a scan of every
distribution, and the ``METADATA`` parse behind each plugin's distribution name and version
(issue 27). What it found is kept in ``entry-points.json`` in dsh's state directory (next to
the audit database), one entry per environment (`_scan`: the interpreter, `sys.path`, and the
mtime of each path entry holding distributions, so installing, upgrading or removing one, or
adding a ``.pth`` file, changes the key; at most `KEPT` environments).

A sandboxed command may be able to write the state directory, so a cache entry is never taken
on its word. Every use re-derives the entry points from the files (`_scan`: the
``entry_points.txt`` of the first distribution of each name on `sys.path`, the way
`importlib.metadata` takes them, parsed the same way; a few milliseconds without its
machinery), and an entry is used only when its list is exactly that: the same entry points,
values, order and providing distributions. A planted cache can add, drop or redirect nothing,
and the distribution name and version it shows must be those the distribution's ``METADATA``
headers say (read for the distributions that provide the group's entry points only), in a
name's characters (nothing a terminal would act on). An
environment the re-derivation cannot follow (a zip file or an ``.egg`` on `sys.path`, another
finder of distributions on `sys.meta_path`, a malformed file) is never cached, and an entry is
written only when `importlib.metadata` and the re-derivation agree. An unreadable, corrupt or
oversized cache is a miss, and one that cannot be written is skipped, silently. When
`importlib.metadata.entry_points` is not the standard library's own (a test's stand-in), it is
asked directly and nothing is cached.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import stat
import sys
from collections.abc import Iterable
from typing import Any, Final, Protocol, cast, final

import attrs

from ._statedir import state_dir

__all__ = [
    "KEPT",
    "Dist",
    "EntryPointLike",
    "InstalledEntryPoint",
    "cache_path",
    "installed_entry_points",
]

FORMAT: Final = 1
KEPT: Final = 8
"""How many environments the cache file remembers (most recent first)."""
MAX_BYTES: Final = 256 * 1024
_INFO: Final = (".dist-info", ".egg-info")
_PATTERN: Final = re.compile(  # `importlib.metadata.EntryPoint.pattern`
    r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"
)

_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,200}")
Derived = list[tuple[str, str, str, str, str]]
"""(normalized distribution, entry point name, value, the distribution's ``Name`` and
``Version`` as its metadata says them): what a cached row must match."""


class EntryPointLike(Protocol):
    """What the host reads of an entry point: `importlib.metadata.EntryPoint` or
    `InstalledEntryPoint` (``dist`` has ``name`` and ``version``, or is ``None``)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def dist(self) -> Any: ...
    def load(self) -> Any: ...


@final
@attrs.frozen
class Dist:
    """The distribution an entry point came from, as `PluginInfo` shows it."""

    name: str | None
    version: str | None


@final
@attrs.frozen
class InstalledEntryPoint:
    """An entry point as `importlib.metadata.EntryPoint` gives it: ``name``, ``value``,
    ``group``, ``dist`` and `load`."""

    name: str
    value: str
    group: str
    dist: Dist | None = None

    def load(self) -> Any:
        """Import the module the value names and return its attribute (as `EntryPoint.load`)."""
        import functools
        import importlib

        match = _PATTERN.match(self.value)
        if match is None:
            raise ValueError(f"not an entry point value: {self.value!r}")
        module = importlib.import_module(match.group("module"))
        names = filter(None, (match.group("attr") or "").split("."))
        return functools.reduce(getattr, names, module)


def installed_entry_points(group: str) -> list[EntryPointLike]:
    """The entry points of *group*, in `importlib.metadata`'s order: from the cache when its
    entry for this environment matches the files, else from `importlib.metadata` (then cached)."""
    stand_in = _stand_in()
    if stand_in is not None:
        return list(stand_in(group=group))
    scanned = _scan(group)
    if scanned is not None:
        found = _cached(*scanned)
        if found is not None:
            return found
    import importlib.metadata

    eps: list[EntryPointLike] = list(importlib.metadata.entry_points(group=group))
    if scanned is not None:
        _store(*scanned, eps)
    return eps


def normalize(name: str) -> str:
    """A distribution name as `importlib.metadata` compares them (PEP 503, ``_`` for ``-``)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _stand_in() -> Any:
    metadata = sys.modules.get("importlib.metadata")
    function = getattr(metadata, "entry_points", None)
    if function is None or getattr(function, "__module__", None) == "importlib.metadata":
        return None
    return function


# -- where, and for which environment -----------------------------------------------------------


def cache_path() -> str | None:
    """``entry-points.json`` in dsh's state directory (``$XDG_STATE_HOME/dsh``), or ``None``
    (nothing cached) when that is not an absolute path.

    The directory is the one the audit plugin writes and the sandbox hides from commands,
    found by the same rule (`dsh_host._host._statedir`), without importing platformdirs in the
    common case: importing it costs a cold start more than the rest of this module."""
    state = state_dir()
    if state is None or not os.path.isabs(state):
        return None
    return os.path.join(state, "entry-points.json")


def _scan(group: str) -> tuple[dict[str, Any], Derived] | None:
    """The key of this environment and the entry points of *group* its files declare, or
    ``None`` when it holds something `importlib.metadata` reads in ways this does not follow.

    The key names the interpreter and `sys.path`, with the place and mtime of each path entry
    that holds distributions (installing, upgrading or removing one changes it); an entry that
    holds none is named as it is, so a working directory on `sys.path` (``python -m dsh_host``
    in one workspace after another) may change freely. The entry points are
    ``(distribution, name, value)``: the ``entry_points.txt`` of the first distribution of
    each normalized name along `sys.path`, parsed as `importlib.metadata` parses it.
    """
    path_finder = getattr(sys.modules.get("_frozen_importlib_external"), "PathFinder", None)
    if any(
        finder is not path_finder and getattr(finder, "find_distributions", None) is not None
        for finder in sys.meta_path
    ):
        return None  # another finder of distributions: importlib.metadata asks it too
    paths: list[list[Any]] = []
    seen: set[str] = set()
    found: Derived = []
    try:
        for entry in cast("list[object]", sys.path):
            if not isinstance(entry, str):
                return None  # a Path or bytes entry: not ours to key (and not JSON)
            root = entry or "."
            if os.path.basename(root).lower().endswith(".egg"):
                return None
            if not os.path.isdir(root):
                if os.path.exists(root):
                    return None  # a zip file on sys.path
                paths.append([entry, None])
                continue
            mtime = os.stat(root).st_mtime_ns
            infos = _infos(root)
            paths.append([entry, os.path.abspath(root), mtime] if infos else [entry, None])
            for normalized, path in infos:
                if normalized in seen:
                    continue
                seen.add(normalized)
                text = _entry_points_text(path)
                pairs = [(n, v) for g, n, v in _pairs(text) if g == group]
                if pairs:
                    shown = _name_and_version(path)
                    found.extend((normalized, n, v, *shown) for n, v in pairs)
    except (OSError, ValueError):
        return None
    key = {"group": group, "python": sys.version, "executable": sys.executable, "path": paths}
    return key, found


def _infos(root: str) -> list[tuple[str, str]]:
    """The metadata directories in *root*: grouped by name in listing order, as `Lookup`."""
    infos: dict[str, list[str]] = {}
    for child in os.listdir(root):
        low = child.lower()
        if not low.endswith(_INFO):
            continue
        if not child.endswith(_INFO):
            raise ValueError("a metadata directory in mixed case")
        normalized = normalize(low.rpartition(".")[0].partition("-")[0])
        if not normalized:
            raise ValueError("a metadata directory without a name")
        infos.setdefault(normalized, []).append(os.path.join(root, child))
    return [(normalized, path) for normalized, paths in infos.items() for path in paths]


def _name_and_version(path: str) -> tuple[str, str]:
    """``Name`` and ``Version`` from the headers of a distribution's ``METADATA`` (``""`` for
    one that is missing: such a row never matches, so it is not cached)."""
    name = version = ""
    try:
        with open(os.path.join(path, "METADATA"), encoding="utf-8") as file:
            for line in itertools.islice(file, 200):
                if not line.strip():
                    break  # the headers end here
                field, _, text = line.partition(":")
                if field == "Name" and not name:
                    name = text.strip()
                elif field == "Version" and not version:
                    version = text.strip()
    except (OSError, UnicodeDecodeError):
        pass
    return name, version


def _entry_points_text(path: str) -> str:
    try:
        with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return ""


def _pairs(text: str) -> Iterable[tuple[str, str, str]]:
    """``(group, name, value)`` as `importlib.metadata`'s ``Sectioned.section_pairs``."""
    section: str | None = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is not None:
            name, sep, value = line.partition("=")
            if not sep:
                raise ValueError("an entry point line without '='")
            yield section, name.strip(), value.strip()


# -- the cache file ------------------------------------------------------------------------------


def _cached(key: dict[str, Any], derived: Derived) -> list[EntryPointLike] | None:
    """The cached entry points for *key*, if the entry says exactly what *derived* says."""
    for entry in _read():
        if not isinstance(entry, dict) or entry.get("key") != key:
            continue
        rows = entry.get("entry_points")
        if not isinstance(rows, list) or len(rows) != len(derived):
            return None
        found: list[EntryPointLike] = []
        for row, derived_row in zip(rows, derived, strict=True):
            if not _row_matches(row, *derived_row):
                return None
            dist = Dist(row["distribution"], row["version"])
            found.append(InstalledEntryPoint(row["name"], row["value"], key["group"], dist))
        return found
    return None


def _row_matches(
    row: Any, normalized: str, name: str, value: str, shown_name: str, version: str
) -> bool:
    """Whether a cached *row* says what the files say: the entry point, and the distribution's
    name and version as its ``METADATA`` spells them (so a planted cache cannot make ``dsh
    plugins`` show another name or version; a row that cannot match is not cached)."""
    if not isinstance(row, dict) or set(row) != {"name", "value", "distribution", "version"}:
        return False
    if row["name"] != name or row["value"] != value:
        return False
    shown = row["distribution"]
    if not (isinstance(shown, str) and _NAME.fullmatch(shown)):
        return False  # shown on a terminal: a distribution name's characters only
    return shown == shown_name and row["version"] == version and normalize(shown) == normalized


def _read() -> list[Any]:
    path = cache_path()
    if path is None:
        return []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return []
        data = json.loads(os.read(fd, MAX_BYTES + 1))
    except Exception:  # corrupt, or not ours: a miss
        return []
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return []
    entries = data.get("entries")
    return entries if isinstance(entries, list) else []


def _store(key: dict[str, Any], derived: Derived, eps: list[EntryPointLike]) -> None:
    """Remember *eps* for *key*, only if they are what *derived* says (else: do not cache)."""
    if len(eps) != len(derived):
        return
    rows = []
    try:
        for ep, derived_row in zip(eps, derived, strict=True):
            dist = ep.dist
            shown = dist.name if dist is not None else None
            row = {"name": ep.name, "value": ep.value, "distribution": shown}
            row["version"] = dist.version if dist is not None else None
            if not _row_matches(row, *derived_row):
                return
            rows.append(row)
    except Exception:  # unreadable metadata: importlib.metadata's answer stands, uncached
        return
    entries = [{"key": key, "entry_points": rows}]
    entries += [e for e in _read() if isinstance(e, dict) and e.get("key") != key][: KEPT - 1]
    _write({"format": FORMAT, "entries": entries})


def _write(data: dict[str, Any]) -> None:
    path = cache_path()
    if path is None:
        return
    text = json.dumps(data, separators=(",", ":")).encode()
    if len(text) > MAX_BYTES:
        return
    temporary = f"{path}.{os.getpid()}.tmp"
    created = False
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o600)
        created = True
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:  # a read-only state directory: run uncached
        if created:  # never a file of that name this process did not make
            with contextlib.suppress(OSError):
                os.unlink(temporary)
