"""dsh for asyncio code: ``async with dsh_host.aio.open_host() as host``.

The pipeline stays trio. Trio runs as a *guest* of the running asyncio loop
(`trio.lowlevel.start_guest_run`): one trio run per asyncio loop, on the loop's own thread,
shared by every asyncio host on it, started by the first `open_host` and ended by the last.
A call runs in a trio task of that run from its first line to its last; its result comes back
to the awaiting asyncio task with no thread in between. Cancelling the asyncio task aborts the
call's `AbortSignal` (the body sees it and the pipeline ends the call ``ABORTED``), and the task
waits for the call to settle before it re-raises, so a call is never abandoned. The caller's
context variables (an OpenTelemetry span, say) are copied into the call's trio task.

A call costs no thread hop, no new trio task and, mostly, no tick of the guest run and no turn
of the asyncio loop: the trio task is a parked *worker* (`_worker`), and the call's first step
runs right away, on the awaiting asyncio task, as a step of that worker, set up as trio's run
loop sets up a task step (the worker is trio's current task, sniffio says trio, the call's
context is the worker's). A call whose pipeline does not suspend ends in that step. One that
suspends (a checkpoint, a wait) is handed to the worker with the message its step yielded, as
trio's run loop would have taken it, and goes on there as any trio task; the awaiting coroutine
then runs the guest run's queued ticks itself (`_Ticks`), so a call that ends in a tick or two
more still returns at once.

The cancellation costs a call nothing until it suspends: the call's signal is live and has no
deadline, so the pipeline still runs a call no hook sees on its bare path, and there its body
runs with no cancel scope, awaited directly (`Pipeline._bare`): the worker, which steps the
call and so sees its first suspension anyway, enters the cancel scope that follows the signal
right there if the body is still running (`Worker._arm`, as the pipeline's `Followed` would).
Only a call that suspends has its signal wired to the awaiting task (`Pending._wait`). No
cancellation can reach a call that never yields. The loop check compares threads
(`Guest.here`) rather than ask asyncio for the running loop (a ``getpid`` system call per call
on Python 3.11). Each call has a signal of its own (reusing one nobody kept would save about
3% of a call, but "nobody kept it" could only be read off `sys.getrefcount`, whose counts
differ between interpreters).

Why not a trio thread: every call would cross threads twice, cancellation would have to be
relayed across them, and context variables would not follow. The guest run shares the thread,
so none of that arises; its cost is trio waiting for I/O in a helper thread while it is idle
(two thread wake-ups for a call that suspends and finds it idle; `_keep_warm` spares calls in
quick succession).

Why not run the pipeline on the asyncio task as a plain coroutine when it would not suspend:
whether it suspends depends on the tool's body and the plugins' hooks, which may use trio (a
cancel scope, a checkpoint) at any point, after side effects; only a trio task can run them
safely. The worker's step gives them one: the same task that a suspension hands the call to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from threading import get_ident
from typing import Any, Literal, TypeVar, final

import dsh_host
from dsh_host import (
    AbortSignal,
    Host,
    Scope,
    ToolExecutionInput,
    ToolExecutionResult,
    arguments_of,
    new_call_id,
)

from ._guest import Guest, Job, handed, in_trio, join, leave, on_loop, spawned
from ._worker import CAN_FOLLOW, HANDED

__all__ = ["AsyncioHost", "open_host"]

Format = Literal["anthropic", "openai"]  # the providers `Host.run_tool_calls` speaks
SchemaFormat = Literal["openai", "anthropic", "mcp"]  # the formats `Host.schemas` speaks

T = TypeVar("T")
Call = ToolExecutionInput | tuple[str, Any] | Mapping[str, Any]


@final
class AsyncioHost:
    """A `Host` driven from asyncio; see the module docstring. Made by `open_host`."""

    def __init__(
        self, host: Host, guest: Guest, close: Callable[[], Coroutine[Any, Any, object]]
    ) -> None:
        self.host = host
        self._guest = guest
        self._loop = _known_thread(guest.ticks.loop)
        self._close = close
        self._closed = False

    def _open(self) -> Guest:
        if self._closed:
            raise RuntimeError(
                "this dsh host is closed (its `async with dsh_host.aio.open_host()` ended, or "
                "aclose() ran): open a new one"
            )
        return self._guest

    def _run(self, job: Job[T]) -> Awaitable[T]:
        return in_trio(self._open(), job)

    async def call(
        self,
        name: str,
        arguments: Any,
        call_id: str | None = None,
        *,
        scope: Scope | None = None,
    ) -> ToolExecutionResult:
        """`Host.call` from asyncio: one call through the whole pipeline."""
        # `in_trio`, `begin`, `Guest.here` and `Pool.take` written out: no closure, no
        # coroutine, fewer calls, per call
        guest = self._guest
        if self._loop._thread_id != get_ident() and (self._closed or not guest.here()):
            on_loop(self._open())  # raises, unless the loop is this one after all
        signal = AbortSignal()
        coro = self.host._call(name, arguments, call_id, scope, signal, None)  # no `call` frame
        pool = guest.workers
        if (
            (idle := pool.idle)
            and "task" not in pool.run  # between two ticks: no task is trio's current one
            and "before_task_step" not in (instruments := pool.instruments)
            and "after_task_step" not in instruments  # no trio instrument to see the step
        ):
            worker = idle[-1]  # it stays idle unless the call suspends (`Worker.step`)
            if CAN_FOLLOW:
                signal._follower = worker  # follows it from the first suspension on
            value = worker.step(coro, signal)  # its exception, if it raised, goes to the caller
            if value is not HANDED:
                return value  # type: ignore[no-any-return]
            return await handed(guest, worker, signal).settle()  # type: ignore[no-any-return]
        return await spawned(guest, signal, coro).settle()  # type: ignore[no-any-return]

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
            await self._run(lambda signal: self._close())
            self._closed = True
            self._loop = _Unknown  # `call`'s loop check then looks further, and finds it closed


class _Unknown:
    """A loop whose running thread is not known by ``_thread_id`` (`Guest.here` then asks)."""

    _thread_id = None


def _known_thread(loop: asyncio.AbstractEventLoop) -> Any:
    """*loop*, if its ``_thread_id`` is the thread running it while it runs (else `_Unknown`):
    asyncio's own loops set it as they start and clear it as they stop."""
    return loop if isinstance(loop, asyncio.BaseEventLoop) else _Unknown


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
    config: Any = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    plugins: Iterable[object] = (),
    entry_points: bool = True,
) -> AsyncIterator[AsyncioHost]:
    """``async with dsh_host.aio.open_host(...) as host:`` `dsh_host.open_host` for asyncio.

    The arguments are those of `dsh_host.open_host`, which opens the host in the trio guest
    run. On exit the host is closed (audit flushed, child processes ended) and, when it was the
    loop's last, the trio guest run ends.
    """
    guest = await join()
    try:
        opened = dsh_host.open_host(
            config, workspace=workspace, plugins=plugins, entry_points=entry_points
        )
        plain = await in_trio(guest, lambda signal: opened.__aenter__())
        host = AsyncioHost(plain, guest, lambda: opened.__aexit__(None, None, None))
        try:
            yield host
        finally:
            await _shielded(host.aclose())
    finally:
        await _shielded(leave(guest))


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
