"""Driving a coroutine started by hand (`resume`), and what a batch's exception group stands
for (`sole`)."""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any

import trio

__all__ = ["resume", "sole"]


@types.coroutine
def resume(coroutine: Coroutine[Any, Any, Any], trap: Any) -> Generator[Any, Any, Any]:
    """Go on awaiting a coroutine that was started by hand and yielded *trap*; its value.

    Forwards what trio sends or throws in exactly as ``await`` would. One generator, nothing
    else: it is what each parked call of a batch holds beyond the call itself.
    """
    while True:
        try:
            sent = yield trap
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:
            try:
                trap = coroutine.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                trap = coroutine.send(sent)
            except StopIteration as stop:
                return stop.value


def sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception a batch's group stands for: its only leaf, else its only non-`Cancelled`
    leaf, else (all cancelled) its first; ``None`` when several different failures happened."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(reversed(exc.exceptions))
        else:
            leaves.append(exc)
    real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    if not real and leaves:
        return leaves[0]
    return None
