"""The public surface: a sorted ``__all__`` of names that really are public."""

from __future__ import annotations

import inspect
import pathlib
import re

import attrs
import pytest

import dsh_host
from dsh_host import hookspecs


def test_all_is_sorted_and_complete():
    assert dsh_host.__all__ == sorted(
        dsh_host.__all__, key=str.lower
    ) or dsh_host.__all__ == sorted(dsh_host.__all__)
    # `testing`, `aio` and `bridges` are public submodules, imported on demand; pytest's
    # assertion rewriting (the pytest11 entry point makes pytest rewrite the whole
    # distribution) adds "@py_builtins".
    # The host and pipeline names are imported on first use (`dsh_host._LAZY`, issue 27).
    public = {n for n in vars(dsh_host) if not n.startswith(("_", "@"))} | set(dsh_host._LAZY)
    assert set(dsh_host.__all__) == public - {"aio", "annotations", "bridges", "testing"}


def test_names_imported_on_first_use_are_the_real_objects():
    from dsh_host._host._host import Host
    from dsh_host._host._open import open_host

    for name in dsh_host._LAZY:
        assert getattr(dsh_host, name).__name__ == name
        assert name in dir(dsh_host)
    assert dsh_host.Host is Host
    assert dsh_host.open_host is open_host
    with pytest.raises(AttributeError, match="no_such_name"):
        dsh_host.no_such_name  # noqa: B018


def test_contract_names_are_exported():
    required = [
        "define_tool",
        "tool",
        "ToolDefinition",
        "ToolSchema",
        "Prop",
        "ToolRegistry",
        "Scope",
        "ToolExecutionInput",
        "ToolExecution",
        "ToolRunContext",
        "ToolExecutionResult",
        "ToolFailure",
        "TextBlock",
        "ImageBlock",
        "Allow",
        "Deny",
        "Ask",
        "Accept",
        "Block",
        "ToolRestriction",
        "AbortSignal",
        "ApprovalRequest",
        "ApprovalOutcome",
        "GenericCallView",
        "TerminalCallView",
        "DiffCallView",
        "GenericResultView",
        "TerminalResultView",
        "DiffResultView",
        "FileLocation",
        "FileDiff",
        "ToolCallKind",
        "Host",
        "hookimpl",
        "hookspec",
        "to_json_schema",
        "validate_args",
        "assert_supported_json_schema",
        "validate_json_schema_value",
        "DshError",
        "ToolArgsError",
        "ToolNotFoundError",
        "ToolOutputError",
        "JsonSchemaError",
        "ConfigError",
        "PluginLoadError",
    ]
    assert set(required) <= set(dsh_host.__all__)


def test_values_are_frozen_attrs_classes():
    for name in [
        "TextBlock",
        "ImageBlock",
        "ToolExecutionResult",
        "ToolFailure",
        "Allow",
        "Deny",
        "Ask",
        "Accept",
        "Block",
        "Scope",
        "ToolExecutionInput",
        "ToolExecution",
        "ToolRestriction",
        "HookContext",
        "ToolDefinition",
        "ToolSchema",
        "FileDiff",
        "FileLocation",
        "GenericCallView",
    ]:
        cls = getattr(dsh_host, name)
        assert attrs.has(cls), name
        assert cls.__setattr__ is not object.__setattr__, f"{name} is not frozen"


def test_error_codes():
    assert dsh_host.ToolArgsError(["x"]).code == "INVALID_ARGS"
    assert dsh_host.ToolNotFoundError("t").code == "UNKNOWN_TOOL"
    assert dsh_host.ToolOutputError("t", ["x"]).code == "INVALID_TOOL_OUTPUT"
    assert dsh_host.JsonSchemaError(["x"]).code == "UNSUPPORTED_SCHEMA"
    assert dsh_host.DshError("m", "MINE").code == "MINE"
    assert dsh_host.ApprovalOutcome.ALLOWED_ONCE == "allowed-once"
    assert dsh_host.ExecutionMode.PARALLEL == "parallel"


def test_every_hookspec_is_typed_and_documented_with_an_example():
    specs = [getattr(hookspecs, n) for n in hookspecs.__all__]
    assert len(specs) == 15
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert len(doc.splitlines()) >= 3, spec.__name__
        assert spec.__name__.startswith("dsh_")
        signature = inspect.signature(spec)
        assert signature.return_annotation is not inspect.Signature.empty, spec.__name__
        for param in signature.parameters.values():
            assert param.annotation is not inspect.Parameter.empty, (spec.__name__, param.name)
        assert "Example::" in doc, spec.__name__


def test_every_hook_is_in_the_generated_hook_reference():
    page = (pathlib.Path(__file__).parents[3] / "docs" / "reference" / "hooks.md").read_text()
    for name in hookspecs.__all__:
        assert f"\n### `{name}(" in page, name


def test_the_api_reference_names_every_public_name_and_no_private_one():
    page = (pathlib.Path(__file__).parents[3] / "docs" / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^###? (?:class |exception )?`(\w+)", page, re.MULTILINE))
    assert set(dsh_host.__all__) - {"hookspecs"} <= documented
    assert not [name for name in documented if name.startswith("_")]


def test_a_hook_context_reads_back_the_text_it_was_given():
    """Issue 26, row 8: ``HookContext("text")`` read back only as a tuple of blocks."""
    note = dsh_host.HookContext("took 2 s\tin all", source="timing")
    assert note.text == "took 2 s\tin all"
    assert dsh_host.HookContext((dsh_host.TextBlock("a"), dsh_host.TextBlock("b"))).text == "a\nb"
