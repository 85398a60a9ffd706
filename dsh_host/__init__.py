"""dsh: a pluggy host for the tool pipeline of LLM agent harnesses.

Everything public is re-exported here; the modules behind it are private.
"""

from __future__ import annotations

from . import hookspecs
from ._host._host import Host
from ._host._messages import arguments_of
from ._host._open import open_host
from ._host._plugins import PluginInfo, PluginStatus
from ._host._registry import DryRun, ToolRegistry
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
from ._registry._hooks import hookimpl, hookspec
from ._schema._dsl import Prop, to_json_schema
from ._schema._jsonsubset import assert_supported_json_schema, validate_json_schema_value
from ._schema._tool import ToolDefinition, ToolSchema, define_tool, tool
from ._schema._validate import validate_args

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
    "arguments_lines",
    "arguments_of",
    "assert_supported_json_schema",
    "canonical_json",
    "define_tool",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "new_call_id",
    "open_host",
    "parse_json",
    "printable",
    "thaw",
    "to_json_schema",
    "tool",
    "validate_args",
    "validate_json_schema_value",
    "view_to_json",
]
