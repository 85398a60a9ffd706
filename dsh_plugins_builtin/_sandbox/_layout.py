"""What a command's view derives from the policy alone (`Layout`, `layout_of`), and the path
arithmetic behind it; `dsh_plugins_builtin._sandbox._bwrap` turns it into bwrap's command line
and Landlock's mount plan."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import attrs

from dsh_plugins_builtin._sandbox import _hostsockets, _locks
from dsh_plugins_builtin._sandbox._denyglob import matching
from dsh_plugins_builtin._sandbox._paths import canonical, inside_any, outermost, under
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots
from dsh_plugins_builtin._sandbox._protected import protected_paths

__all__ = [
    "Layout",
    "anchors",
    "inside_path",
    "layout_of",
    "masked_dirs",
    "private_tmp",
    "rw_roots",
]


def rw_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The writable roots as pinned at start (their real paths then), never re-resolved: a root
    swapped for a symlink later must not move the confinement with it. A policy that was never
    pinned (built by hand) uses `writable_roots`."""
    current = writable_roots(policy)
    if not policy.pins or policy.mode != "workspace-write":
        return current
    pinned = {pin.path: pin.real for pin in policy.pins}
    out: dict[Path, None] = {}
    for root in policy.writable_roots:
        real = pinned.get(root)
        if real is not None:  # a root missing at start matches nothing
            out.setdefault(real, None)
    return tuple(out)


@attrs.frozen
class Layout:
    """What a command's view of the filesystem derives from the policy alone: the path
    arithmetic, done once per policy (`layout_of`). What exists is looked at per command.

    Attributes:
        rw: The writable roots (`rw_roots`).
        host_tmp: The host's ``/tmp`` (canonical): the private tmp is seen there.
        masks: The hidden host directories (`masked_dirs`).
        tmp: The private tmp (`private_tmp`).
        mounts: The binds after the masks, outermost first: ``(path, writable, only if it
            exists)``.
        visible: The canonical roots a working directory needs no bind of its own under.
        protected: The protected paths inside a writable root.
        anchors: The directories between a writable root and a protected path deeper in it,
            outermost first (`anchors`; those of hidden entries are found per command).
        denied: The ``deny_read`` entries not hidden already (a root in a hidden directory
            shows what lies under it).
        masked_denied: The others (a working directory there shows them: `denied_now`).
        locks: dsh's lock directory (`dsh_plugins_builtin._sandbox._locks`).
        locks_shown: A root shows it (it is not in ``/dev/shm`` or a hidden directory).
        sockets_allowed: ``allow_unix_sockets``, real paths.
        mask_prefixes: ``masks`` as `_hostsockets.prefixes`.
        patterns: The ``deny_read`` globs, matched again per command (`_denyglob`).
    """

    rw: tuple[Path, ...]
    host_tmp: Path
    masks: tuple[Path, ...]
    tmp: Path | None
    mounts: tuple[tuple[Path, bool, bool], ...]
    visible: frozenset[Path]
    protected: tuple[Path, ...]
    anchors: tuple[Path, ...]
    denied: tuple[Path, ...]
    masked_denied: tuple[Path, ...]
    locks: Path
    locks_shown: bool
    sockets_allowed: frozenset[str] = frozenset()
    mask_prefixes: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    @property
    def held(self) -> tuple[Path, ...]:
        """What a command takes from `MOUNT_POINTS`: the anchors, then the protected paths."""
        return (*self.anchors, *self.protected)

    def mounts_now(self, cwd: Path | None) -> list[tuple[Path, bool]]:
        """The binds for a command in *cwd*: ``(path, writable)``, outermost first."""
        out = [(path, rw) for path, rw, check in self.mounts if not check or path.exists()]
        if cwd is None or cwd in self.visible:
            return out
        real = canonical(cwd)
        if real in self.visible or any(path == real for path, _ in out):
            return out
        if inside_any(real, self.masks) and not inside_any(real, self.rw) and real.exists():
            out.append((real, False))  # a working directory in a hidden one stays visible
            out.sort(key=lambda item: (len(item[0].parts), str(item[0])))
        return out

    def locks_now(self, mounts: Iterable[tuple[Path, bool]]) -> Path | None:
        """The lock directory when a command with these binds would see it (then it gets an
        empty read-only tmpfs): a root or the working directory shows it, and it exists."""
        shown = self.locks_shown or any(under(self.locks, path) for path, _ in mounts)
        return self.locks if shown and self.locks.is_dir() else None

    def denied_now(self, mounts: Iterable[tuple[Path, bool]] = ()) -> list[tuple[Path, bool]]:
        """The existing ``deny_read`` entries still in view with these binds: ``(path, is a
        directory)``; one in a hidden directory that a bind shows (a working directory) too."""
        out = []
        shown = [p for p in self.masked_denied if any(under(p, m) for m, _ in mounts)]
        for path in (*self.denied, *shown):  # one lstat each (and a stat for a symlink)
            if not os.access(path, os.F_OK, follow_symlinks=False):
                continue  # missing, as most are: said without an exception raised for each
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    with contextlib.suppress(OSError):
                        mode = os.stat(path).st_mode
            except OSError:
                continue  # missing: nothing to hide
            out.append((path, stat.S_ISDIR(mode)))
        if self.patterns:  # what the globs cover now, made since the start included
            known = [path for path, _ in out]
            for path, is_dir in matching(self.patterns, self.rw):
                if not any(under(path, hidden) for hidden in known):
                    out.append((path, is_dir))
        return out

    def sockets_now(
        self, mounts: Iterable[tuple[Path, bool]], denied: Iterable[tuple[Path, bool]]
    ) -> list[Path]:
        """The host's listening Unix sockets a command with these binds and these hidden
        ``deny_read`` entries would see, but for ``allow_unix_sockets`` (`_hostsockets`)."""
        covers, allowed = _hostsockets.covers, self.sockets_allowed
        masks = self.mask_prefixes
        shown = _hostsockets.prefixes(path for path, _ in mounts)
        gone = _hostsockets.prefixes(path for path, _ in denied)

        def hidden(path: str) -> bool:
            if path in allowed or covers(path, gone):
                return True
            return covers(path, masks) and not covers(path, shown)

        return _hostsockets.in_view(_hostsockets.listening(), hidden)


# By policy: the policy, $XDG_RUNTIME_DIR, its layout, and the socket directories that did not
# exist then (one that appears since is hidden from the next command on: the layout is redone).
_LAYOUTS: dict[int, tuple[SandboxPolicy, str | None, Layout, tuple[str, ...]]] = {}


def layout_of(policy: SandboxPolicy) -> Layout:
    """*policy*'s `Layout`, computed at its first command (the last few policies are kept)."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    hit = _LAYOUTS.get(id(policy))
    if hit is not None and hit[0] is policy and hit[1] == runtime_dir:
        cached, absent = hit[2], hit[3]
        if not any(os.path.isdir(path) for path in absent):  # none of them made since
            return cached
    absent = tuple(text for text in _socket_dirs() if not os.path.isdir(text))
    rw = rw_roots(policy)
    masks = masked_dirs(policy)
    tmp = private_tmp(policy)
    mounts, visible = _mounts(policy, rw, masks, tmp)
    locks = canonical(_locks.lock_dir())
    hidden = tuple(
        p
        for p in policy.deny_read
        if inside_any(p, masks)
        and not inside_any(p, rw)
        and not any(under(p, path) for path, _, _ in mounts)
    )
    layout = Layout(
        rw=rw,
        host_tmp=canonical(Path("/tmp")),
        masks=masks,
        tmp=tmp,
        mounts=mounts,
        visible=visible,
        protected=(protected := outermost(p for p in protected_paths(policy) if inside_any(p, rw))),
        anchors=anchors(protected, rw),
        denied=tuple(p for p in policy.deny_read if p not in hidden),
        masked_denied=hidden,
        locks=locks,
        locks_shown=inside_any(locks, rw)
        or any(under(locks, path) for path, _, _ in mounts)
        or not inside_any(locks, (*masks, Path("/dev/shm"))),
        sockets_allowed=frozenset(str(canonical(path)) for path in policy.unix_sockets),
        mask_prefixes=_hostsockets.prefixes(masks),
        patterns=policy.deny_patterns,
    )
    if len(_LAYOUTS) >= 16:
        _LAYOUTS.clear()
    _LAYOUTS[id(policy)] = (policy, runtime_dir, layout, absent)
    return layout


def private_tmp(policy: SandboxPolicy) -> Path | None:
    """The private tmp's canonical path, when it is one of the writable roots."""
    if policy.tmp is None or policy.mode != "workspace-write":
        return None
    real = canonical(policy.tmp)
    return real if real in rw_roots(policy) else None


def inside_path(path: Path, tmp: Path | None) -> Path:
    """Where *path* (canonical) is seen inside bwrap: the private tmp is seen at ``/tmp``."""
    if tmp is not None and under(path, tmp) and tmp != Path("/"):
        return Path("/tmp", path.relative_to(tmp))
    return path


def masked_dirs(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The host directories that hold other programs' Unix sockets (and shared temp files):
    ``/tmp``, ``/var/tmp``, ``/run`` (``/var/run``) and ``$XDG_RUNTIME_DIR``; each existing one
    not inside a writable root is hidden (``/tmp`` shows the private tmp instead)."""
    rw = rw_roots(policy)
    tmp = private_tmp(policy)
    out: list[Path] = []
    for text in _socket_dirs():
        real = canonical(Path(text))
        if not real.is_dir() or real == Path("/") or any(under(real, o) for o in out):
            continue
        if any(under(real, root) for root in rw if root != tmp):
            continue  # configured writable: shared knowingly
        out = [o for o in out if not under(o, real)]
        out.append(real)
    return tuple(sorted(out, key=lambda p: (len(p.parts), str(p))))


def anchors(
    hidden: Iterable[Path], rw: tuple[Path, ...], known: tuple[Path, ...] = ()
) -> tuple[Path, ...]:
    """The directories between each of *hidden* and the innermost writable root holding it
    (none for one outside every root), outermost first, but for those in *known*.

    A command could rename such a directory away, with what is hidden in it, and see the thing
    under the new name or make its own in its place (``mv python x; mkdir -p python/src``,
    ``mv sub sub2; cat sub2/.env``). Bound onto itself each is a mount point, which the kernel
    will not rename or remove, its contents as writable as before."""
    found: dict[Path, None] = {}
    for path in hidden:
        roots = [r for r in rw if under(path, r)]
        if not roots:
            continue
        root = max(roots, key=lambda r: len(r.parts))
        for depth in range(len(root.parts) + 1, len(path.parts)):
            found.setdefault(Path(*path.parts[:depth]), None)
    return tuple(sorted((p for p in found if p not in known), key=lambda p: (len(p.parts), str(p))))


def _socket_dirs() -> tuple[str, ...]:
    """Where other programs keep their Unix sockets, as spelled (absolute only)."""
    spelled = ("/tmp", "/var/tmp", "/run", "/var/run", os.environ.get("XDG_RUNTIME_DIR", ""))
    return tuple(text for text in spelled if text.startswith("/"))


def _mounts(
    policy: SandboxPolicy, rw: tuple[Path, ...], masks: tuple[Path, ...], tmp: Path | None
) -> tuple[tuple[tuple[Path, bool, bool], ...], frozenset[Path]]:
    """Every bind after the masks, outermost first: ``(path, writable, only if it exists)``;
    and the canonical roots seen (a working directory under one of them needs no bind)."""
    mounts: dict[Path, tuple[bool, bool]] = {}
    pinned = {pin.path: pin.real for pin in policy.pins}  # as at start, not as now
    visible = [policy.workspace, *policy.read_roots]
    visible += policy.runtime  # dsh's installation (``rg`` among it), e.g. a venv under /tmp
    seen: set[Path] = set()
    for path in visible:  # a root that lies in a hidden directory stays visible
        real = pinned.get(path) or canonical(path)
        seen.add(real)
        covered = any(under(real, root) for root in rw)
        if inside_any(real, masks) and not covered:
            mounts.setdefault(real, (False, True))
    for root in rw:
        if root != tmp and not any(under(root, other) for other in rw if other != root):
            mounts[root] = (True, False)  # a root nested in another writable root is writable
    extra = list(policy.unix_sockets)
    resolv = canonical(Path("/etc/resolv.conf"))
    if policy.network and resolv != Path("/etc/resolv.conf"):
        extra.append(resolv)  # the name server configuration, often under /run
    for path in extra:
        real = canonical(path)
        if inside_any(real, masks) and not inside_any(real, rw):
            mounts.setdefault(real, (path in policy.unix_sockets, True))
    ordered = sorted(mounts.items(), key=lambda item: (len(item[0].parts), str(item[0])))
    return tuple((path, w, check) for path, (w, check) in ordered), frozenset(seen)
