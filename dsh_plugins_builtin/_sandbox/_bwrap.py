"""The bubblewrap command line: which paths a command sees, and how."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from dsh_plugins_builtin._sandbox import _hostsockets, _locks
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._mountns import dev_plan
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from dsh_plugins_builtin._sandbox._paths import canonical, inside_any, under
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots
from dsh_plugins_builtin._sandbox._protected import protected_paths

__all__ = [
    "MOUNT_POINTS",
    "bwrap_argv",
    "canonical",
    "inside_any",
    "inside_path",
    "masked_dirs",
    "mount_plan",
    "open_roots",
    "private_tmp",
    "rw_roots",
    "seccomp_pipe",
    "under",
]


def seccomp_pipe(program: bytes) -> int:
    """A pipe holding ``program`` (bwrap reads ``--seccomp FD`` to its end); the read end."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)  # a few KiB: fits the pipe buffer, never blocks
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return read_fd


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


def open_roots(policy: SandboxPolicy, opened: list[int]) -> dict[Path, int]:
    """Open every writable root and check it is still the pinned directory (appends to
    ``opened``). bwrap then binds these descriptors, so a swap after this check binds nothing
    else."""
    pins = {pin.real: pin for pin in policy.pins}
    fds: dict[Path, int] = {}
    for root in layout_of(policy).rw:
        try:
            fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SandboxUnavailable(
                f'the writable root "{root}" cannot be opened ({exc.strerror}); it was replaced '
                "or removed since the host started",
                mode=policy.mode,
            ) from None
        opened.append(fd)
        st = os.fstat(fd)
        pin = pins.get(root)
        if pin is not None and (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            raise SandboxUnavailable(
                f'the writable root "{pin.path}" was replaced since the host started (it is now '
                "another directory); restart the host on the intended directory",
                mode=policy.mode,
            )
        fds[root] = fd
    return fds


def bwrap_argv(
    argv: Sequence[str],
    policy: SandboxPolicy,
    cwd: Path | None,
    bwrap: str = "bwrap",
    seccomp_fd: int | None = None,
    root_fds: Mapping[Path, int] | None = None,
    missing: Collection[Path] | None = None,
) -> list[str]:
    layout = layout_of(policy)
    fds = root_fds or {}
    tmp = layout.tmp
    if missing is None:  # a command with no `take` and no `give_back`: a mounted server's
        missing = MOUNT_POINTS.hold(layout.protected)
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in layout.masks:  # host socket directories: out of view (a fresh tmpfs, or our tmp)
        if tmp is not None and path == layout.host_tmp:
            fd = fds.get(tmp)
            out += (
                ["--bind-fd", str(fd), "/tmp"] if fd is not None else ["--bind", str(tmp), "/tmp"]
            )
        else:
            out += ["--tmpfs", str(path)]
    mounts = layout.mounts_now(cwd)
    for path, writable in mounts:
        if writable and path in fds:
            out += ["--bind-fd", str(fds[path]), str(path)]  # the pinned directory itself
        else:
            out += ["--bind" if writable else "--ro-bind", str(path), str(path)]
    for path in layout.protected:  # each one inside a writable root
        if path in missing:
            # Not there yet: an empty read-only tmpfs is mounted there, so the command cannot
            # create it, nor .git/config or .claude/hooks/x inside it. bwrap makes an empty
            # directory as the mount point (see `_MountPoints`).
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    denied = layout.denied_now(mounts)
    for path, is_dir in denied:  # an empty read-only tmpfs, or /dev/null
        out += ["--tmpfs", str(path), "--remount-ro"] if is_dir else ["--ro-bind", "/dev/null"]
        out.append(str(path))
    for path in layout.sockets_now(mounts, denied):  # connect() finds /dev/null: refused
        out += ["--ro-bind", "/dev/null", str(path)]
    locks = layout.locks_now(mounts)
    if locks is not None:  # dsh's lock files: out of reach even where a root shows them
        out += ["--tmpfs", str(locks), "--remount-ro", str(locks)]
    out += ["--unshare-all", "--unshare-user-try"]
    if policy.network:
        out.append("--share-net")
    out += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    if cwd is not None:
        out += ["--chdir", str(inside_path(canonical(cwd), tmp))]
    return [*out, "--", *argv]


def mount_plan(policy: SandboxPolicy) -> tuple[tuple[Any, ...], ...]:
    """What Landlock's mount namespace does (`dsh_plugins_builtin._sandbox._mountns`): the same
    view as `bwrap_argv` gives, minus the protected paths (Landlock refuses those)."""
    layout = layout_of(policy)
    tmp = layout.tmp
    pins = {pin.real: pin for pin in policy.pins}
    plan: list[tuple[Any, ...]] = []
    for path in layout.masks:
        if tmp is not None and path == layout.host_tmp:
            pin = pins.get(tmp)
            ident = (pin.dev, pin.ino) if pin is not None else (-1, -1)
            plan.append(("bind", str(tmp), "/tmp", True, *ident))
        else:
            plan.append(("tmpfs", str(path), False))
    mounts = layout.mounts_now(None)
    for path, writable in mounts:
        pin = pins.get(path)  # a pinned root: bound only if it is still that directory
        ident = (pin.dev, pin.ino) if pin is not None else (-1, -1)
        plan.append(("bind", str(path), str(path), writable, *ident))
    plan += dev_plan()  # a /dev of its own: no disk, input device or terminal of the host
    denied = layout.denied_now(mounts)
    for path, is_dir in denied:
        plan.append(("tmpfs", str(path), True) if is_dir else ("null", str(path)))
    plan += [("null", str(path)) for path in layout.sockets_now(mounts, denied)]
    locks = layout.locks_now(mounts)
    if locks is not None:
        plan.append(("tmpfs", str(locks), True))
    plan.append(("proc",))
    return tuple(plan)


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
        denied: The ``deny_read`` entries not hidden already (a root in a hidden directory
            shows what lies under it).
        masked_denied: The others (a working directory there shows them: `denied_now`).
        locks: dsh's lock directory (`dsh_plugins_builtin._sandbox._locks`).
        locks_shown: A root shows it (it is not in ``/dev/shm`` or a hidden directory).
        sockets_allowed: ``allow_unix_sockets``, real paths.
        mask_prefixes: ``masks`` as `_hostsockets.prefixes`.
    """

    rw: tuple[Path, ...]
    host_tmp: Path
    masks: tuple[Path, ...]
    tmp: Path | None
    mounts: tuple[tuple[Path, bool, bool], ...]
    visible: frozenset[Path]
    protected: tuple[Path, ...]
    denied: tuple[Path, ...]
    masked_denied: tuple[Path, ...]
    locks: Path
    locks_shown: bool
    sockets_allowed: frozenset[str] = frozenset()
    mask_prefixes: tuple[str, ...] = ()

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
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    with contextlib.suppress(OSError):
                        mode = os.stat(path).st_mode
            except OSError:
                continue  # missing: nothing to hide
            out.append((path, stat.S_ISDIR(mode)))
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
        protected=_outermost(p for p in protected_paths(policy) if inside_any(p, rw)),
        denied=tuple(p for p in policy.deny_read if p not in hidden),
        masked_denied=hidden,
        locks=locks,
        locks_shown=inside_any(locks, rw)
        or any(under(locks, path) for path, _, _ in mounts)
        or not inside_any(locks, (*masks, Path("/dev/shm"))),
        sockets_allowed=frozenset(str(canonical(path)) for path in policy.unix_sockets),
        mask_prefixes=_hostsockets.prefixes(masks),
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


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """*paths* without those under another of them (read-only already, and no mount point can
    be made in a read-only directory), in their order."""
    given = tuple(dict.fromkeys(paths))
    return tuple(p for p in given if not any(o != p and under(p, o) for o in given))


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
