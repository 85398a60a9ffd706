"""The audit plugin's writer: rows queued from calls, committed in batches by one thread.

`AuditWriter` puts three collaborators together:

- `RowQueue` (``_queue``): the bounded queue, the writer thread and group commit, with their
  guarantees (a row is queued synchronously; back-pressure, never drops; every waiting task is
  woken exactly once; the thread starts on the first row and exits when idle);
- `DatabaseFile` (``_sqlite``): the SQLite database, used only while it is the file at its path
  (or a `PostgresStore` instead);
- `Losses` (``_losses``): rows committed and lost, the health rows, and each kind of failure
  reported once; `AuditWriter.failing` says whether the last commit failed, so that a required
  audit can refuse calls.

The writer itself builds the rows of a batch and commits them, with the health rows waiting,
into the database that is at the path *after* the commit. `AuditWriter.close` and interpreter
exit flush the queue first.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, final

from ._committed import Committed
from ._faults import Replaced, write_errors
from ._losses import Losses
from ._queue import RowQueue
from ._redact import arguments_json, redact, safe_text, scrub
from ._row import Entry, build_row
from ._schema import COLUMNS
from ._sqlite import DatabaseFile

__all__ = [
    "COLUMNS",
    "AuditWriter",
    "Committed",
    "Entry",
    "arguments_json",
    "redact",
    "safe_text",
    "scrub",
]


@final
class AuditWriter:
    """One database, written by one thread in batches; see the module docstring.

    Args:
        path: the database file, already resolved (no symbolic link in it).
        busy_timeout: seconds a commit waits for another writer's lock before failing (finite,
            not negative: `ValueError` otherwise).
        capacity: rows the queue holds before callers wait for room.
        workspace: the host's workspace, recorded in every row.
        host_id: this host run's identifier, recorded in every row (default: a random one).
        store: a `PostgresStore` that takes the rows instead of the SQLite database at *path*.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout: float = 5.0,
        capacity: int = 10_000,
        workspace: str | None = None,
        host_id: str | None = None,
        store: Any = None,
    ) -> None:
        if not math.isfinite(busy_timeout) or busy_timeout < 0:  # NaN: a wait that never ends
            raise ValueError(f"busy_timeout must be finite and not negative, not {busy_timeout!r}")
        self.path = path
        self.store = store
        """A `PostgresStore` that takes the rows instead of the SQLite database at *path*."""
        self.where = store.where if store is not None else str(path)
        """Where rows go, as messages name it (a URL's password shown as ``***``)."""
        self.workspace = safe_text(workspace)
        self.host_id = host_id if host_id is not None else os.urandom(6).hex()
        self.losses = Losses(self.where, store.url if store is not None else None)
        """Rows committed and lost, and what was reported (`Losses`)."""
        self._queue = RowQueue(
            f"dsh audit writer: {path}", capacity, self._commit, self.losses.failed
        )
        self._lock = self._queue.lock  # also guards opening and closing the database
        self.enqueue: Callable[..., Committed | None] = self._queue.submit
        """`submit`, bound to the queue's own: the per-call path, one call frame fewer."""
        self._file = DatabaseFile(path, busy_timeout, self._lock, self.losses.recreating)

    @property
    def failing(self) -> str | None:
        """``None`` while rows get committed; else the kind and cause of the last failure."""
        return self.losses.failing

    @property
    def lost_total(self) -> int:
        """Rows that could not be committed since the writer was made (reported, never reset)."""
        return self.losses.lost_total

    # -- the trio side, and any thread -------------------------------------------------------

    def submit(self, entry: Entry, *, wait: bool) -> Committed | None:
        """Queue *entry* now, from a trio task; what to await, if anything (`RowQueue.submit`)."""
        return self._queue.submit(entry, wait=wait)

    def flush_when_run_ends(self) -> None:
        """Commit rows queued from the current trio run before the run ends (once per run)."""
        self._queue.flush_when_run_ends()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every row queued so far is committed (or failed); ``False`` on timeout."""
        return self._queue.flush(timeout)

    @property
    def idle(self) -> bool:
        """No writer thread and no open database: `close` has nothing to wait for."""
        with self._lock:
            return self._queue.stopped and self.store is None and self._file.connection is None

    def close(self) -> None:
        """Flush, stop the writer thread and close the database (a later row reopens them)."""
        if not self._queue.stop():
            return  # called from the writer itself (a finalizer): it stops after this batch
        with self._lock:
            if self._queue.stopped:
                self._close_connection()
            lost = self.losses.take_lost()
        self.losses.report_closing(lost)

    def pin(self) -> None:
        """Create the database's directory now and remember its identity (see `check_path`)."""
        with self._lock:
            if self.store is None:
                self._file.pin()

    def probe(self) -> None:
        """Open the database now; a failure sets `failing` and is reported, as a write's would."""
        with self._lock:
            try:
                self.store.connect() if self.store is not None else self._file.connect()
            except Exception as exc:
                if not isinstance(exc, write_errors()):
                    raise
                self._close_connection()
                self.losses.failed(exc, 0)

    # -- the writer thread -------------------------------------------------------------------

    def _commit(self, entries: list[Entry]) -> None:
        reported = self.losses.reported
        rows = [build_row(entry, self.workspace, self.host_id, reported) for entry in entries]
        try:
            self._commit_rows(rows)
        except Exception as exc:
            if not isinstance(exc, write_errors()):
                raise
            with self._lock:
                self._close_connection()  # reconnect next time: the file may be fixed by then
            self.losses.failed(exc, len(rows))
            return
        self.losses.succeeded(len(rows))

    def _commit_rows(self, rows: list[tuple[Any, ...]]) -> None:
        """Commit *rows* (and pending health rows) into the file that is at the path *after* it.

        A database deleted or replaced during the commit holds rows nobody will read: they are
        committed again into the new one, so a returned commit is on record at the path.
        """
        if self.store is not None:
            pending = self.losses.health(self.host_id, self.workspace)
            self.store.commit(rows, pending)
            self.losses.recorded(len(pending))
            return
        for _ in range(3):
            connection = self._file.connect()
            health = self.losses.health(self.host_id, self.workspace)
            if self._file.commit(connection, rows, health):
                self.losses.recorded(len(health))
                return
            self._file.moved()
        raise Replaced(f"{self.path} keeps being deleted or replaced while rows are written")

    def _close_connection(self) -> None:
        if self.store is not None:
            self.store.close()
        self._file.close()
