"""The audit database's file on disk: a pinned directory, and no symbolic link in the way."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

from ._faults import Replaced
from ._schema import migrate

__all__ = ["check_path", "connect_database", "create_database"]


def check_path(path: Path, pin: tuple[int, int] | None) -> tuple[int, int]:
    """Refuse a database whose directory changed since first use (*pin*), or that is a symlink;
    return the directory's identity, to pin."""
    directory = path.parent
    if pin is None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:  # removed: a new one, made here, is as safe as the first
        directory.mkdir(mode=0o700, parents=True)
        st = os.lstat(directory)
        pin = (st.st_dev, st.st_ino)
    if not stat.S_ISDIR(st.st_mode):
        raise Replaced(f"{directory} is no longer a directory")
    if pin is None:
        pin = (st.st_dev, st.st_ino)
    elif pin != (st.st_dev, st.st_ino):
        raise Replaced(f"{directory} is not the directory it was when first opened")
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            mode = os.lstat(name).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise Replaced(f"{name} is not a regular file (a symbolic link?)")
    return pin


def create_database(path: Path) -> None:
    """Create the database file owner-only (arguments may be sensitive, even redacted), if absent."""
    if not os.path.lexists(path):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, flags, 0o600))


def connect_database(
    path: Path, busy_timeout: float
) -> tuple[sqlite3.Connection, int, tuple[int, int]]:
    """Open and migrate the database at *path* (checked by `check_path`): the connection, a
    descriptor held on the file (its ``st_nlink`` drops to 0 once it is unlinked) and its
    (device, inode)."""
    connection = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        migrate(connection)
        held = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        connection.close()
        raise
    st = os.fstat(held)
    return connection, held, (st.st_dev, st.st_ino)
