"""A kept view's mount table (``/proc/PID/mountinfo`` of a process in it), which says where its
mounts are now.

A mask is a mount on a directory entry, not on a name: when the host renames what a view masks
(``mv ~/.aws ~/.aws-old``, or a directory above it) and makes another in its place, the mask
goes with the renamed entry, and the new one is in plain view. No mount event comes of that,
but the table then shows the mount point at its new path. So the host checks a new view's table
against its bwrap line (`shows`: every place the line mounts on is a mount point there), and
the view's server compares the table with that one (`digest`) before each command
(`dsh_plugins_builtin._sandbox._forkserver`): any difference, and the view is not used again.
Standard library only: the fork server imports it before it enters a view.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from typing import Final

__all__ = ["digest", "mount_points", "read", "shows"]

_ESCAPED: Final = re.compile(rb"\\([0-7]{3})")


def read(fd: int) -> bytes:
    """The whole table from the start, on a descriptor of a ``mountinfo`` file."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def digest(table: bytes) -> str:
    """Of each line: the mount's id, its parent's and its mount point (the fields that say
    which mounts there are, and where; the root of a cgroup mount is shown relative to the
    reader's cgroup, and a file system's options may change under every mount of it)."""
    kept = hashlib.sha256()
    for line in table.splitlines():
        fields = line.split(b" ", 5)
        kept.update(b" ".join((*fields[:2], fields[4] if len(fields) > 4 else b"")) + b"\n")
    return kept.hexdigest()


def mount_points(table: bytes) -> set[str]:
    """The mount point of each line (the fifth field; the kernel writes a space, a tab, a
    newline and a backslash in it as octal escapes)."""
    out = set()
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) > 4:
            point = _ESCAPED.sub(lambda m: bytes((int(m.group(1), 8),)), fields[4])
            out.add(os.fsdecode(point))
    return out


def shows(table: bytes, places: Iterable[str]) -> bool:
    """Whether every one of *places* is a mount point in *table*."""
    return set(places) <= mount_points(table)
