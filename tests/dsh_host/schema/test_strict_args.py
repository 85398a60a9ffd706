"""Arguments the model got wrong are named: DSL and attrs parameters are closed objects."""

from __future__ import annotations

import attrs

from dsh_host import define_tool, tool, validate_args


def echo(**kwargs):
    return define_tool(
        name="echo", description="", execute=lambda args: "ok",
        parameters={"text": {"type": "string", "required": True}, "count": {"type": "integer"}},
        **kwargs,
    )  # fmt: skip


async def test_an_unknown_key_is_invalid_args_with_did_you_mean(make_host):
    result = await make_host(tools=[echo()]).call("echo", {"txet": "hi", "text": "x"})
    assert result.code == "INVALID_ARGS"
    assert result.text == (
        'Error: invalid arguments: "txet" is not a declared property; did you mean "text"?'
    )


async def test_an_unknown_key_with_no_close_match_lists_the_declared_ones(make_host):
    result = await make_host(tools=[echo()]).call("echo", {"text": "x", "zzz": 1})
    assert result.code == "INVALID_ARGS"
    assert "(declared: count, text)" in result.text


async def test_a_tool_without_parameters_says_it_takes_none(make_host):
    t = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    result = await make_host(tools=[t]).call("t", {"x": 1})
    assert result.text == (
        'Error: invalid arguments: "x" is not a declared property (this tool takes no arguments)'
    )


@attrs.frozen
class Inner:
    host: str


@attrs.frozen
class Args:
    path: str
    inner: Inner | None = None


async def test_attrs_parameters_are_closed_at_every_level(make_host):
    @tool
    async def read(args: Args, ctx: object) -> str:
        "Read."
        return args.path

    assert read.schema.parameters["additionalProperties"] is False
    result = await make_host(tools=[read]).call("read", {"pth": "a", "path": "a"})
    assert result.code == "INVALID_ARGS"
    assert 'did you mean "path"' in result.text


async def test_strict_arguments_false_keeps_the_object_open(make_host):
    open_echo = echo(strict_arguments=False)
    assert "additionalProperties" not in open_echo.schema.parameters
    assert (await make_host(tools=[open_echo]).call("echo", {"text": "x", "zz": 1})).text == "ok"


async def test_a_raw_json_schema_is_used_as_it_is(make_host):
    raw = {"type": "object", "properties": {"a": {"type": "string"}}}
    t = define_tool(name="t", description="", parameters=raw, execute=lambda args: "ok")
    assert t.schema.parameters == raw
    assert validate_args(t, {"a": "x", "b": 2}) == []
    assert (await make_host(tools=[t]).call("t", {"b": 2})).text == "ok"


def test_a_raw_closed_schema_gets_did_you_mean_too():
    raw = {"type": "object", "properties": {"path": {"type": "string"}},
           "additionalProperties": False}  # fmt: skip
    t = define_tool(name="t", description="", parameters=raw, execute=lambda args: "ok")
    assert validate_args(t, {"pth": "x"}) == [
        '"pth" is not a declared property; did you mean "path"?'
    ]


def test_an_explicit_additional_properties_is_kept():
    t = define_tool(
        name="t", description="", execute=lambda args: "ok",
        parameters={"type": "object", "properties": {}, "additionalProperties": True},
    )  # fmt: skip
    assert t.schema.parameters["additionalProperties"] is True
