"""Property: whatever the model sends, `execute` returns one frozen, JSON-safe result."""

from __future__ import annotations

import json
import math

import attrs
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_host import DshError, Host, ToolExecutionResult, define_tool, hookimpl

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
non_json = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        {1, 2},
        b"bytes",
        object(),
        {1: "int key"},
        (lambda: 1),
        frozenset(),
    ]
)
arguments = (
    json_values
    | non_json
    | st.dictionaries(st.text(max_size=5), json_values | non_json, max_size=3)
)


def tools():
    async def echo(args, ctx):
        return args.get("text", "")

    async def raises(args, ctx):
        raise RuntimeError("boom")

    async def dsh_error(args, ctx):
        raise DshError("nope", "CUSTOM")

    async def bad_output(args, ctx):
        return {"x": float("nan")}

    def sync(args):
        return [1, {"a": None}]

    params = {"text": {"type": "string"}, "n": {"type": "integer", "required": True}}
    return [
        define_tool(name=name, description="", parameters=params, execute=fn)
        for name, fn in [
            ("echo", echo),
            ("raises", raises),
            ("dsh_error", dsh_error),
            ("bad_output", bad_output),
            ("sync", sync),
        ]
    ]


class Noisy:
    name = "noisy"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return None

    @hookimpl
    async def dsh_tool_execute(self, execution, call_next):
        return await call_next()


def assert_frozen_json_safe(result: ToolExecutionResult) -> None:
    assert isinstance(result, ToolExecutionResult)
    assert attrs.has(type(result))
    assert type(result).__setattr__ is not object.__setattr__
    assert isinstance(result.content, tuple)
    text = json.dumps(result.to_json(), allow_nan=False)
    assert json.loads(text)["is_error"] is result.is_error
    if result.is_error:
        assert result.error is not None
        assert result.error.code
        assert result.text.startswith("Error: ")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["echo", "raises", "dsh_error", "bad_output", "sync", "unknown"]),
    args=arguments,
)
def test_execute_always_returns_a_frozen_json_safe_result(name, args):
    host = Host(plugins=[Noisy()], load_entrypoints=False)
    for t in tools():
        host.registry.register(t)

    async def main():
        return await host.call(name, args)

    result = trio.run(main)
    assert_frozen_json_safe(result)
    if not isinstance(args, dict) or any(
        isinstance(v, float) and not math.isfinite(v) for v in args.values()
    ):
        assert result.is_error
