"""What can go wrong writing the audit record, by kind: each kind is reported once, with advice.

Kinds: ``locked``, ``full``, ``unwritable``, ``corrupt``, ``replaced``, ``unreachable``
(PostgreSQL), ``encode`` and ``other``.
"""

from __future__ import annotations

import errno
import sys

__all__ = ["ADVICE", "Replaced", "classify", "write_errors"]


ADVICE = {
    "locked": "another process holds the database lock; stop it or raise busy_timeout_ms",
    "full": "the disk (or quota) is full; free space",
    "unwritable": "set [plugin.audit] path to a file this user can write",
    "corrupt": "the file is not an SQLite database; move it away or set [plugin.audit] path",
    "replaced": (
        "the database or its directory was replaced (by a symbolic link or another directory) "
        "after the host started; check who did it, then restart dsh"
    ),
    "unreachable": (
        "the PostgreSQL server did not answer for reconnect_ms; check that it runs and is "
        "reachable, and the URL's user and database, or raise reconnect_ms"
    ),
    "encode": "a row could not be encoded; it was recorded with a placeholder for its arguments",
    "other": "see the error; set [plugin.audit] path to a writable file",
}


def write_errors() -> tuple[type[Exception], ...]:
    """What a failed write raises: SQLite's and the OS's errors, and psycopg's when psycopg is
    imported (a `PostgresStore` is in use)."""
    import sqlite3  # here: a start that writes no row never imports it

    psycopg = sys.modules.get("psycopg")
    store: tuple[type[Exception], ...] = (psycopg.Error,) if psycopg is not None else ()
    return (sqlite3.Error, OSError, Replaced, *store)


def classify(exc: BaseException) -> str:
    """The kind of a write failure, for reporting once per kind."""
    import sqlite3  # here: a start that writes no row never imports it

    if isinstance(exc, Replaced):
        return "replaced"
    if type(exc).__module__.startswith("psycopg"):
        names = {cls.__name__ for cls in type(exc).__mro__}
        return "unreachable" if names & {"OperationalError", "InterfaceError"} else "other"
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        base = code & 0xFF if isinstance(code, int) else None
        text = str(exc).lower()
        if base in (5, 6) or "locked" in text or "busy" in text:  # SQLITE_BUSY, SQLITE_LOCKED
            return "locked"
        if base == 13 or "full" in text:  # SQLITE_FULL
            return "full"
        if base in (8, 14, 23) or "readonly" in text or "unable to open" in text:
            return "unwritable"  # SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_AUTH
        if base in (11, 26) or "not a database" in text or "malformed" in text:
            return "corrupt"  # SQLITE_CORRUPT, SQLITE_NOTADB
        return "other"
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "full"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST):
            return "unwritable"
        return "other"
    return "other"


class Replaced(Exception):
    """The database or its directory is not what the host pinned at start."""
