"""The baton of a batch: which worker may start the next call, and waking workers for it.

One worker at a time holds the baton (`_Batch.holder`); when its call suspends it lets go
(`_hand_on`), waking idle workers or starting new ones, up to the cap. See `._batch`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import trio
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

__all__ = ["_Baton"]


class _Baton:
    """The baton-passing part of `_Batch` (whose slots hold the state named here)."""

    __slots__ = ("coming", "drain_limit", "drainer", "holder", "idle", "in_flight", "workers")

    holder: Any  # the worker task holding the baton; None when it is free
    coming: int  # workers woken or started that have not run yet
    next: int
    inputs: list[Any]
    max_parallel: int
    in_flight: int
    idle: deque[Task]
    nursery: trio.Nursery | None
    workers: int
    drainer: Task | None
    drain_limit: int
    work: Callable[[], Coroutine[Any, Any, None]]

    def _hand_on(self) -> None:
        """The holder's call is about to suspend: let go of the baton, and have workers come.

        The baton is left free for the first worker to come back. Unless some are already on
        their way, as many idle workers as there are calls that could start now are woken (and
        new ones started, up to the cap), all at once: trio runs them in its next pass, where
        each takes the baton in turn as the previous one's call suspends, so several calls start
        in one pass of the scheduler instead of one per pass.
        """
        self.holder = None
        if self.coming:
            return
        wanted = min(len(self.inputs) - self.next, self.max_parallel - self.in_flight)
        idle = self.idle
        while idle and wanted > 0:
            self.coming += 1
            wanted -= 1
            reschedule(idle.popleft())
        nursery = self.nursery
        while wanted > 0 and self.workers <= self.max_parallel and nursery is not None:
            self.coming += 1
            wanted -= 1
            self.workers += 1
            nursery.start_soon(self.work)

    def _landed(self) -> None:
        """A parallel dispatch ended: wake the holder if it waits for this many to end."""
        self.in_flight -= 1
        drainer = self.drainer
        if drainer is not None and self.in_flight <= self.drain_limit:
            self.drainer = None
            reschedule(drainer)

    async def _drain(self, limit: int) -> None:
        """Wait (holding the baton) until at most *limit* parallel dispatches run."""
        if self.in_flight <= limit:
            return
        self.drainer, self.drain_limit = current_task(), limit
        await self._wait(None)

    async def _wait(self, queue: deque[Task] | None) -> None:
        """Park this task (in *queue*, else as the drainer) until rescheduled or cancelled."""
        task = current_task()
        if queue is not None:
            queue.append(task)

        def abort(_: Any) -> Abort:
            if queue is not None:
                queue.remove(task)
            elif self.drainer is task:
                self.drainer = None
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)
