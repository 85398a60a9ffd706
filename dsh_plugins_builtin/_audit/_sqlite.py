"""The audit database's file on disk: a pinned directory, and no symbolic link in the way.

`DatabaseFile` keeps the SQLite database open only while it is the file at its path: one
deleted or replaced while the host runs (its directory removed, the file unlinked or swapped) is
noticed before and after every commit, said, and opened anew at the path.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

from ._faults import Replaced
from ._schema import INSERT, INSERT_HEALTH, migrate

if TYPE_CHECKING:  # imported by the first connection (`connect_database`), not at start
    import sqlite3

__all__ = ["DatabaseFile", "check_path", "connect_database", "create_database", "write_ahead"]


@final
class DatabaseFile:
    """The SQLite database at *path*, used only while it is the file at that path.

    Args:
        path: the database file, already resolved (no symbolic link in it).
        busy_timeout: seconds a commit waits for another writer's lock before failing.
        lock: held to close the database when it is found gone (the writer's lock).
        gone: told why, when the open database is found gone or replaced.
    """

    def __init__(
        self,
        path: Path,
        busy_timeout: float,
        lock: threading.RLock,
        gone: Callable[[str], None],
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._lock = lock
        self._gone = gone
        self.connection: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # (device, inode) of the open database
        self._held: int | None = None  # a descriptor on it: st_nlink 0 once it is unlinked
        self._pin: tuple[int, int] | None = None  # (device, inode) of the directory

    def pin(self) -> None:
        """Create the database's directory now and remember its identity (see `check_path`)."""
        if self._pin is None:
            self._pin = check_path(self.path, self._pin)

    def connect(self) -> sqlite3.Connection:
        """The open connection, or a new one after checking the path was not replaced."""
        if self.connection is not None:
            if self.same_file():
                return self.connection
            self.moved()
        self._pin = check_path(self.path, self._pin)
        create_database(self.path)
        self._pin = check_path(self.path, self._pin)
        connection, self._held, self._identity = connect_database(self.path, self.busy_timeout)
        self.connection = connection
        return connection

    def commit(
        self,
        connection: sqlite3.Connection,
        rows: list[tuple[Any, ...]],
        health: list[tuple[Any, ...]],
    ) -> bool:
        """Commit *rows* and *health* in one transaction on *connection* (from `connect`);
        whether they are in the file at the path (``False``: deleted or replaced meanwhile)."""
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.executemany(INSERT, rows)
            connection.executemany(INSERT_HEALTH, health)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return self.same_file()

    def same_file(self) -> bool:
        """Whether the open database is still the file at its path (not unlinked, not swapped)."""
        try:
            st = os.lstat(self.path)
            held = os.fstat(self._held) if self._held is not None else None
        except OSError:  # gone, or its directory is
            return False
        if held is not None and held.st_nlink == 0:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def moved(self) -> None:
        """The open database is gone or replaced: say why and close it."""
        directory = self.path.parent
        if not os.path.lexists(directory):
            why = "directory was removed"
        elif not os.path.lexists(self.path):
            why = "file was deleted"
        else:
            why = "file was replaced by another file"
        self._gone(why)
        with self._lock:
            self.close()

    def close(self) -> None:
        """Close the connection and the descriptor held on the file (a later `connect` reopens)."""
        if self.connection is not None:
            connection, self.connection = self.connection, None
            connection.close()
        if self._held is not None:
            held, self._held = self._held, None
            os.close(held)


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
    import sqlite3  # here: a start that writes no row never imports it

    connection = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        write_ahead(connection, busy_timeout)
        connection.execute("PRAGMA synchronous=NORMAL")
        migrate(connection)
        held = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        connection.close()
        raise
    st = os.fstat(held)
    return connection, held, (st.st_dev, st.st_ino)


def write_ahead(
    connection: sqlite3.Connection,
    busy_timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Put the database of *connection* in WAL mode, waiting up to *busy_timeout* seconds for
    the lock that takes.

    While another connection is about to write (a host opening the same new database at the
    same moment, putting it in WAL mode itself), ``PRAGMA journal_mode=WAL`` fails at once with
    "database is locked", whatever the connection's timeout: it already reads the file, and
    SQLite does not call the busy handler to upgrade a reader (two could deadlock). So it is
    tried again here, after pauses of 1 ms doubling up to 50 ms, as the busy handler would have
    waited. An attempt may also wait in that busy handler (another connection holds the file
    exclusively): the connection's busy timeout is set to the time left before each attempt,
    and restored after, so the whole wait stays within *busy_timeout*. Extended codes
    (``SQLITE_BUSY_RECOVERY``, ``SQLITE_BUSY_SNAPSHOT``) are retried as their primary code.
    """
    import sqlite3

    if not math.isfinite(busy_timeout) or busy_timeout < 0:
        raise ValueError(f"busy_timeout must be a finite number of seconds, not {busy_timeout!r}")
    deadline = clock() + busy_timeout
    delay = 0.001
    (restore,) = connection.execute("PRAGMA busy_timeout").fetchone()
    try:
        while True:
            left = deadline - clock()
            connection.execute(f"PRAGMA busy_timeout = {max(0, int(left * 1000))}")
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                code = getattr(error, "sqlite_errorcode", None)
                busy = code is not None and code & 0xFF in (
                    sqlite3.SQLITE_BUSY,
                    sqlite3.SQLITE_LOCKED,
                )
                left = deadline - clock()
                if not busy or left <= 0:
                    raise
            _pause(min(delay, left))
            delay = min(delay * 2, 0.05)
    finally:
        connection.execute(f"PRAGMA busy_timeout = {int(restore)}")


_pause = time.sleep  # how `write_ahead` waits (a test's stand-in lets the other side go)
