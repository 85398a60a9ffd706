"""The trio guest run that `dsh_host.aio` drives calls through (see its docstring)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import attrs
import outcome
import sniffio
import trio

from dsh_host import AbortSignal

from ._worker import CAN_STEP, HANDED, Pool, Worker

__all__ = [
    "Guest",
    "Job",
    "Pending",
    "begin",
    "handed",
    "in_trio",
    "join",
    "leave",
    "on_loop",
    "spawned",
]

T = TypeVar("T")
Job = Callable[[AbortSignal], Coroutine[Any, Any, T]]
"""A call: the coroutine to run in the guest run, given the call's abort signal."""


@attrs.define(eq=False)
class _Ticks:
    """Runs the guest run's ticks on the asyncio loop, in order, each once: from a loop
    callback, or earlier, from a call that waits on them (`run_now`), so that a call the guest
    run finishes in one tick needs no turn of the asyncio loop at all."""

    loop: asyncio.AbstractEventLoop
    queue: collections.deque[Callable[[], object]] = attrs.Factory(collections.deque)
    queued: bool = False
    """A `_from_loop` callback is on the asyncio loop."""
    running: bool = False
    """A tick is running (never start one inside another)."""

    def soon(self, tick: Callable[[], object]) -> None:
        """``run_sync_soon_not_threadsafe`` of the guest run."""
        self.queue.append(tick)
        if not self.queued:
            self.queued = True
            self.loop.call_soon(self._from_loop)

    def threadsafe(self, tick: Callable[[], object]) -> None:
        """``run_sync_soon_threadsafe`` (trio's I/O thread hands a tick back this way)."""
        self.loop.call_soon_threadsafe(self._run, tick)

    def _from_loop(self) -> None:
        self.queued = False
        self.run_now()

    def run_now(self) -> bool:
        """Run the ticks queued now; ``False`` if there were none or a tick is running."""
        if self.running or not self.queue:
            return False
        try:
            for _ in range(len(self.queue)):
                self._run(self.queue.popleft())
        finally:
            if self.queue and not self.queued:  # a tick raised: the rest still run
                self.queued = True
                self.loop.call_soon(self._from_loop)
        return True

    def _run(self, tick: Callable[[], object]) -> None:
        self.running = True
        try:
            tick()
        finally:
            self.running = False


@attrs.define(eq=False)
class Guest:
    """The trio guest run of one asyncio loop."""

    ticks: _Ticks
    token: trio.lowlevel.TrioToken
    nursery: trio.Nursery
    stop: trio.Event
    finished: asyncio.Future[outcome.Outcome[None]]
    users: int = 0
    stopping: bool = False
    last: float = 0.0
    """When a call last started or ended (trio's clock)."""
    wake: trio.Event = attrs.Factory(trio.Event)
    workers: Pool = attrs.Factory(Pool)
    """Workers parked and ready to run a call's first step (`in_trio`)."""
    thread: int = attrs.Factory(threading.get_ident)
    """The thread it started on (its loop's): see `here`."""

    def here(self) -> bool:
        """Whether this is the guest run's thread and its loop is running: then it is the
        running loop (one loop runs per thread at a time). Cheaper than asking asyncio for the
        running loop, which costs a ``getpid`` system call; when this says no, `on_loop` asks."""
        return threading.get_ident() == self.thread and self.ticks.loop.is_running()


_guests: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[Guest]] = (
    weakref.WeakKeyDictionary()
)


async def join() -> Guest:
    """The loop's guest run (started if there is none), counted as used once more."""
    loop = _running_loop()
    while True:
        starting = _guests.get(loop)
        if starting is None:
            starting = _guests[loop] = loop.create_future()
            try:
                _start(loop, starting)
            except BaseException:
                del _guests[loop]
                raise
        guest = await asyncio.shield(starting)
        if not guest.stopping:
            guest.users += 1
            return guest
        await asyncio.shield(guest.finished)  # one trio run per thread: let it end first
        if _guests.get(loop) is starting:
            del _guests[loop]


def _running_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        library = sniffio.current_async_library() if _in_async() else "no event loop"
        raise RuntimeError(
            f"dsh_host.aio runs under asyncio, but this is {library}: under trio use "
            "`dsh_host.open_host` and `await host.call(...)` directly"
        ) from None


def _in_async() -> bool:
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return True


def _start(loop: asyncio.AbstractEventLoop, ready: asyncio.Future[Guest]) -> None:
    finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
    ticks = _Ticks(loop)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            token = trio.lowlevel.current_trio_token()
            guest = Guest(ticks, token, nursery, stop, finished)
            trio.lowlevel.spawn_system_task(_keep_warm, guest)
            if not ready.done():
                ready.set_result(guest)
            await stop.wait()
            guest.workers.close()

    def done(result: outcome.Outcome[None]) -> None:
        if not finished.done():
            finished.set_result(result)
        if not ready.done():  # the run ended before it started serving
            ready.set_exception(RuntimeError(f"the trio guest run ended at once: {result!r}"))

    trio.lowlevel.start_guest_run(
        main,
        run_sync_soon_threadsafe=ticks.threadsafe,
        run_sync_soon_not_threadsafe=ticks.soon,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,
        strict_exception_groups=True,
    )


INLINE_TICKS = 3
"""How many queued guest ticks a call runs itself before it waits on the asyncio loop."""

WARM: float = 0.002
"""How long (seconds) the guest run stays warm after a call: see `_keep_warm`."""


async def _keep_warm(guest: Guest) -> None:
    """While calls come (one started or ended less than `WARM` ago), keep a trio task runnable:
    the guest run's ticks are then scheduled on the asyncio loop itself (``loop.call_soon``)
    instead of waiting for I/O in trio's helper thread, so a call in a quick succession of calls
    does not pay two thread hops. A long call does not keep it spinning; idle, it sleeps until
    the next call wakes it."""
    while True:
        if trio.current_time() - guest.last < WARM:
            await trio.lowlevel.checkpoint()
        else:
            guest.wake = trio.Event()
            await guest.wake.wait()


def _spawn(guest: Guest, task: Callable[[], Awaitable[None]]) -> None:
    """Start *task* in the guest run, straight from the asyncio loop's thread (where the guest
    run lives, between two of its ticks): no message through trio's entry queue, no wake-up
    write; the task's context is a copy of the caller's (trio copies the current context)."""
    _warm(guest)
    guest.nursery.start_soon(task)


def _warm(guest: Guest) -> None:
    guest.last = trio.current_time()
    guest.wake.set()


async def leave(guest: Guest) -> None:
    guest.users -= 1
    if guest.users == 0:
        guest.stopping = True
        guest.token.run_sync_soon(guest.stop.set)
        (await asyncio.shield(guest.finished)).unwrap()


def on_loop(guest: Guest) -> None:
    """Raise unless this is the guest run's asyncio loop."""
    if asyncio.get_running_loop() is not guest.ticks.loop:
        raise RuntimeError(
            "this dsh host was opened on another event loop: open one on this loop "
            "(`dsh_host.aio.open_host`)"
        )


async def in_trio(guest: Guest, job: Job[T]) -> T:
    """Run *job* in the guest run (`begin`); cancelling the caller aborts its signal."""
    on_loop(guest)
    signal = AbortSignal()
    started = begin(guest, signal, job(signal))
    if type(started) is Pending:
        return await started.settle()  # type: ignore[no-any-return]
    return started  # type: ignore[no-any-return]


def begin(guest: Guest, signal: AbortSignal, coro: Coroutine[Any, Any, Any]) -> Any:
    """Start the call *coro* (made with *signal*) from the guest run's asyncio loop: its value
    if it ended at once, else a `Pending` to await (`Pending.settle`).

    Its first step runs now, as a step of an idle `Worker` (`Worker.step`): a call that does
    not suspend ends there. One that does is the worker's (or, with no idle worker, a new
    worker's: `spawned`) trio task from then on."""
    worker = guest.workers.take()
    if worker is None:
        return spawned(guest, signal, coro)
    # `take` left it last in `idle`: `step` takes it out if the call suspends
    value = worker.step(coro)  # its exception, if it raised, goes to the caller
    return value if value is not HANDED else handed(guest, worker, signal)


def spawned(guest: Guest, signal: AbortSignal, coro: Coroutine[Any, Any, Any]) -> Pending[Any]:
    """The `Pending` of a call that no idle worker could start: a new worker starts it."""
    call: Pending[Any] = Pending(guest, signal)
    if CAN_STEP:
        worker = Worker(guest.workers, first=coro, finish=call.finish)
        _spawn(guest, worker.drive)
    else:
        _spawn(guest, lambda: call.run(coro))
    return call


def handed(guest: Guest, worker: Worker, signal: AbortSignal) -> Pending[Any]:
    """The `Pending` of a call whose first step suspended and that *worker* took over."""
    call: Pending[Any] = Pending(guest, signal)
    worker.finish = call.finish
    _warm(guest)
    return call


@attrs.define(eq=False)
class Pending(Generic[T]):
    """A call that did not end at once: its outcome (`finish`) and the asyncio side's wait."""

    guest: Guest
    signal: AbortSignal
    result: outcome.Outcome[T] | None = None
    waiting: list[asyncio.Future[None]] = attrs.Factory(list)

    async def settle(self) -> T:
        """Its value (or exception). The caller first runs the guest run's queued ticks itself
        (`_Ticks.run_now`, up to `INLINE_TICKS`), so a call that ends in a tick or two returns
        with no turn of the asyncio loop; only a call still running then waits on the loop."""
        ticks = self.guest.ticks
        for _ in range(INLINE_TICKS):
            if self.result is not None or not ticks.run_now():
                break
        if self.result is None:
            await self._wait(ticks.loop)
        assert self.result is not None
        return self.result.unwrap()

    async def run(self, coro: Coroutine[Any, Any, T]) -> None:
        """The call as a trio task of its own (when workers cannot be used)."""
        try:
            value = await coro
        except BaseException as exc:
            self.finish(outcome.Error(exc))
        else:
            self.finish(outcome.Value(value))

    def finish(self, result: outcome.Outcome[T]) -> None:
        self.guest.last = trio.current_time()
        self.result = result
        for future in self.waiting:
            if not future.done():
                future.set_result(None)

    async def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for the call to end; a cancelled caller aborts the call and still waits."""
        first = loop.create_future()
        self.waiting.append(first)
        try:
            await first
        except asyncio.CancelledError:
            if self.result is not None:  # it settled as the cancellation came: nothing to wait for
                raise
            self.guest.token.run_sync_soon(self.signal.abort, "the asyncio task was cancelled")
            settled = loop.create_future()  # the first was cancelled with the caller
            self.waiting.append(settled)
            while not settled.done():  # never abandon the call: wait for it to settle
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(settled)
            raise
