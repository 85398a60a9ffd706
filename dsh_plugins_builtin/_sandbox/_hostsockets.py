"""The host's listening Unix sockets a command would see, so each is covered (issue 22, row 1).

Hiding the host's socket directories (``/tmp``, ``/var/tmp``, ``/run``, ``$XDG_RUNTIME_DIR``)
leaves every socket kept anywhere else in view: Docker Desktop's ``~/.docker/desktop/docker.sock``,
a daemon's socket under ``/var/lib``, a language server's in the workspace. Seccomp cannot read
the path ``connect`` is given, and Landlock (up to ABI 7) does not govern connecting to a named
socket, so each one is covered where it lies: ``/dev/null`` is bound over it (bwrap's
``--ro-bind``, the Landlock mount plan's ``null`` step), and ``connect`` is refused
(``ECONNREFUSED``).

The list is the kernel's: ``/proc/net/unix`` names every bound socket of the host's network
namespace, read again for each command (a daemon started since is covered from its next one).
What it cannot name stays reachable, as the docs say: a socket bound by a relative path, or
bound in another network namespace (a container's) at a path the host also shows.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

__all__ = ["covers", "in_view", "listening", "prefixes"]

# Each line: "%pK: %08X %08X %08X %04X %02X %5lu" (hexadecimal and decimal numbers, never a
# "/"), then " " and the path of a named socket, to the end of the line ("@" starts an abstract
# one: those live in the network namespace, which a command does not share). So the first " /"
# of a line starts a path.
_NAMED: Final = re.compile(rb" (/[^\n]*)")


def listening(table: str = "/proc/net/unix") -> frozenset[str]:
    """The absolute paths of the named Unix sockets bound in this network namespace."""
    try:
        with open(table, "rb") as file:
            data = file.read()
    except OSError:
        return frozenset()
    return frozenset(os.fsdecode(path) for path in _NAMED.findall(data))


def in_view(sockets: Iterable[str], hidden: Callable[[str], bool]) -> list[Path]:
    """The *sockets* (paths as bound) a command would reach: their real paths, each still a
    socket, that the view does not already hide. *hidden* is asked of each directory (real
    path) first, then of each socket in one it does not hide: whether it lies in a hidden
    directory no bind brings back, under a hidden ``deny_read`` entry, or is listed in
    ``allow_unix_sockets``. Sorted, so equal views give equal command lines.

    A socket in a directory the command could not pass through (`_passable`: a ``0700``
    directory of another user, as PostgreSQL keeps its sockets) is out of its reach already,
    and is not covered: neither could bwrap or the Landlock child reach it to mount there."""
    real_dirs: dict[str, str | None] = {}
    out: set[str] = set()
    for text in sockets:
        parent, name = os.path.split(text)
        if parent in real_dirs:
            real_dir = real_dirs[parent]
        else:  # where the name was bound: its directory's real path, if it is in view
            real_dir = real_dirs[parent] = _real_dir(parent)
            if real_dir is not None and (hidden(real_dir) or not _passable(real_dir)):
                real_dir = real_dirs[parent] = None
        if real_dir is None:
            continue
        path = os.path.join(real_dir, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode) and not hidden(path):
                out.add(path)
        except PermissionError:  # a closed directory of its own (`_passable`): covered unseen
            if not hidden(path):
                out.add(path)
        except OSError:
            continue  # gone, or a path of another mount namespace
    return [Path(path) for path in sorted(out)]


def _passable(real_dir: str) -> bool:
    """Whether a command of this user, with no capability, may search *real_dir* and each
    directory above it, or make it so: a directory it owns it may ``chmod`` (Landlock does not
    govern that). The kernel answers for an ordinary user (``faccessat`` with the effective
    ids: ACLs included); where it says no, and for uid 0 (whose answer ignores the mode), the
    mode bits are read as a capability-less process meets them, each directory it owns passed."""
    euid = os.geteuid()
    if euid != 0 and os.access(real_dir, os.X_OK, effective_ids=True):
        return True
    groups = {os.getegid(), *os.getgroups()}
    path = real_dir
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid != euid:
            bit = stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
            if not st.st_mode & bit:
                return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def _real_dir(path: str) -> str | None:
    """*path*'s real path (as `os.path.realpath` gives, in three system calls), or ``None``
    when it is not a directory here."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def prefixes(paths: Iterable[Path]) -> tuple[str, ...]:
    """*paths* as prefixes for `covers` (``/`` for the root, else the path and a ``/``)."""
    return tuple("/" if path == Path("/") else f"{path}/" for path in paths)


def covers(path: str, roots: tuple[str, ...]) -> bool:
    """Whether *path* (absolute, normal) is one of the *roots* (`prefixes`) or lies under one."""
    return f"{path}/".startswith(roots)
