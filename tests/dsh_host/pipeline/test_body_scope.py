"""A body under a caller's signal opens its cancel scope only when it first suspends (issue 27
item 5, issue 25's asyncio host): the abort still ends it ABORTED, wherever it waits."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dsh_host import AbortSignal, define_tool
from tests.conftest import make_echo


@pytest.fixture(autouse=True, params=["late", "eager"])
def scope_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every abort case twice: the scope entered at the first wait, and entered eagerly (what a
    trio without the internals `enter_below` writes gets)."""
    if request.param == "eager":
        monkeypatch.setattr("dsh_host._pipeline._dispatch.CAN_ENTER_BELOW", False)
        monkeypatch.setattr("dsh_host._pipeline._pipeline.CAN_ENTER_BELOW", False)
    return str(request.param)


@pytest.fixture(params=["first call", "bare path"])
def make_host(request: pytest.FixtureRequest, make_host: Any) -> Any:
    """Every case twice more: as a host's first call (which finds out that no hook sees its
    calls) and as a later one, on the bare path (`Pipeline._bare`, which keeps a caller's live
    signal with no deadline)."""
    if request.param == "first call":
        return make_host

    def build(*plugins: object, tools: Any = ()) -> Any:
        return _Warmed(make_host(*plugins, tools=(*tools, make_echo())))

    return build


class _Warmed:
    """A host whose every call comes after a plain one (so that it runs bare)."""

    def __init__(self, host: Any) -> None:
        self.host = host

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        await self.host.call("echo", {"text": "warm"})
        return await self.host.call(*args, **kwargs)


def _tool(execute: Any) -> Any:
    return define_tool(name="t", description="", parameters={}, execute=execute)


@pytest.mark.parametrize("scope_mode", ["late"], indirect=True)  # eager enters one by definition
async def test_a_body_that_answers_at_once_under_a_signal_opens_no_cancel_scope(make_host, scopes):
    async def execute(args: Any) -> str:
        return "done"

    host = make_host(tools=[_tool(execute)])
    await host.call("t", {})  # warm
    scopes.watch()
    result = await host.call("t", {}, signal=AbortSignal())
    assert result.text == "done"
    assert scopes == []


async def test_a_body_that_aborts_its_signal_and_answers_at_once_is_aborted(make_host):
    signal = AbortSignal()

    async def execute(args: Any) -> str:
        signal.abort()
        return "done"

    result = await make_host(tools=[_tool(execute)]).call("t", {}, signal=signal)
    assert result.code == "ABORTED"


async def test_abort_while_the_body_waits_inside_its_own_scope_is_not_its_timeout(make_host):
    signal = AbortSignal()
    seen: list[Any] = []

    async def execute(args: Any) -> str:
        with trio.move_on_after(1000) as own:
            signal.abort("stop")
            await trio.sleep_forever()
        seen.append(own.cancelled_caught)  # never reached: the abort is not the body's timeout
        return "timed out"

    result = await make_host(tools=[_tool(execute)]).call("t", {}, signal=signal)
    assert result.code == "ABORTED"
    assert seen == []


async def test_abort_cancels_every_later_wait_of_the_body(make_host):
    signal = AbortSignal()
    events: list[str] = []

    async def execute(args: Any) -> str:
        await trio.sleep(0)  # suspends first at the body's own level: the scope opens here
        try:
            with trio.CancelScope():
                signal.abort()
                await trio.sleep_forever()
        finally:
            events.append("cleanup")
            try:
                await trio.sleep(0)
            except trio.Cancelled:
                events.append("cancelled again")
                raise
        return "done"

    result = await make_host(tools=[_tool(execute)]).call("t", {}, signal=signal)
    assert result.code == "ABORTED"
    assert events == ["cleanup", "cancelled again"]


async def test_abort_inside_a_shield_of_the_body_waits_for_the_shield(make_host):
    signal = AbortSignal()
    events: list[str] = []

    async def execute(args: Any) -> str:
        with trio.CancelScope(shield=True):
            signal.abort()
            await trio.sleep(0)
            events.append("shield done")
        await trio.sleep_forever()
        return "done"

    result = await make_host(tools=[_tool(execute)]).call("t", {}, signal=signal)
    assert result.code == "ABORTED"
    assert events == ["shield done"]


async def test_abort_cancels_the_tasks_of_a_nursery_the_body_opened_first(make_host):
    signal = AbortSignal()
    events: list[str] = []

    async def execute(args: Any) -> str:
        async def child() -> None:
            try:
                await trio.sleep_forever()
            finally:
                events.append("child cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            await trio.sleep(0)
            signal.abort()
        events.append("after nursery")
        await trio.sleep(0)
        events.append("not reached")
        return "done"

    result = await make_host(tools=[_tool(execute)]).call("t", {}, signal=signal)
    assert result.code == "ABORTED"
    assert "child cancelled" in events
    assert "not reached" not in events


async def test_an_abort_from_another_task_ends_a_waiting_body_promptly(make_host):
    signal = AbortSignal()
    started = trio.Event()

    async def execute(args: Any) -> str:
        started.set()
        await trio.sleep_forever()
        return "never"

    host = make_host(tools=[_tool(execute)])
    results: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            results.append(await host.call("t", {}, signal=signal))

        nursery.start_soon(call)
        await started.wait()
        signal.abort()
    assert results[0].code == "ABORTED"
