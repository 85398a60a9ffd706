"""Every valid JSON value works, and nothing grows without bound (issue 10 items 7 and 9)."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable

import pytest
import trio

from dsh_host import Host, Scope
from dsh_host._model._json import MAX_DEPTH, NotJsonError, freeze
from dsh_plugins_builtin.guards import GuardsPlugin
from tests.conftest import make_echo, soak_size


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_freeze_accepts_512_levels_and_refuses_513_without_recursion_error():
    assert freeze(nested(MAX_DEPTH), "arguments") is not None
    with pytest.raises(NotJsonError, match="nested more than 512 levels deep"):
        freeze(nested(MAX_DEPTH + 1), "arguments")
    with pytest.raises(NotJsonError, match="nested more than 512 levels deep"):
        freeze(nested(200_000), "arguments")


def _fastest(work: Callable[[], object]) -> float:
    """The least time of five runs of *work*, garbage collection paused (a collection or
    another process's burst in one run is not the cost of the work)."""
    gc.collect()
    gc.disable()
    try:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return min(times)


def test_freeze_is_linear_in_width_and_depth():
    wide = {f"k{i}": [i, {"x": "y"}] for i in range(10_000)}
    wider = {f"k{i}": [i, {"x": "y"}] for i in range(40_000)}
    small = _fastest(lambda: freeze(wide))
    assert _fastest(lambda: freeze(wider)) < small * 12  # 4x the size: nowhere near 16x


def test_freeze_bounds_integers_like_parse_json():
    assert freeze(10**4299) == 10**4299
    with pytest.raises(NotJsonError, match="more than 4300 digits"):
        freeze({"n": 10**4300}, "arguments")


def test_freeze_keeps_paths_and_cycles_in_messages():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotJsonError, match=r"arguments\[0\] contains itself"):
        freeze(loop, "arguments")
    with pytest.raises(NotJsonError, match=r"arguments\.a\[1\] is a set"):
        freeze({"a": [1, {2}]}, "arguments")


async def test_host_call_bounds_python_arguments(make_host):
    host = make_host(tools=[make_echo()])
    deep = await host.call("echo", {"text": nested(10_000)})
    assert deep.code == "INVALID_ARGS"
    assert "nested more than 512 levels deep" in deep.error.message
    big = await host.call("echo", {"text": 10**5000})
    assert big.code == "INVALID_ARGS"


async def test_a_lone_surrogate_passes_freeze_guards_and_the_body():
    guards = GuardsPlugin()
    host = Host(plugins=[guards], load_entrypoints=False)
    host.registry.register(make_echo())
    result = await host.call("echo", {"text": "\udcff"})
    assert (result.is_error, result.text) == (False, "\udcff")


async def _scoped_calls(n: int):
    guards = GuardsPlugin()
    host = Host(plugins=[guards], load_entrypoints=False)
    host.registry.register(make_echo())
    registry = host.registry
    parent = Scope("root")
    registry.add_guard(lambda execution: None, parent, name="g")

    async def burst(count: int) -> None:
        for i in range(count):
            scope = Scope(f"agent-{i}", parent)
            await host.call("echo", {"text": "x"}, scope=scope)
            registry.get("echo", scope)
            await trio.lowlevel.checkpoint()

    return host, guards, burst


async def test_many_scopes_leave_no_cache_entries():
    n = soak_size(2_000, 10_000)
    host, guards, burst = await _scoped_calls(n)
    await burst(n)
    gc.collect()
    assert len(host.registry._views) == 0
    assert len(host.registry._guard_cache) == 0
    assert len(guards._streaks) == 0
    assert host.registry.open_scopes() == 1  # "root", which holds a guard


@pytest.mark.soak
async def test_scopes_leave_memory_at_baseline():
    n = soak_size(1_000, 10_000)
    _host, _guards, burst = await _scoped_calls(n)
    await burst(200)  # warm up
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await burst(n)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 200_000, grown  # was +26 MB for 10,000 scopes


async def test_close_scope_forgets_what_was_registered_in_it(make_host):
    host = make_host(tools=[make_echo()])
    registry = host.registry
    scope = Scope("agent")
    child = Scope("sub", scope)
    registry.register(make_echo("mine"), scope)
    registry.add_guard(lambda execution: "no", child, name="g")
    assert registry.get("mine", child) is not None
    assert registry.open_scopes() == 2
    registry.close_scope(scope)
    assert registry.open_scopes() == 0
    assert registry.get("mine", child) is None
    assert registry.guards_for(child) == ()
    assert (await host.call("echo", {"text": "x"}, scope=child)).text == "x"


def test_owner_lookups_create_no_scope_state(make_host):
    host = make_host(tools=[make_echo()])
    for i in range(100):
        assert host.registry.owner("echo", Scope(f"s{i}")) is None
    assert host.registry.open_scopes() == 0
