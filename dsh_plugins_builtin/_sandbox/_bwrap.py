"""The bubblewrap command line: which paths a command sees, and how."""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots
from dsh_plugins_builtin._sandbox._protected import protected_paths

__all__ = [
    "MOUNT_POINTS",
    "bwrap_argv",
    "canonical",
    "inside_any",
    "open_roots",
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
    tmp = canonical(Path("/tmp"))
    rw = rw_roots(policy)
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    mounts: dict[Path, bool] = {}  # path -> writable
    if not any(under(tmp, root) for root in rw):
        out += ["--tmpfs", str(tmp)]
        visible = [policy.workspace, *policy.read_roots, *([cwd] if cwd is not None else [])]
        for path in visible:
            real = canonical(path)
            covered = any(under(real, root) for root in rw)
            if under(real, tmp) and real.exists() and not covered:
                mounts.setdefault(real, False)
    for root in rw:
        if not any(under(root, other) for other in rw if other != root):
            mounts[root] = True  # a root nested in another writable root is already writable
    fds = root_fds or {}
    for path in sorted(mounts, key=lambda p: (len(p.parts), str(p))):
        if mounts[path] and path in fds:
            out += ["--bind-fd", str(fds[path]), str(path)]  # the pinned directory itself
        else:
            out += ["--bind" if mounts[path] else "--ro-bind", str(path), str(path)]
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
    out += ["--unshare-all", "--unshare-user-try"]
    if policy.network:
        out.append("--share-net")
    out += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    if cwd is not None:
        out += ["--chdir", str(canonical(cwd))]
    return [*out, "--", *argv]


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
