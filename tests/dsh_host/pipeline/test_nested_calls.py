"""``parent``: a nested call carries the outer call's token (identity only), validated."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_host import ToolExecutionInput, define_tool, hookimpl
from tests.conftest import make_echo


class Seen:
    name = "seen"

    def __init__(self) -> None:
        self.calls: list[Any] = []

    @hookimpl
    def dsh_tool_result(self, execution, result):
        self.calls.append((execution.name, execution.token, execution.parent, result))


async def test_ctx_call_runs_a_nested_call_through_the_pipeline_with_parent_set(make_host):
    outer: dict[str, Any] = {}

    async def body(args: Any, ctx: Any) -> str:
        outer["token"] = ctx.token
        inner = await ctx.call("echo", {"text": "inner"})
        return f"outer saw {inner.text}"

    seen = Seen()
    host = make_host(
        seen,
        tools=[make_echo(), define_tool(name="outer", description="", parameters={}, execute=body)],
    )
    result = await host.call("outer", {}, call_id="c1")
    assert result.text == "outer saw inner"
    (name, token, parent, _), (outer_name, outer_token, outer_parent, _) = seen.calls
    assert (name, outer_name) == ("echo", "outer")
    assert parent is outer["token"] is outer_token
    assert outer_parent is None
    assert token is not outer_token


@pytest.mark.parametrize("kind", ["token", "context", "execution"])
async def test_parent_is_kept_as_the_outer_token_only(make_host, kind):
    captured: dict[str, Any] = {}

    async def body(args: Any, ctx: Any) -> str:
        captured["ctx"] = ctx
        return "ok"

    seen = Seen()
    host = make_host(
        seen,
        tools=[make_echo(), define_tool(name="outer", description="", parameters={}, execute=body)],
    )
    await host.call("outer", {})
    ctx = captured["ctx"]
    given = {"token": ctx.token, "context": ctx, "execution": ctx.execution}[kind]
    input = ToolExecutionInput(call_id="n", name="echo", arguments={"text": "x"}, parent=given)
    result = await host.registry.execute(input)
    assert result.text == "x"
    assert seen.calls[-1][2] is ctx.token  # the token, never the outer arguments or signal


@pytest.mark.parametrize("parent", ["call-1", 7, object()])
async def test_a_parent_that_is_not_a_token_is_refused_with_a_clear_result(make_host, parent):
    seen = Seen()
    host = make_host(seen, tools=[make_echo()])
    input = ToolExecutionInput(call_id="n", name="echo", arguments={"text": "x"}, parent=parent)
    result = await host.registry.execute(input)
    assert result.code == "INVALID_ARGS"
    assert "parent must be the outer call's token (ctx.token)" in result.error.message
    assert type(parent).__name__ in result.error.message
    assert [c[2] for c in seen.calls] == [None]  # observers still see the call, no bad parent


async def test_a_nested_call_shares_the_outer_signal_and_scope(make_host):
    from dsh_host import AbortSignal, Scope

    signal = AbortSignal()
    scope = Scope("agent")
    inner_seen: dict[str, Any] = {}

    async def inner(args: Any, ctx: Any) -> str:
        inner_seen.update(scope=ctx.scope, aborted=ctx.signal.aborted)
        return "in"

    async def outer(args: Any, ctx: Any) -> str:
        signal.abort("stop")
        return (await ctx.call("inner", {})).code or "ok"

    host = make_host()
    host.registry.register(
        define_tool(name="inner", description="", parameters={}, execute=inner), scope
    )
    host.registry.register(
        define_tool(name="outer", description="", parameters={}, execute=outer), scope
    )
    input = ToolExecutionInput(call_id="o", name="outer", arguments={}, scope=scope, signal=signal)
    result = await host.registry.execute(input)
    assert result.code == "ABORTED"
    assert inner_seen == {}  # the nested call saw the abort before dispatch
