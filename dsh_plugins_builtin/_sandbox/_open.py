"""Race-free reads: the fence's path opened beneath its root, following no symlink.

The root is opened from ``/`` without following symlinks and compared with its pin, and the
rest of the path is opened beneath that descriptor with ``openat2`` (``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``; see `dsh_plugins_builtin._sandbox._beneath`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from dsh_plugins_builtin._sandbox._beneath import (
    DIR_FLAGS,
    HAVE_OPENAT2,
    open_absolute,
    open_beneath,
    open_dir_nofollow,
    open_normal,
)
from dsh_plugins_builtin._sandbox._judge import denied_by, in_tmp, read_key
from dsh_plugins_builtin._sandbox._paths import PathArg, within
from dsh_plugins_builtin._sandbox._pins import gone, pin_holds
from dsh_plugins_builtin._sandbox._policy import RootReplaced, SandboxPolicy, readable_roots

__all__ = ["RACED", "open_read", "open_root", "relative", "root_of"]

RACED = (errno.ELOOP, errno.EXDEV)
_RETRIES = 3


def root_of(key: Path, roots: tuple[Path, ...]) -> Path:
    """The deepest root ``key`` lies under (the caller has checked that one does)."""
    best = Path("/")
    for root in roots:
        if within(str(key), str(root)) and len(str(root)) > len(str(best)):
            best = root
    return best


def _root_text(key: str, roots: tuple[str, ...]) -> str | None:
    """The deepest of ``roots`` (canonical, as text) that ``key`` lies under, or ``None``."""
    best: str | None = None
    for root in roots:
        if within(key, root) and (best is None or len(root) > len(best)):
            best = root
    return best


def open_root(root: str, policy: SandboxPolicy) -> int:
    """Open a canonical root from ``/`` following no symlink; compare it with its pin."""
    resolved = policy.resolved
    if resolved is not None:
        pin = resolved.pins.get(root)
    else:
        pin = next((p for p in policy.pins if str(p.real) == root), None)
    if pin is not None:
        # A pinned root: opened by its path and accepted only if it is the pinned directory
        # (device and inode), so no walk is needed; a mismatch takes the strict open below,
        # which says what changed.
        with contextlib.suppress(OSError):
            fd = os.open(root, DIR_FLAGS)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (pin.dev, pin.ino):
                return fd
            os.close(fd)
    try:
        fd = open_dir_nofollow(root)
    except OSError as exc:
        if pin is not None:
            raise RootReplaced(pin, gone(exc)) from None
        raise
    if pin is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            os.close(fd)
            raise RootReplaced(pin, "it is now another directory")
    return fd


def relative(key: Path, root: Path) -> str:
    """``key`` below ``root`` (both canonical, ``key`` under ``root``), as a relative path."""
    return _relative_text(str(key), str(root))


def _relative_text(text: str, base: str) -> str:
    if text == base:
        return "."
    return text[len(base) :].lstrip("/")


def _normal(joined: str) -> str | None:
    """*joined* with empty and ``.`` components dropped, absolute; ``None`` if it has ``..``.

    A path that is already so (most are) is returned as it is, without splitting it."""
    if (
        not joined.startswith("/")
        or "//" in joined
        or "/./" in joined
        or "/../" in joined
        or joined.endswith(("/", "/.", "/.."))
    ):
        parts = [part for part in joined.split("/") if part and part != "."]
        if ".." in parts:
            return None
        return "/" + "/".join(parts)
    return joined


def _lexical_key(spelled: str, policy: SandboxPolicy, pins_checked: bool) -> str | None:
    """The path as spelled, normalised, when it can be opened without resolving it first.

    That is: ASCII, no ``..`` component, and inside a readable root that is a canonical pinned
    root which still holds (`pin_holds`, or ``pins_checked``). ``None`` otherwise (and where
    ``openat2`` is missing): the caller resolves and fences it the long way.
    """
    resolved = policy.resolved
    if resolved is None or not HAVE_OPENAT2 or not spelled.isascii() or "\0" in spelled:
        return None
    spelled = in_tmp(spelled, policy)
    joined = spelled if spelled.startswith("/") else f"{policy.workspace}/{spelled}"
    key = _normal(joined)
    if key is None:
        return None  # ".." after a symlink climbs from where the symlink leads
    root = _root_text(key, resolved.readable_text)
    pin = None if root is None else resolved.pins.get(root)
    if pin is None or not (pins_checked or pin_holds(pin, root)):
        return None
    if (policy.deny_read or policy.deny_patterns) and denied_by(key, policy) is not None:
        return None  # the long way refuses it, naming the entry
    if key.startswith(("/proc/", "/dev/")) or key in ("/dev", "/proc"):
        return None  # the long way refuses /proc and devices, or lets a root there (`read_key`)
    return key


def open_read(
    path: PathArg, policy: SandboxPolicy, *, directory: bool = False, pins_checked: bool = False
) -> tuple[int, str]:
    """Fence a read, then open it beneath its root without following any symlink.

    Args:
        path: As spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.
        directory: Open a directory (for listing) instead of a file.
        pins_checked: The caller ran `check_pinned` on this policy just now (the roots are
            not looked at again; the opened file is still beneath its root).

    Returns:
        A new read-only descriptor (``O_NONBLOCK``: a FIFO does not hang the call) and the
        canonical path it is (text: a ``Path`` costs more than the read of a small file).

    Raises:
        FenceDenied: As `check_read`.
        RootReplaced: The root the path lies under was replaced since the host started.
        OSError: As ``open`` would; ``ELOOP`` when the path kept changing under the call.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    spelled = os.fspath(path)
    lexical = _lexical_key(spelled, policy, pins_checked)
    if lexical is not None:
        # No symlink may be met anywhere on the path: if the open succeeds, the path as
        # spelled (normalised, no "..") is the canonical path, inside a pinned root that still
        # holds. A symlink on it (ELOOP) is resolved and judged the long way, below.
        try:
            return open_normal(lexical, flags), lexical  # `_normal` made it so: no split
        except OSError as exc:
            if exc.errno not in RACED:
                raise
    for attempt in range(_RETRIES):
        key, checked = read_key(spelled, policy, pins_checked)
        try:
            return _open_judged(key, checked, policy, flags), key
        except OSError as exc:
            # A symlink raced in after the check: judge the path again (never follow it).
            if exc.errno not in RACED or attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _open_judged(key: str, checked: str | None, policy: SandboxPolicy, flags: int) -> int:
    """Open the canonical *key* the fence let through, beneath its root, no symlink followed."""
    resolved = policy.resolved
    pin = None
    if resolved is not None:
        root = _root_text(key, resolved.readable_text) or "/"
        if HAVE_OPENAT2:
            pin = resolved.pins.get(root)
    else:
        root = str(root_of(Path(key), readable_roots(policy)))
    if pin is not None and (checked == root or pin_holds(pin)):
        # The root is its pinned directory (one lstat, just now) and no component of the
        # canonical path may be a symlink: one openat2 from "/" opens the file the fence
        # judged, inside the root. (A directory put in the root's place in between lies where
        # the root did, so inside a writable root: nothing the fence would not let this call
        # read.)
        return open_absolute(key, flags)
    root_fd = open_root(root, policy)  # a replaced root raises RootReplaced
    try:
        return open_beneath(root_fd, _relative_text(key, root), flags)
    finally:
        os.close(root_fd)
