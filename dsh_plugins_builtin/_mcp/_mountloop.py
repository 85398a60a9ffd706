"""`Mount`: the daemon thread running an asyncio loop that holds the ``mcp`` plugin's links
where no trio run owns the host (`_mount` says when), and the hop of a tool call there and
back."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ._mount import Link

if TYPE_CHECKING:
    import asyncio

    import anyio

__all__ = ["Mount"]

T = TypeVar("T")


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark the outcome of a task nobody waits for any more as seen (no "never retrieved")."""
    if not task.cancelled():
        task.exception()


class Mount:
    """The mount loop: a daemon thread running asyncio, and the links it holds."""

    def __init__(self) -> None:
        import asyncio

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dsh-mcp", daemon=True)
        self._thread.start()
        self.links: dict[str, Link] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, links: list[Link], timeout: float) -> None:
        """Start *links* concurrently; return once each is running or failed (or *timeout*)."""
        import asyncio
        import concurrent.futures

        async def start_all() -> None:
            import anyio

            loop = asyncio.get_running_loop()
            readies = []
            for link in links:
                ready = anyio.Event()
                self._tasks.append(loop.create_task(link.run(ready)))
                readies.append(ready)
            for ready in readies:
                await ready.wait()

        self.links.update({link.name: link for link in links})
        for link in links:
            link.runner = self
        future = asyncio.run_coroutine_threadsafe(start_all(), self._loop)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout)

    async def wait(self, event: anyio.Event) -> None:
        """Wait from a trio task for *event* (a re-listing's, set in the mount loop)."""
        await self.run(event.wait)

    async def run(self, coroutine: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run *coroutine()* in the mount loop from a trio task; cancelling this cancels it.

        One wake-up each way and nothing in between (no `concurrent.futures.Future` chained to
        the task, as `asyncio.run_coroutine_threadsafe` makes): the task is made in the loop,
        and its end wakes this trio task. Callbacks given to the loop run in order, so a
        cancellation always finds the task made.
        """
        loop, token, done = self._loop, trio.lowlevel.current_trio_token(), trio.Event()
        made: list[asyncio.Task[T]] = []

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        def start() -> None:
            task = loop.create_task(coroutine())
            task.add_done_callback(wake)
            made.append(task)

        def cancel() -> None:
            task = made[0]
            task.cancel()
            task.add_done_callback(_retrieved)

        loop.call_soon_threadsafe(start)
        try:
            await done.wait()
        except trio.Cancelled:
            loop.call_soon_threadsafe(cancel)
            raise
        return made[0].result()

    def close(self) -> None:
        """Close every session and stop the loop (stdio servers see end of input and exit)."""
        if not self._thread.is_alive():
            return
        import asyncio

        async def stop_all() -> None:
            for link in self.links.values():
                link.stop()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
        for link in self.links.values():
            link.close()
