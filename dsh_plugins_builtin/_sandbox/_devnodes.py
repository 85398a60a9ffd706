"""Device nodes of dsh's own for a root command's ``/dev`` (``null``, ``zero``, ``tty``...).

bwrap's ``--dev`` (and the Landlock backend's ``/dev``, `dsh_plugins_builtin._sandbox._mountns`)
binds the host's own nodes: a command running as root owns them, capabilities or not, and its
``chmod 000 /dev/null`` changed the host's ``/dev/null`` (every service writing there failed
after). A read-only bind cannot be used (bwrap remounts it ``nodev``). So a root host binds
copies of its own instead (`nodes`), made with ``mknod`` in dsh's state directory (which no
command sees) and checked before each command: the mode a command changed is put back. Where
they cannot serve (no ``mknod``, a ``nodev`` file system) the host's are bound as before, and
`nodes` says ``None``. A user other than root owns none of the host's nodes: nothing to do.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Final

from dsh_plugins_builtin._common._dirs import user_state_path

__all__ = ["NAMES", "host_nodes", "nodes"]

NAMES: Final = ("null", "zero", "full", "random", "urandom", "tty")
_MODE: Final = 0o666
_ready: dict[Path, tuple[tuple[str, int], ...] | None] = {}  # directory -> (path, rdev) or None


def nodes(directory: Path | None = None) -> Path | None:
    """The directory of dsh's own nodes, each checked now (its mode put back, or made again),
    or ``None`` (not root, or they cannot serve here: the host's are bound). Made, and tried,
    once per directory; each later call is an ``lstat`` per node."""
    if os.geteuid() != 0:
        return None
    directory = directory or user_state_path("dsh") / "dev"
    if directory not in _ready:
        _ready[directory] = _set_up(directory)
    made = _ready[directory]
    if made is None:
        return None
    try:
        for path, rdev in made:
            _ensure(path, rdev)
    except OSError:  # the directory went away meanwhile: made again, or none
        _ready[directory] = _set_up(directory)
        return directory if _ready[directory] is not None else None
    return directory


@functools.cache
def host_nodes() -> tuple[str, ...]:
    """Which of `NAMES` the host has (as the Landlock plan, read once: it does not change)."""
    return tuple(name for name in NAMES if os.path.exists(f"/dev/{name}"))


def _set_up(directory: Path) -> tuple[tuple[str, int], ...] | None:
    """The nodes the host has (``(path, rdev)``), made in *directory*; ``None`` where they
    cannot serve (no ``mknod``; a ``nodev`` file system refuses the write tried here)."""
    try:
        made = tuple(
            (str(directory / name), os.stat(f"/dev/{name}").st_rdev) for name in host_nodes()
        )
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        for path, rdev in made:
            _ensure(path, rdev)
        with open(directory / "null", "wb") as null:
            null.write(b"")
    except OSError:
        return None
    return made


def _ensure(path: str, want: int) -> None:
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want and st.st_uid == 0:
            if stat.S_IMODE(st.st_mode) != _MODE:  # what a command's chmod left: the same
                os.chmod(path, _MODE)  # node (Landlock's rule for it holds) with its mode back
            return
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | _MODE, want)
    os.chmod(path, _MODE)  # the umask took some bits (the directory is dsh's: no link here)
