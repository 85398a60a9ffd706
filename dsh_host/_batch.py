"""`execute_batch`: one model step's calls, with a rolling parallel pool and exclusive barriers.

Policy (pre-execute, approval, guards) runs in model order, one call at a time; only the wrappers
and bodies overlap. A committer finalises calls (post-execute, observers) in model order as they
settle, so results and their contexts come back in the order the model asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._signal import AbortSignal
from ._values import ExecutionMode, ToolExecution, ToolExecutionInput, ToolExecutionResult

if TYPE_CHECKING:
    from ._pipeline import Pipeline
    from ._registry import ToolRegistry
    from ._trace import Trace

__all__ = ["run_batch"]


@attrs.define
class _Slot:
    ready: trio.Event = attrs.Factory(trio.Event)
    execution: ToolExecution | None = None
    result: ToolExecutionResult | None = None
    post: bool = True

    def settle(self, execution: ToolExecution, result: ToolExecutionResult, post: bool) -> None:
        self.execution, self.result, self.post = execution, result, post
        self.ready.set()


async def run_batch(
    registry: ToolRegistry,
    pipeline: Pipeline,
    inputs: list[ToolExecutionInput],
    max_parallel: int,
    signal: AbortSignal | None,
    trace: Trace | None,
    on_result: Callable[[int, ToolExecutionResult], None] | None = None,
) -> list[ToolExecutionResult]:
    if signal is not None:
        inputs = [i if i.signal is not None else attrs.evolve(i, signal=signal) for i in inputs]
    if len(inputs) == 1:
        # One call: nothing to overlap or order; the plain pipeline, no tasks, no events.
        first = inputs[0]
        if signal is not None and signal.aborted:
            first = attrs.evolve(first, signal=_ABORTED)
        result = await pipeline.run(first, trace)
        if on_result is not None:
            on_result(0, result)
        return [result]
    slots = [_Slot() for _ in inputs]
    results: list[Any] = [None] * len(inputs)
    ready: list[Any] = [None] * len(inputs)
    modes: list[ExecutionMode | None] = [None] * len(inputs)

    def stopped() -> bool:
        return signal is not None and signal.aborted

    async def commit() -> None:
        for index, slot in enumerate(slots):
            await slot.ready.wait()
            assert slot.execution is not None
            assert slot.result is not None
            results[index] = await pipeline.finalize(slot.execution, slot.result, slot.post, trace)
            if on_result is not None:
                on_result(index, results[index])

    async def dispatch(index: int, execution: ToolExecution) -> None:
        result, post = await pipeline.dispatch(execution, trace, ready[index])
        slots[index].settle(execution, result, post)

    async def prepare(index: int) -> ToolExecution | None:
        """Stages A-G for one call, in model order; ``None`` when it needs no dispatch."""
        prepared = await pipeline.prepare(inputs[index], trace)
        if prepared.result is not None:
            slots[index].settle(prepared.execution, prepared.result, prepared.post)
            return None
        return prepared.execution

    async def pooled(index: int, execution: ToolExecution, limiter: trio.CapacityLimiter) -> None:
        try:
            await dispatch(index, execution)
        finally:
            limiter.release_on_behalf_of(index)

    def mode(index: int) -> ExecutionMode:
        """The call's mode, classified once; its arguments are then frozen and validated once."""
        known = modes[index]
        if known is not None:
            return known
        known, tool, frozen, args = registry._classify(inputs[index])
        if frozen is not None:
            input = inputs[index]
            if frozen is not input.arguments:  # the pipeline's own freeze then costs nothing
                inputs[index] = attrs.evolve(input, arguments=frozen)
            if args is not None:
                ready[index] = (tool, frozen, args)
        modes[index] = known
        return known

    index = 0
    async with trio.open_nursery() as outer:
        outer.start_soon(commit)
        while index < len(inputs) and not stopped():
            if mode(index) is ExecutionMode.EXCLUSIVE:
                execution = await prepare(index)
                if execution is not None:
                    await dispatch(index, execution)
                index += 1
                continue
            limiter = trio.CapacityLimiter(max_parallel)
            async with trio.open_nursery() as pool:
                while (
                    index < len(inputs) and not stopped() and mode(index) is ExecutionMode.PARALLEL
                ):
                    await limiter.acquire_on_behalf_of(index)
                    execution = await prepare(index)
                    if execution is None:
                        limiter.release_on_behalf_of(index)
                    else:
                        pool.start_soon(pooled, index, execution, limiter)
                    index += 1
        for rest in range(index, len(inputs)):
            prepared = await pipeline.prepare(attrs.evolve(inputs[rest], signal=_ABORTED), trace)
            assert prepared.result is not None
            slots[rest].settle(prepared.execution, prepared.result, prepared.post)
    return results


_ABORTED = AbortSignal()
_ABORTED.abort("batch aborted before this call started")
