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

Inside writable roots, the `protected_paths` (``.git``, ``.claude``, ``.dsh``, ``dsh.toml``,
the config file in use and dsh's own installation, by default) stay read-only: `check_write`
refuses them and everything under them.

The fence decides *which* real path a call may touch; `open_read` and `atomic_write_text` then
open it race-free: the root is opened from ``/`` without following symlinks and compared with
its pin, and the rest of the path is opened beneath that root descriptor with ``openat2``
(``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``; see `dsh_plugins_builtin._sandbox._beneath`). A symlink
swapped in after the check makes the call fail (after a short retry), never read or write
outside. Symlinks that stay inside a root keep working: the fence resolves them first, and
the descriptor walk follows the canonical path they lead to.

`atomic_write_text` publishes a write through a temp file created in the held parent
directory and ``renameat`` there, so a hard link to a file outside is never written through
and the rename can never follow a symlink out. The caller may pass an ``expect`` stamp (the
file's device, inode, size, mtime and ctime when it was read: a compare-and-swap, so an edit
from another process is a `WriteConflict`) and a ``commit`` context manager held around the
final check and the rename (the tools use it to decide atomically between "committed" and
"the call gave up"). A file replaced in place within one timestamp tick and with the same
size, or between the check and the ``rename`` syscall, is a residual race POSIX offers no
compare-and-rename to close.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import attrs

from dsh_plugins_builtin._sandbox._beneath import mkdir_beneath
from dsh_plugins_builtin._sandbox._judge import (
    FenceDenied,
    changed,
    check_read,
    check_write,
    denied_by,
    host_only,
)
from dsh_plugins_builtin._sandbox._open import RACED, open_read, open_root, relative, root_of
from dsh_plugins_builtin._sandbox._paths import PathArg, resolve_target
from dsh_plugins_builtin._sandbox._pins import check_pinned, pin_roots
from dsh_plugins_builtin._sandbox._policy import (
    SANDBOX_MODES,
    RootPin,
    RootReplaced,
    SandboxMode,
    SandboxPolicy,
    readable_roots,
    writable_roots,
)
from dsh_plugins_builtin._sandbox._protected import (
    config_warning,
    import_paths,
    install_in_roots,
    install_paths,
    protected_paths,
)

__all__ = [
    "SANDBOX_MODES",
    "FenceDenied",
    "FileStamp",
    "RootPin",
    "RootReplaced",
    "SandboxMode",
    "SandboxPolicy",
    "WriteConflict",
    "atomic_write_text",
    "check_pinned",
    "check_read",
    "check_write",
    "config_warning",
    "denied_by",
    "host_only",
    "import_paths",
    "install_in_roots",
    "install_paths",
    "open_read",
    "pin_roots",
    "protected_paths",
    "readable_roots",
    "resolve_target",
    "stamp",
    "writable_roots",
]


@attrs.frozen
class FileStamp:
    """What identifies one version of a file: device, inode, size, mtime and ctime (ns)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


def stamp(st: os.stat_result) -> FileStamp:
    """The `FileStamp` of a ``stat`` result."""
    return FileStamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class WriteConflict(Exception):
    """The file changed since the caller read it (`atomic_write_text`'s ``expect``)."""


# -- atomic writes -----------------------------------------------------------------------------


def _before_replace(target: Path) -> None:
    """Test seam: runs after the temp file is written and before the final re-check."""


def _same_dir(fd: int, path: Path) -> bool:
    try:
        held = os.fstat(fd)
        now = os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _open_parent(key: Path, spelled: str, policy: SandboxPolicy) -> int:
    """Open (creating missing levels) the parent of ``key`` beneath its writable root."""
    roots = writable_roots(policy)
    root = root_of(key, roots)
    root_fd = open_root(str(root), policy)
    try:
        return mkdir_beneath(root_fd, relative(key.parent, root))
    except OSError as exc:
        if exc.errno in RACED:
            raise changed(spelled, policy, "a directory on the way") from None
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), spelled) from None
        raise
    finally:
        os.close(root_fd)


def _check_expected(dir_fd: int, name: str, expect: FileStamp, spelled: str) -> None:
    try:
        now = stamp(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except FileNotFoundError:
        raise WriteConflict(f'"{spelled}" was deleted since it was read') from None
    if now != expect:
        raise WriteConflict(f'"{spelled}" was changed by someone else since it was read')


def atomic_write_text(
    target: PathArg,
    content: str,
    policy: SandboxPolicy,
    *,
    encoding: str = "utf-8",
    expect: FileStamp | None = None,
    commit: Callable[[], AbstractContextManager[object]] | None = None,
) -> None:
    """Write ``content`` to ``target`` atomically, fencing it under ``policy``.

    The text goes to a temp file created in the target's directory (held by a descriptor
    opened beneath the writable root), the fence is re-checked right before the rename, and
    the temp file is removed on any failure. Missing parent directories are created. An
    existing target's permission bits are preserved. A symlink or hard link at the target is
    replaced, never written through.

    Args:
        target: The path as spelled (relative paths resolve against the workspace).
        content: The text to write.
        policy: The sandbox policy.
        encoding: The text encoding.
        expect: The stamp of the file as the caller read it; the write happens only if the
            file is still that one (else `WriteConflict`).
        commit: A context manager entered around the ``expect`` check and the rename; raising
            from it cancels the write.

    Raises:
        FenceDenied: The write is outside the policy (or protected), now or at the re-check.
        RootReplaced: The root was replaced since the host started.
        WriteConflict: ``expect`` no longer matches.
        OSError: The write itself failed (e.g. the target is a directory).
    """
    spelled = os.fspath(target)
    data = content.encode(encoding)
    key = check_write(spelled, policy)
    name = key.name
    if not name or key in writable_roots(policy):
        # A root is a directory; never create a temp file in its (unfenced) parent.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(key))
    dir_fd = _open_parent(key, spelled, policy)
    tmp_name: str | None = None
    try:
        tmp_name = _write_temp(dir_fd, name, data)
        _before_replace(key)
        fresh = check_write(spelled, policy)  # raises FenceDenied if it now points out
        if fresh != key or not _same_dir(dir_fd, key.parent):
            raise changed(spelled, policy, "the target")
        with commit() if commit is not None else contextlib.nullcontext():
            if expect is not None:
                _check_expected(dir_fd, name, expect, spelled)
            os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            tmp_name = None
        _sync_dir(dir_fd)
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=dir_fd)
        os.close(dir_fd)


def _write_temp(dir_fd: int, name: str, data: bytes) -> str:
    """Write *data* to a new temp file next to *name* (keeping its mode); the temp's name."""
    old_mode: int | None = None
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            old_mode = stat.S_IMODE(st.st_mode)
    except FileNotFoundError:
        pass
    tmp_name = f".{name[:200]}.{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp_name, flags, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if old_mode is not None:
                os.fchmod(handle.fileno(), old_mode)
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name, dir_fd=dir_fd)
        raise
    return tmp_name


def _sync_dir(dir_fd: int) -> None:
    """Make the rename durable; best effort."""
    with contextlib.suppress(OSError):
        sync_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.fsync(sync_fd)
        finally:
            os.close(sync_fd)
