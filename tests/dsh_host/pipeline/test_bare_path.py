"""The bare path (`Pipeline._bare`): a call no hook, guard or trace sees, and what it must keep.

A registry with no plugin runs a call as its tool alone. Everything that could see the call
must still see it: a plugin or guard that came after the coroutine was made (before it was
awaited), a scoped guard, a body that asks for its signal or token, or aborts that signal.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import trio

import dsh_host._model._values as values_module
from dsh_host import (
    AbortSignal,
    Deny,
    HookContext,
    Scope,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
    hookspecs,
)
from dsh_host._model import _signal
from dsh_host._pipeline._pipeline import Pipeline
from dsh_host._registry._hooks import HookRelay, make_plugin_manager
from tests.conftest import make_echo

CALL = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"})


def _registry_with_pm() -> tuple[ToolRegistry, Any]:
    pm = make_plugin_manager(hookspecs)
    registry = ToolRegistry(hooks=HookRelay(pm))
    registry.register(make_echo())
    return registry, pm


class DenyAll:
    name = "deny_all"

    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return Deny("no")


async def test_a_plugin_registered_after_the_call_was_made_still_decides() -> None:
    registry, pm = _registry_with_pm()
    assert not (await registry.execute(CALL)).is_error  # the registry is seen with no hook
    made = registry.execute(CALL)  # chosen while no hook is there
    pm.register(DenyAll(), name="deny_all")
    result = await made
    assert (result.code, result.decided_by) == ("DENIED", "deny_all")
    again = await registry.execute(CALL)
    assert again.decided_by == "deny_all"


async def test_a_guard_added_after_the_call_was_made_still_denies() -> None:
    registry, _ = _registry_with_pm()
    await registry.execute(CALL)
    made = registry.execute(CALL)
    registry.add_guard(lambda execution: "guarded", name="g")
    result = await made
    assert (result.code, result.decided_by) == ("DENIED", "g")


async def test_a_scoped_guard_denies_a_call_in_its_scope() -> None:
    registry, _ = _registry_with_pm()
    await registry.execute(CALL)
    scope = Scope("agent")
    registry.add_guard(lambda execution: "scoped", scope, name="g")
    await registry.execute(CALL)  # the global path is bare again after the change
    inside = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"}, scope=scope)
    result = await registry.execute(inside)
    assert (result.code, result.decided_by) == ("DENIED", "g")
    assert not (await registry.execute(CALL)).is_error


async def test_a_call_whose_body_reads_nothing_makes_no_signal_or_token(monkeypatch: Any) -> None:
    made: list[Any] = []
    new_signal = _signal._new_signal

    def counting(cls: Any) -> Any:
        made.append(cls)
        return new_signal(cls)

    monkeypatch.setattr(_signal, "_new_signal", counting)
    tokens: list[Any] = []
    token_class = values_module.CallToken
    monkeypatch.setattr(values_module, "CallToken", lambda: tokens.append(1) or token_class())
    registry = ToolRegistry()
    registry.register(make_echo())
    for _ in range(3):
        assert (await registry.execute(CALL)).text == "x"
    assert made == []
    assert tokens == []


async def test_a_body_that_asks_gets_one_signal_and_one_token_that_work() -> None:
    seen: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        signal, token = ctx.signal, ctx.token
        assert ctx.signal is signal
        assert ctx.execution.token is token
        assert isinstance(signal, AbortSignal)
        assert not signal.aborted
        assert copy.copy(ctx.execution).token is token
        seen.append((signal, token))
        return "ok"

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="", parameters={}, execute=body))
    first = await registry.execute(ToolExecutionInput(call_id="a", name="t", arguments={}))
    second = await registry.execute(ToolExecutionInput(call_id="b", name="t", arguments={}))
    assert first.text == second.text == "ok"
    assert seen[0][0] is not seen[1][0]
    assert seen[0][1] is not seen[1][1]


async def test_a_body_that_aborts_its_own_signal_ends_aborted_with_its_contexts() -> None:
    async def body(args: Any, ctx: Any) -> str:
        ctx.defer_context("kept")
        ctx.signal.abort("changed my mind")
        return "done"

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="", parameters={}, execute=body))
    result = await registry.execute(ToolExecutionInput(call_id="a", name="t", arguments={}))
    assert result.is_error
    assert result.code == "ABORTED"
    assert [c.text for c in result.additional_contexts] == ["kept"]
    assert isinstance(result.additional_contexts[0], HookContext)


async def test_a_body_whose_nested_call_reads_the_token_ties_it_to_the_outer_call() -> None:
    parents: list[Any] = []

    class Watch:
        name = "watch"

        @hookimpl
        def dsh_tool_result(self, execution: Any, result: Any) -> None:
            parents.append((execution.name, execution.parent))

    async def outer(args: Any, ctx: Any) -> str:
        inner = await ctx.call("echo", {"text": "in"})
        parents.append(("token", ctx.token))
        return inner.text

    registry, pm = _registry_with_pm()
    registry.register(define_tool(name="outer", description="", parameters={}, execute=outer))
    result = await registry.execute(ToolExecutionInput(call_id="o", name="outer", arguments={}))
    assert result.text == "in"
    pm.register(Watch(), name="watch")
    await registry.execute(ToolExecutionInput(call_id="o", name="outer", arguments={}))
    by_name = dict((name, parent) for name, parent in parents)
    assert by_name["echo"] is by_name["token"]


async def test_a_cancelled_caller_cancels_a_bare_body() -> None:
    started = trio.Event()

    async def body(args: Any, ctx: Any) -> str:
        started.set()
        await trio.sleep_forever()
        return "never"

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="", parameters={}, execute=body))
    call = ToolExecutionInput(call_id="a", name="t", arguments={})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(registry.execute, call)
        await started.wait()
        nursery.cancel_scope.cancel()
    assert nursery.cancel_scope.cancelled_caught


async def test_a_bare_body_reading_its_context_sees_the_call_frozen() -> None:
    seen: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        seen.append((ctx.call_id, ctx.name, ctx.arguments, ctx.scope, ctx.parent))
        assert ctx.execution is ctx.execution
        assert not hasattr(ctx, "nothing_like_this")
        assert ctx.execution.arguments is args
        return "ok"

    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="", parameters={"path": {"type": "string"}}, execute=body)
    )
    result = await registry.execute(
        ToolExecutionInput(call_id="a", name="t", arguments={"path": "p"})
    )
    assert result.text == "ok"
    call_id, name, arguments, scope, parent = seen[0]
    assert (call_id, name, dict(arguments), scope, parent) == ("a", "t", {"path": "p"}, None, None)
    with pytest.raises(TypeError):
        arguments["path"] = "q"  # frozen, as every execution's arguments are


def _safe_echo(**kwargs: Any) -> Any:
    return make_echo("safe", is_concurrency_safe=lambda args: True, **kwargs)


def _calls(count: int, name: str = "safe") -> list[ToolExecutionInput]:
    return [
        ToolExecutionInput(call_id=f"c{i}", name=name, arguments={"text": str(i)})
        for i in range(count)
    ]


async def test_a_batch_runs_calls_no_hook_sees_bare(monkeypatch: Any) -> None:
    made: list[Any] = []
    make = values_module.ToolExecution._make.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, *args: Any) -> Any:
        made.append(args[0])
        return make(cls, *args)

    monkeypatch.setattr(values_module.ToolExecution, "_make", classmethod(counting))
    registry = ToolRegistry()
    registry.register(_safe_echo())
    results = await registry.execute_batch(_calls(6))
    assert [r.text for r in results] == [str(i) for i in range(6)]
    # The first is parked while the nursery opens (the general path); the rest run bare.
    assert made == ["c0"]


async def test_a_plugin_registered_during_a_batch_decides_for_the_calls_after_it() -> None:
    registry, pm = _registry_with_pm()

    async def register(args: Any, ctx: Any) -> str:
        pm.register(DenyAll(), name="deny_all")
        return "registered"

    registry.register(_safe_echo())
    registry.register(
        define_tool(
            name="plug",
            description="",
            parameters={},
            execute=register,
            is_concurrency_safe=lambda args: True,
        )
    )
    inputs = _calls(3)
    inputs.insert(2, ToolExecutionInput(call_id="p", name="plug", arguments={}))
    results = await registry.execute_batch([*inputs, *_calls(2)])
    assert [r.text for r in results[:3]] == ["0", "1", "registered"]
    assert [r.decided_by for r in results[3:]] == ["deny_all"] * 3


async def test_a_batch_asks_a_raising_is_concurrency_safe_once_and_runs_the_call_alone() -> None:
    asked: list[Any] = []

    def unsure(args: Any) -> bool:
        asked.append(args["text"])
        if args["text"] == "2":
            raise ValueError("unsure")
        return True

    registry = ToolRegistry()
    registry.register(make_echo("safe", is_concurrency_safe=unsure))
    results = await registry.execute_batch(_calls(4))
    assert [r.text for r in results] == ["0", "1", "2", "3"]
    assert sorted(asked) == ["0", "1", "2", "3"]


async def test_a_batch_runs_its_bare_calls_in_one_runner_not_a_coroutine_each(
    monkeypatch: Any,
) -> None:
    from dsh_host._pipeline._pipeline import Pipeline

    started: list[Any] = []
    bare = Pipeline._bare

    def counting(self: Any, input: Any, ready: Any = None) -> Any:
        started.append(input.call_id)
        return bare(self, input, ready)

    monkeypatch.setattr(Pipeline, "_bare", counting)
    registry = ToolRegistry()
    registry.register(_safe_echo())
    results = await registry.execute_batch(_calls(6))
    assert [r.text for r in results] == [str(i) for i in range(6)]
    assert started == []  # the first goes the general way (parked), the rest through the runner


async def test_a_bare_batch_call_that_suspends_and_one_that_fails_keep_their_order(
    autojump_clock: Any,
) -> None:
    async def slow(args: Any, ctx: Any) -> str:
        await trio.sleep(int(args["text"]))
        if args["text"] == "2":
            raise ValueError("two")
        return args["text"]

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="safe",
            description="",
            parameters={"text": {"type": "string"}},
            execute=slow,
            is_concurrency_safe=lambda args: True,
        )
    )
    results = await registry.execute_batch(_calls(5))
    assert [r.text for r in results if not r.is_error] == ["0", "1", "3", "4"]
    assert results[2].is_error
    assert "two" in results[2].text


async def test_a_batch_that_hooks_see_never_starts_a_bare_runner(monkeypatch: Any) -> None:
    from dsh_host._pipeline import _bare_batch

    entered: list[Any] = []
    original = _bare_batch._bare_calls

    def counting(batch: Any, me: Any) -> Any:
        entered.append(batch)
        return original(batch, me)

    monkeypatch.setattr(_bare_batch, "_bare_calls", counting)
    registry, pm = _registry_with_pm()
    registry.register(_safe_echo())
    assert [r.text for r in await registry.execute_batch(_calls(4))] == ["0", "1", "2", "3"]
    assert entered  # no hook: the runner runs the calls after the first
    entered.clear()

    class Watch:
        name = "watch"

        @hookimpl
        def dsh_tool_result(self, execution: Any, result: Any) -> None:
            return None

    pm.register(Watch(), name="watch")
    assert [r.text for r in await registry.execute_batch(_calls(4))] == ["0", "1", "2", "3"]
    assert entered == []  # an observer sees every call: no bare runner is even made


def _waiting_tool(started: trio.Event, seen: list[Any] | None = None) -> Any:
    async def body(args: Any, ctx: Any) -> str:
        if args.get("wait"):
            started.set()
            try:
                await trio.sleep_forever()
            finally:
                if seen is not None:
                    seen.append(ctx.signal)
        return "ok"

    parameters = {"wait": {"type": "boolean"}}
    return define_tool(name="t", description="", parameters=parameters, execute=body)


async def test_a_call_under_a_live_callers_signal_runs_bare_and_its_abort_still_ends_it(
    monkeypatch: Any,
) -> None:
    """The asyncio host passes a signal with every call: it takes the bare path (its body's
    scope entered only if it suspends), and an abort while it waits ends it ``ABORTED``."""
    started, seen = trio.Event(), []
    registry = ToolRegistry()
    registry.register(_waiting_tool(started, seen))
    await registry.execute(ToolExecutionInput(call_id="w", name="t", arguments={}))  # seen bare

    def not_bare(*args: Any) -> Any:
        raise AssertionError("a live signal with no deadline left the bare path")

    monkeypatch.setattr(Pipeline, "_run", not_bare)
    call = ToolExecutionInput(call_id="a", name="t", arguments={}, signal=AbortSignal())
    assert (await registry.execute(call)).text == "ok"
    signal, results = AbortSignal(), []
    waits = ToolExecutionInput(call_id="b", name="t", arguments={"wait": True}, signal=signal)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _append(results, registry.execute(waits)))
        await started.wait()
        signal.abort("stop")
    assert results[0].code == "ABORTED"
    assert seen == [signal]  # the body's signal is the caller's


async def _append(results: list[Any], call: Any) -> None:
    results.append(await call)


async def test_a_call_under_an_aborted_signal_or_one_with_a_deadline_is_not_bare(
    autojump_clock: Any,
) -> None:
    started = trio.Event()
    registry = ToolRegistry()
    registry.register(_waiting_tool(started))
    await registry.execute(ToolExecutionInput(call_id="w", name="t", arguments={}))  # seen bare
    aborted = AbortSignal()
    aborted.abort()
    early = await registry.execute(
        ToolExecutionInput(call_id="a", name="t", arguments={}, signal=aborted)
    )
    assert early.code == "ABORTED_BEFORE_DISPATCH"  # never started
    timed = ToolExecutionInput(
        call_id="b", name="t", arguments={"wait": True}, signal=AbortSignal.after(5)
    )
    assert (await registry.execute(timed)).code == "ABORTED"  # its deadline cancelled the body


def test_a_bare_batch_call_enters_no_coroutine_but_its_body() -> None:
    """The batch starts each bare call's body by hand on its worker's frame: no runner
    coroutine to resume per call, only the body's own frame."""
    import inspect
    import sys

    registry = ToolRegistry()
    registry.register(_safe_echo())
    calls = _calls(200)
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_flags & inspect.CO_COROUTINE:
            entered.append(frame.f_code.co_name)

    async def go() -> None:
        await registry.execute_batch(calls)
        sys.setprofile(profile)
        try:
            results = await registry.execute_batch(calls)
        finally:
            sys.setprofile(None)
        assert [r.text for r in results] == [str(i) for i in range(200)]

    trio.run(go)
    bodies = entered.count("execute")
    assert bodies == 200
    assert len(entered) - bodies <= 30  # the batch's own, a few per batch (was 218: one per call)


def test_a_bare_batch_call_that_returns_at_once_raises_no_stop_iteration() -> None:
    """A body that never suspends comes back through the worker's driver (``yield from``),
    not ``coroutine.send``, which raises a `StopIteration` into the batch's loop per call
    (issue 27, the batch floor)."""
    import sys

    registry = ToolRegistry()
    registry.register(_safe_echo())
    calls = _calls(200)
    stops: list[str] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "exception" and arg[0] is StopIteration and frame.f_code.co_name == "_calls":
            stops.append(frame.f_code.co_name)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.endswith("_bare_batch.py") else None

    async def go() -> None:
        await registry.execute_batch(calls)
        sys.settrace(tracer)
        try:
            results = await registry.execute_batch(calls)
        finally:
            sys.settrace(None)
        assert [r.text for r in results] == [str(i) for i in range(200)]

    trio.run(go)
    assert stops == []  # was 199: one per call after the first


async def test_a_bare_batch_goes_on_after_a_body_that_raised_or_suspended(
    autojump_clock: Any,
) -> None:
    """The worker's driver ends with a body that raises (a new one takes the next call) and
    carries a body that suspends to its end; the calls around them still run, in order."""

    async def body(args: Any, ctx: Any) -> str:
        text = args["text"]
        if text in ("1", "4"):
            raise ValueError(f"bad {text}")
        if text in ("2", "5"):
            await trio.sleep(1)
        return text

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="safe",
            description="",
            parameters={"text": {"type": "string"}},
            execute=body,
            is_concurrency_safe=lambda args: True,
        )
    )
    results = await registry.execute_batch(_calls(8), max_parallel=2)
    assert [r.text if not r.is_error else "error" for r in results] == [
        "0", "error", "2", "3", "error", "5", "6", "7",
    ]  # fmt: skip
    assert "bad 4" in results[4].text
