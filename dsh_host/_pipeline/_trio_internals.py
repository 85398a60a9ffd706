"""Every read of trio's private state, in one place.

Lazy stages (`._stage`) need the current task's cancel status and its chain of parents, which
trio does not expose publicly (``Task._cancel_status``, ``CancelStatus._scope`` and
``CancelStatus.parent``). Each reader here degrades safely: `cancel_status` returns ``None`` when
it cannot be read (the pipeline then uses eager stages: slower, still correct) and `unshielded`
answers ``False`` (no scope entered). ``tests/dsh_host/pipeline/test_trio_internals.py`` fails
loudly when a trio release moves any of them.
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["cancel_status", "unshielded"]


def cancel_status() -> object | None:
    """The current task's cancel status (trio-private), or ``None`` where it cannot be read."""
    try:
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
