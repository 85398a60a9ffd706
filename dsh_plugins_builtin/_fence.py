"""The file fence: which paths the file tools may read and write under a sandbox policy.

This is a *policy fence*, not a kernel boundary: trusted code checks a model-controlled path
before touching it. A path is judged by its **real** location: every symlink and ``..`` is
resolved component by component (as ``chdir`` would), and for a path that does not exist yet
the real path of its deepest existing ancestor is taken and the missing suffix re-appended.

* ``danger-full-access``: nothing is fenced.
* ``workspace-write``: writes must land under a writable root (by default the workspace,
  ``/tmp`` and the platform temp dir); reads under the workspace, a writable root or an extra
  read root.
* ``read-only``: every write is denied; reads as for ``workspace-write``.

`atomic_write_text` publishes a write through a temp file and ``os.replace``. It walks to the
parent directory one component at a time without following symlinks (``O_NOFOLLOW``), creates
missing parents (fencing each), and re-checks the fence right before the replace, so a symlink
swapped in after the caller's check is caught. A residual race between that re-check and the
``rename`` syscall is accepted; the rename itself happens inside the held directory, so it can
never follow a symlink out of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import attrs

__all__ = [
    "SANDBOX_MODES",
    "FenceDenied",
    "RootPin",
    "RootReplaced",
    "SandboxMode",
    "SandboxPolicy",
    "atomic_write_text",
    "check_pinned",
    "check_read",
    "check_write",
    "pin_roots",
    "protected_paths",
    "readable_roots",
    "resolve_target",
    "writable_roots",
]

SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("read-only", "workspace-write", "danger-full-access")

_MAX_SYMLINKS = 40  # the Linux MAXSYMLINKS
_O_PATH: int = getattr(os, "O_PATH", os.O_RDONLY)
_DIR_FLAGS = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

PathArg = str | os.PathLike[str]


class FenceDenied(Exception):
    """A file operation was refused by the fence.

    Attributes:
        path: The path as the caller spelled it.
        mode: The sandbox mode that denied it.
    """

    def __init__(self, reason: str, *, path: str = "", mode: str = "") -> None:
        """Build the denial.

        Args:
            reason: The full human-readable message (names the path and the mode).
            path: The path as the caller spelled it.
            mode: The sandbox mode in force.
        """
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.mode = mode


def _abs_path(value: PathArg) -> Path:
    return Path(os.path.abspath(os.fspath(value)))


def _abs_paths(values: Iterable[PathArg]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for value in values:
        seen.setdefault(_abs_path(value), None)
    return tuple(seen)


def _default_writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    return (policy.workspace, Path("/tmp"), Path(tempfile.gettempdir()))


@attrs.frozen
class SandboxPolicy:
    """The per-call sandbox policy shared by the file fence and process confinement.

    Attributes:
        mode: ``read-only``, ``workspace-write`` or ``danger-full-access``.
        workspace: The workspace root; relative paths resolve against it.
        writable_roots: Where ``workspace-write`` may write. Defaults to the workspace, ``/tmp``
            and ``tempfile.gettempdir()`` (deduplicated). Ignored by the other modes.
        read_roots: Extra roots the file tools may read besides the workspace and the writable
            roots (process confinement never restricts reads).
        network: Whether a confined process may use the network.
    """

    mode: SandboxMode = attrs.field(validator=attrs.validators.in_(SANDBOX_MODES))
    workspace: Path = attrs.field(converter=_abs_path)
    writable_roots: tuple[Path, ...] = attrs.field(
        converter=_abs_paths,
        default=attrs.Factory(_default_writable_roots, takes_self=True),
    )
    read_roots: tuple[Path, ...] = attrs.field(converter=_abs_paths, default=())
    network: bool = False
    protected: tuple[str, ...] = (".git", ".claude", ".dsh")
    config_file: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(_abs_path)
    )
    pins: tuple[RootPin, ...] = ()


@attrs.frozen
class RootPin:
    """A root as it was when the host started: its canonical path and its device and inode."""

    path: Path
    real: Path
    dev: int
    ino: int


class RootReplaced(Exception):
    """A pinned root was replaced (moved, swapped for a symlink) after the host started."""

    def __init__(self, pin: RootPin, now: str) -> None:
        super().__init__(
            f'the sandbox root "{pin.path}" was replaced after the host started ({now}); '
            "refusing to run: restart dsh if the move was intended"
        )
        self.pin = pin


def pin_roots(policy: SandboxPolicy) -> SandboxPolicy:
    """Return *policy* with every root it names (workspace, writable and read roots) pinned.

    Each existing root is resolved once, here, and its device and inode recorded; `check_pinned`
    later refuses a call whose root has since been replaced. Missing roots are not pinned (they
    match nothing, as before).
    """
    pins: dict[Path, RootPin] = {}
    for root in (policy.workspace, *policy.writable_roots, *policy.read_roots):
        if root in pins:
            continue
        try:
            real = Path(_resolve_abs(str(root)))
            st = os.stat(real, follow_symlinks=False)
        except (OSError, ValueError):
            continue
        if stat.S_ISDIR(st.st_mode):
            pins[root] = RootPin(root, real, st.st_dev, st.st_ino)
    return attrs.evolve(policy, pins=tuple(pins.values()))


def check_pinned(policy: SandboxPolicy) -> None:
    """Raise `RootReplaced` if a pinned root's path no longer leads to the same directory.

    The check walks each root path without following a final symlink: a root that is now a
    symlink, or a directory with another device or inode, fails.
    """
    for pin in policy.pins:
        try:
            real = _resolve_abs(str(pin.path))
            st = os.stat(pin.path, follow_symlinks=False)
        except (OSError, ValueError) as exc:
            raise RootReplaced(pin, f"it cannot be inspected: {exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise RootReplaced(pin, "it is now a symbolic link")
        if real != str(pin.real) or (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            raise RootReplaced(pin, "it is now another directory")


def protected_paths(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The absolute paths that stay read-only inside writable roots, to every tool and command.

    Relative entries of ``policy.protected`` are taken under each writable root (canonical, as
    `writable_roots` gives them); absolute entries as they are; the config file the host was
    started with is added when it lies in a writable root. Paths need not exist: a protected
    ``.git`` that does not exist yet may not be created either.
    """
    roots = writable_roots(policy)
    if not roots or roots == (Path("/"),):
        return ()
    out: dict[Path, None] = {}
    for entry in policy.protected:
        if os.path.isabs(entry):
            out.setdefault(Path(_resolve_abs(os.path.normpath(entry))), None)
            continue
        for root in roots:
            out.setdefault(Path(_resolve_abs(os.path.join(str(root), entry))), None)
    if policy.config_file is not None:
        config = Path(_resolve_abs(str(policy.config_file)))
        if any(_within(str(config), str(root)) for root in roots):
            out.setdefault(config, None)
    return tuple(out)


def _resolve_abs(path: str) -> str:
    """Resolve an absolute path component by component; missing components stay literal."""
    pending = list(reversed(path.split("/")))
    resolved = "/"
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            # ``resolved`` is always real (or a real prefix plus missing names), so its lexical
            # parent is its real parent.
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            resolved = candidate  # missing (or a file used as a directory): keep it literal
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = "/"
            pending.extend(reversed(target.split("/")))
        else:
            resolved = candidate
    return resolved


def resolve_target(path: PathArg, workspace: Path) -> Path:
    """Return the real location a path designates.

    Relative paths are taken relative to ``workspace``. Symlinks and ``..`` are resolved component
    by component; for a path that does not exist yet the result is the real path of its deepest
    existing ancestor plus the missing suffix.

    Args:
        path: The path as the model spelled it.
        workspace: The directory relative paths are resolved against.

    Returns:
        The canonical absolute path.

    Raises:
        ValueError: The path contains a NUL byte.
        OSError: A symlink loop, or an ancestor that cannot be inspected.
    """
    spelled = os.fspath(path)
    if "\0" in spelled:
        raise ValueError("path contains a NUL byte")
    joined = os.path.join(os.path.abspath(os.fspath(workspace)), spelled)
    return Path(_resolve_abs(joined))


def _within(key: str, root: str) -> bool:
    return root == "/" or key == root or key.startswith(root + "/")


def _canonical_roots(roots: Iterable[Path]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for root in roots:
        try:
            canonical = Path(_resolve_abs(str(root)))
        except OSError:
            continue
        if canonical.is_dir():  # a missing root matches nothing until it exists
            seen.setdefault(canonical, None)
    return tuple(seen)


def writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical, existing, deduplicated roots a policy lets anything write under.

    Both the fence and the process confinement derive their writable set from this function.

    Args:
        policy: The sandbox policy.

    Returns:
        ``()`` for ``read-only``, ``(Path("/"),)`` for ``danger-full-access``, else the roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    if policy.mode == "read-only":
        return ()
    return _canonical_roots(policy.writable_roots)


def readable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical roots the file tools may read under.

    Args:
        policy: The sandbox policy.

    Returns:
        ``(Path("/"),)`` for ``danger-full-access``; else the workspace, the configured writable
        roots and the extra read roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    return _canonical_roots((policy.workspace, *policy.writable_roots, *policy.read_roots))


def _describe(spelled: str, key: Path | None) -> str:
    if key is None or spelled == str(key):
        return f'"{spelled}"'
    return f'"{spelled}" (resolves to "{key}")'


def _resolve_or_deny(path: PathArg, policy: SandboxPolicy, verb: str) -> Path:
    spelled = os.fspath(path)
    try:
        return resolve_target(spelled, policy.workspace)
    except ValueError as exc:
        shown = spelled.replace("\0", "\\0")
        raise FenceDenied(
            f'{verb} "{shown}" denied: {exc} under {policy.mode} mode',
            path=spelled,
            mode=policy.mode,
        ) from None
    except OSError as exc:
        raise FenceDenied(
            f"{verb} {_describe(spelled, None)} denied: cannot resolve the path "
            f"({exc.strerror or exc}) under {policy.mode} mode",
            path=spelled,
            mode=policy.mode,
        ) from None


def _roots_text(roots: Iterable[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "none"


def check_read(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a read.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The canonical path to read.

    Raises:
        FenceDenied: The real path lies outside the workspace, the writable roots and the read
            roots (never under ``danger-full-access``).
    """
    spelled = os.fspath(path)
    key = _resolve_or_deny(spelled, policy, "read of")
    roots = readable_roots(policy)
    if any(_within(str(key), str(root)) for root in roots):
        return key
    raise FenceDenied(
        f"read of {_describe(spelled, key)} denied: outside the workspace and read roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def check_write(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a write.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The fresh canonical target to write.

    Raises:
        FenceDenied: ``read-only`` mode, or the real path lies outside every writable root.
    """
    spelled = os.fspath(path)
    key = _resolve_or_deny(spelled, policy, "write to")
    if policy.mode == "danger-full-access":
        return key
    if policy.mode == "read-only":
        raise FenceDenied(
            f"write to {_describe(spelled, key)} denied: file access denied under read-only mode",
            path=spelled,
            mode=policy.mode,
        )
    roots = writable_roots(policy)
    if any(_within(str(key), str(root)) for root in roots):
        return key
    raise FenceDenied(
        f"write to {_describe(spelled, key)} denied: outside the writable roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def _before_replace(target: Path) -> None:
    """Test seam: runs after the temp file is written and before the final re-check."""


def _changed(spelled: str, policy: SandboxPolicy, what: str) -> FenceDenied:
    return FenceDenied(
        f"write to {_describe(spelled, None)} denied: {what} changed during the write "
        f"under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def _open_parent(parent: Path, spelled: str, policy: SandboxPolicy) -> int:
    """Open ``parent`` without following any symlink, creating (and fencing) missing levels."""
    fd = os.open("/", _DIR_FLAGS)
    current = "/"
    try:
        for name in parent.parts[1:]:
            current = os.path.join(current, name)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                check_write(current, policy)  # fence every directory we are about to create
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    raise _changed(spelled, policy, f'the directory "{current}"') from None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise _changed(spelled, policy, f'the directory "{current}"') from None
                raise NotADirectoryError(
                    errno.ENOTDIR, os.strerror(errno.ENOTDIR), current
                ) from None
            os.close(fd)
            fd = child
            if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW opens a symlink itself
                raise _changed(spelled, policy, f'the directory "{current}"')
        return fd
    except BaseException:
        os.close(fd)
        raise


def _same_dir(fd: int, path: Path) -> bool:
    try:
        held = os.fstat(fd)
        now = os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _write_replace_unfenced(key: Path, data: bytes) -> None:
    key.parent.mkdir(parents=True, exist_ok=True)
    old_mode: int | None = None
    try:
        st = os.stat(key)
        if stat.S_ISREG(st.st_mode):
            old_mode = stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{key.name}.", suffix=".tmp", dir=key.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(handle.fileno(), old_mode if old_mode is not None else 0o666 & ~mask)
        os.replace(tmp, key)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(
    target: PathArg, content: str, policy: SandboxPolicy, *, encoding: str = "utf-8"
) -> None:
    """Write ``content`` to ``target`` atomically, fencing it under ``policy``.

    The text goes to a temp file in the target's directory, the fence is re-checked (the target
    re-resolved) right before ``os.replace``, and the temp file is removed on any failure.
    Missing parent directories are created, each one fenced. An existing target's permission
    bits are preserved. A symlink at the target is replaced, never followed.

    Args:
        target: The path as spelled (relative paths resolve against the workspace).
        content: The text to write.
        policy: The sandbox policy.
        encoding: The text encoding.

    Raises:
        FenceDenied: The write is outside the policy, now or at the re-check.
        OSError: The write itself failed (e.g. the target is a directory).
    """
    spelled = os.fspath(target)
    data = content.encode(encoding)
    key = check_write(spelled, policy)
    if policy.mode == "danger-full-access":
        _write_replace_unfenced(key, data)
        return
    name = key.name
    if not name or key in writable_roots(policy):
        # A root is a directory; never create a temp file in its (unfenced) parent.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(key))
    dir_fd = _open_parent(key.parent, spelled, policy)
    tmp_name: str | None = None
    try:
        old_mode: int | None = None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                old_mode = stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            pass
        tmp_name = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp_name, flags, 0o666, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if old_mode is not None:
                os.fchmod(handle.fileno(), old_mode)
            os.fsync(handle.fileno())
        _before_replace(key)
        fresh = check_write(spelled, policy)  # raises FenceDenied if it now points out
        if fresh != key or not _same_dir(dir_fd, key.parent):
            raise _changed(spelled, policy, "the target")
        os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp_name = None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=dir_fd)
        os.close(dir_fd)
