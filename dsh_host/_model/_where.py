"""Where a plugin failed: the file and line of the innermost frame in the plugin's own code.

A traceback of a plugin failure runs from dsh's own frames, through the plugin's, often into a
library the plugin called. The line a plugin author needs is the last one in *their* code: the
innermost frame whose module belongs to the plugin's top-level package. Hand-written because the
standard `traceback` module has no notion of "the plugin's package"; it still does the
formatting.
"""

from __future__ import annotations

import traceback
from types import TracebackType

import attrs

from ._values import TextBlock, ToolExecutionResult, ToolFailure

__all__ = ["format_traceback", "located", "plugin_location"]

_OWN = "dsh_host"


def _package(module: object) -> str:
    return str(module or "").split(".", 1)[0]


def plugin_location(exc: BaseException, package: str | None = None) -> str | None:
    """``path/to/file.py:LINE`` of the innermost frame of *exc*'s traceback in *package* (a
    top-level package name); with *package* ``None``, the package of the first frame outside
    ``dsh_host`` (the plugin's hook function, which dsh called). ``None`` if there is none.

    A `SyntaxError` in the plugin's own file is located by the error itself.
    """
    tb: TracebackType | None = exc.__traceback__
    best: tuple[str, int] | None = None
    while tb is not None:
        module = _package(tb.tb_frame.f_globals.get("__name__"))
        if package is None and module not in (_OWN, "importlib", "trio", "pluggy", ""):
            package = module
        if package is not None and module == package:
            best = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}"
    return f"{best[0]}:{best[1]}" if best is not None else None


def format_traceback(exc: BaseException) -> str:
    """The full traceback of *exc*, chained causes included, as Python prints it."""
    return "".join(traceback.format_exception(exc)).rstrip("\n")


def located(result: ToolExecutionResult, exc: BaseException) -> ToolExecutionResult:
    """A ``PLUGIN_FAILED`` *result* whose message ends with the plugin's file and line, and whose
    ``meta["traceback"]`` holds the full traceback (``dsh call --json``/``--trace``,
    ``DSH_DEBUG=1``). Only the host sees ``meta``; the model reads the message."""
    error = result.error
    if error is None:
        return result
    where = plugin_location(exc)
    message = f"{error.message} (at {where})" if where else error.message
    return attrs.evolve(
        result,
        content=(TextBlock(f"Error: {message}"),),
        error=ToolFailure(message, error.code, error.name),
        meta={"traceback": format_traceback(exc)},
    )
