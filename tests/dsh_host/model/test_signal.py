"""`AbortSignal` and the frozen JSON snapshots."""

from __future__ import annotations

import copy
import json

import pytest
import trio

from dsh_host import AbortSignal, FrozenDict, canonical_json, thaw
from dsh_host._model._json import freeze


async def test_abort_wakes_waiters_and_is_idempotent():
    signal = AbortSignal()
    woke = []

    async def waiter():
        await signal.wait()
        woke.append(signal.reason)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        signal.abort("first")
        signal.abort("second")
    assert woke == ["first"]
    assert signal.aborted
    assert signal.reason == "first"
    await signal.wait()  # returns at once


def test_any_aborts_with_the_first_reason():
    a, b = AbortSignal(), AbortSignal()
    fused = AbortSignal.any([a, b])
    assert not fused.aborted
    b.abort("b went")
    assert fused.aborted
    assert fused.reason == "b went"
    a.abort("a went")
    assert fused.reason == "b went"
    done = AbortSignal()
    done.abort()
    assert AbortSignal.any([AbortSignal(), done]).reason == "aborted"


def test_freeze_makes_deep_immutable_json_that_dumps_and_copies():
    value = freeze({"a": [1, {"b": None}], "c": "x"})
    assert json.loads(json.dumps(value)) == {"a": [1, {"b": None}], "c": "x"}
    assert isinstance(value, FrozenDict)
    assert isinstance(value["a"], tuple)
    for mutate in (
        lambda: value.update(x=1),
        lambda: value.pop("a"),
        lambda: value["a"][1].clear(),
    ):
        with pytest.raises(TypeError):
            mutate()
    assert copy.deepcopy(value) is value
    assert thaw(value) == {"a": [1, {"b": None}], "c": "x"}
    assert isinstance(thaw(value)["a"], list)
    assert hash(value) == hash(freeze({"c": "x", "a": [1, {"b": None}]}))


def test_canonical_json_is_stable():
    assert canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'


async def test_a_deadline_signal_aborts_by_itself_without_a_task(autojump_clock):
    signal = AbortSignal.after(5, "too slow")
    assert not signal.aborted
    assert signal.deadline == trio.current_time() + 5
    await trio.sleep(4.9)
    assert not signal.aborted
    await signal.wait()
    assert trio.current_time() == 5
    assert signal.aborted
    assert signal.reason == "too slow"
    assert signal.aborted_at == 5


async def test_a_fused_signal_takes_the_earliest_deadline(autojump_clock):
    late, early = AbortSignal.after(10), AbortSignal.after(3, "early")
    fused = AbortSignal.any([late, AbortSignal(), early])
    assert fused.deadline == early.deadline
    await trio.sleep(3)
    assert fused.aborted
    assert fused.reason == "early"


async def test_a_body_under_a_deadline_signal_is_cancelled_on_time(make_host, autojump_clock):
    from dsh_host import define_tool, hookimpl

    class Deadline:
        name = "deadline"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            return await call_next(signal=AbortSignal.after(2))

    async def hang(args, ctx):
        await trio.sleep_forever()

    host = make_host(
        Deadline(), tools=[define_tool(name="hang", description="", parameters={}, execute=hang)]
    )
    result = await host.call("hang", {})
    assert result.code == "ABORTED"
    assert trio.current_time() == 2


def test_an_inert_signal_is_a_fresh_live_signal_marked_inert():
    from dsh_host._model._signal import _inert

    fresh, inert = AbortSignal(), _inert()
    assert inert._inert
    assert not fresh._inert
    # Every other slot as `AbortSignal()` sets it (`_inert` fills them itself, on the hot path).
    for slot in AbortSignal.__slots__:
        if slot != "_inert":
            assert getattr(inert, slot) == getattr(fresh, slot), slot
    assert inert is not _inert()
    assert not inert.aborted
    inert.abort("mine")  # a body may abort its own signal: only that call's signal
    assert inert.aborted
    assert not _inert().aborted
