"""The empty directories bwrap makes as mount points over missing protected paths."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow

__all__ = ["MOUNT_POINTS"]


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
