"""The awaitable a call waits on for its row's commit, and how the writer thread wakes it."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, final

import trio

__all__ = ["Committed", "wake"]


@final
class Committed:
    """Awaitable: resolves once its row's batch is committed or has failed.

    The wait cannot be cancelled (as ``trio.to_thread.run_sync`` cannot): the writer wakes every
    row within the SQLite busy timeout plus the disk's time. The writer marks it done from the
    trio thread (``run_sync_soon``), so awaiting it after that, or never, is fine.
    """

    __slots__ = ("done", "task", "token")

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.done = False
        self.task: trio.lowlevel.Task | None = None  # set while a task is parked on it

    def __await__(self) -> Generator[Any, None, None]:
        if not self.done:
            self.task = trio.lowlevel.current_task()
            yield from trio.lowlevel.wait_task_rescheduled(_not_abortable).__await__()


def _not_abortable(raise_cancel: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


def wake(slots: list[Committed]) -> None:
    """Mark *slots* done: one ``run_sync_soon`` per trio run they belong to."""
    if not slots:
        return
    by_run: dict[trio.lowlevel.TrioToken, list[Committed]] = {}
    for slot in slots:
        by_run.setdefault(slot.token, []).append(slot)
    for token, group in by_run.items():
        with contextlib.suppress(trio.RunFinishedError):  # that run is over: nobody to wake
            token.run_sync_soon(_release, group)


def _release(slots: list[Committed]) -> None:
    """In the trio thread: mark each slot done and resume the task parked on it, if any."""
    for slot in slots:
        slot.done = True
        task = slot.task
        if task is not None:
            slot.task = None
            trio.lowlevel.reschedule(task)
