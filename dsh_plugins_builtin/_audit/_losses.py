"""The audit writer's accounts: rows committed and lost, the health rows, and what is reported.

- A database that cannot be written is reported once per kind of failure (``locked``, ``full``,
  ``unwritable``, ``corrupt``, ``replaced``, ``encode``, ``other``), as an error on the
  ``dsh_plugins_builtin.audit`` logger (stderr unless the application routes logging
  elsewhere); `Losses.failing` says whether the last commit failed, so that a required audit
  can refuse calls.
- Each loss and each recreation of the database is kept as a health row (at most
  `HEALTH_KEPT`) until a commit records it (``dsh audit --health`` shows them).
- When writing works again, or the writer closes with rows lost, the count is said once.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final, final

from ._faults import ADVICE, classify
from ._redact import timestamp as _timestamp

__all__ = ["HEALTH_KEPT", "Losses", "logger"]

logger = logging.getLogger("dsh_plugins_builtin.audit")

HEALTH_KEPT: Final = 1_000
"""The most health rows (losses, recreations) kept while the database cannot be written."""


@final
class Losses:
    """What the writer committed, lost and reported; see the module docstring.

    Args:
        where: where rows go, as messages name it.
        url: the PostgreSQL URL whose password is scrubbed from errors (``None`` for SQLite).
    """

    def __init__(self, where: str, url: str | None) -> None:
        self.where = where
        self.url = url
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
        self.reported: set[str] = set()
        """The kinds of failure (and causes of recreation) said once already."""
        self._unrecorded: list[tuple[str, int, str]] = []  # health rows waiting for a commit

    def health(self, host_id: str, workspace: str | None) -> list[tuple[Any, ...]]:
        """The health rows waiting for a commit, stamped now."""
        return [(_timestamp(time.time()), host_id, workspace, *event)
                for event in self._unrecorded]  # fmt: skip

    def recorded(self, health: int) -> None:
        """The first *health* rows of `health` are committed."""
        del self._unrecorded[:health]

    def succeeded(self, rows: int) -> None:
        """*rows* were committed: if writing failed before, say that it works again."""
        self.committed += rows
        if self.failing is not None:
            lost, self.lost, self.failing = self.lost, 0, None
            self.reported.clear()
            logger.warning(
                "audit: recording tool calls in %s works again; %d call(s) were not recorded",
                self.where, lost,
            )  # fmt: skip

    def failed(self, exc: BaseException, rows: int) -> None:
        """*rows* could not be committed because of *exc*: count them, say so once per kind."""
        kind = classify(exc)
        said = _scrubbed(str(exc), self.url) if self.url is not None else str(exc)
        self.lost += rows
        self.lost_total += rows
        self.failing = f"{kind}: {type(exc).__name__}: {said}"
        if rows:
            pending = self._unrecorded
            if pending and pending[-1][0] == "lost" and pending[-1][2] == self.failing:
                rows += pending.pop()[1]  # one health row per run of the same failure
            pending.append(("lost", rows, self.failing))
            del pending[:-HEALTH_KEPT]
        if kind not in self.reported:
            self.reported.add(kind)
            logger.error(
                "audit: cannot record tool calls in %s (%s): %s: %s. Calls go on unrecorded "
                "unless [plugin.audit] required = true; this is reported once per kind of "
                "failure, and the count of lost calls when writing works again (`dsh audit "
                "--health` shows it). What to do: %s.",
                self.where, kind, type(exc).__name__, said, ADVICE[kind],
            )  # fmt: skip

    def recreating(self, why: str) -> None:
        """The database was gone (*why*) and is opened anew: count it, say so once per cause."""
        self.recreated += 1
        self._unrecorded.append(("recreated", 0, f"the database {why}"))
        if why not in self.reported:
            self.reported.add(why)
            logger.warning(
                "audit: the database %s is gone (its %s) while the host ran; recording goes on in "
                "the "
                "database now at that path (created if absent). Calls recorded before are not "
                "in it: restore them from a backup if you need them. Said once per cause.",
                self.where, why,
            )  # fmt: skip

    def take_lost(self) -> int:
        """The rows lost since writing last worked, now forgotten (the writer closes)."""
        lost, self.lost = self.lost, 0
        return lost

    def report_closing(self, lost: int) -> None:
        """Say that the writer closes with *lost* rows not recorded, if any."""
        if lost:
            logger.error(
                "audit: closing with %d call(s) not recorded in %s since writing last worked "
                "(%s); they are lost",
                lost, self.where, self.failing,
            )  # fmt: skip


def _scrubbed(text: str, url: str) -> str:
    """`~._postgres.scrub`, loaded with the first PostgreSQL error (SQLite needs none of it)."""
    from ._postgres import scrub

    return scrub(text, url)
