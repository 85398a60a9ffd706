"""`AbortSignal` and the frozen JSON snapshots."""

from __future__ import annotations

import copy
import json

import pytest
import trio

from dsh_host import AbortSignal, FrozenDict, canonical_json, thaw
from dsh_host._json import freeze


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
