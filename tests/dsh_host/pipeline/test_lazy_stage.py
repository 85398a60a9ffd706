"""The execute stage's cancel scope is entered lazily (issue 11): the hook_timeout bound holds
whatever a wrapper does around its own suspensions: its own scopes, nurseries and shields."""

from __future__ import annotations

import contextlib

import pytest
import trio

from dsh_host import Host, define_tool, hookimpl
from tests.conftest import make_echo


def _host(*plugins: object, timeout: float = 5) -> Host:
    host = Host(config={"host": {"hook_timeout": timeout}}, plugins=plugins, load_entrypoints=False)
    host.registry.register(make_echo())

    async def slow(args):
        await trio.sleep(100)
        return "done"

    host.registry.register(define_tool(name="slow", description="", parameters={}, execute=slow))
    return host


def _wrapper(body):
    class Wrapper:
        name = "wrapper"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            return await body(call_next)

    return Wrapper()


def _timed_out(result, plugin: str = "wrapper") -> bool:
    return (
        result.code == "PLUGIN_FAILED"
        and result.decided_by == plugin
        and "did not answer dsh_tool_execute within 5 s" in result.text
    )


async def test_a_wrapper_hung_on_its_own_is_cut_off(autojump_clock):
    async def hangs(call_next):
        await trio.sleep_forever()

    started = trio.current_time()
    result = await _host(_wrapper(hangs)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 5


async def test_a_wrapper_hung_inside_its_own_nursery_is_cut_off(autojump_clock):
    async def hangs(call_next):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()

    started = trio.current_time()
    result = await _host(_wrapper(hangs)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 5


async def test_a_wrapper_hung_inside_its_own_longer_scope_is_cut_off(autojump_clock):
    async def hangs(call_next):
        with trio.move_on_after(1_000):
            await trio.sleep_forever()
        return await call_next()

    started = trio.current_time()
    result = await _host(_wrapper(hangs)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 5


async def test_a_wrapper_that_swallows_the_cancellation_is_cancelled_again(autojump_clock):
    async def stubborn(call_next):
        with trio.CancelScope():  # its own scope, so the stage's scope cannot be entered
            for _ in range(3):
                with contextlib.suppress(trio.Cancelled):
                    await trio.sleep(4)
            return await call_next()

    started = trio.current_time()
    result = await _host(_wrapper(stubborn)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 5  # every later suspension was cancelled at once


async def test_a_shielded_wait_is_not_cut_but_answering_late_fails(autojump_clock):
    async def shielded(call_next):
        with trio.CancelScope(shield=True):
            await trio.sleep(8)
        return await call_next()

    started = trio.current_time()
    result = await _host(_wrapper(shielded)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 8  # a shield is a shield, as with any scope


async def test_own_time_inside_own_scopes_is_summed_and_the_body_time_is_not(autojump_clock):
    async def busy(call_next):
        async with trio.open_nursery():
            await trio.sleep(2)
        result = await call_next()  # 100 s of body: not the wrapper's own time
        with trio.move_on_after(60):
            await trio.sleep(2)
        return result

    assert (await _host(_wrapper(busy)).call("slow", {})).text == "done"

    async def too_busy(call_next):
        async with trio.open_nursery():
            await trio.sleep(3)
        result = await call_next()
        with trio.move_on_after(60):
            await trio.sleep(3)  # 3 + 3 > 5: cut off 2 s into this one
        return result

    started = trio.current_time()
    result = await _host(_wrapper(too_busy)).call("slow", {})
    assert _timed_out(result), result
    assert trio.current_time() - started == 105


async def test_the_inner_of_two_wrappers_is_blamed_for_its_own_time(autojump_clock):
    class Outer:
        name = "outer"

        @hookimpl(tryfirst=True)
        async def dsh_tool_execute(self, execution, call_next):
            with trio.move_on_after(1_000):  # the inner link runs inside this scope
                return await call_next()

    class Inner:
        name = "inner"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            await trio.sleep(1)
            result = await call_next()
            await trio.sleep_forever()
            return result

    result = await _host(Outer(), Inner()).call("slow", {})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "inner"), result


async def test_the_callers_cancellation_still_propagates_through_a_lazy_stage(autojump_clock):
    async def waits(call_next):
        async with trio.open_nursery():
            await trio.sleep(1)
        return await call_next()

    host = _host(_wrapper(waits))
    with trio.move_on_after(50) as scope:
        await host.call("slow", {})
    assert scope.cancelled_caught


async def test_an_outer_wrapper_driven_late_keeps_the_inner_links_deadline(autojump_clock):
    """The outer link's first step runs undriven until the inner one first waits; its budget
    then goes below the inner one's, so the deadline in force stays the inner link's."""

    class Outer:
        name = "outer"

        @hookimpl(tryfirst=True)
        async def dsh_tool_execute(self, execution, call_next):
            return await call_next()

    class Inner:
        name = "inner"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            await trio.sleep(1)  # the outer link is first driven here
            result = await call_next()  # 100 s of body
            await trio.sleep_forever()  # 4 s left of its own 5
            return result

    started = trio.current_time()
    result = await _host(Outer(), Inner()).call("slow", {})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "inner"), result
    assert trio.current_time() - started == 105


async def _hang_in_a_nursery() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        await trio.sleep_forever()


def _nursery_hanger(stage: str) -> object:
    async def pre(execution, call_next):
        await _hang_in_a_nursery()

    async def guard(execution):
        await _hang_in_a_nursery()

    async def post(execution, result):
        await _hang_in_a_nursery()

    plugin = type("Hangs", (), {"name": "nursery"})()
    function = {"dsh_tool_pre_execute": pre, "dsh_tool_guard": guard}.get(stage, post)
    setattr(plugin, stage, hookimpl(function))
    return plugin


@pytest.mark.parametrize(
    "stage", ["dsh_tool_pre_execute", "dsh_tool_guard", "dsh_tool_post_execute"]
)
async def test_every_lazy_stage_cuts_off_a_hook_hung_in_its_own_nursery(stage, autojump_clock):
    started = trio.current_time()
    result = await _host(_nursery_hanger(stage)).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "nursery"), result
    assert f"did not answer {stage} within 5 s" in result.text
    assert trio.current_time() - started == 5


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy-stage", "eager-stage"])
async def test_an_async_wrapper_is_bounded_whether_or_not_the_stage_can_be_lazy(
    lazy, monkeypatch, autojump_clock
):
    """Where trio's cancel status cannot be read, the first async wrapper goes the eager way
    (`dispatch`): the same bound, the same results."""
    from dsh_host._pipeline import _finish, _gate, _stage, _wrappers

    if not lazy:
        for module in (_gate, _finish, _stage, _wrappers):  # every place that reads it
            monkeypatch.setattr(module, "cancel_status", lambda: None)

    async def late_then_on(call_next):
        await trio.sleep(6)
        return await call_next()

    async def on_then_late(call_next):
        result = await call_next()  # 100 s of body: not the wrapper's own time
        await trio.sleep(4)
        return result

    started = trio.current_time()
    result = await _host(_wrapper(late_then_on)).call("echo", {"text": "x"})
    assert _timed_out(result), result
    assert trio.current_time() - started == 5
    started = trio.current_time()
    result = await _host(_wrapper(on_then_late)).call("slow", {})
    assert not result.is_error, result
    assert result.text == "done"
    assert trio.current_time() - started == 104


async def test_a_wrapper_whose_own_time_starts_only_after_a_waiting_body_is_bounded(
    autojump_clock,
):
    """No budget exists while the body waits (nothing of the wrapper's waited before): the one
    made then starts paused, and the wrapper's time after the body still counts."""

    async def on_then_hangs(call_next):
        result = await call_next()
        await trio.sleep(3)
        await trio.sleep(3)
        return result

    started = trio.current_time()
    result = await _host(_wrapper(on_then_hangs)).call("slow", {})
    assert _timed_out(result), result
    assert trio.current_time() - started == 105
