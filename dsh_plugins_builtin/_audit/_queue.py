"""The audit writer's queue: one thread, a bounded queue, and group commit.

Calls hand their rows to `RowQueue` from the trio thread; one long-lived writer thread takes
everything queued and hands it, as one batch, to the *commit* it was given (one transaction), then
wakes the calls that wait for that commit: one ``TrioToken.run_sync_soon`` per batch and trio run,
which reschedules every waiting task at once. So a call costs a queue append and one wake-up
shared by its whole batch, never a ``trio.to_thread.run_sync`` round trip of its own.

Why hand-written: SQLite allows one writer per database, and what is needed here (a queue that
parks *trio* tasks when full, group commit, per-batch wake-ups across several trio runs) is a few
dozen lines over `threading.Condition` and ``trio.lowlevel``; no library on PyPI or in Debian
does this for trio (``trio.to_thread`` is the per-call round trip this replaces).

Guarantees:

- A row is queued synchronously, inside the observer call, so it is committed even if the
  awaitable the observer returns is never awaited (an observer time limit, a cancellation).
- Back-pressure, never drops: while the queue holds `RowQueue.capacity` rows or more, every
  further caller waits for its own row's commit (with ``durability = "sync"`` every caller does
  anyway). So the queue holds at most *capacity* rows beyond those of callers that are parked
  waiting for them.
- Every waiting task is woken exactly once, after its batch committed or failed. Those waits
  cannot be cancelled (as ``trio.to_thread.run_sync`` cannot be): a wait is bounded by the
  SQLite busy timeout plus the disk, and an observer time limit must not cut a row off.
- The thread starts on the first row and exits after `IDLE_SECONDS` without rows (the next row
  starts a new one); `RowQueue.stop` and interpreter exit flush the queue first.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final, final

import trio

from ._committed import Committed
from ._committed import wake as _wake
from ._row import Entry

__all__ = ["IDLE_SECONDS", "LINGER_SECONDS", "MAX_BATCH", "RowQueue"]

IDLE_SECONDS: Final = 2.0
"""How long the writer thread waits for rows before it exits (a later row starts another)."""

MAX_BATCH: Final = 5_000
"""The most rows one transaction commits (so that waiting calls are woken progressively)."""

LINGER_SECONDS: Final = 0.01
"""How long the writer lets rows that nobody waits for (``durability = "async"``) gather into
a bigger batch before it commits them; a row somebody waits for ends the wait at once."""


@final
class RowQueue:
    """The queue and its writer thread; see the module docstring.

    Args:
        name: the writer thread's name.
        capacity: rows the queue holds before callers wait for room.
        commit: commits one batch, in the writer thread (without the lock held).
        failed: told of anything *commit* raised, with the batch's size.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        commit: Callable[[list[Entry]], None],
        failed: Callable[[BaseException, int], None],
    ) -> None:
        self.name = name
        self.capacity = capacity
        self._commit = commit
        self._failed = failed
        # Re-entrant: a garbage collection in the writer thread, inside the lock, may finalise the
        # plugin, whose finaliser calls close(), which takes the lock again.
        self.lock = threading.RLock()
        """Guards the queue; the writer also holds it to open or close its database."""
        self._wake_writer = threading.Condition(self.lock)
        self._drained = threading.Condition(self.lock)
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
        with self.lock:
            rows = self._rows
            if not wait and len(rows) < self.capacity:
                # `_push`, inline, for a row nobody waits for: a writer that runs and neither
                # waits for rows nor lingers needs no wake-up.
                rows.append((entry, None))
                self._queued += 1
                if self._thread is None or self._idle or self._lingering:
                    self._wake_for(None)
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
        self._wake_for(waiter)

    def _wake_for(self, waiter: Committed | None) -> None:
        """After a row was appended (under the lock): start or wake the writer if needed."""
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
        thread = threading.Thread(target=self._run, name=self.name)
        thread.daemon = True  # interpreter exit flushes it through close() (see AuditPlugin)
        self._thread = thread
        thread.start()

    # -- any thread --------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every row queued so far is committed (or failed); ``False`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
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

    def stop(self) -> bool:
        """Flush and stop the writer thread (a later row starts another); ``False`` when called
        from the writer thread itself (a finalizer), which stops after its batch."""
        with self.lock:
            thread = self._thread
            self._stopping = True
            self._idle = self._lingering = False
            self._wake_writer.notify()
        if thread is threading.current_thread():
            return False
        if thread is not None:
            thread.join()
        return True

    @property
    def stopped(self) -> bool:
        """Whether no writer thread runs (read it under `lock`)."""
        return self._thread is None

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._commit([entry for entry, _ in batch])
            except BaseException as exc:  # never leave a waiter hanging, whatever happened
                self._failed(exc, len(batch))
            finally:
                _wake([waiter for _, waiter in batch if waiter is not None])
                with self.lock:
                    self._busy = 0
                    self._done += len(batch)
                    self._drained.notify_all()

    def _take(self) -> list[tuple[Entry, Committed | None]] | None:
        """Wait for rows and take the next batch; ``None`` when the thread is to exit."""
        with self.lock:
            while not self._rows:
                if self._stopping:
                    self._thread = None
                    return None
                self._idle = True
                self._wake_writer.wait(IDLE_SECONDS)
                if self._idle and not self._rows:  # nobody woke us: idle long enough
                    self._idle = False
                    self._thread = None
                    return None
                self._idle = False
            if not self._waited_for and len(self._rows) < self._batch and not self._stopping:
                self._lingering = True  # nobody waits: let a bigger batch gather
                self._wake_writer.wait(LINGER_SECONDS)
                self._lingering = False
            rows = self._rows
            batch = [rows.popleft() for _ in range(min(len(rows), MAX_BATCH))]
            self._waited_for -= sum(1 for _, slot in batch if slot is not None)
            self._busy = len(batch)
        return batch


async def _flush_at_end(flush: Callable[[], bool]) -> None:
    """Wait for the end of the trio run, then for *flush* in a worker thread."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(flush)
