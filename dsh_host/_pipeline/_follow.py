"""Hook stages that follow the caller's signal, and the observer round of a cancelled call.

A call's hook stages (pre-execute, approval, guards) are bounded by their timeouts; `Following`
also cuts them short when the caller's `AbortSignal` aborts (the asyncio host's task
cancellation, ``host.abort``-style APIs): a person who never answers, or a hook that ignores the
signal, does not keep the call (nor the process's Ctrl-C) waiting past the abort. A trio caller's
own cancellation reaches the stages by itself; `observe_cancelled` then still gives the call its
one observer round (the audit row), shielded and bounded, before the cancellation goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from .._model._signal import AbortSignal
from ._trio_internals import CAN_ENTER_BELOW, cancel_status, enter_below

__all__ = [
    "_BODY",
    "_FINALIZED",
    "_GATE",
    "_POST",
    "Following",
    "cut_short_settled",
    "shielded_for",
]

_GATE, _BODY, _POST, _FINALIZED = "gate", "body", "post", "finalized"
"""How far a call got when its caller cancelled it (`_Finish.cut_short`): in stages C-G, in
H-J (the body may have run), in K, or in `_Finish.finalize` (which sees to it itself)."""


class Following:
    """``with Following(signal) as scope``: a cancel scope that *signal*'s abort (or deadline)
    cancels; ``scope.cancelled_caught`` says whether it cut the block short. *signal* ``None``
    or inert (nobody outside the pipeline holds it): no scope (``None``).

    *base*: the cancel status a hook already started on the caller's frame began in (a chain's
    link that suspended there); its scopes may still be open, so the scope is entered below them
    (`enter_below`), as if entered before the hook began. Where that cannot be done, no scope:
    the stage is bounded by its timeout alone, as before."""

    __slots__ = ("base", "scope", "signal", "unsubscribe")

    def __init__(self, signal: AbortSignal | None, base: object = None) -> None:
        self.signal = signal
        self.base = base
        self.scope: trio.CancelScope | None = None
        self.unsubscribe: Callable[[], None] | None = None

    def __enter__(self) -> trio.CancelScope | None:
        signal = self.signal
        if signal is None or signal._inert:
            return None
        scope = trio.CancelScope(deadline=signal._deadline)
        base = self.base
        if base is None or cancel_status() is base:
            scope.__enter__()
        elif CAN_ENTER_BELOW:
            enter_below(scope, base)
        else:
            return None
        self.scope = scope
        self.unsubscribe = signal._subscribe(lambda _signal: scope.cancel())
        return scope

    def __exit__(self, etype: Any, exc: BaseException | None, tb: Any) -> bool:
        scope = self.scope
        if scope is None:
            return False
        if self.unsubscribe is not None:
            self.unsubscribe()
        return bool(scope.__exit__(etype, exc, tb))


async def cut_short_settled(
    pipeline: Any, settled: list[Any], trace: Any, cause: BaseException
) -> None:
    """The observer round of every call of a batch that settled but was not finalised in its
    turn when *cause* ended the batch, if it is the caller's cancellation (`cut_short`: a
    success becomes ``ABORTED``). *settled*: the batch's ``(execution, result, post)`` entries."""
    for index, entry in enumerate(settled):
        if entry is not None and entry[0] is not None:
            settled[index] = None
            await pipeline.cut_short(entry[0], _POST, entry[1], trace, cause)


def shielded_for(seconds: float) -> trio.CancelScope:
    """A shielded scope that ends *seconds* from now: the observer round of a cancelled call."""
    return trio.CancelScope(shield=True, deadline=trio.current_time() + seconds)
