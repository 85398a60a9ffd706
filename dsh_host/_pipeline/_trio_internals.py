"""Every read of trio's private state, in one place.

Lazy stages (`._stage`) need the current task's cancel status and its chain of parents, which
trio does not expose publicly (``Task._cancel_status``, ``CancelStatus._scope`` and
``CancelStatus.parent``). Each reader here degrades safely: `cancel_status` returns ``None`` when
it cannot be read (the pipeline then uses eager stages: slower, still correct) and `unshielded`
answers ``False`` (no scope entered). ``tests/dsh_host/pipeline/test_trio_internals.py`` fails
loudly when a trio release moves any of them.

One write: `enter_below` enters a scope late, below the scopes a tool body opened before its
first suspension (``Task._activate_cancel_status`` and the ``CancelStatus.parent`` setter, which
trio itself uses to move a task started with ``nursery.start``).
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["CAN_ENTER_BELOW", "cancel_status", "enter_below", "unshielded"]


def _can_enter_below() -> bool:
    """Whether this trio has what `enter_below` writes: ``Task._activate_cancel_status`` and a
    settable ``CancelStatus.parent`` (without them, bodies get their scope eagerly)."""
    try:
        from trio._core._run import CancelStatus, Task
    except ImportError:
        return False
    parent = getattr(CancelStatus, "parent", None)
    return callable(getattr(Task, "_activate_cancel_status", None)) and (
        isinstance(parent, property) and parent.fset is not None
    )


CAN_ENTER_BELOW = _can_enter_below()


def _run_context() -> Any:
    """trio's thread-local run context (``GLOBAL_RUN_CONTEXT``: what `current_task` reads), or
    ``None`` where this trio has none (`cancel_status` then goes through `current_task`)."""
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT
    except ImportError:
        return None
    return GLOBAL_RUN_CONTEXT


_RUN_CONTEXT = _run_context()


def cancel_status() -> object | None:
    """The current task's cancel status (trio-private), or ``None`` where it cannot be read."""
    try:
        if _RUN_CONTEXT is not None:
            status: object = _RUN_CONTEXT.task._cancel_status  # `current_task()`, no call
            return status
        return trio.lowlevel.current_task()._cancel_status
    except (AttributeError, RuntimeError):
        return None


def unshielded(status: Any, base: object) -> bool:
    """Whether no scope between *status* and *base* (the stage's start) is shielded."""
    while status is not base:
        scope = getattr(status, "_scope", None)
        if status is None or scope is None or scope.shield:
            return False
        status = getattr(status, "parent", None)
    return True


def enter_below(scope: trio.CancelScope, base: Any) -> None:
    """Enter *scope* as if it had been entered while the task's cancel status was *base*:
    directly below *base* and above every scope and nursery opened since (a shield among them
    keeps its cancellation out, as it would have)."""
    task: Any = trio.lowlevel.current_task()
    status = task._cancel_status
    if status is base:
        scope.__enter__()
        return
    outermost = status
    while outermost.parent is not base:
        outermost = outermost.parent
        if outermost is None:
            raise RuntimeError("the cancel status a body started in is not above it")
    task._activate_cancel_status(base)
    try:
        scope.__enter__()
    finally:
        inserted = task._cancel_status
        task._activate_cancel_status(status)
    outermost.parent = inserted
