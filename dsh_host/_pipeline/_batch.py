"""`execute_batch`: one model step's calls, with a rolling parallel pool and exclusive barriers.

Policy (pre-execute, approval, guards) runs in model order, one call at a time; only the wrappers
and bodies overlap, at most ``max_parallel`` at once. Calls are finalised (post-execute,
observers, ``on_result``) in model order as they settle, so results and their contexts come back
in the order the model asked.

How it is cheap. The calls are run by a few *workers*: the caller's own task first, and more tasks
only when needed, never more than ``max_parallel + 1`` (a task per call would cost a spawn, a
limiter slot and an event each). One worker at a time holds the *baton*, the right to start the
next call: it classifies the call, waits for a free slot (or, for an exclusive call, for every
running call to end), runs its policy (`Pipeline.prepare`), then starts the rest of the call -
wrappers, body, finalisation - by hand in its own task. When that rest finishes without ever
suspending, the holder simply goes on to the next call: a batch of calls that never suspend runs
like a loop of `execute`, with no task switch, wake-up or event. Only when the rest suspends (a
body awaiting I/O) does the holder let go of the baton, at that moment, and wake as many idle
workers (or start new ones) as calls could start now; trio runs them in its next pass, where each
takes the baton in turn as the call before suspends, so a pool of calls that each wait briefly
starts about ``max_parallel`` calls per scheduler pass, one task step per call. A worker back from
its call takes a free baton itself. No nursery is opened until a parallel call with others after
it is reached (a batch of exclusive calls never opens one). This scheduling is hand-written because
trio's `CapacityLimiter` and memory channels pass through the scheduler on every acquire or send
(a checkpoint each), and an `Event` per call costs a wake-up: here the only trips through the
scheduler are the ones the calls themselves make.

Cancelling the caller cancels every worker (one nursery); a worker woken then starts no call.
What the machinery raises comes out as itself, not in an exception group (`ToolRegistry.execute`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio
from trio.lowlevel import (
    Task,
    checkpoint_if_cancelled,
    current_task,
    reschedule,
)

from .._model._signal import AbortSignal
from .._model._values import ExecutionMode, ToolExecution, ToolExecutionInput, ToolExecutionResult
from ._bare_batch import bare_calls
from ._baton import _Baton
from ._by_hand import resume, sole
from ._classify import classify
from ._follow import _BODY, cut_short_settled
from ._inputs import with_arguments, with_signal
from ._wrappers import _DispatchState

if TYPE_CHECKING:
    from .._model._trace import Trace
    from .._registry._hooks import Plan
    from .._registry._registry import ToolTable
    from ._pipeline import Pipeline

__all__ = ["run_batch"]

_PARALLEL: Final = ExecutionMode.PARALLEL


async def run_batch(
    registry: ToolTable,
    pipeline: Pipeline,
    inputs: list[ToolExecutionInput],
    max_parallel: int,
    signal: AbortSignal | None,
    trace: Trace | None,
    on_result: Callable[[int, ToolExecutionResult], None] | None = None,
) -> list[ToolExecutionResult]:
    """Run *inputs* as one batch (see the module docstring); results in model order."""
    if not inputs:
        return []
    if len(inputs) == 1:
        # One call: nothing to overlap or order; the plain pipeline, no tasks, no events.
        first = inputs[0]
        if signal is not None:
            if signal.aborted:
                first = attrs.evolve(first, signal=_ABORTED)
            elif first.signal is None:
                first = attrs.evolve(first, signal=signal)
        result = await pipeline.run(first, trace)
        if on_result is not None:
            on_result(0, result)
        return [result]
    batch = _Batch(registry, pipeline, inputs, max_parallel, signal, trace, on_result)
    batch.holder = current_task()
    # Up to the first parallel call that has others after it, nothing can overlap: no nursery
    # (opening one costs more than a call). A batch of exclusive calls never opens one.
    await batch.work()
    if batch.pending != batch.next:
        return batch.results
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            batch.nursery = nursery
            await batch.work()
    except BaseExceptionGroup as group:
        failure = sole(group)
        if failure is None:
            raise
    if failure is not None:
        await cut_short_settled(batch.pipeline, batch.settled, batch.trace, failure)
        # What the machinery raised (a cancellation, a Ctrl-C, an ``on_result`` that failed)
        # comes out as itself, as it would from `execute`, not wrapped in a group.
        raise failure
    return batch.results


class _Batch(_Baton):
    """The state of one batch run: its calls, the baton, the in-flight count, the commit point."""

    __slots__ = (
        "committed",
        "committing",
        "inputs",
        "max_parallel",
        "next",
        "nursery",
        "on_result",
        "pending",
        "pending_parallel",
        "pending_ready",
        "pipeline",
        "registry",
        "results",
        "settled",
        "signal",
        "trace",
    )

    def __init__(
        self,
        registry: ToolTable,
        pipeline: Pipeline,
        inputs: list[ToolExecutionInput],
        max_parallel: int,
        signal: AbortSignal | None,
        trace: Trace | None,
        on_result: Callable[[int, ToolExecutionResult], None] | None,
    ) -> None:
        count = len(inputs)
        self.registry = registry
        self.pipeline = pipeline
        self.inputs = inputs
        self.max_parallel = max_parallel
        self.signal = signal
        self.trace = trace
        self.on_result = on_result
        self.results: list[Any] = [None] * count
        self.settled: list[Any] = [None] * count  # (execution, result, post) until finalised
        self.next = 0  # the next call to prepare
        self.committed = 0  # the next call to finalise
        self.committing = False  # a worker is finalising (only one at a time, in model order)
        self.in_flight = 0  # parallel dispatches running now
        self.holder: Any = None  # the worker task holding the baton; None when it is free
        self.idle: deque[Task] = deque()  # workers waiting for the baton
        self.drainer: Task | None = None  # the holder waiting for in-flight dispatches to end
        self.drain_limit = 0
        self.workers = 1  # the caller's task is the first worker
        self.coming = 0  # workers woken or started that have not run yet
        self.nursery: trio.Nursery | None = None
        self.pending = -1  # a call classified, not started: before the nursery was opened
        self.pending_ready: Any = None  # its (tool, frozen, args)
        self.pending_parallel = True

    # -- the workers -------------------------------------------------------------------------

    async def work(self) -> None:
        """One worker: runs calls, stage by stage, while it holds the baton (see the module)."""
        me, pipeline, trace, signal = current_task(), self.pipeline, self.trace, self.signal
        count, hooks, slots = len(self.inputs), pipeline.hooks, self.max_parallel - 1
        if self.holder is not me:  # a worker just started
            self.coming -= 1
        while True:
            if self.holder is not me and not await self._take(me):
                return  # nothing left to start; whoever holds the baton ends the batch
            if self.nursery and signal is None and trace is None and await bare_calls(self, me):
                continue  # a call run bare suspended: the baton was handed on
            index = self.next
            if index >= count or (signal is not None and signal.aborted):
                return await self._finish()
            if (started := self._classified(index)) is None:
                return  # parked: the caller opens the nursery
            input, frozen, ready, parallel = started
            if self.in_flight > (limit := slots if parallel else 0) and not await self._room(limit):
                continue  # aborted while waiting for room: the next turn ends the batch
            self.next = index + 1
            plan = hooks.plan()  # the call's hooks, as `Pipeline.run` reads them
            admitted, post = pipeline.admit(input, frozen, plan), False  # no policy: no coroutine
            if admitted is None:  # (the `Prepared` not kept in this frame: a parked call's)
                admitted, post = _unpacked(await pipeline.prepare(input, trace, frozen=frozen))
            execution, result = admitted
            try:
                if result is None and parallel:  # wrappers and body run here, by hand (see above)
                    wrapped = bool(plan.execute)
                    plain = not wrapped and ready is not None and ready[1] is ready[2]
                    state = None if wrapped or plain else _DispatchState(ready)
                    if plain:  # the body stage trusts what `classify` froze and accepted
                        pipeline._accepted = ready[0], ready[1]
                    running: Coroutine[Any, Any, Any] = (
                        pipeline.dispatch(execution, trace, ready, plan) if wrapped
                        else pipeline.body_stage(execution, state, trace)
                    )  # fmt: skip
                    try:
                        trap = running.send(None)
                    except StopIteration as stop:
                        value = stop.value
                    else:  # it suspends: the baton is handed on (no task, event or wrapper)
                        self.in_flight += 1  # nothing else ran since the call started
                        self._hand_on()
                        del input, ready, frozen, admitted, started  # a parked call's, not held
                        try:
                            value = await resume(running, trap)
                        finally:
                            self._landed()
                    result, post = (
                        value if wrapped else (pipeline.dispatched(execution, state, value), True)
                    )
                elif result is None:  # an exclusive call keeps the baton: nothing else starts
                    result, post = await pipeline.dispatch(execution, trace, ready, plan)
            except BaseException as exc:  # the caller's cancellation: the call's observer round
                await pipeline.cut_short(execution, _BODY, None, trace, exc)
                raise
            if index != self.committed or self.committing:
                self.settled[index] = (execution, result, post)  # finalised in its turn
            elif (later := self._settle(me, index, execution, result, post, plan)) is not None:
                await later  # its turn: finalised here, by hand too

    def _classified(self, index: int) -> tuple[ToolExecutionInput, Any, Any, bool] | None:
        """Call *index*, classified once (frozen and validated here, handed on with the batch's
        signal): ``(input, frozen, ready, parallel)``; ``None`` when it was parked (`_park`)."""
        input = self.inputs[index]
        if index == self.pending:  # classified before the nursery was opened, or by `bare_calls`
            return input, None, self.pending_ready, self.pending_parallel
        mode, tool, frozen, args = classify(self.registry, input)
        signal = self.signal
        if signal is not None and input.signal is None:
            input = with_signal(input, frozen, signal)
        parallel, ready = mode is _PARALLEL, None if args is None else (tool, frozen, args)
        if parallel and self.nursery is None and index + 1 < len(self.inputs):
            self._park(index, input, frozen, ready)
            return None
        return input, frozen, ready, parallel

    def _settle(
        self,
        me: Task,
        index: int,
        execution: ToolExecution,
        result: ToolExecutionResult,
        post: bool,
        plan: Plan,
    ) -> Coroutine[Any, Any, None] | None:
        """Record call *index*, whose turn it is; what is left to await (its finalisation, the
        calls that settled meanwhile), or ``None`` (no coroutine when there is nothing)."""
        if (post and plan.post) or plan.result:
            return self._settle_later(me, index, execution, result, post, plan)
        if self._record(index, result):
            return self._commit(me)  # calls that settled meanwhile, in order
        return None

    def _record(self, index: int, result: ToolExecutionResult) -> bool:
        """Record call *index*'s final *result* in order; whether calls that settled meanwhile
        are waiting to be committed after it."""
        self.results[index] = result
        self.committed = index = index + 1
        if self.on_result is not None:
            self.on_result(index - 1, result)
        return index < len(self.inputs) and self.settled[index] is not None and not self.committing

    async def _settle_later(
        self,
        me: Task,
        index: int,
        execution: ToolExecution,
        result: ToolExecutionResult,
        post: bool,
        plan: Plan,
    ) -> None:
        """`_settle` for a call that post-execute or an observer sees: finalised by hand."""
        result = await self._finalize(me, execution, result, post, plan)
        if self._record(index, result):
            await self._commit(me)

    async def _take(self, me: Task) -> bool:
        """Wait for the baton and take it; ``False`` when there is nothing left to start."""
        while self.holder is not None:  # another worker holds it, or the batch is over
            if self.next >= len(self.inputs):
                return False
            await self._wait(self.idle)
            self.coming -= 1
        self.holder = me
        await checkpoint_if_cancelled()  # no call starts in a batch being cancelled
        return True

    def _park(
        self, index: int, input: ToolExecutionInput, frozen: Any, ready: Any, parallel: bool = True
    ) -> None:
        """Keep call *index*, classified, for the next turn (its input carrying the frozen
        arguments): the first parallel call with others after it, for when the caller has
        opened the nursery; or the call `bare_calls` could not run bare."""
        if frozen is not None and frozen is not input.arguments:
            input = with_arguments(input, frozen)
        self.inputs[index], self.pending_ready, self.pending = input, ready, index
        self.pending_parallel = parallel

    async def _room(self, limit: int) -> bool:
        """Wait until at most *limit* parallel calls run; ``False`` if the batch was aborted."""
        await self._drain(limit)
        await checkpoint_if_cancelled()
        return self.signal is None or not self.signal.aborted

    async def _finalize(
        self,
        me: Task,
        execution: ToolExecution,
        result: ToolExecutionResult,
        post: bool,
        plan: Plan,
    ) -> ToolExecutionResult:
        """`Pipeline.finalize`, run by hand: if it suspends while this worker holds the baton,
        the baton is let go first."""
        finalizing = self.pipeline.finalize(execution, result, post, self.trace, plan)
        try:
            trap = finalizing.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        self.committing = True
        try:
            if self.holder is me:
                self._hand_on()
            return await resume(finalizing, trap)  # type: ignore[no-any-return]
        finally:
            self.committing = False

    async def _commit(self, me: Task) -> None:
        """Finalise every settled call from the commit point on, in model order.

        Each finalisation runs by hand like a dispatch: if it suspends while this worker holds
        the baton, the baton is handed on first.
        """
        self.committing = True
        try:
            settled, results, count = self.settled, self.results, len(self.inputs)
            pipeline, trace, on_result = self.pipeline, self.trace, self.on_result
            index = self.committed
            while index < count and (entry := settled[index]) is not None:
                settled[index] = None
                execution, result, post = entry
                plan = pipeline.hooks.plan()
                if execution is not None and ((post and plan.post) or plan.result):
                    running = pipeline.finalize(execution, result, post, trace, plan)
                    try:
                        trap = running.send(None)
                    except StopIteration as stop:
                        result = stop.value
                    else:
                        if self.holder is me:
                            self._hand_on()
                        result = await resume(running, trap)
                results[index] = result
                self.committed = index = index + 1
                if on_result is not None:
                    on_result(index - 1, result)
        finally:
            self.committing = False

    async def _finish(self) -> None:
        """As the holder, with no call left to start: report the unstarted ones, end the batch."""
        inputs, pipeline, trace = self.inputs, self.pipeline, self.trace
        start, count = self.next, len(inputs)
        self.next = count
        for index in range(start, count):
            prepared = await pipeline.prepare(attrs.evolve(inputs[index], signal=_ABORTED), trace)
            assert prepared.result is not None
            self.settled[index] = (prepared.execution, prepared.result, prepared.post)
        # The baton is not handed on: the idle workers leave now, the busy ones when done.
        self.holder = _DONE
        idle = self.idle
        while idle:
            self.coming += 1
            reschedule(idle.popleft())
        if self.committed == start and start < count and not self.committing:
            await self._commit(current_task())


_DONE: Final[Any] = object()
"""The baton's holder once the batch has nothing left to start."""

_ABORTED = AbortSignal()
_ABORTED.abort("batch aborted before this call started")


def _unpacked(prepared: Any) -> tuple[tuple[Any, Any], bool]:  # ((execution, result), post)
    return (prepared.execution, prepared.result), prepared.post
