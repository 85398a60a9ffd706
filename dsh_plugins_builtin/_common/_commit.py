"""Writes that are either committed and reported as such, or not made at all.

A file tool's work runs in a worker thread the host stops waiting for when the call is
cancelled (a deadline, the caller's abort). Without care, that thread could still rename its
temp file into place after the call was reported as failed: an error result with the file
changed. Two pieces prevent it:

* `CommitGate`: the thread enters ``gate.committing()`` around its final check and the rename;
  the call side closes the gate when it stops waiting. Both take one lock, so exactly one of
  "committed" and "closed before the commit" happens. Closing waits at most for one rename.
* `CommitLedger`: an execute wrapper (the ``timeout`` plugin) opens one around the call with
  `commit_ledger`; a tool that committed records its result there with `record_commit`, so
  the wrapper can report the committed write instead of ``TOOL_TIMEOUT``. The ledger travels
  in a context variable, which trio hands to the tool's task and worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

from dsh_host import ToolExecutionResult

__all__ = [
    "CommitCancelled",
    "CommitGate",
    "CommitLedger",
    "commit_ledger",
    "record_commit",
]


class CommitCancelled(Exception):
    """The call stopped waiting before the write was committed; nothing was changed."""


class CommitGate:
    """One write's decision between "committed" and "the call gave up first".

    Attributes:
        result: The success result the writer prepared before committing (reported when the
            call side finds the write committed after it stopped waiting).
    """

    def __init__(self) -> None:
        """An open gate."""
        self._lock = threading.Lock()
        self._state: Literal["open", "closed", "committed"] = "open"
        self.result: ToolExecutionResult | None = None

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Hold the gate around the commit; raise `CommitCancelled` if it was closed.

        The gate counts as committed only when the block finishes without raising.
        """
        with self._lock:
            if self._state != "open":
                raise CommitCancelled("the call was cancelled before the write was committed")
            yield
            self._state = "committed"

    def check_open(self) -> None:
        """Raise `CommitCancelled` if the call already stopped waiting (skip the work)."""
        if self._state != "open":
            raise CommitCancelled("the call was cancelled before the write began")

    def mark_committed(self) -> None:
        """Record a commit made outside `committing` (if the call is still waiting for it)."""
        with self._lock:
            if self._state == "open":
                self._state = "committed"

    def close(self) -> bool:
        """Stop any later commit; return whether the write was committed (waits for one)."""
        with self._lock:
            if self._state == "open":
                self._state = "closed"
            return self._state == "committed"


class CommitLedger:
    """Where a tool records the result of a write it committed during one call."""

    def __init__(self) -> None:
        """An empty ledger."""
        self.committed: ToolExecutionResult | None = None


_LEDGER: ContextVar[CommitLedger | None] = ContextVar("dsh_commit_ledger", default=None)


@contextmanager
def commit_ledger() -> Iterator[CommitLedger]:
    """Open a ledger for the calls made inside the block (see the module docstring)."""
    ledger = CommitLedger()
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def record_commit(result: ToolExecutionResult) -> None:
    """Record a committed write's result in the ledger of the current call, if one is open."""
    ledger = _LEDGER.get()
    if ledger is not None:
        ledger.committed = result
