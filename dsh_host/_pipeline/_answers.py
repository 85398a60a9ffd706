"""What a hook may answer, how each answer is checked, and the pipeline's shared constants."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from .._model._errors import PluginFailure
from .._model._text import printable
from .._model._values import Accept, Allow, ApprovalOutcome, Ask, Block, Deny

__all__ = [
    "_ACCEPT",
    "_ALLOW",
    "_ANSWERS",
    "_NO_SCOPE",
    "_UNCALLED",
    "_WRAPPER_ARGS",
    "_as_reason",
    "_check_outcome",
    "_check_post",
    "_check_pre",
    "_check_reason",
    "_clock",
    "_failed",
    "logger",
]

logger = logging.getLogger("dsh_host")

_NO_SCOPE = contextlib.nullcontext()
_UNCALLED: Any = object()
_PRE_TYPES = (Allow, Deny, Ask)
_POST_TYPES = (Accept, Block)
_ANSWERS = (Allow, Deny, Ask, Accept, Block, str)
_WRAPPER_ARGS = ("execution", "call_next")
_ALLOW = Allow()
_ACCEPT = Accept()
_clock = time.monotonic  # the watchdog's clock (`Watchdog` reads the same one)


def _as_reason(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"returned {value!r}; expected str or None")


def _failed(exc: BaseException) -> str:
    """``raised KeyError: 'x'`` (for the trace and logs); never itself raises."""
    try:
        text = printable(str(exc))
    except Exception:
        text = "<unprintable>"
    return f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"


def _check_pre(value: Any) -> Any:
    if isinstance(value, _PRE_TYPES):
        return value
    raise TypeError(f"returned {value!r}; expected Allow(), Deny(reason), Ask() or None")


def _check_post(value: Any) -> Any:
    if isinstance(value, _POST_TYPES):
        return value
    raise TypeError(f"returned {value!r}; expected Accept(...), Block(feedback) or None")


def _check_outcome(value: Any) -> ApprovalOutcome:
    try:
        return ApprovalOutcome(value)
    except ValueError:
        raise TypeError(
            f"returned {value!r}; expected an ApprovalOutcome "
            f"({', '.join(o.value for o in ApprovalOutcome)}) or None"
        ) from None


def _check_reason(reason: Any, who: str) -> str:
    if isinstance(reason, str):
        return reason
    raise PluginFailure(
        who, "dsh_tool_guard", TypeError(f"returned {reason!r}; expected str or None")
    )
