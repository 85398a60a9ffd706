"""The Landlock backend's view of the filesystem: a private mount namespace per command.

`Plan` is built in the host (`dsh_plugins_builtin._sandbox._bwrap.mount_plan`, the same
decisions as bwrap's command line) and carried out by the command's process between ``fork``
and ``exec`` (`apply`), before Landlock and seccomp: it hides the host's socket directories
(``/tmp``, ``/var/tmp``, ``/run``, ``$XDG_RUNTIME_DIR``) under empty tmpfs mounts, binds the
private tmp at ``/tmp``, binds back the roots and allowed sockets that lay in them, hides every
``deny_read`` entry (an empty read-only tmpfs over a directory, ``/dev/null`` over a file)
and every listening host socket still in view (``/dev/null``: `_hostsockets`),
gives it a ``/dev`` of its own as bwrap's ``--dev`` does (`dev_plan`: ``null``, ``zero``,
``full``, ``random``, ``urandom`` and ``tty`` bound from the host, the ``fd`` and ``std*``
links, and empty ``pts`` and ``shm``: no disk, input device, console or terminal of the host,
no shared memory) and mounts a ``/proc`` of the command's own PID namespace (no host process
is visible).

Each step is a list: ``["tmpfs", path, read_only]`` (``[..., size]``: at most that many
bytes), ``["bind", source, target, writable]``, ``["null", path]``, ``["symlink", target,
path]``, ``["proc"]``, ``["proc-ro", path]`` (an entry of the ``/proc`` just mounted, bound
read-only onto itself), ``["devpts"]`` (a fresh instance on ``/dev/pts``), ``["seal", path]``
(a protected path that does not exist: its directory made, an empty read-only tmpfs over it).
Bind sources are opened before the first step hides them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from dsh_plugins_builtin._sandbox._beneath import DIR_FLAGS, mkdir_beneath, open_beneath

__all__ = ["Plan", "apply", "dev_plan", "places"]

Plan = tuple[tuple[Any, ...], ...]

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_NOATIME = 1024
_MS_NODIRATIME = 2048
_MS_RELATIME = 1 << 21
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_CLONE_NEWNS = 0x00020000


_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)


@functools.cache
def dev_plan(source: str = "/dev") -> tuple[tuple[Any, ...], ...]:
    """The steps of a ``/dev`` of the command's own, as bwrap's ``--dev`` makes one. The
    host's ``/dev`` would show its disks (as root, read whole, whatever ``deny_read`` says),
    input devices, consoles and terminals: Landlock lets a command read every file, devices
    included. The nodes are bound from *source* (a root host's own copies: `_devnodes`). Made
    once: which of those nodes the host has does not change."""
    plan: list[tuple[Any, ...]] = [("tmpfs", "/dev", False)]
    for name in _DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            plan.append(("bind", f"{source}/{name}", f"/dev/{name}", True))
    plan += [("symlink", target, f"/dev/{name}") for name, target in _DEV_LINKS]
    plan += [("tmpfs", "/dev/pts", False), ("tmpfs", "/dev/shm", False)]
    return tuple(plan)


def _target(path: str, *, directory: bool, make: bool = True) -> int:
    """An ``O_PATH`` descriptor of the mount point *path*, made if missing (an empty directory
    or file), every level reached from a fresh ``/`` following no symlink. With *make* false
    nothing is made (``FileNotFoundError``): a step that only hides what is there must not
    leave a file or directory on the host where a socket or a ``deny_read`` entry was."""
    root = os.open("/", DIR_FLAGS)  # this namespace's "/", not one held from before
    try:
        rel = path.strip("/")
        if not make:
            return open_beneath(root, rel, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        if directory:
            return mkdir_beneath(root, rel)
        parent_rel, name = os.path.split(rel)
        parent = mkdir_beneath(root, parent_rel) if parent_rel else os.dup(root)
        try:
            with contextlib.suppress(FileExistsError):
                flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(name, flags, 0o600, dir_fd=parent))
            return open_beneath(parent, name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        finally:
            os.close(parent)
    finally:
        os.close(root)


def _reach(step: Sequence[Any], source: str, fail: Callable[[str], NoReturn]) -> int | None:
    """The mount point of *step*, reached from a fresh ``/`` following no symlink (a command
    may have planted one): made if missing, but for a step that only hides (a socket, a
    ``deny_read`` entry), which gets ``None`` for a target that is gone."""
    kind = step[0]
    path = step[2] if kind == "bind" else step[1]
    hides = kind == "null" or (kind == "tmpfs" and step[2])
    directory = kind in ("tmpfs", "seal") or os.path.isdir(source)
    try:
        return _target(path, directory=directory, make=not hides)
    except OSError as exc:
        if hides and isinstance(exc, FileNotFoundError):
            return None
        fail(f"reaching the mount point {path} (no symlink may be on the way)")


def _open_source(step: Sequence[Any], fail: Callable[[str], NoReturn]) -> int:
    """Open a bind source; a pinned root must still be the directory it was at start."""
    try:
        fd = os.open(step[1], os.O_PATH | os.O_CLOEXEC)
        st = os.fstat(fd)
    except OSError:
        fail(f"opening {step[1]} to bind it")
    dev, ino = (step[4], step[5]) if len(step) > 5 else (-1, -1)
    if dev >= 0 and (st.st_dev, st.st_ino) != (dev, ino):
        fail(f"the root {step[1]} was replaced since the host started; binding it")
    return fd


def _read_only_flags(at: str) -> int:
    """Flags that remount the bind at *at* read-only, keeping what the kernel locks (a remount
    in a user namespace may not drop the source's nosuid, nodev, noexec or atime flags)."""
    kept = os.statvfs(at).f_flag
    flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    flags |= kept & (_MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME)  # ST_* and MS_* agree here
    return flags | (_MS_RELATIME if kept & os.ST_RELATIME else 0)


def _read_only(
    mount: Callable[[str | None, str, str | None, int, str], None],
    path: str,
    directory: bool,
    fail: Callable[[str], NoReturn],
) -> None:
    """Remount the bind just made at *path* read-only in the mount itself: Landlock grants by
    path, so a bind placed under a writable root (the private /tmp) would inherit its rights."""
    try:  # the mount's own root now, reached as the mount point was
        target = _target(path, directory=directory)
    except OSError:
        fail(f"reaching the mount point {path} (no symlink may be on the way)")
    at = f"/proc/self/fd/{target}"
    try:
        mount(None, at, None, _read_only_flags(at), f"making {path} read-only:")
    finally:
        os.close(target)


def _proc_read_only(
    mount: Callable[[str | None, str, str | None, int, str], None],
    path: str,
    fail: Callable[[str], NoReturn],
) -> None:
    """Bind *path* of the ``/proc`` just mounted onto itself, read-only (as bwrap's
    ``--ro-bind-try``): nothing to do where this kernel has no such entry."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError:
        fail(f"reaching {path}")
    at = f"/proc/self/fd/{fd}"
    try:
        mount(at, at, None, _MS_BIND, f"binding {path} onto itself:")
    finally:
        os.close(fd)
    _read_only(mount, path, os.path.isdir(path), fail)


def _symlink(target: str, path: str, fail: Callable[[str], NoReturn]) -> None:
    """Make the link *path* (in a directory this plan just mounted) pointing at *target*."""
    parent, name = os.path.split(path)
    try:
        directory = _target(parent, directory=True)
    except OSError:
        fail(f"reaching {parent} to link {name}")
    try:
        os.symlink(target, name, dir_fd=directory)
    except OSError:
        fail(f"linking {path}")
    finally:
        os.close(directory)


def _mounter(libc: ctypes.CDLL, fail: Callable[[str], NoReturn]) -> Callable[..., None]:
    """``mount(source, target, kind, flags, what, size=0)``: one ``mount(2)``, or *fail*."""

    def mount(
        source: str | None, target: str, kind: str | None, flags: int, what: str, size: int = 0
    ) -> None:
        ctypes.set_errno(0)
        data = None if kind != "tmpfs" else b"mode=0755" + (b",size=%d" % size if size else b"")
        if kind == "devpts":  # as bwrap's --dev mounts one: its own, no terminal of the host's
            data = b"newinstance,ptmxmode=0666,mode=620"
        if (
            libc.mount(
                None if source is None else source.encode(),
                target.encode(),
                None if kind is None else kind.encode(),
                ctypes.c_ulong(flags),
                data,
            )
            != 0
        ):
            fail(f"{what} {target}")

    return mount


_WHOLE = frozenset(("proc", "proc-ro", "devpts", "symlink"))
"""The steps with no mount point to reach first (`_whole`)."""


def _whole(
    mount: Callable[..., None], step: Sequence[Any], fail: Callable[[str], NoReturn]
) -> None:
    """A step of `_WHOLE`: a fresh ``/proc`` or ``/dev/pts``, a part of ``/proc`` read-only, a
    link."""
    kind = step[0]
    if kind == "proc":
        mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "mounting")
    elif kind == "proc-ro":
        _proc_read_only(mount, step[1], fail)
    elif kind == "devpts":
        mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "mounting")
    else:
        _symlink(step[1], step[2], fail)


def places(plan: Sequence[Sequence[Any]]) -> frozenset[str]:
    """Where *plan*'s steps mount, for `_viewtable.shows`: not a link, nor a part of ``/proc``
    this kernel may not have (bwrap's ``--ro-bind-try``). A step that only hides what is gone
    by the time it runs mounts nothing either (`_reach`)."""
    out = set()
    for step in plan:
        kind = step[0]
        if kind in ("symlink", "proc-ro"):
            continue
        out.add(
            {"proc": "/proc", "devpts": "/dev/pts"}.get(kind)
            or (step[2] if kind == "bind" else step[1])
        )
    return frozenset(out)


def apply(
    libc: ctypes.CDLL,
    plan: Sequence[Sequence[Any]],
    fail: Callable[[str], NoReturn],
    *,
    fresh: bool = True,
    cwd: str | None = None,
) -> None:
    """Carry out *plan* in a new mount namespace (in the forked command, before ``exec``);
    with *fresh* false, in the one the caller made already (a kept view's early steps). Then
    enter *cwd* (default: the working directory, by its path) in the new view."""

    mount = _mounter(libc, fail)
    try:
        cwd = os.getcwd() if cwd is None else cwd
    except OSError:
        fail("finding the working directory")
    if fresh:
        if libc.unshare(ctypes.c_int(_CLONE_NEWNS)) != 0:
            fail("unshare(CLONE_NEWNS)")
        mount(None, "/", None, _MS_REC | _MS_PRIVATE, "making private")
    sources: dict[int, int] = {}
    for i, step in enumerate(plan):  # in the new namespace, before anything is hidden
        if step[0] == "bind":
            sources[i] = _open_source(step, fail)
    for i, step in enumerate(plan):
        kind = step[0]
        if kind in _WHOLE:
            _whole(mount, step, fail)
            continue
        source = f"/proc/self/fd/{sources[i]}" if kind == "bind" else "/dev/null"
        path = step[2] if kind == "bind" else step[1]
        target = _reach(step, source, fail)
        if target is None:
            continue  # what it would hide is gone since the plan was made
        at = f"/proc/self/fd/{target}"
        if kind in ("tmpfs", "seal"):
            flags = _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if kind == "seal" or step[2] else 0)
            size = step[3] if kind == "tmpfs" and len(step) > 3 else 0
            mount("tmpfs", at, "tmpfs", flags, f"mounting a tmpfs on {path}:", size)
        else:
            mount(source, at, None, _MS_BIND | _MS_REC, f"binding {path}:")
            if kind == "bind" and not step[3]:
                _read_only(mount, path, os.path.isdir(source), fail)
        os.close(target)
    for fd in sources.values():
        os.close(fd)
    try:  # the old working directory lies in the mounts now covered: enter the new view
        os.chdir(cwd)
    except OSError:
        fail(f"entering the working directory {cwd} in the new view")
