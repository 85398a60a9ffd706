"""Structural facts that make the hot path cheap (issue 11 item 3): none of these can flake.

They count things (worker threads, cancel scopes, allocated blocks, hook implementations) rather
than time anything.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
import trio

from dsh_host import Accept, Deny, Host, ToolExecutionInput, ToolRegistry, hookimpl
from tests.conftest import make_echo

CALL = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"})


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every function handed to a worker thread from now on."""
    handed: list[Any] = []
    run_sync = trio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    return handed


class AsyncEverywhere:
    """Trivial async implementations of every per-call hook, a waterfall link among them."""

    name = "async_everywhere"

    @hookimpl
    async def dsh_tool_pre_execute(self, execution, call_next):
        return await call_next()

    @hookimpl
    async def dsh_tool_guard(self, execution):
        return None

    @hookimpl
    async def dsh_tool_execute(self, execution, call_next):
        return await call_next()

    @hookimpl
    async def dsh_tool_post_execute(self, execution, result):
        return Accept()

    @hookimpl
    async def dsh_tool_result(self, execution, result):
        return None


class SyncEverywhere:
    name = "sync_everywhere"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return None

    @hookimpl
    def dsh_tool_guard(self, execution):
        return None

    @hookimpl
    def dsh_tool_post_execute(self, execution, result):
        return None

    @hookimpl
    def dsh_tool_result(self, execution, result):
        return None


def _host(*plugins: object) -> Host:
    host = Host(plugins=plugins, load_entrypoints=False)
    host.registry.register(make_echo())
    return host


async def test_an_all_async_call_uses_no_worker_thread(threads, scopes):
    host = _host(AsyncEverywhere())
    scopes.watch()
    result = await host.registry.execute(CALL)
    assert result.text == "x"
    assert threads == []


async def test_no_cancel_scope_for_a_call_with_no_signal_and_no_deadline(scopes):
    bare = ToolRegistry()
    bare.register(make_echo())
    scopes.watch()
    assert (await bare.execute(CALL)).text == "x"
    assert scopes == []
    assert (await _host(SyncEverywhere()).registry.execute(CALL)).text == "x"
    assert scopes == []  # synchronous plugins: no scope either


async def test_async_hooks_cost_at_most_one_cancel_scope_per_stage(scopes):
    """The hook_timeout bound is kept by one scope per stage, not one per implementation."""
    many = [AsyncEverywhere() for _ in range(4)]
    for i, plugin in enumerate(many):
        plugin.name = f"async_{i}"  # type: ignore[misc]
    host = _host(*many)
    scopes.watch()
    assert (await host.registry.execute(CALL)).text == "x"
    # Pre-execute, guards, execute wrappers and post-execute enter their stage's scope lazily,
    # at a hook's first wait of its own: none waited, so none. Observers keep one eager scope
    # (a cut-off observer is reported and the next one gets a fresh scope): one in all, not
    # one per implementation (20 here), and given no deadline since no hook suspended.
    assert len(scopes) == 1
    assert all(scope.deadline == float("inf") for scope in scopes)


async def test_execute_wrappers_that_never_wait_on_their_own_open_no_cancel_scope(scopes):
    host = Host(plugins=[AsyncWrapperOnly(f"w{i}") for i in range(3)], load_entrypoints=False)
    host.registry.register(make_echo())
    scopes.watch()
    assert (await host.registry.execute(CALL)).text == "x"
    assert scopes == []


class AsyncWrapperOnly:
    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    async def dsh_tool_execute(self, execution, call_next):
        return await call_next()


async def test_the_bare_pipeline_allocates_a_bounded_number_of_blocks_per_call():
    bare = ToolRegistry()
    bare.register(make_echo())
    for _ in range(200):  # warm caches
        await bare.execute(CALL)
    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        for _ in range(1_000):
            await bare.execute(CALL)
        grown = sys.getallocatedblocks() - before
    finally:
        gc.enable()
    # What stays allocated after 1,000 calls: nothing per call (results are dropped), so the
    # growth is a small constant, far below one block per call.
    assert grown < 200, grown


def test_a_plugin_may_turn_its_per_call_hooks_off():
    class Off:
        name = "off"

        def __init__(self) -> None:
            self.dsh_idle_hooks = frozenset({"dsh_tool_post_execute"})

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return None

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            raise AssertionError("never called")

    host = _host(Off())
    relay = host.registry._pipeline.hooks
    assert [i.plugin for i in relay.impls("dsh_tool_pre_execute")] == ["off"]
    assert relay.impls("dsh_tool_post_execute") == ()


class LastLink:
    """A pre-execute link that offers a plain function for when it is the last (both log)."""

    name = "linked"

    def __init__(self) -> None:
        self.called: list[str] = []
        self.dsh_last_links = {"dsh_tool_pre_execute": self.alone}

    @hookimpl
    def dsh_tool_pre_execute(self, execution, call_next):
        self.called.append("link")
        return call_next()

    def alone(self, execution):
        self.called.append("alone")
        return None


class Later:
    name = "later"

    @hookimpl(trylast=True)
    def dsh_tool_pre_execute(self, execution):
        return Deny("later says no")


async def test_a_last_link_is_called_as_the_plain_function_its_plugin_offers():
    """``dsh_last_links``: with nothing after the link, the host calls the plain function (no
    ``call_next``); with an implementation after it, the link itself, as it always did."""
    linked = LastLink()
    host = _host(linked)
    relay = host.registry._pipeline.hooks
    assert [i.waterfall for i in relay.impls("dsh_tool_pre_execute")] == [False]
    assert (await host.call("echo", {"text": "x"})).text == "x"
    assert linked.called == ["alone"]
    later = Later()
    host.pm.register(later, name="later")
    assert [i.waterfall for i in relay.impls("dsh_tool_pre_execute")] == [True, False]
    denied = await host.call("echo", {"text": "x"})
    assert (denied.code, denied.decided_by) == ("DENIED", "later")
    assert linked.called == ["alone", "link"]
    host.pm.unregister(later)
    assert (await host.call("echo", {"text": "x"})).text == "x"
    assert linked.called == ["alone", "link", "alone"]


async def test_a_last_link_offer_that_raises_leaves_the_link():
    class Odd(LastLink):
        @property
        def dsh_last_links(self):
            raise RuntimeError("no")

        @dsh_last_links.setter
        def dsh_last_links(self, value):
            pass

    odd = Odd()
    host = _host(odd)
    assert (await host.call("echo", {"text": "x"})).text == "x"
    assert odd.called == ["link"]


async def test_a_last_link_offer_stands_only_for_the_plugins_own_hook_method():
    """A second link of the same plugin (pluggy's ``specname``), called last, is not the one the
    offer stands for: it is called, and its Deny stands."""

    class TwoLinks(LastLink):
        @hookimpl(specname="dsh_tool_pre_execute", trylast=True)
        def closing_time(self, execution, call_next):
            self.called.append("closing")
            return Deny("closed")

    two = TwoLinks()
    host = _host(two)
    denied = await host.call("echo", {"text": "x"})
    assert denied.code == "DENIED"
    assert two.called == ["link", "closing"]


@pytest.mark.parametrize(
    ("alone", "taken"),
    [
        (lambda execution: None, True),  # some of the hook's arguments, by name
        (lambda execution, extra: None, False),  # one the hook does not give: not taken
    ],
)
async def test_a_last_link_offer_takes_the_hooks_arguments_by_name(alone, taken):
    linked = LastLink()
    linked.dsh_last_links = {"dsh_tool_pre_execute": alone}
    host = _host(linked)
    assert (await host.call("echo", {"text": "x"})).text == "x"
    assert linked.called == ([] if taken else ["link"])


def test_the_default_stack_registers_no_per_call_hook_for_plugins_configured_off(tmp_path):
    """hook_commands with no hooks configured, guards with no reminders: nothing per call."""
    ws = tmp_path / "ws"
    ws.mkdir()
    config = {
        "host": {"workspace": str(ws)},
        "plugins": {"enable": ["hook_commands", "guards", "timeout"]},
        "plugin": {"guards": {"repeat_thresholds": []}},
    }
    host = Host(config, environ={})
    relay = host.registry._pipeline.hooks
    per_call = {
        hook: [i.plugin for i in relay.impls(hook)]
        for hook in (
            "dsh_tool_pre_execute",
            "dsh_tool_guard",
            "dsh_tool_execute",
            "dsh_tool_post_execute",
            "dsh_tool_result",
        )
    }
    assert per_call == {
        "dsh_tool_pre_execute": [],
        "dsh_tool_guard": ["guards"],
        "dsh_tool_execute": ["timeout"],
        "dsh_tool_post_execute": [],
        "dsh_tool_result": [],
    }


class CountingArgs(dict):  # type: ignore[type-arg]
    """Arguments that count how often they are walked (frozen)."""

    walks = 0

    def items(self):  # type: ignore[no-untyped-def, override]
        type(self).walks += 1
        return super().items()


async def test_a_batch_freezes_and_validates_each_call_once(monkeypatch):
    validated: list[Any] = []
    host = _host()
    tool = make_echo("safe", is_concurrency_safe=lambda args: True)
    host.registry.register(tool)
    from dsh_host import ToolDefinition

    prepare = ToolDefinition.prepare

    def counting(self: ToolDefinition, arguments: Any) -> Any:
        validated.append(arguments)
        return prepare(self, arguments)

    monkeypatch.setattr(ToolDefinition, "prepare", counting)
    accepts = tool.accepts  # the fast check, tried first wherever arguments are validated
    assert accepts is not None

    def counting_accepts(arguments: Any) -> bool:
        validated.append(arguments)
        return accepts(arguments)

    object.__setattr__(tool, "accepts", counting_accepts)
    CountingArgs.walks = 0
    inputs = [
        ToolExecutionInput(call_id=f"c{i}", name="safe", arguments=CountingArgs(text=str(i)))
        for i in range(3)
    ]
    results = await host.registry.execute_batch(inputs)
    assert [r.text for r in results] == ["0", "1", "2"]
    assert CountingArgs.walks == 3
    assert len(validated) == 3


async def test_a_batch_of_one_opens_no_nursery(monkeypatch):
    opened: list[Any] = []
    open_nursery = trio.open_nursery

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return open_nursery(*args, **kwargs)

    monkeypatch.setattr(trio, "open_nursery", counting)
    host = _host()
    seen: list[Any] = []
    results = await host.registry.execute_batch([CALL], on_result=lambda i, r: seen.append(i))
    assert [r.text for r in results] == ["x"]
    assert (opened, seen) == ([], [0])


async def test_a_batch_imports_nothing_once_one_ran(monkeypatch):
    """The batch scheduler is imported on the first batch, not by every batch again (an
    ``import`` statement cost a one-call batch 40% more than `execute`)."""
    import builtins

    host = _host()
    await host.registry.execute_batch([CALL])
    imported: list[str] = []
    real = builtins.__import__

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        imported.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counting)
    results = await host.registry.execute_batch([CALL])
    results += await host.registry.execute_batch([CALL, CALL])
    assert ([r.text for r in results], imported) == (["x", "x", "x"], [])


async def test_a_batch_of_one_whose_batch_signal_aborted_does_not_start():
    from dsh_host import AbortSignal

    own, batch = AbortSignal(), AbortSignal()
    batch.abort("stop")
    call = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"}, signal=own)
    (result,) = await _host().registry.execute_batch([call], signal=batch)
    assert result.code == "ABORTED_BEFORE_DISPATCH"


async def test_hooks_that_open_their_own_cancel_scopes_nest_inside_the_stage(autojump_clock):
    """The stage's one scope is entered before any hook runs, so a hook's own scopes nest."""
    from dsh_host import define_tool

    class Scoped:
        name = "scoped"

        @hookimpl
        async def dsh_tool_pre_execute(self, execution, call_next):
            with trio.move_on_after(1):
                await trio.sleep(0.5)
                decision = await call_next()
            return decision

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            with trio.CancelScope():
                await trio.sleep(0.5)
                return await call_next()

        @hookimpl
        async def dsh_tool_post_execute(self, execution, result, call_next):
            with trio.move_on_after(10):
                await trio.sleep(0.1)
            return await call_next()

    async def slow(args: Any) -> str:
        await trio.sleep(60)  # longer than hook_timeout: the body's time is not the wrapper's
        return "done"

    host = Host(config={"host": {"hook_timeout": 5}}, plugins=[Scoped()], load_entrypoints=False)
    host.registry.register(define_tool(name="slow", description="", parameters={}, execute=slow))
    result = await host.call("slow", {})
    assert (result.is_error, result.text) == (False, "done")


async def test_a_hook_that_swallows_the_stage_deadline_is_still_blamed(autojump_clock):
    class Swallows:
        name = "swallows"

        @hookimpl
        async def dsh_tool_guard(self, execution):
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                return None  # answers anyway, late

    class After:
        name = "after"

        @hookimpl(tryfirst=True)
        async def dsh_tool_guard(self, execution):
            return None

    host = Host(
        config={"host": {"hook_timeout": 3}}, plugins=[Swallows(), After()], load_entrypoints=False
    )
    host.registry.register(make_echo())
    started = trio.current_time()
    result = await host.call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "swallows")
    assert "swallows did not answer dsh_tool_guard within 3 s" in result.error.message
    assert trio.current_time() - started == pytest.approx(3)


async def test_stages_can_enter_their_cancel_scope_lazily_with_this_trio():
    """Lazy stages read trio's private ``Task._cancel_status``; if a trio release moves it, the
    pipeline falls back to eager scopes (slower, still correct) and this test says so."""
    from dsh_host._pipeline._stage import _Stage

    stage = _Stage.lazy()
    assert stage is not None, "trio's Task._cancel_status is gone: stages are eager again"
    assert stage.base is trio.lowlevel.current_task()._cancel_status


def _python_calls_per_call(registry: ToolRegistry, call: ToolExecutionInput) -> float:
    """Python-level calls one ``execute`` makes (`bench/count_calls.py`'s figure): a count, not
    a time, so the shared machine cannot blur it."""
    seen = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen[0] += 1

    async def go() -> None:
        for _ in range(3):
            await registry.execute(call)
        sys.setprofile(profile)
        try:
            for _ in range(10):
                await registry.execute(call)
        finally:
            sys.setprofile(None)

    trio.run(go)
    return seen[0] / 10


def test_the_bare_and_the_four_plugin_paths_make_few_python_calls():
    class Four:
        name = "four"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return None

        @hookimpl
        def dsh_tool_guard(self, execution):
            return None

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            return await call_next()

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return None

    bare = ToolRegistry()
    bare.register(make_echo())
    # execute, _bare, the snapshot, the context, the body, the result (+ the profiler's own
    # setprofile call once): was 19 before the bare path.
    assert _python_calls_per_call(bare, CALL) <= 7
    host = Host(plugins=[Four()], load_entrypoints=False)
    host.registry.register(make_echo())
    assert _python_calls_per_call(host.registry, CALL) <= 29  # was 46
