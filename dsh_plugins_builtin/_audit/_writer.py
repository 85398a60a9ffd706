"""The audit plugin's writer: one thread, a bounded queue, and group commit.

Calls hand their rows to `AuditWriter` from the trio thread; one long-lived writer thread takes
everything queued, builds the rows and commits them in one SQLite transaction, then wakes the
calls that wait for that commit: one ``TrioToken.run_sync_soon`` per batch and trio run, which
reschedules every waiting task at once. So a call costs a queue append and one wake-up shared by
its whole batch, never a ``trio.to_thread.run_sync`` round trip of its own.

Why hand-written: SQLite allows one writer per database, and what is needed here (a queue that
parks *trio* tasks when full, group commit, per-batch wake-ups across several trio runs) is a few
dozen lines over `threading.Condition` and ``trio.lowlevel``; no library on PyPI or in Debian
does this for trio (``trio.to_thread`` is the per-call round trip this replaces).

Guarantees:

- A row is queued synchronously, inside the observer call, so it is committed even if the
  awaitable the observer returns is never awaited (an observer time limit, a cancellation).
- Back-pressure, never drops: while the queue holds `AuditWriter.capacity` rows or more, every
  further caller waits for its own row's commit (with ``durability = "sync"`` every caller does
  anyway). So the queue holds at most *capacity* rows beyond those of callers that are parked
  waiting for them.
- Every waiting task is woken exactly once, after its batch committed or failed. Those waits
  cannot be cancelled (as ``trio.to_thread.run_sync`` cannot be): a wait is bounded by the
  SQLite busy timeout plus the disk, and an observer time limit must not cut a row off.
- A database that cannot be written is reported once per kind of failure (``locked``, ``full``,
  ``unwritable``, ``corrupt``, ``replaced``, ``encode``, ``other``), as an error on the
  ``dsh_plugins_builtin.audit`` logger (stderr unless the application routes logging
  elsewhere); `AuditWriter.failing` says whether the last commit failed, so that a required
  audit can refuse calls.
- The thread starts on the first row and exits after `IDLE_SECONDS` without rows (the next row
  starts a new one); `AuditWriter.close` and interpreter exit flush the queue first.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, final

import trio

from ._committed import Committed
from ._committed import wake as _wake
from ._faults import ADVICE, Replaced, classify, write_errors
from ._postgres import scrub
from ._redact import arguments_json, redact, safe_text
from ._redact import timestamp as _timestamp
from ._row import Entry, build_row
from ._schema import COLUMNS, INSERT, INSERT_HEALTH
from ._sqlite import check_path, connect_database, create_database

__all__ = [
    "COLUMNS",
    "AuditWriter",
    "Committed",
    "Entry",
    "arguments_json",
    "redact",
    "safe_text",
]

logger = logging.getLogger("dsh_plugins_builtin.audit")

IDLE_SECONDS: Final = 2.0
"""How long the writer thread waits for rows before it exits (a later row starts another)."""

_HEALTH_KEPT: Final = 1_000
"""The most health rows (losses, recreations) kept while the database cannot be written."""

MAX_BATCH: Final = 5_000
"""The most rows one transaction commits (so that waiting calls are woken progressively)."""

LINGER_SECONDS: Final = 0.01
"""How long the writer lets rows that nobody waits for (``durability = "async"``) gather into
a bigger batch before it commits them; a row somebody waits for ends the wait at once."""


@final
class AuditWriter:
    """One SQLite database, written by one thread in batches; see the module docstring.

    Args:
        path: the database file, already resolved (no symbolic link in it).
        busy_timeout: seconds a commit waits for another writer's lock before failing.
        capacity: rows the queue holds before callers wait for room.
        workspace: the host's workspace, recorded in every row.
        host_id: this host run's identifier, recorded in every row (default: a random one).
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
        self.path = path
        self.store = store
        """A `PostgresStore` that takes the rows instead of the SQLite database at *path*."""
        self.where = store.where if store is not None else str(path)
        """Where rows go, as messages name it (a URL's password shown as ``***``)."""
        self.workspace = safe_text(workspace)
        self.host_id = host_id if host_id is not None else uuid.uuid4().hex[:12]
        self.busy_timeout = busy_timeout
        self.capacity = capacity
        self.failing: str | None = None
        """``None`` while rows get committed; else the kind and cause of the last failure."""
        self.committed = 0
        """Rows committed so far."""
        self.lost = 0
        """Rows that could not be committed since writing last worked."""
        self.lost_total = 0
        """Rows that could not be committed since the writer was made (reported, never reset)."""
        self.recreated = 0
        """How many times the database was found deleted or replaced and opened anew."""
        self._identity: tuple[int, int] | None = None  # (device, inode) of the open database
        self._held: int | None = None  # a descriptor on it: st_nlink 0 once it is unlinked
        self._unrecorded: list[tuple[str, int, str]] = []  # health rows waiting for a commit
        # Re-entrant: a garbage collection in the writer thread, inside the lock, may finalise the
        # plugin, whose finaliser calls close(), which takes the lock again.
        self._lock = threading.RLock()
        self._wake_writer = threading.Condition(self._lock)
        self._drained = threading.Condition(self._lock)
        self._rows: deque[tuple[Entry, Committed | None]] = deque()
        self._busy = 0  # rows taken by the writer and not yet committed
        self._queued = 0  # rows ever queued ...
        self._done = 0  # ... and ever committed or failed (rows are taken in order)
        self._idle = False  # the writer waits on _wake_writer for any row
        self._lingering = False  # the writer waits on _wake_writer for a bigger batch
        self._waited_for = 0  # queued rows whose caller waits for the commit
        self._batch = max(1, min(capacity // 2, 1_000))  # enough rows to end a linger
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._connection: sqlite3.Connection | None = None
        self._pin: tuple[int, int] | None = None  # (device, inode) of the directory
        self._reported: set[str] = set()
        self._flushers: trio.lowlevel.RunVar[bool] = trio.lowlevel.RunVar("dsh_audit_flusher")

    # -- the trio side -----------------------------------------------------------------------

    def submit(self, entry: Entry, *, wait: bool) -> Committed | None:
        """Queue *entry* now, from a trio task; return what to await, if anything.

        The row is queued before this returns, so it is committed even if the caller never
        awaits the result (an observer time limit, a cancellation). With *wait*, or when the
        queue already holds `capacity` rows (back-pressure), returns a `Committed` that resolves
        once the row's batch is committed or has failed; otherwise ``None``.

        Without *wait* and with room in the queue (the fast path) this is an append under an
        uncontended lock: the writer holds the lock only to take a batch, never while it builds
        rows or commits them.
        """
        with self._lock:
            if not wait and len(self._rows) < self.capacity:
                self._push(entry, None)
                return None
            slot = Committed(trio.lowlevel.current_trio_token())
            self._push(entry, slot)
        return slot

    def flush_when_run_ends(self) -> None:
        """Make sure rows queued from the current trio run are committed before the run ends.

        Starts (once per run) a system task that, when trio cancels it at the end of the run,
        waits in a worker thread for the queue to drain.
        """
        if self._flushers.get(False):
            return
        self._flushers.set(True)
        trio.lowlevel.spawn_system_task(
            _flush_at_end, self.flush, name="dsh audit: flush at run end"
        )

    def _push(self, entry: Entry, waiter: Committed | None) -> None:
        """Append under the lock and make sure a writer thread will take it."""
        self._rows.append((entry, waiter))
        self._queued += 1
        if waiter is not None:
            self._waited_for += 1
        if self._thread is None:
            self._start()
        elif self._idle:
            self._idle = False
            self._wake_writer.notify()
        elif self._lingering and (waiter is not None or len(self._rows) >= self._batch):
            self._lingering = False
            self._wake_writer.notify()

    def _start(self) -> None:
        self._stopping = False
        self._idle = False
        thread = threading.Thread(target=self._run, name=f"dsh audit writer: {self.path}")
        thread.daemon = True  # interpreter exit flushes it through close() (see AuditPlugin)
        self._thread = thread
        thread.start()

    # -- any thread --------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every row queued so far is committed (or failed); ``False`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._queued
            while self._done < target:
                if self._thread is None:  # nobody to drain it (only after a crash)
                    self._start()
                elif self._lingering:  # commit now, not after the linger
                    self._lingering = False
                    self._wake_writer.notify()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._drained.wait(left)
        return True

    def close(self) -> None:
        """Flush, stop the writer thread and close the database (a later row reopens them)."""
        with self._lock:
            thread = self._thread
            self._stopping = True
            self._idle = self._lingering = False
            self._wake_writer.notify()
        if thread is threading.current_thread():
            return  # called from the writer itself (a finalizer): it stops after this batch
        if thread is not None:
            thread.join()
        with self._lock:
            if self._thread is None:
                self._close_connection()
            lost, self.lost = self.lost, 0
        if lost:
            logger.error(
                "audit: closing with %d call(s) not recorded in %s since writing last worked "
                "(%s); they are lost",
                lost, self.where, self.failing,
            )  # fmt: skip

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._rows:
                    if self._stopping:
                        self._thread = None
                        return
                    self._idle = True
                    self._wake_writer.wait(IDLE_SECONDS)
                    if self._idle and not self._rows:  # nobody woke us: idle long enough
                        self._idle = False
                        self._thread = None
                        return
                    self._idle = False
                if not self._waited_for and len(self._rows) < self._batch and not self._stopping:
                    self._lingering = True  # nobody waits: let a bigger batch gather
                    self._wake_writer.wait(LINGER_SECONDS)
                    self._lingering = False
                rows = self._rows
                batch = [rows.popleft() for _ in range(min(len(rows), MAX_BATCH))]
                self._waited_for -= sum(1 for _, slot in batch if slot is not None)
                self._busy = len(batch)
            try:
                self._commit([entry for entry, _ in batch])
            except BaseException as exc:  # never leave a waiter hanging, whatever happened
                self._failed(exc, len(batch))
            finally:
                _wake([waiter for _, waiter in batch if waiter is not None])
                with self._lock:
                    self._busy = 0
                    self._done += len(batch)
                    self._drained.notify_all()

    def _commit(self, entries: list[Entry]) -> None:
        rows = [build_row(entry, self.workspace, self.host_id, self._reported) for entry in entries]
        try:
            self._commit_rows(rows)
        except Exception as exc:
            if not isinstance(exc, write_errors()):
                raise
            with self._lock:
                self._close_connection()  # reconnect next time: the file may be fixed by then
            self._failed(exc, len(rows))
            return
        self.committed += len(rows)
        if self.failing is not None:
            lost, self.lost, self.failing = self.lost, 0, None
            self._reported.clear()
            logger.warning(
                "audit: recording tool calls in %s works again; %d call(s) were not recorded",
                self.where, lost,
            )  # fmt: skip

    def _commit_rows(self, rows: list[tuple[Any, ...]]) -> None:
        """Commit *rows* (and pending health rows) into the file that is at the path *after* it.

        A database deleted or replaced during the commit holds rows nobody will read: they are
        committed again into the new one, so a returned commit is on record at the path.
        """
        if self.store is not None:
            pending = [(_timestamp(time.time()), self.host_id, self.workspace, *event)
                       for event in self._unrecorded]  # fmt: skip
            self.store.commit(rows, pending)
            del self._unrecorded[: len(pending)]
            return
        for _ in range(3):
            connection = self._connect()
            health = [(_timestamp(time.time()), self.host_id, self.workspace, *event)
                      for event in self._unrecorded]  # fmt: skip
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(INSERT, rows)
                connection.executemany(INSERT_HEALTH, health)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            if self._same_file():
                del self._unrecorded[: len(health)]
                return
            self._moved()
        raise Replaced(f"{self.path} keeps being deleted or replaced while rows are written")

    def _same_file(self) -> bool:
        """Whether the open database is still the file at its path (not unlinked, not swapped)."""
        try:
            st = os.lstat(self.path)
            held = os.fstat(self._held) if self._held is not None else None
        except OSError:  # gone, or its directory is
            return False
        if held is not None and held.st_nlink == 0:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def _moved(self) -> None:
        """The open database is gone or replaced: say so (once per cause) and drop it."""
        directory = self.path.parent
        if not os.path.lexists(directory):
            why = "directory was removed"
        elif not os.path.lexists(self.path):
            why = "file was deleted"
        else:
            why = "file was replaced by another file"
        self.recreated += 1
        self._unrecorded.append(("recreated", 0, f"the database {why}"))
        with self._lock:
            self._close_connection()
        if why not in self._reported:
            self._reported.add(why)
            logger.warning(
                "audit: the database %s is gone (its %s) while the host ran; recording goes on in "
                "the "
                "database now at that path (created if absent). Calls recorded before are not "
                "in it: restore them from a backup if you need them. Said once per cause.",
                self.path, why,
            )  # fmt: skip

    def _failed(self, exc: BaseException, rows: int) -> None:
        kind = classify(exc)
        said = scrub(str(exc), self.store.url) if self.store is not None else str(exc)
        self.lost += rows
        self.lost_total += rows
        self.failing = f"{kind}: {type(exc).__name__}: {said}"
        if rows:
            pending = self._unrecorded
            if pending and pending[-1][0] == "lost" and pending[-1][2] == self.failing:
                rows += pending.pop()[1]  # one health row per run of the same failure
            pending.append(("lost", rows, self.failing))
            del pending[:-_HEALTH_KEPT]
        if kind not in self._reported:
            self._reported.add(kind)
            logger.error(
                "audit: cannot record tool calls in %s (%s): %s: %s. Calls go on unrecorded "
                "unless [plugin.audit] required = true; this is reported once per kind of "
                "failure, and the count of lost calls when writing works again (`dsh audit "
                "--health` shows it). What to do: %s.",
                self.where, kind, type(exc).__name__, said, ADVICE[kind],
            )  # fmt: skip

    def _connect(self) -> sqlite3.Connection:
        """The open connection, or a new one after checking the path was not replaced."""
        if self._connection is not None:
            if self._same_file():
                return self._connection
            self._moved()
        self._pin = check_path(self.path, self._pin)
        create_database(self.path)
        self._pin = check_path(self.path, self._pin)
        connection, self._held, self._identity = connect_database(self.path, self.busy_timeout)
        self._connection = connection
        return connection

    def pin(self) -> None:
        """Create the database's directory now and remember its identity (see `check_path`)."""
        with self._lock:
            if self._pin is None and self.store is None:
                self._pin = check_path(self.path, self._pin)

    def probe(self) -> None:
        """Open the database now; a failure sets `failing` and is reported, as a write's would."""
        with self._lock:
            try:
                self.store.connect() if self.store is not None else self._connect()
            except Exception as exc:
                if not isinstance(exc, write_errors()):
                    raise
                self._close_connection()
                self._failed(exc, 0)

    def _close_connection(self) -> None:
        if self.store is not None:
            self.store.close()
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.close()
        if self._held is not None:
            held, self._held = self._held, None
            os.close(held)


async def _flush_at_end(flush: Callable[[], bool]) -> None:
    """Wait for the end of the trio run, then for *flush* in a worker thread."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(flush)
