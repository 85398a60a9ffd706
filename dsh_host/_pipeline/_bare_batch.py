"""A batch's calls that no hook or guard sees, run back to back as `execute` runs them.

`bare_calls` is `_Batch.work`'s loop for the common case of a host with no per-call hook: each
call is classified here (looked up, frozen and accepted in one walk, asked whether it is
concurrency-safe), then run as `Pipeline._bare` would run it, its body started by hand on the
worker's own frame (no runner to resume per call, no coroutine but the body's). The first call
it cannot run so (a hook or guard came, a scoped or signalled call, arguments its snapshot does
not accept, an exclusive call, no free slot) is left classified for `work` (`_Batch._park`),
which takes it from there as it would any call.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Awaitable, Generator
from types import CoroutineType
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
    return not await _calls(batch, me)


async def _calls(batch: Any, me: Task) -> bool:
    """`bare_calls`' loop: each body run on this frame, as `Pipeline._bare` would once its checks
    passed (made here): one that never suspends comes back through the worker's `_driver` (no
    coroutine but its own, no `StopIteration`); one that suspends is driven on by `_landing`
    while the baton goes on to another worker."""
    pipeline, inputs, count = batch.pipeline, batch.inputs, len(batch.inputs)
    tools = pipeline._global_tools
    results, settled, on_result = batch.results, batch.settled, batch.on_result
    run_nested, done, driving = pipeline._run_nested, _Done(), None
    while (index := batch.next) < count and index != batch.pending:
        input = inputs[index]
        if (ready := _now(batch, index, input, tools)) is None:
            return True  # `work` takes it from there
        tool, arguments = ready
        batch.next = index + 1
        context = _bare_context(input, arguments, tool, run_nested)
        try:  # `Pipeline._bare`'s body stage: the body's first step, started by hand
            call = (
                tool.execute(arguments, context) if tool.takes_context else tool.execute(arguments)
            )
            if type(call) is not CoroutineType:
                call = _awaited(call)  # an awaitable of another kind
            if driving is None:
                driving = _driver(done)
                driving.send(None)
            if (trap := driving.send(call)) is not done:  # it suspends: the baton is handed on
                batch.in_flight += 1
                batch._hand_on()
                try:
                    await _landing(driving, trap, done)
                finally:
                    batch._landed()
            value, done.value = done.value, None
        except BaseException as exc:
            driving = None  # it ended with the call (or never started one)
            if await genuine(exc):
                raise
            result = raised(exc)
        else:
            result = (
                _text_result(value)
                if type(value) is str and tool.validate_output is None
                else normalise(tool, value)
            )
        call = value = None  # a parked call of a later turn holds neither
        if context._deferred or result.decided_by is not None or "execution" in context.__dict__:
            result = pipeline.bare_end(tool, context, result)
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


class _Done:
    """What a worker's `_driver` yields when a body returned; its value until read."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None


@types.coroutine
def _driver(done: _Done) -> Generator[Any, Any, None]:
    """Awaits each body sent in on its own frame (``yield from``: the interpreter's ``await``),
    then yields *done* holding its value: a body that returns at once costs no
    `StopIteration`, as ``coroutine.send`` raises one per return. A body's trap comes out of
    ``send`` as itself (`_landing` drives the rest); a body's exception ends the driver."""
    while True:
        done.value = yield from (yield done)


@types.coroutine
def _landing(
    driving: Generator[Any, Any, None], trap: Any, done: _Done
) -> Generator[Any, Any, None]:
    """`resume` for a body suspended in *driving*: forwards what trio sends or throws in until
    the body has returned (*driving* yields *done*) or raised (out of here)."""
    while True:
        try:
            sent = yield trap
        except GeneratorExit:
            driving.close()
            raise
        except BaseException as exc:
            trap = driving.throw(exc)
        else:
            trap = driving.send(sent)
        if trap is done:
            return


def _now(batch: Any, index: int, input: Any, tools: Any) -> tuple[Any, Any] | None:
    """`classify`, for the call at *index*: its tool and frozen arguments when it runs bare now
    (concurrency-safe, a free slot, and still no hook or guard); else ``None``, the call left
    to `work` (parked, or not of the kind: `work` classifies it and names what is wrong)."""
    if input.scope is not None or input.signal is not None or input.parent is not None:
        return None
    tool = tools.get(input.name)
    if (
        tool is None
        or not tool.is_async
        or (safe := tool.is_concurrency_safe) is None
        or (snapshot := tool.snapshot) is None
        or (arguments := snapshot(input.arguments)) is None
    ):
        return None
    try:
        parallel = safe(arguments) is True
    except BaseException as exc:  # the tool's fault: run it alone; a real Ctrl-C goes on
        if real_interrupt(exc):
            raise
        batch._park(index, input, arguments, None, False)
        return None
    pipeline, pm = batch.pipeline, batch.pipeline.hooks.pm
    if (
        not parallel
        or batch.in_flight >= batch.max_parallel
        or pipeline._bare_plan is None  # `Pipeline.bare_now`, inline
        or (pm is not None and pm.generation != pipeline._bare_generation)
    ):
        batch._park(index, input, arguments, (tool, arguments, arguments), parallel)
        return None
    return tool, arguments


class _Nothing:
    """Awaited, gives ``None`` at once: no frame (``iter`` of an empty tuple)."""

    __slots__ = ()
    __await__ = functools.partial(iter, ())


_NOTHING: Final = cast(Awaitable[None], _Nothing())
_bare_context = ToolRunContext._call
_text_result = ToolExecutionResult._text


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    """*awaitable*'s value, as a coroutine (a body that is ``async`` by its mark only)."""
    return await awaitable
