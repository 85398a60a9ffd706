"""The bubblewrap command line: which paths a command sees, and how."""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
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


def inside_any(path: Path, roots: Iterable[Path]) -> bool:
    return any(under(path, root) for root in roots)


def under(path: Path, root: Path) -> bool:
    return root == Path("/") or path == root or root in path.parents


def canonical(path: Path) -> Path:
    return Path(os.path.realpath(path))


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
    for root in rw_roots(policy):
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
    rw = rw_roots(policy)
    fds = root_fds or {}
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    masks = masked_dirs(policy)
    tmp = private_tmp(policy)
    for path in masks:  # host socket directories: out of view (a fresh tmpfs, or our tmp)
        if tmp is not None and path == canonical(Path("/tmp")):
            fd = fds.get(tmp)
            out += (
                ["--bind-fd", str(fd), "/tmp"] if fd is not None else ["--bind", str(tmp), "/tmp"]
            )
        else:
            out += ["--tmpfs", str(path)]
    for path, writable in _mounts(policy, cwd, rw, masks, tmp):
        if writable and path in fds:
            out += ["--bind-fd", str(fds[path]), str(path)]  # the pinned directory itself
        else:
            out += ["--bind" if writable else "--ro-bind", str(path), str(path)]
    out += _protect_args(policy, rw, missing)
    out += _deny_args(policy, rw, masks)
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
    rw = rw_roots(policy)
    masks = masked_dirs(policy)
    tmp = private_tmp(policy)
    plan: list[tuple[Any, ...]] = []
    for path in masks:
        if tmp is not None and path == canonical(Path("/tmp")):
            pin = next((p for p in policy.pins if p.real == tmp), None)
            ident = (pin.dev, pin.ino) if pin is not None else (-1, -1)
            plan.append(("bind", str(tmp), "/tmp", True, *ident))
        else:
            plan.append(("tmpfs", str(path), False))
    pins = {pin.real: pin for pin in policy.pins}
    for path, writable in _mounts(policy, None, rw, masks, tmp):
        pin = pins.get(path)  # a pinned root: bound only if it is still that directory
        ident = (pin.dev, pin.ino) if pin is not None else (-1, -1)
        plan.append(("bind", str(path), str(path), writable, *ident))
    for dev in ("/dev/pts", "/dev/shm"):  # no terminal of the host, no shared memory
        if os.path.isdir(dev):
            plan.append(("tmpfs", dev, False))
    for path, is_dir in _denied(policy, rw, masks):
        plan.append(("tmpfs", str(path), True) if is_dir else ("null", str(path)))
    plan.append(("proc",))
    return tuple(plan)


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
    spelled = ["/tmp", "/var/tmp", "/run", "/var/run", os.environ.get("XDG_RUNTIME_DIR", "")]
    for text in spelled:
        if not text.startswith("/"):
            continue
        real = canonical(Path(text))
        if not real.is_dir() or real == Path("/") or any(under(real, o) for o in out):
            continue
        if any(under(real, root) for root in rw if root != tmp):
            continue  # configured writable: shared knowingly
        out = [o for o in out if not under(o, real)]
        out.append(real)
    return tuple(sorted(out, key=lambda p: (len(p.parts), str(p))))


def _mounts(
    policy: SandboxPolicy,
    cwd: Path | None,
    rw: tuple[Path, ...],
    masks: tuple[Path, ...],
    tmp: Path | None,
) -> list[tuple[Path, bool]]:
    """Every bind after the masks, outermost first: ``(path, writable)``."""
    mounts: dict[Path, bool] = {}
    pinned = {pin.path: pin.real for pin in policy.pins}  # as at start, not as now
    visible = [policy.workspace, *policy.read_roots, *([cwd] if cwd is not None else [])]
    visible += policy.runtime  # dsh's installation (``rg`` among it), e.g. a venv under /tmp
    for path in visible:  # a root that lies in a hidden directory stays visible
        real = pinned.get(path) or canonical(path)
        covered = any(under(real, root) for root in rw)
        if inside_any(real, masks) and real.exists() and not covered:
            mounts.setdefault(real, False)
    for root in rw:
        if root != tmp and not any(under(root, other) for other in rw if other != root):
            mounts[root] = True  # a root nested in another writable root is already writable
    extra = list(policy.unix_sockets)
    resolv = canonical(Path("/etc/resolv.conf"))
    if policy.network and resolv != Path("/etc/resolv.conf"):
        extra.append(resolv)  # the name server configuration, often under /run
    for path in extra:
        real = canonical(path)
        if inside_any(real, masks) and os.path.exists(real) and not inside_any(real, rw):
            mounts.setdefault(real, path in policy.unix_sockets)
    return sorted(mounts.items(), key=lambda item: (len(item[0].parts), str(item[0])))


def _protect_args(
    policy: SandboxPolicy, rw: tuple[Path, ...], missing: Collection[Path] | None
) -> list[str]:
    out: list[str] = []
    for path in protected_paths(policy):
        if not inside_any(path, rw):
            continue  # outside every writable root it is read-only already
        if path in missing if missing is not None else not os.path.lexists(path):
            # Not there yet: an empty read-only tmpfs is mounted there, so the command cannot
            # create it, nor .git/config or .claude/hooks/x inside it. bwrap makes an empty
            # directory as the mount point (see `_MountPoints`).
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    return out


def _denied(
    policy: SandboxPolicy, rw: tuple[Path, ...], masks: tuple[Path, ...]
) -> list[tuple[Path, bool]]:
    """The existing ``deny_read`` entries still in view: ``(path, is a directory)``."""
    out = []
    for path in policy.deny_read:
        if inside_any(path, masks) and not inside_any(path, rw):
            continue  # hidden already
        if os.path.isdir(path):
            out.append((path, True))
        elif os.path.lexists(path):
            out.append((path, False))
    return out


def _deny_args(policy: SandboxPolicy, rw: tuple[Path, ...], masks: tuple[Path, ...]) -> list[str]:
    """``deny_read``: an empty read-only tmpfs over a directory, ``/dev/null`` over a file."""
    out: list[str] = []
    for path, is_dir in _denied(policy, rw, masks):
        if is_dir:
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", "/dev/null", str(path)]
    return out


class _MountPoints:
    """The empty directories bwrap makes where it mounts a tmpfs over a missing protected path.

    Without this, every command would leave ``.git``, ``.claude``, ``.dsh`` and ``dsh.toml``
    behind as empty directories in each writable root (``/tmp`` included), where a person or a
    tool later trips over them. A path is *ours* from the first command that finds it missing
    until the last command that mounted over it has ended; then its directory is removed if it
    is still empty (``rmdir``: never a file, a link or anything with contents). A command that
    starts meanwhile mounts over it too, rather than bind it as an existing path that may
    vanish before bwrap gets to it. Commands of other processes may still race with the removal;
    they then fail to set up (closed), never run unconfined.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, tuple[int, tuple[Path, ...]]] = {}  # uses, parents bwrap makes

    def take(self, paths: Iterable[Path]) -> frozenset[Path]:
        """Of *paths*, the ones to mount over (missing now, or ours); each is counted in use."""
        taken: set[Path] = set()
        with self._lock:
            for path in paths:
                if path in self._users:
                    uses, parents = self._users[path]
                    self._users[path] = (uses + 1, parents)
                elif not os.path.lexists(path):
                    missing = []  # bwrap makes these too (`mkdir -p`); removed after the path
                    parent = path.parent
                    while parent != parent.parent and not os.path.lexists(parent):
                        missing.append(parent)
                        parent = parent.parent
                    self._users[path] = (1, tuple(missing))
                else:
                    continue
                taken.add(path)
        return frozenset(taken)

    def give_back(self, paths: Iterable[Path]) -> None:
        """The command that took *paths* has ended: remove the ones no command uses now."""
        with self._lock:
            for path in paths:
                uses, parents = self._users[path]
                if uses > 1:
                    self._users[path] = (uses - 1, parents)
                    continue
                del self._users[path]
                for directory in (path, *parents):  # the deepest first
                    if not _remove_empty(directory):
                        break  # not empty, gone, not a directory: keep it (and above)


def _remove_empty(directory: Path) -> bool:
    """``rmdir`` the canonical *directory*, reached from ``/`` through no symlink (a command may
    have swapped a parent for one, to aim the removal elsewhere); whether it was removed."""
    try:
        parent = open_dir_nofollow(str(directory.parent))
    except OSError:
        return False
    try:
        os.rmdir(directory.name, dir_fd=parent)
    except OSError:
        return False
    finally:
        os.close(parent)
    return True


MOUNT_POINTS = _MountPoints()
