"""A batch's calls that no hook or guard sees, run back to back as `execute` runs them.

`bare_calls` is `_Batch.work`'s loop for the common case of a host with no per-call hook: each
call is classified here (looked up, frozen and accepted in one walk, asked whether it is
concurrency-safe), then run by `Pipeline._bare`, started by hand like any parallel dispatch. The
first call it cannot run so (a hook or guard came, a scoped or signalled call, arguments its
snapshot does not accept, an exclusive call, no free slot) is left classified for `work`
(`_Batch._park`), which takes it from there as it would any call.
"""

from __future__ import annotations

from typing import Any

from trio.lowlevel import Task

from ._by_hand import resume
from ._contain import real_interrupt

__all__ = ["bare_calls"]


async def bare_calls(batch: Any, me: Task) -> bool:
    """Run the *batch*'s next calls bare while *me* holds the baton; whether it still does.

    *batch* is a `._batch._Batch` (not imported: it imports this module).

    Only with the nursery open (a call that suspends hands the baton on to other workers, as
    in `work`), no batch signal and no trace (the caller checks those).
    """
    pipeline, inputs, count = batch.pipeline, batch.inputs, len(batch.inputs)
    tools, slots, pm = pipeline._global_tools, batch.max_parallel - 1, pipeline.hooks.pm
    results, settled, on_result = batch.results, batch.settled, batch.on_result
    if pipeline._bare_plan is None:
        pipeline.note_idle(pipeline.hooks.plan())
    while (index := batch.next) < count and index != batch.pending:
        input = inputs[index]
        if input.scope is not None or input.signal is not None or input.parent is not None:
            return True
        tool = tools.get(input.name)
        if (
            tool is None
            or not tool.is_async
            or (safe := tool.is_concurrency_safe) is None
            or (snapshot := tool.snapshot) is None
            or (arguments := snapshot(input.arguments)) is None
        ):
            return True  # `work` classifies it (and names what is wrong with it)
        try:  # `classify`, from here on
            parallel = safe(arguments) is True
        except BaseException as exc:  # the tool's fault: run it alone; a real Ctrl-C goes on
            if real_interrupt(exc):
                raise
            batch._park(index, input, arguments, None, False)
            return True
        if (
            not parallel
            or batch.in_flight > slots
            or pipeline._bare_plan is None  # `Pipeline.bare_now`, inline
            or (pm is not None and pm.generation != pipeline._bare_generation)
        ):
            batch._park(index, input, arguments, (tool, arguments, arguments), parallel)
            return True
        batch.next = index + 1
        running = pipeline._bare(input, (tool, arguments))
        try:
            trap = running.send(None)
        except StopIteration as stop:
            result = stop.value
        else:  # it suspends: the baton is handed on, as in `work`
            batch.in_flight += 1
            batch._hand_on()
            del input, tool, arguments  # what a parked call need not hold
            try:
                result = await resume(running, trap)
            finally:
                batch._landed()
        if index != batch.committed or batch.committing:
            settled[index] = (None, result, False)  # final: committed in its turn
        else:  # `_Batch._record`, inline
            results[index] = result
            batch.committed = index = index + 1
            if on_result is not None:
                on_result(index - 1, result)
            if index < count and settled[index] is not None and not batch.committing:
                await batch._commit(me)
        if batch.holder is not me:
            return False
    return True
