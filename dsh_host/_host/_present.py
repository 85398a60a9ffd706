"""Cards for a call and its result: plugin presenters, then the tool's own, then a generic card."""

from __future__ import annotations

import typing
from typing import Any

from .._model._json import freeze
from .._model._values import Scope, ToolExecutionResult
from .._model._views import (
    CALL_VIEWS,
    RESULT_VIEWS,
    CallView,
    GenericCallView,
    GenericResultView,
    ResultView,
)
from .._pipeline._contain import real_interrupt
from .._registry._hooks import HookRelay, Impl
from .._registry._registry import ToolTable

__all__ = ["present_call", "present_result"]


def present_call(
    registry: ToolTable, hooks: HookRelay, name: str, args: Any, scope: Scope | None = None
) -> CallView:
    """`Host.present_call`."""
    tool = registry.get(name, scope)
    if tool is not None:
        for impl in hooks.impls("dsh_present_call"):
            view = _safe(impl.function, CALL_VIEWS, **_wanted(impl, tool=tool, args=args))
            if view is not None:
                return typing.cast("CallView", view)
        if tool.present_call is not None:
            typed = tool.args_or_none(args)
            if typed is not None:
                view = _safe(tool.present_call, CALL_VIEWS, typed)
                if view is not None:
                    return typing.cast("CallView", view)
    try:
        raw = freeze(args)
    except ValueError:
        raw = repr(args)
    return GenericCallView(title=name, raw_input=raw)


def present_result(
    registry: ToolTable,
    hooks: HookRelay,
    name: str,
    args: Any,
    result: ToolExecutionResult,
    scope: Scope | None = None,
) -> ResultView:
    """`Host.present_result`."""
    tool = registry.get(name, scope)
    if tool is not None:
        for impl in hooks.impls("dsh_present_result"):
            wanted = _wanted(impl, tool=tool, args=args, result=result)
            view = _safe(impl.function, RESULT_VIEWS, **wanted)
            if view is not None:
                return typing.cast("ResultView", view)
        if tool.present_result is not None:
            typed = tool.args_or_none(args)
            if typed is not None:
                view = _safe(tool.present_result, RESULT_VIEWS, typed, result)
                if view is not None:
                    return typing.cast("ResultView", view)
    # No result presenter: the card keeps the title the pending call's card had.
    title = present_call(registry, hooks, name, args, scope).title
    return GenericResultView(title=title, content=result.content)


def _wanted(impl: Impl, **kwargs: Any) -> dict[str, Any]:
    """The hook's arguments this implementation takes: pluggy's ``argnames`` for it, read through
    ``functools.wraps`` (not its outer function's code, which a wrapper hides)."""
    return {name: kwargs[name] for name in impl.argnames}


def _safe(function: Any, kinds: tuple[type, ...], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` if it returns one of *kinds*; ``None`` if anything else
    or it raises (a real Ctrl-C goes on)."""
    try:
        view = function(*args, **kwargs)
    except BaseException as exc:  # a presenter's failure falls back; a real Ctrl-C goes on
        if real_interrupt(exc):
            raise
        return None
    return view if isinstance(view, kinds) else None
