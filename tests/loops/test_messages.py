"""`Host.run_tool_calls`: provider tool calls in, the provider's result shapes out."""

from __future__ import annotations

import json

import pytest

import dsh_host
from dsh_host import Deny, ImageBlock, hookimpl
from tests.conftest import make_echo


class Tools:
    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())

        async def picture(args, ctx):
            return [
                ImageBlock(
                    data="iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", mime_type="image/png"
                )
            ]

        register(
            dsh_host.define_tool(
                name="picture", description="an image", parameters={}, execute=picture
            )
        )


class DenyRm:
    name = "norm"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        if isinstance(execution.arguments, dict) and execution.arguments.get("text") == "rm":
            return Deny("no rm")
        return None


async def run(calls, format):
    async with dsh_host.open_host(plugins=[Tools(), DenyRm()], entry_points=False) as host:
        return await host.run_tool_calls(calls, format=format)


async def test_anthropic_tool_use_blocks_become_tool_results():
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}},
            {"type": "tool_use", "id": "toolu_2", "name": "echo", "input": {"text": "rm"}},
            {"type": "tool_use", "id": "toolu_3", "name": "picture", "input": {}},
        ],
    }
    out = await run(message, "anthropic")
    assert out == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
         "content": [{"type": "text", "text": "hi"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
         "content": [{"type": "text", "text": "Error: no rm"}]},
        {"type": "tool_result", "tool_use_id": "toolu_3", "is_error": False,
         "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA"}}]},
    ]  # fmt: skip
    json.dumps(out)  # plain JSON, ready to send


async def test_openai_chat_tool_calls_with_json_string_arguments():
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "hi"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "echo", "arguments": '{"text": '}},
        {"id": "call_3", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
    ]  # fmt: skip
    out = await run({"role": "assistant", "content": None, "tool_calls": calls}, "openai")
    assert [m["tool_call_id"] for m in out] == ["call_1", "call_2", "call_3"]
    assert all(m["role"] == "tool" for m in out)
    assert out[0]["content"] == "hi"
    assert out[1]["content"].startswith(
        'Error: invalid arguments: "arguments" must be a JSON object'
    )
    assert "not valid JSON" in out[1]["content"]
    assert "nope" in out[2]["content"]


async def test_openai_responses_function_call_items():
    items = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "echo", "arguments": '{"text": "r"}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_8", "name": "picture", "arguments": "{}"},
    ]  # fmt: skip
    out = await run(items, "openai")
    assert out[0] == {"type": "function_call_output", "call_id": "call_9", "output": "r"}
    assert out[1]["call_id"] == "call_8"
    assert "image (image/png)" in out[1]["output"]


@pytest.mark.parametrize(
    "arguments",
    [
        "",
        "{",
        "null",
        "[]",
        '{"text": "\\ud800"',
        '{"text": 1}',
        "[" * 100_000,
        '{"a":1,"a":2}',
        "\x00",
    ],
)
async def test_malformed_arguments_never_raise(arguments):
    call = {"id": "c", "type": "function", "function": {"name": "echo", "arguments": arguments}}
    (out,) = await run([call], "openai")
    assert out["content"].startswith("Error: invalid arguments")


@pytest.mark.parametrize(
    ("calls", "error", "message"),
    [
        ([{"type": "tool_use", "name": "echo", "input": {}}], ValueError, 'has no "id"'),
        ([{"type": "tool_use", "id": "x", "input": {}}], ValueError, "has no tool name"),
        ([{"type": "function_call", "id": "fc", "name": "echo"}], ValueError, 'has no "call_id"'),
        ("tool_use", TypeError, "must be a list of anthropic tool calls"),
        ([3], TypeError, "tool call 0 must be an object"),
    ],
)
async def test_calls_that_cannot_be_answered_are_the_callers_mistake(calls, error, message):
    fmt = "openai" if "function_call" in str(calls) else "anthropic"
    with pytest.raises(error, match=message):
        await run(calls, fmt)


async def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match='format must be "anthropic" or "openai"'):
        await run([], "gemini")


async def test_schemas_in_each_format():
    async with dsh_host.open_host(plugins=[Tools()], entry_points=False) as host:
        assert host.schemas(format="anthropic")[0]["input_schema"]["type"] == "object"
        assert host.schemas(format="openai")[0]["type"] == "function"
        assert "inputSchema" in host.schemas()[0]
        with pytest.raises(ValueError, match="format must be"):
            host.schemas(format="xml")
