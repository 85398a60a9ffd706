"""A batch's calls that no hook or guard sees, run back to back as `execute` runs them.

`bare_calls` is `_Batch.work`'s loop for the common case of a host with no per-call hook: each
call is classified here (looked up, frozen and accepted in one walk, asked whether it is
concurrency-safe), then run by `Pipeline._bare`, started by hand like any parallel dispatch. The
first call it cannot run so (a hook or guard came, a scoped or signalled call, arguments its
snapshot does not accept, an exclusive call, no free slot) is left classified for `work`
(`_Batch._park`), which takes it from there as it would any call.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Final, cast

from trio.lowlevel import Task

from .._model._outcomes import raised
from .._model._values import ToolExecutionResult, ToolRunContext
from ._body import normalise
from ._contain import genuine, real_interrupt

__all__ = ["bare_calls"]


def bare_calls(batch: Any, me: Task) -> Awaitable[bool | None]:
    """Run the *batch*'s next calls bare while *me* holds the baton; awaited, whether it let go
    of the baton (a call suspended). Nothing to await (no frame) when no call can run bare.

    *batch* is a `._batch._Batch` (not imported: it imports this module).

    Only with the nursery open (a call that suspends hands the baton on to other workers, as
    in `work`), no batch signal and no trace (the caller checks those).
    """
    pipeline = batch.pipeline
    if not pipeline.bare_now():
        pipeline._bare_plan = None  # a hook or guard sees the calls (`Pipeline.note_idle`)
        return _NOTHING
    if batch.pending == batch.next:
        return _NOTHING  # `work` starts the call it parked first
    return _bare_calls(batch, me)


async def _bare_calls(batch: Any, me: Task) -> bool:
    box = _Box()
    box.runner = _run_jobs(batch.pipeline, box)
    try:
        return not await _calls(batch, me, box)
    finally:
        box.runner.close()  # waiting for a job that will not come (or done already)


async def _calls(batch: Any, me: Task, box: _Box) -> bool:
    """`bare_calls`' loop: each call run by *box*'s runner."""
    pipeline, inputs, count = batch.pipeline, batch.inputs, len(batch.inputs)
    tools, slots, pm = pipeline._global_tools, batch.max_parallel - 1, pipeline.hooks.pm
    results, settled, on_result = batch.results, batch.settled, batch.on_result
    runner = box.runner
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
        box.input, box.tool, box.arguments = input, tool, arguments
        trap = runner.send(None)
        if trap is not _DONE:  # it suspends: the baton is handed on, as in `work`
            batch.in_flight += 1
            batch._hand_on()
            del input, tool, arguments  # what a parked call need not hold
            try:
                await _until_done(runner, trap)
            finally:
                batch._landed()
        result = box.result
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


_DONE: Final[Any] = object()
"""What a runner yields when its job is done (its result is in its `_Box`)."""


class _Box:
    """A worker's runner of bare calls, its next job (input, tool, arguments), its last result."""

    __slots__ = ("arguments", "input", "result", "runner", "tool")

    input: Any
    tool: Any
    arguments: Any
    result: ToolExecutionResult
    runner: Coroutine[Any, Any, None]


async def _run_jobs(pipeline: Any, box: _Box) -> None:
    """Run *box*'s jobs one after another, as `Pipeline._bare` would once its checks passed
    (`_calls` made them), awaiting `_DONE_NOW` after each: started by hand, a call that never
    suspends comes back as a value, not as the ``StopIteration`` a finished coroutine raises,
    and costs no coroutine of its own."""
    run_nested = pipeline._run_nested
    while True:
        input, tool, arguments = box.input, box.tool, box.arguments
        box.input = box.tool = box.arguments = None
        context = _bare_context(input, arguments, tool, run_nested)
        try:
            value = await (
                tool.execute(arguments, context) if tool.takes_context else tool.execute(arguments)
            )
        except BaseException as exc:
            if await genuine(exc):
                raise
            result, value = raised(exc), None
        else:
            if type(value) is str and tool.validate_output is None:  # `normalise`, first case
                result = _text_result(value)
            else:
                result = normalise(tool, value)
        if context._deferred or result.decided_by is not None or "execution" in context.__dict__:
            result = pipeline.bare_end(tool, context, result)
        box.result = result
        del input, tool, arguments, context, value, result  # a runner waiting holds no call
        await _DONE_NOW


class _DoneNow:
    """Awaited, yields `_DONE` once: no frame (``iter`` of a one-tuple, made in C)."""

    __slots__ = ()
    __await__ = functools.partial(iter, (_DONE,))


_DONE_NOW: Final[Any] = _DoneNow()


class _Nothing:
    """Awaited, gives ``None`` at once: no frame (``iter`` of an empty tuple)."""

    __slots__ = ()
    __await__ = functools.partial(iter, ())


_NOTHING: Final = cast(Awaitable[None], _Nothing())
_bare_context = ToolRunContext._call
_text_result = ToolExecutionResult._text


@types.coroutine
def _until_done(runner: Coroutine[Any, Any, None], trap: Any) -> Generator[Any, Any, None]:
    """Go on awaiting *runner* (started by hand, it yielded *trap*) until its job is done:
    `resume` (`._by_hand`), stopping at `_DONE` instead of at the runner's end."""
    while True:
        try:
            sent = yield trap
        except GeneratorExit:
            runner.close()
            raise
        except BaseException as exc:
            trap = runner.throw(exc)
        else:
            trap = runner.send(sent)
        if trap is _DONE:
            return
