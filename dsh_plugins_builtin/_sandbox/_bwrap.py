"""The bubblewrap command line: which paths a command sees, and how."""

from __future__ import annotations

import mmap
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from dsh_plugins_builtin._sandbox._devnodes import host_nodes, nodes
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._layout import (
    Layout,
    anchors,
    inside_path,
    layout_of,
    masked_dirs,
    private_tmp,
    rw_roots,
)
from dsh_plugins_builtin._sandbox._mountns import dev_plan
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from dsh_plugins_builtin._sandbox._paths import canonical, inside_any, under
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy

__all__ = [
    "MOUNT_POINTS",
    "Layout",
    "bwrap_argv",
    "canonical",
    "inside_any",
    "inside_path",
    "layout_of",
    "masked_dirs",
    "mount_plan",
    "open_roots",
    "private_tmp",
    "rw_roots",
    "seccomp_pipe",
    "under",
]


_PROC_READ_ONLY: Final = tuple(
    word
    for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
    for word in ("--ro-bind-try", path, path)
)
"""The parts of ``/proc`` that change the machine, not a process: kernel settings
(``/proc/sys/kernel/core_pattern`` names a program the kernel runs as root), the SysRq trigger,
interrupt affinity. A fresh ``/proc`` leaves them writable to the user that owns them (root, as
which a command of a root host runs, capabilities or not): each is bound read-only over itself."""


def _own_nodes() -> list[str]:
    """A root host's own device nodes over those ``--dev`` binds from the host (`_devnodes`)."""
    own = nodes()
    if own is None:
        return []
    return [w for name in host_nodes() for w in ("--dev-bind", f"{own}/{name}", f"/dev/{name}")]


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


_PAGE: Final = mmap.PAGESIZE  # a tmpfs size is rounded up to pages: each share, down


def bwrap_argv(
    argv: Sequence[str],
    policy: SandboxPolicy,
    cwd: Path | None,
    bwrap: str = "bwrap",
    seccomp_fd: int | None = None,
    root_fds: Mapping[Path, int] | None = None,
    missing: Collection[Path] | None = None,
    tmpfs_bytes: int | None = None,
    ways: Sequence[tuple[str, int]] = (),
) -> list[str]:
    """The bwrap command line for *argv*. The directories in RAM a command may write
    (``/dev/shm`` and the fresh ones over the host's socket directories: ``/run``,
    ``/var/tmp``...) hold at most *tmpfs_bytes* together (the command's memory limit: what it
    writes there is memory no address-space limit counts), an equal share each; ``/dev``
    itself is read-only, and in ``read-only`` mode all of them are."""
    layout = layout_of(policy)
    fds = root_fds or {}
    tmp = layout.tmp
    if missing is None:  # a command with no `take` and no `give_back`: a mounted server's
        missing = MOUNT_POINTS.hold(layout.held)
    scratch = ["/dev/shm", *(str(p) for p in layout.masks if p != layout.host_tmp or tmp is None)]
    share = None if tmpfs_bytes is None else max(tmpfs_bytes // len(scratch) // _PAGE, 1) * _PAGE
    size = [] if share is None else ["--size", str(share)]
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *_own_nodes()]
    out += [*size, "--tmpfs", "/dev/shm", "--proc", "/proc", *_PROC_READ_ONLY]
    for path in layout.masks:  # host socket directories: out of view (a fresh tmpfs, or our tmp)
        fd = fds.get(tmp) if tmp is not None and path == layout.host_tmp else None
        if tmp is not None and path == layout.host_tmp:
            out += (
                ["--bind-fd", str(fd), "/tmp"] if fd is not None else ["--bind", str(tmp), "/tmp"]
            )
        else:
            out += [*size, "--tmpfs", str(path)]  # writable, in RAM: read-only in read-only mode
    for seen, fd in ways:  # the way to a root in the private tmp: mount points (`_tmpway`)
        out += ["--bind-fd", str(fd), seen]
    mounts = layout.mounts_now(cwd)
    for path, writable in mounts:
        if writable and path in fds:
            out += ["--bind-fd", str(fds[path]), str(path)]  # the pinned directory itself
        else:
            out += ["--bind" if writable else "--ro-bind", str(path), str(path)]
    out += _hiding(layout, mounts, missing)
    locks = layout.locks_now(mounts)
    if locks is not None:  # dsh's lock files: out of reach even where a root shows them
        out += ["--tmpfs", str(locks), "--remount-ro", str(locks)]
    out += ["--remount-ro", "/dev"]  # after every mount point made in it (a root in /dev/shm)
    for place in scratch if policy.mode == "read-only" else ():
        out += ["--remount-ro", place]
    # The command (or the relay) is the namespace's first process: no bwrap init in view (its
    # /proc/1/exe was the host's bwrap, which a root command chmod-ed; its memory writable).
    out += ["--unshare-all", "--unshare-user-try", "--as-pid-1"]
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
    # A /dev of its own (no disk, input device or terminal of the host), before the roots: a
    # root under /dev (a workspace on /dev/shm) stays in view, as under bwrap's --dev. First of
    # all: a root host's own nodes (`_devnodes`) are in its state directory, which a mask
    # below may cover (a state directory under /tmp).
    own = nodes()
    plan: list[tuple[Any, ...]] = [*dev_plan("/dev" if own is None else str(own))]
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
    denied = layout.denied_now(mounts)
    sockets = layout.sockets_now(mounts, denied)
    for path in anchors((*(path for path, _ in denied), *sockets), layout.rw):
        plan.append(("bind", str(path), str(path), True, -1, -1))  # as in `bwrap_argv`
    for path, is_dir in denied:
        plan.append(("tmpfs", str(path), True) if is_dir else ("null", str(path)))
    plan += [("null", str(path)) for path in sockets]
    locks = layout.locks_now(mounts)
    if locks is not None:
        plan.append(("tmpfs", str(locks), True))
    plan.append(("proc",))
    return tuple(plan)


def _hiding(
    layout: Layout, mounts: list[tuple[Path, bool]], missing: Collection[Path]
) -> list[str]:
    """bwrap's arguments for what a command in a writable root must not reach: the anchors
    on the way, the protected paths, the ``deny_read`` entries and the host sockets."""
    out: list[str] = []
    denied = layout.denied_now(mounts)
    sockets = layout.sockets_now(mounts, denied)
    # Each directory between a writable root and what is hidden in it (a protected path, a
    # deny_read entry, a host socket) is bound onto itself: a mount point, which the command
    # cannot rename away with the hidden thing in it and remake in its place (`anchors`).
    hidden = (*(path for path, _ in denied), *sockets)
    below = tuple(f"{gone}/" for gone in missing)  # what lies below one of them (absolute)
    for path in (*layout.anchors, *anchors(hidden, layout.rw, layout.anchors)):
        if str(path).startswith(below):
            continue  # below a directory that is not there: covered by its empty tmpfs
        if path in missing:  # not there: nothing below it can be made either
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--bind", str(path), str(path)]
    for path in layout.protected:  # each one inside a writable root
        if str(path).startswith(below):
            continue  # below a directory that is not there: covered by its empty tmpfs
        if path in missing:
            # Not there yet: an empty read-only tmpfs is mounted there, so the command cannot
            # create it, nor .git/config or .claude/hooks/x inside it. bwrap makes an empty
            # directory as the mount point (see `_MountPoints`).
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    for path, is_dir in denied:  # an empty read-only tmpfs, or /dev/null
        out += ["--tmpfs", str(path), "--remount-ro"] if is_dir else ["--ro-bind", "/dev/null"]
        out.append(str(path))
    for path in sockets:  # connect() finds /dev/null: refused
        out += ["--ro-bind", "/dev/null", str(path)]
    return out
