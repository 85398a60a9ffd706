"""Waterfall chains (pre- and post-execute) are resolved on the pipeline's own frame until a
link really waits (issue 11); every way a link can answer, wait, raise or pass on is handled
exactly as when each link is awaited in turn."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import pytest
import trio

from dsh_host import Accept, Allow, ApprovalOutcome, Ask, Deny, Host, hookimpl
from tests.conftest import make_echo


def _host(*plugins: object, hook_timeout: float = 30) -> Host:
    config = {"host": {"hook_timeout": hook_timeout}}
    host = Host(config=config, plugins=plugins, load_entrypoints=False)
    host.registry.register(make_echo())
    return host


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


class Passes(Named):
    """A plain link that hands the decision on (a tail call)."""

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution, call_next):
        return call_next()


class Denies(Named):
    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Deny("not today")


class LaterDenies(Named):
    @hookimpl
    async def dsh_tool_pre_execute(self, execution):
        await trio.sleep(1)
        return Deny("not today")


class _Forward:
    """An awaitable that is not a coroutine: awaits *inner* and returns what it gives."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield from self.inner.__await__())


async def test_a_tail_call_leaves_the_decision_credited_downstream():
    result = await _host(Passes("passes"), Denies("denies")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("DENIED", "denies")


@pytest.mark.parametrize("later", [False, True])
async def test_a_link_awaiting_a_downstream_that_waits_gets_its_decision(later, autojump_clock):
    seen = []

    class Wraps(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            decision = await call_next()
            seen.append(decision)
            return decision

    downstream = LaterDenies("denies") if later else Denies("denies")
    result = await _host(Wraps("wraps"), downstream).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("DENIED", "denies")
    assert seen == [Deny("not today")]


async def test_time_a_link_waits_downstream_is_not_its_own(autojump_clock):
    class Slow(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            decision = await call_next()  # 4 s downstream: not its own
            await trio.sleep(3)
            return decision

    class Waits(Named):
        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep(4)

    started = trio.current_time()
    result = await _host(Slow("slow"), Waits("waits"), hook_timeout=5).call("echo", {"text": "x"})
    assert (result.is_error, result.text) == (False, "x")
    assert trio.current_time() - started == pytest.approx(7)


async def test_time_a_link_waited_before_call_next_still_counts_after_it(autojump_clock):
    class Link(Named):
        def __init__(self, name: str, before: float, after: float) -> None:
            super().__init__(name)
            self.before, self.after = before, after

        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            await trio.sleep(self.before)
            decision = await call_next()  # 4 s downstream: not its own
            await trio.sleep(self.after)
            return decision

    class Waits(Named):
        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep(4)

    host = _host(Link("within", 2, 2), Waits("waits"), hook_timeout=5)
    assert (await host.call("echo", {"text": "x"})).text == "x"
    host = _host(Link("over", 2, 4), Waits("waits"), hook_timeout=5)
    result = await host.call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "over")


async def test_the_link_that_runs_out_of_its_own_time_is_blamed(autojump_clock):
    class Outer(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            return await call_next()

    class Inner(Named):
        @hookimpl
        async def dsh_tool_pre_execute(self, execution, call_next):
            await trio.sleep(1)
            decision = await call_next()
            await trio.sleep(10)
            return decision

    result = await _host(Outer("outer"), Inner("inner"), hook_timeout=5).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "inner")
    assert "inner did not answer dsh_tool_pre_execute within 5 s" in result.error.message


async def test_a_link_declaring_its_arguments_in_another_order_is_called_by_name():
    class Adds(Named):
        @hookimpl
        async def dsh_tool_post_execute(self, call_next, result):
            decision = await call_next()
            return Accept(additional_contexts=(f"saw {result.text}",), detail=repr(decision))

    result = await _host(Adds("adds")).call("echo", {"text": "x"})
    assert result.text == "x"
    assert [c.content[0].text for c in result.additional_contexts] == ["saw x"]


async def test_a_link_returning_an_awaitable_that_is_not_a_coroutine_is_awaited():
    class Forwards(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution, call_next):
            return _Forward(call_next())

    result = await _host(Forwards("forwards"), Denies("denies")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("DENIED", "denies")


async def test_a_link_answering_for_itself_without_awaiting_call_next_is_credited():
    asked = []

    class Own(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution, call_next):
            call_next()  # made, never awaited: nobody after it is asked
            return Deny("mine")

    class Later(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            asked.append(self.name)

    result = await _host(Own("own"), Later("later")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by, asked) == ("DENIED", "own", [])


async def test_a_link_that_waits_then_abstains_after_call_next_leaves_its_answer(autojump_clock):
    class Abstains(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            await trio.sleep(1)
            await call_next()
            return None  # abstains: what call_next gave stands, credited downstream

    result = await _host(Abstains("abstains"), Denies("denies")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("DENIED", "denies")


async def test_a_link_that_waits_then_abstains_lets_the_next_decide(autojump_clock):
    class Abstains(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep(1)

    result = await _host(Abstains("abstains"), LaterDenies("denies")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("DENIED", "denies")


@pytest.mark.parametrize("wait", [False, True])
async def test_a_link_answering_nonsense_fails_closed_and_is_named(wait, autojump_clock):
    class Nonsense(Named):
        @hookimpl
        async def dsh_tool_pre_execute(self, execution, call_next):
            if wait:
                await trio.sleep(1)
            await call_next()
            return "yes"

    result = await _host(Nonsense("nonsense")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "nonsense")


@pytest.mark.parametrize("wait", [False, True])
async def test_a_link_raising_fails_its_call_and_is_named(wait, autojump_clock):
    class Raises(Named):
        @hookimpl
        async def dsh_tool_post_execute(self, execution, result, call_next):
            if wait:
                await trio.sleep(1)
            raise KeyError("boom")

    result = await _host(Raises("raises")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "raises")
    assert "KeyError" in result.text


async def test_a_downstream_failure_reaches_the_link_awaiting_it_and_names_the_culprit():
    caught = []

    class Outer(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            try:
                return await call_next()
            except Exception as exc:
                caught.append(type(exc).__name__)
                raise

    class Broken(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            raise KeyError("boom")

    result = await _host(Outer("outer"), Broken("broken")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "broken")
    assert caught == ["PluginFailure"]


class _Blocks(Named):
    """A plain hook that returns 31 s after it started (on the watchdog's clock)."""

    pipeline: Any = None

    def _block(self) -> None:
        self.pipeline.watchdog.started -= 31


class _BlockingLink(_Blocks):
    @hookimpl
    def dsh_tool_pre_execute(self, execution, call_next):
        self._block()
        return call_next()


class _BlockingPlainHook(_Blocks):
    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        self._block()
        return None


class _BlockingWrapper(_Blocks):
    @hookimpl
    def dsh_tool_execute(self, execution, call_next):
        self._block()
        return call_next()


@pytest.mark.parametrize(
    ("blocks", "before", "hook"),
    [
        (_BlockingLink, (), "dsh_tool_pre_execute"),
        # a waterfall link first: the chain calls both
        (_BlockingPlainHook, (Passes("passes"),), "dsh_tool_pre_execute"),
        (_BlockingWrapper, (), "dsh_tool_execute"),
    ],
)
async def test_a_blocking_plain_hook_is_reported_by_name_and_fails_closed(blocks, before, hook):
    plugin = blocks("blocks")
    host = _host(*before, plugin)
    plugin.pipeline = host.registry._pipeline
    plugin.pipeline.watchdog.stream = None
    for _ in range(2):  # the first call registers the watchdog; later ones watch inline
        result = await host.call("echo", {"text": "x"})
        assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "blocks")
        assert f"blocks did not answer {hook} within 30 s" in result.error.message
    assert plugin.pipeline.watchdog.plugin is None


async def test_a_chains_plain_links_are_watched_inline(monkeypatch):
    """`_Chain.resolve` watches each plain link itself: no `Pipeline.watched` call per link."""
    host = _host(Passes("passes"), Denies("denies"))
    pipeline = host.registry._pipeline
    await host.call("echo", {"text": "x"})  # registers the watchdog
    calls: list[str] = []

    def watched(plugin: str, hook: str, tool: str, function: Any, *args: Any) -> Any:
        calls.append(plugin)
        return function(*args)

    monkeypatch.setattr(pipeline, "watched", watched)
    for _ in range(2):
        result = await host.call("echo", {"text": "x"})
        assert (result.code, result.decided_by) == ("DENIED", "denies")
    assert calls == []
    assert pipeline.watchdog.plugin is None


async def test_a_links_answer_is_not_checked_against_the_awaitable_abc(monkeypatch):
    """A decision a link answers is known not to be awaitable: no ``inspect.isawaitable``."""
    from dsh_host._pipeline import _chain

    class Allows(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution, call_next):
            return Allow()

    checked: list[object] = []
    real = inspect.isawaitable

    def isawaitable(value: object) -> bool:
        checked.append(value)
        return real(value)

    monkeypatch.setattr(_chain.inspect, "isawaitable", isawaitable)
    result = await _host(Passes("passes"), Allows("allows")).call("echo", {"text": "x"})
    assert (result.is_error, result.text) == (False, "x")
    assert checked == []


async def test_plain_execute_wrappers_are_watched_inline(monkeypatch):
    """`_pass_over` watches each plain wrapper itself: no `Pipeline.watched` call per wrapper."""

    class Wraps(Named):
        @hookimpl
        def dsh_tool_execute(self, execution, call_next):
            return call_next()

    host = _host(Wraps("wraps"))
    pipeline = host.registry._pipeline
    await host.call("echo", {"text": "x"})  # registers the watchdog
    calls: list[str] = []

    def watched(plugin: str, hook: str, tool: str, function: Any, *args: Any) -> Any:
        calls.append(plugin)
        return function(*args)

    monkeypatch.setattr(pipeline, "watched", watched)
    for _ in range(2):
        result = await host.call("echo", {"text": "x"})
        assert (result.is_error, result.text) == (False, "x")
    assert calls == []
    assert pipeline.watchdog.plugin is None


async def test_the_stricter_of_an_allow_and_a_downstream_ask_is_asked(autojump_clock):
    asked = []

    class Permits(Named):
        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            downstream = await call_next()
            return downstream if isinstance(downstream, Ask) else Allow()

    class Asks(Named):
        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep(1)
            return Ask("sure?")

    class Approver(Named):
        @hookimpl
        def dsh_tool_approve(self, request):
            asked.append((request.reason, request.asked_by))
            return ApprovalOutcome.REJECTED

    host = _host(Permits("permits"), Asks("asks"), Approver("approver"))
    result = await host.call("echo", {"text": "x"})
    assert result.code == "DENIED"
    assert asked == [("sure?", "asks")]


async def test_a_plain_wrapper_handing_on_a_signal_of_its_own_is_heard():
    from dsh_host import AbortSignal

    ran = []

    class Stops(Named):
        @hookimpl
        def dsh_tool_execute(self, execution, call_next):
            signal = AbortSignal()
            signal.abort("stop")
            return call_next(signal=signal)  # a tail call, with a signal: not passed over

    async def body(args):
        ran.append(args)
        return "ran"

    from dsh_host import define_tool

    host = Host(config={}, plugins=[Stops("stops")], load_entrypoints=False)
    host.registry.register(define_tool(name="t", description="", parameters={}, execute=body))
    result = await host.call("t", {})
    assert (result.is_error, ran) == (True, [])
    assert result.code == "ABORTED_BEFORE_DISPATCH"


async def test_a_call_next_passed_on_unawaited_cannot_run_the_links_again_later():
    kept = []
    asked = []

    class Keeps(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution, call_next):
            kept.append(call_next)
            return call_next()  # a tail call

    class Later(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            asked.append(self.name)

    result = await _host(Keeps("keeps"), Later("later")).call("echo", {"text": "x"})
    assert (result.text, asked) == ("x", ["later"])
    with pytest.raises(RuntimeError, match="tail call"):
        await kept[0]()
    assert asked == ["later"]  # the links after it were not asked a second time


@pytest.mark.parametrize("outer", [False, True])
async def test_a_wrapper_call_next_passed_on_unawaited_cannot_run_the_body_again(outer):
    from dsh_host import define_tool

    kept = []
    ran = []

    class Keeps(Named):
        @hookimpl
        def dsh_tool_execute(self, execution, call_next):
            kept.append(call_next)
            return call_next()  # a tail call

    class Outer(Named):  # an `async` wrapper first: the plain one is reached inside `_wrap`
        @hookimpl(tryfirst=True)
        async def dsh_tool_execute(self, execution, call_next):
            return await call_next()

    async def body(args):
        ran.append(1)
        return "ran"

    plugins = [Keeps("keeps"), *([Outer("outer")] if outer else [])]
    host = Host(config={}, plugins=plugins, load_entrypoints=False)
    host.registry.register(define_tool(name="t", description="", parameters={}, execute=body))
    assert (await host.call("t", {})).text == "ran"
    with pytest.raises(RuntimeError, match="tail call"):
        await kept[0]()
    assert ran == [1]  # the body ran once, inside the call
