"""dsh: a pluggy host for the tool pipeline of LLM agent harnesses.

Everything public is re-exported here; the modules behind it are private.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import typing as _typing

from . import _attrs_code, _gc

if _attrs_code.console(getattr(_sys, "orig_argv", [])):  # the dsh console script: before
    _gc.pause()  # the first import of a module with classes (see `_gc`, `_attrs_code`)
    _attrs_code.install()

from . import hookspecs
from ._model._errors import (
    ConfigError,
    DshError,
    JsonSchemaError,
    PluginLoadError,
    ToolArgsError,
    ToolNotFoundError,
    ToolOutputError,
)
from ._model._json import FrozenDict, JsonInputError, canonical_json, parse_json, thaw
from ._model._signal import AbortSignal
from ._model._text import arguments_lines, printable
from ._model._trace import TraceEvent
from ._model._values import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    Block,
    Deny,
    ExecutionMode,
    HookContext,
    ImageBlock,
    Scope,
    TextBlock,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRestriction,
    ToolRunContext,
)
from ._registry._hooks import hookimpl, hookspec
from ._schema._dsl import Prop, to_json_schema
from ._schema._jsonsubset import assert_supported_json_schema, validate_json_schema_value
from ._schema._tool import ToolDefinition, ToolSchema, define_tool, tool
from ._schema._validate import validate_args

if _typing.TYPE_CHECKING:
    from ._host._configfile import find_config
    from ._host._host import Host
    from ._host._messages import arguments_of
    from ._host._open import open_host, own_host
    from ._host._plugins import PluginInfo, PluginStatus
    from ._host._registry import DryRun, ToolRegistry
    from ._host._services import HostServices
    from ._host._trust import TrustedConfigs
    from ._model._views import (
        DiffCallView,
        DiffResultView,
        FileDiff,
        FileLocation,
        GenericCallView,
        GenericResultView,
        ReadResultView,
        SearchResultView,
        TerminalCallView,
        TerminalResultView,
        ToolCallKind,
        view_to_json,
    )
    from ._pipeline._pipeline import new_call_id

# The host and the pipeline are imported on first use (issue 27): `import dsh_host` for a plugin
# or a tool definition starts neither trio nor the entry-point machinery. So are the cards
# (views) a presenter returns: a host that shows none (``dsh hook claude``) makes none.
_VIEWS = (
    "DiffCallView", "DiffResultView", "FileDiff", "FileLocation", "GenericCallView",
    "GenericResultView", "ReadResultView", "SearchResultView", "TerminalCallView",
    "TerminalResultView", "ToolCallKind", "view_to_json",
)  # fmt: skip
_LAZY = {
    **dict.fromkeys(_VIEWS, "._model._views"),
    "DryRun": "._host._registry",
    "Host": "._host._host",
    "HostServices": "._host._services",
    "PluginInfo": "._host._plugins",
    "PluginStatus": "._host._plugins",
    "ToolRegistry": "._host._registry",
    "TrustedConfigs": "._host._trust",
    "arguments_of": "._host._messages",
    "new_call_id": "._pipeline._pipeline",
    "open_host": "._host._open",
    "own_host": "._host._open",
    "find_config": "._host._configfile",
}

__all__ = [
    "AbortSignal",
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "ApprovalRequest",
    "Ask",
    "Block",
    "ConfigError",
    "Deny",
    "DiffCallView",
    "DiffResultView",
    "DryRun",
    "DshError",
    "ExecutionMode",
    "FileDiff",
    "FileLocation",
    "FrozenDict",
    "GenericCallView",
    "GenericResultView",
    "HookContext",
    "Host",
    "HostServices",
    "ImageBlock",
    "JsonInputError",
    "JsonSchemaError",
    "PluginInfo",
    "PluginLoadError",
    "PluginStatus",
    "Prop",
    "ReadResultView",
    "Scope",
    "SearchResultView",
    "TerminalCallView",
    "TerminalResultView",
    "TextBlock",
    "ToolArgsError",
    "ToolCallKind",
    "ToolDefinition",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolFailure",
    "ToolNotFoundError",
    "ToolOutputError",
    "ToolRegistry",
    "ToolRestriction",
    "ToolRunContext",
    "ToolSchema",
    "TraceEvent",
    "TrustedConfigs",
    "arguments_lines",
    "arguments_of",
    "assert_supported_json_schema",
    "canonical_json",
    "define_tool",
    "find_config",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "new_call_id",
    "open_host",
    "own_host",
    "parse_json",
    "printable",
    "thaw",
    "to_json_schema",
    "tool",
    "validate_args",
    "validate_json_schema_value",
    "view_to_json",
]


def __getattr__(name: str) -> _typing.Any:
    """The public names of the host, the pipeline and the cards, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
