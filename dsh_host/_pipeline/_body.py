"""Running a tool body in a cancel scope that follows its signal, and normalising its value."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import trio

from .._model._content import to_content
from .._model._errors import ToolOutputError
from .._model._json import canonical_json, freeze
from .._model._outcomes import aborted, failure, raised
from .._model._values import ImageBlock, TextBlock, ToolExecutionResult, ToolRunContext
from ._contain import genuine, is_cancellation
from ._trio_internals import enter_below
from ._verify import checked

if TYPE_CHECKING:
    from .._schema._tool import ToolDefinition

__all__ = ["Followed", "body_raised", "followed", "normalise", "run_body"]


async def run_body(tool: ToolDefinition, args: Any, context: ToolRunContext) -> ToolExecutionResult:
    """Run the body in a cancel scope that follows the (fused) signal; never raises.

    An ``async`` body under a signal nobody outside the pipeline holds needs no scope: the
    pipeline awaits it itself (`Pipeline.body_stage`), with no frame of this function's.
    """
    value: Any = MISSING
    result: ToolExecutionResult | None = None
    with trio.CancelScope(deadline=context.signal.deadline) as scope:
        unsubscribe = context.signal._subscribe(lambda _signal: scope.cancel())
        try:
            call: Callable[[], Any] = (
                functools.partial(tool.execute, args, context)
                if tool.takes_context
                else functools.partial(tool.execute, args)
            )
            if tool.is_async:
                value = await call()
            else:
                value = await trio.to_thread.run_sync(call, abandon_on_cancel=True)
                if inspect.isawaitable(value):
                    value = await value
        except BaseException as exc:
            # A KeyboardInterrupt, SystemExit or stray Cancelled from the tool is its failure;
            # only a real Ctrl-C and the caller's own cancellation go on.
            if await genuine(exc):
                raise
            result = raised(exc)
        finally:
            unsubscribe()
    if result is not None:
        return result
    if value is MISSING:
        return aborted(True)
    result = normalise(tool, value)
    if context.signal.aborted and not result.is_error:
        return aborted(True)
    return result


MISSING: Any = object()
"""No value yet, or a body's call that its own cancel scope ended (`Followed`)."""


class Followed:
    """Drives an ``async`` body whose first step already ran (and suspended, yielding *trap*)
    under a signal with no deadline, entering the cancel scope that follows the signal only now.

    Entered at the body's first suspension, the scope is placed where an eager one would be:
    between the cancel status the body started in (*base*) and every scope or nursery the body
    opened meanwhile (`enter_below`). From there on it is the eager case; the body's first
    step ran no checkpoint, so nothing could have been cancelled in it. Returns `MISSING` when
    the scope absorbed its own cancellation (the call was aborted).
    """

    __slots__ = ("base", "body", "signal", "trap")

    def __init__(self, body: Any, trap: Any, signal: Any, base: object) -> None:
        self.body, self.trap, self.signal, self.base = body, trap, signal, base

    def __await__(self) -> Generator[Any, Any, Any]:
        send, throw, signal = self.body.send, self.body.throw, self.signal
        scope = trio.CancelScope()
        enter_below(scope, self.base)
        unsubscribe = signal._subscribe(lambda _signal: scope.cancel())
        trap, sent, error = self.trap, None, None
        try:
            while True:
                try:
                    sent, error = (yield trap), None
                except BaseException as exc:
                    sent, error = None, exc
                try:
                    trap = send(sent) if error is None else throw(error)
                except StopIteration as stop:
                    value = stop.value
                    break
        except BaseException as exc:
            unsubscribe()
            if scope.__exit__(type(exc), exc, exc.__traceback__):
                return MISSING
            raise
        unsubscribe()
        scope.__exit__(None, None, None)
        return value


def normalise(tool: ToolDefinition, value: Any) -> ToolExecutionResult:
    if type(value) is str and tool.validate_output is None:  # the common case, first
        return ToolExecutionResult._success((TextBlock._of(value),))
    try:
        if isinstance(value, ToolExecutionResult):
            return checked(value, f'tool "{tool.name}"')
        if tool.validate_output is not None:
            frozen = freeze(value, "value")
            violations = tool.validate_output(frozen)
            if violations:
                raise ToolOutputError(tool.name, violations)
            return ToolExecutionResult(content=canonical_json(frozen))
        if type(value) is str:
            return ToolExecutionResult._success((TextBlock(value),))
        if isinstance(value, str | TextBlock | ImageBlock):
            return ToolExecutionResult(content=value)
        if value is None:
            return ToolExecutionResult(content=())
        if isinstance(value, list | tuple) and all(
            isinstance(v, str | TextBlock | ImageBlock) for v in value
        ):
            return ToolExecutionResult(content=to_content(value))
        return ToolExecutionResult(content=canonical_json(freeze(value, "value")))
    except ToolOutputError as exc:
        return failure(exc.message, exc.code, "ToolOutputError")
    except (ValueError, TypeError) as exc:
        error = ToolOutputError(tool.name, [str(exc)])
        return failure(error.message, error.code, "ToolOutputError")


async def followed(
    tool: ToolDefinition, args: Any, context: ToolRunContext, base: object, signal: Any = None
) -> ToolExecutionResult:
    """An ``async`` body under a caller's signal without a deadline: its first step runs with
    no cancel scope (most bodies answer without suspending), the rest under `Followed`.
    *signal*: ``context.signal``, when the caller has it at hand (the context's execution is
    then not made unless the body reads it)."""
    if signal is None:
        signal = context.signal
    try:
        body = tool.execute(args, context) if tool.takes_context else tool.execute(args)
        it = body if type(body) is _Coroutine or inspect.iscoroutine(body) else _awaiting(body)
        try:
            value = it.send(None)
        except StopIteration as stop:
            value = stop.value
        else:
            value = await Followed(it, value, signal, base)
    except BaseException as exc:
        if await genuine(exc):
            raise
        if is_cancellation(exc) and signal.aborted:
            return aborted(True)  # what the eager scope would have absorbed
        return raised(exc)
    if value is MISSING:
        return aborted(True)
    if type(value) is str and tool.validate_output is None:  # `normalise`, its first case
        result = _text_result(value)
    else:
        result = normalise(tool, value)
    if signal._aborted and not result.is_error:  # `aborted`: it has no deadline
        return aborted(True)
    return result


async def body_raised(exc: BaseException, signal: Any, follower: Any) -> ToolExecutionResult:
    """How a bare body's exception *exc* ends its call (`Pipeline._bare`), or *exc* re-raised.

    *follower*: ``None``, or the signal's caller-follower (``signal._follower``: the asyncio
    host's worker, which steps the call and so sees its first suspension for nothing). Then
    `Pipeline._bare` awaits the body directly, on its own frame, having told the follower
    (``follower.unscoped = True``: attributes, not calls, on the hot path) and taken it off
    the signal (a call made with the same signal meanwhile gets a plain one). If the body is
    still running at the call's first suspension, the follower enters there the cancel scope
    that follows *signal* (its ``scope``), below the cancel status the body started in, as
    `Followed` does; ``follower.ended(exc)`` exits it as the body ends, saying whether it
    absorbed *exc* (its own cancellation); a body that ended with no ``scope`` only clears
    ``unscoped``."""
    if follower is not None and follower.ended(exc):
        return aborted(True)  # what `Followed`'s scope absorbs
    if await genuine(exc):
        raise exc
    if follower is not None and is_cancellation(exc) and signal.aborted:
        return aborted(True)
    return raised(exc)


_Coroutine = types.CoroutineType
_text_result = ToolExecutionResult._text


async def _awaiting(awaitable: Any) -> Any:
    """A coroutine awaiting *awaitable* (a body that returned another kind of awaitable)."""
    return await awaitable
