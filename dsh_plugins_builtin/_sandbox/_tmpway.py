"""The way to a root bound inside the private tmp, made of real directories before each command.

A workspace under the host's ``/tmp`` is bound at its own path, which lies inside the private
tmp a command sees at ``/tmp``: the directories on the way (``/tmp/proj`` of ``/tmp/proj/ws``)
are plain directories of the private tmp, which a command may rename and replace
(``mv /tmp/proj /tmp/x && ln -s /oldroot/etc /tmp/proj``). bwrap makes the next command's
mount point following that link, on the host (as root: anywhere), and Landlock's mount
namespace refuses it, every command after. So before each command (`ready`), each directory on
the way is checked from the private tmp down, following no link: a link or a file there (what
a command left; the private tmp is the host's own) is removed, and a missing directory made.
Under bwrap each is then bound onto itself from the descriptor checked: a mount point, which
a command running meanwhile cannot rename away while the next one starts.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from dsh_plugins_builtin._sandbox._beneath import DIR_FLAGS, open_absolute
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._paths import under

__all__ = ["ready"]


def ready(tmp: Path, host_tmp: Path, places: Iterable[Path]) -> list[tuple[str, int]]:
    """Make the way from *tmp* (the private tmp, seen at *host_tmp*) to each of *places* that
    lies under *host_tmp* real directories, the place itself included when it is a directory
    (a socket or file bound there gets its mount point from bwrap). Returns each directory on
    the way (as seen, under *host_tmp*) with an ``O_PATH`` descriptor of it, the caller's to
    close: bwrap binds each onto itself (``--bind-fd``), a mount point no command can rename
    while another one starts."""
    ways: dict[tuple[str, ...], int] = {}  # the way -> how many of its directories to hold
    for place in places:
        if place != host_tmp and under(place, host_tmp):
            parts = place.relative_to(host_tmp).parts
            way, hold = (parts, len(parts) - 1) if place.is_dir() else (parts[:-1], len(parts) - 1)
            ways[way] = max(ways.get(way, 0), hold)
    held: dict[str, int] = {}
    if not ways:
        return []
    top = open_absolute(str(tmp), DIR_FLAGS)
    try:
        for parts, hold in sorted(ways.items()):
            fd: int | None = os.dup(top)
            try:
                for depth, name in enumerate(parts, 1):
                    parent, fd = fd, None
                    assert parent is not None
                    fd = _real_dir(parent, name)  # closes parent, raised or not
                    seen = str(Path(host_tmp, *parts[:depth]))
                    if seen not in held and depth <= hold:  # not a root: bound on its own
                        held[seen] = os.dup(fd)
            finally:
                if fd is not None:
                    os.close(fd)
    except OSError as exc:
        for fd in held.values():
            os.close(fd)
        raise SandboxUnavailable(
            f"the private tmp {tmp} cannot hold the way to a root ({exc.strerror or exc}); "
            "restart the host",
            mode="workspace-write",
        ) from None
    finally:
        os.close(top)
    return sorted(held.items(), key=lambda item: item[0].count("/"))


def _real_dir(parent: int, name: str) -> int:
    """The directory *name* in *parent* (closed), made one if it is missing, a link or a file."""
    try:
        try:
            mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISDIR(mode):
            os.unlink(name, dir_fd=parent)  # a command's link or file, in our own private tmp
            mode = None
        if mode is None:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
        return os.open(name, DIR_FLAGS, dir_fd=parent)  # a link raced in meanwhile: ELOOP/ENOTDIR
    finally:
        os.close(parent)
