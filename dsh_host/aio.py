"""dsh for asyncio code: ``async with dsh_host.aio.open_host() as host``.

The pipeline stays trio. Trio runs as a *guest* of the running asyncio loop
(`trio.lowlevel.start_guest_run`): one trio run per asyncio loop, on the loop's own thread,
shared by every asyncio host on it, started by the first `open_host` and ended by the last.
A call is a trio task of that run; its result comes back to the awaiting asyncio task with no
thread in between. Cancelling the asyncio task aborts the call's `AbortSignal` (the body sees
it and the pipeline ends the call ``ABORTED``), and the task waits for the call to settle before
it re-raises, so a call is never abandoned. The caller's context variables (an OpenTelemetry
span, say) are copied into the call's trio task.

Why not a trio thread: every call would cross threads twice, cancellation would have to be
relayed across them, and context variables would not follow. The guest run shares the thread,
so none of that arises; its cost is trio waiting for I/O in a helper thread while it is idle
(two thread wake-ups for a call that finds it idle; `_keep_warm` spares calls in quick
succession).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, final

import attrs
import outcome
import sniffio
import trio

from dsh_host import (
    AbortSignal,
    Host,
    Scope,
    ToolExecutionInput,
    ToolExecutionResult,
    arguments_of,
    new_call_id,
)

from ._host._lifecycle import ConfigSource, SchemaFormat, host_config

__all__ = ["AsyncioHost", "open_host"]

Format = Literal["anthropic", "openai"]  # the providers `Host.run_tool_calls` speaks

T = TypeVar("T")
Call = ToolExecutionInput | tuple[str, Any] | Mapping[str, Any]


@attrs.define(eq=False)
class _Guest:
    """The trio guest run of one asyncio loop."""

    token: trio.lowlevel.TrioToken
    nursery: trio.Nursery
    stop: trio.Event
    finished: asyncio.Future[outcome.Outcome[None]]
    users: int = 0
    stopping: bool = False
    last: float = 0.0
    """When a call last started or ended (trio's clock)."""
    wake: trio.Event = attrs.Factory(trio.Event)


_guests: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[_Guest]] = (
    weakref.WeakKeyDictionary()
)


async def _join() -> _Guest:
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


def _start(loop: asyncio.AbstractEventLoop, ready: asyncio.Future[_Guest]) -> None:
    finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            guest = _Guest(trio.lowlevel.current_trio_token(), nursery, stop, finished)
            trio.lowlevel.spawn_system_task(_keep_warm, guest)
            if not ready.done():
                ready.set_result(guest)
            await stop.wait()

    def done(result: outcome.Outcome[None]) -> None:
        if not finished.done():
            finished.set_result(result)
        if not ready.done():  # the run ended before it started serving
            ready.set_exception(RuntimeError(f"the trio guest run ended at once: {result!r}"))

    trio.lowlevel.start_guest_run(
        main,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        run_sync_soon_not_threadsafe=loop.call_soon,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,
        strict_exception_groups=True,
    )


WARM: float = 0.002
"""How long (seconds) the guest run stays warm after a call: see `_keep_warm`."""


async def _keep_warm(guest: _Guest) -> None:
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


def _spawn(guest: _Guest, task: Callable[[], Awaitable[None]]) -> None:
    guest.last = trio.current_time()
    guest.wake.set()
    guest.nursery.start_soon(task)


async def _leave(guest: _Guest) -> None:
    guest.users -= 1
    if guest.users == 0:
        guest.stopping = True
        guest.token.run_sync_soon(guest.stop.set)
        (await asyncio.shield(guest.finished)).unwrap()


async def _in_trio(guest: _Guest, job: Callable[[AbortSignal], Awaitable[T]]) -> T:
    """Run *job* as a trio task of the guest run; cancelling the caller aborts its signal."""
    loop = asyncio.get_running_loop()
    waiting: list[asyncio.Future[outcome.Outcome[T]]] = [loop.create_future()]
    signal = AbortSignal()
    context = contextvars.copy_context()

    ended: list[bool] = []

    async def task() -> None:
        _copy_into_trio(context)
        result = await outcome.acapture(job, signal)
        guest.last = trio.current_time()
        ended.append(True)
        for future in waiting:
            if not future.done():
                future.set_result(result)

    guest.token.run_sync_soon(_spawn, guest, task)
    try:
        return (await waiting[0]).unwrap()
    except asyncio.CancelledError:
        if ended:  # the call settled as the cancellation came: nothing left to wait for
            raise
        guest.token.run_sync_soon(signal.abort, "the asyncio task was cancelled")
        settled = loop.create_future()  # the first was cancelled with the caller
        waiting.append(settled)
        while not settled.done():  # never abandon the call: wait for it to settle
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(settled)
        raise


def _copy_into_trio(context: contextvars.Context) -> None:
    """The caller's context variables, set in the current trio task's own context."""
    for var, value in context.items():
        if var is not sniffio.current_async_library_cvar:
            var.set(value)


@final
class AsyncioHost:
    """A `Host` driven from asyncio; see the module docstring. Made by `open_host`."""

    def __init__(self, host: Host, guest: _Guest) -> None:
        self.host = host
        self._guest = guest
        self._closed = False

    def _run(self, job: Callable[[AbortSignal], Awaitable[T]]) -> Awaitable[T]:
        if self._closed:
            raise RuntimeError(
                "this dsh host is closed (its `async with dsh_host.aio.open_host()` ended, or "
                "aclose() ran): open a new one"
            )
        return _in_trio(self._guest, job)

    async def call(
        self,
        name: str,
        arguments: Any,
        call_id: str | None = None,
        *,
        scope: Scope | None = None,
    ) -> ToolExecutionResult:
        """`Host.call` from asyncio: one call through the whole pipeline."""
        return await self._run(
            lambda signal: self.host.call(
                name, arguments, call_id=call_id, scope=scope, signal=signal
            )
        )

    async def call_many(
        self, calls: Iterable[Call], *, max_parallel: int = 10
    ) -> list[ToolExecutionResult]:
        """One model step (`ToolRegistry.execute_batch`): results in model order.

        Each call is a `ToolExecutionInput`, a ``(name, arguments)`` pair, or a mapping with
        ``name``, ``arguments`` and optionally ``call_id``.
        """
        inputs = [_input(call) for call in calls]
        return await self._run(
            lambda signal: self.host.registry.execute_batch(inputs, max_parallel, signal=signal)
        )

    async def run_tool_calls(self, calls: Any, *, format: Format) -> list[dict[str, Any]]:
        """`Host.run_tool_calls` from asyncio: provider tool calls in, result shapes out."""
        return await self._run(
            lambda signal: self.host.run_tool_calls(calls, format=format, signal=signal)
        )

    def schemas(self, scope: Scope | None = None, *, format: SchemaFormat = "mcp") -> list[Any]:
        """`Host.schemas`: the tools in a provider's ``tools`` format."""
        return self.host.schemas(scope, format=format)

    async def aclose(self) -> None:
        """`Host.aclose`: stop the plugins (flush audit, end child processes). Once."""
        if not self._closed:
            await self._run(lambda signal: self.host.aclose())
            self._closed = True


def _input(call: Call) -> ToolExecutionInput:
    if isinstance(call, ToolExecutionInput):
        return call
    if isinstance(call, tuple):
        name, arguments = call
        call_id = None
    elif isinstance(call, Mapping):
        name, arguments, call_id = call["name"], call.get("arguments"), call.get("call_id")
    else:
        raise TypeError(
            f"a call is a ToolExecutionInput, a (name, arguments) pair or a mapping, "
            f"not {type(call).__name__}"
        )
    return ToolExecutionInput(
        call_id=call_id or new_call_id(), name=name, arguments=arguments_of(arguments)
    )


@contextlib.asynccontextmanager
async def open_host(
    config: ConfigSource = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    plugins: Iterable[object] = (),
    entry_points: bool = True,
) -> AsyncIterator[AsyncioHost]:
    """``async with dsh_host.aio.open_host(...) as host:`` `dsh_host.open_host` for asyncio.

    The arguments are those of `dsh_host.open_host`. On exit the host is closed (audit flushed,
    child processes ended) and, when it was the loop's last, the trio guest run ends.
    """
    guest = await _join()
    try:
        config_ = host_config(config, workspace)
        made: list[Host] = []

        async def build(signal: AbortSignal) -> None:
            made.append(Host(config_, plugins=plugins, load_entrypoints=entry_points))

        await _in_trio(guest, build)
        host = AsyncioHost(made[0], guest)
        try:
            yield host
        finally:
            await _shielded(host.aclose())
    finally:
        await _shielded(_leave(guest))


async def _shielded(work: Awaitable[None]) -> None:
    """Await *work* to the end even if the caller is cancelled meanwhile (then re-raise)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError
