"""Root pins: every root's device and inode at start, so a replaced root is refused later."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import attrs

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow
from dsh_plugins_builtin._sandbox._paths import resolve_abs
from dsh_plugins_builtin._sandbox._policy import (
    RootPin,
    RootReplaced,
    SandboxPolicy,
    _Resolved,
    readable_roots,
    writable_roots,
)
from dsh_plugins_builtin._sandbox._protected import protected_paths

__all__ = ["check_pinned", "gone", "pin_holds", "pin_roots", "read_only"]


def pin_roots(policy: SandboxPolicy) -> SandboxPolicy:
    """Return *policy* with every root it names (workspace, writable and read roots) pinned.

    Each existing root is resolved once, here, and its device and inode recorded; `check_pinned`
    later refuses a call whose root has since been replaced. Missing roots are not pinned (they
    match nothing, as before). The canonical readable, writable and protected paths are
    computed here too, once: a call never canonicalises a root again.
    """
    pins: dict[Path, RootPin] = {}
    for root in (policy.workspace, *policy.writable_roots, *policy.read_roots):
        if root in pins:
            continue
        try:
            real = Path(resolve_abs(str(root)))
            st = os.stat(real, follow_symlinks=False)
        except (OSError, ValueError):
            continue
        if stat.S_ISDIR(st.st_mode):
            pins[root] = RootPin(root, real, st.st_dev, st.st_ino)
    return _resolved(attrs.evolve(policy, pins=tuple(pins.values())))


def read_only(policy: SandboxPolicy) -> SandboxPolicy:
    """*policy* with nothing writable (mode ``read-only``): the same roots, the same pins (no
    root is resolved or pinned again, so a root replaced since the start is still refused)."""
    return _resolved(attrs.evolve(policy, mode="read-only"))


def _resolved(pinned: SandboxPolicy) -> SandboxPolicy:
    """*pinned* with its canonical roots and protected paths worked out, once."""
    readable, writable = readable_roots(pinned), writable_roots(pinned)
    by_real = {str(pin.real): pin for pin in pinned.pins}
    canonical = [
        (str(pin.real) + "/", pin)
        for pin in pinned.pins
        if pin.path == pin.real and str(pin.real) != "/"
    ]
    canonical.sort(key=lambda item: len(item[0]), reverse=True)
    resolved = _Resolved(
        readable,
        writable,
        protected_paths(pinned),
        tuple(str(root) for root in readable),
        tuple(str(root) for root in writable),
        by_real,
        tuple(canonical),
        tuple((str(pin.real), pin) for pin in pinned.pins if pin.path == pin.real),
        tuple(pin for pin in pinned.pins if pin.path != pin.real),
    )
    object.__setattr__(pinned, "resolved", resolved)  # frozen: set once, right after creation
    return pinned


def pin_holds(pin: RootPin, real: str | None = None) -> bool:
    """Whether the root's canonical path (``real``) still leads to the pinned directory.

    One ``lstat``. A symlink at the root itself fails; so does another directory. A symlinked
    directory *above* it that still leads to the very same directory (device and inode)
    passes: it is the same tree (and a file is opened by its canonical path following no
    symlink anywhere on it, so such a read fails closed).
    """
    try:
        st = os.stat(pin.real if real is None else real, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return not stat.S_ISLNK(st.st_mode) and (st.st_dev, st.st_ino) == (pin.dev, pin.ino)


def check_pinned(policy: SandboxPolicy) -> None:
    """Raise `RootReplaced` if a pinned root's path no longer leads to the same directory.

    The check looks at each root path without following a final symlink: a root that is now a
    symlink, or a directory with another device or inode, fails. It costs one ``lstat`` per
    canonical root (`pin_holds`); the roots are never resolved again.
    """
    resolved = policy.resolved
    if resolved is not None and not resolved.others:
        for real, pin in resolved.canonical:
            if not pin_holds(pin, real):
                break  # replaced: the loop below says how
        else:
            return
    for pin in policy.pins:
        if pin.path == pin.real:
            if pin_holds(pin):
                continue
            # Replaced: open it following no symlink to say how.
            try:
                fd = open_dir_nofollow(str(pin.real))
            except OSError as exc:
                raise RootReplaced(pin, gone(exc)) from None
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
                raise RootReplaced(pin, "it is now another directory")
            continue
        try:
            real = resolve_abs(str(pin.path))
            st = os.stat(pin.path, follow_symlinks=False)
        except (OSError, ValueError) as exc:
            raise RootReplaced(pin, f"it cannot be inspected: {exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise RootReplaced(pin, "it is now a symbolic link")
        if real != str(pin.real) or (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            raise RootReplaced(pin, "it is now another directory")


def gone(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return "it, or a directory above it, is now a symbolic link"
    if exc.errno == errno.ENOENT:
        return "it no longer exists"
    return f"it cannot be opened: {exc.strerror or exc}"
