"""The ``timeout`` plugin: budgets, TOOL_TIMEOUT, the grace period, and caller aborts.

Every timed test runs on trio's MockClock (``autojump_clock``): the clock jumps whenever all
tasks are idle, so ``trio.current_time()`` tells exactly when the call ended.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

import pytest
import trio

from dsh_host import (
    AbortSignal,
    ApprovalOutcome,
    Ask,
    ConfigError,
    DshError,
    Scope,
    ToolExecution,
    ToolExecutionResult,
    define_tool,
    hookimpl,
)
from dsh_plugins_builtin.timeout import (
    TOOL_TIMEOUT,
    TimeoutConfig,
    TimeoutPlugin,
    ToolTimeoutReason,
)
from tests.conftest import make_echo


def sleeper(name: str = "slow", seconds: float = math.inf, **kwargs):
    """A tool whose body sleeps *seconds* (forever by default) and then returns ``"done"``."""

    async def execute(args, ctx):
        await trio.sleep(seconds)
        return "done"

    return define_tool(name=name, description="sleeps", parameters={}, execute=execute, **kwargs)


def timeout_config(**table):
    return {"plugin": {"timeout": table}}


def assert_timed_out(result: ToolExecutionResult, ms: int) -> None:
    assert result.to_json() == {
        "content": [{"type": "text", "text": f"Error: tool call timed out after {ms}ms"}],
        "is_error": True,
        "error": {
            "message": f"tool call timed out after {ms}ms",
            "code": "TOOL_TIMEOUT",
            "name": "ToolTimeoutError",
        },
        "additional_contexts": [],
        "meta": None,
        "decided_by": "timeout",
        "decision_detail": None,
    }


# -- budgets ---------------------------------------------------------------------------------


async def test_a_call_that_finishes_in_time_keeps_its_own_result(make_host, autojump_clock):
    seen = []

    async def execute(args, ctx):
        seen.append(ctx.signal)
        await trio.sleep(0.05)
        return "ok"

    tool = define_tool(name="t", description="", parameters={}, execute=execute, timeout_ms=100)
    caller = AbortSignal()
    host = make_host(TimeoutPlugin(), tools=[tool])
    result = await host.call("t", {}, signal=caller)
    assert (result.text, result.is_error, result.decided_by) == ("ok", False, None)
    assert seen[0] is not caller  # the body runs under the deadline fused with the caller's signal
    assert not seen[0].aborted
    assert TOOL_TIMEOUT == "TOOL_TIMEOUT"


async def test_the_tools_own_timeout_ms_is_the_budget(make_host, autojump_clock):
    host = make_host(TimeoutPlugin(), tools=[sleeper(timeout_ms=100)])
    result = await host.call("slow", {})
    assert_timed_out(result, 100)
    assert trio.current_time() == pytest.approx(0.1)


async def test_per_tool_config_overrides_the_tools_timeout(make_host, autojump_clock):
    config = timeout_config(per_tool={"slow": 5000, "quick": 50})
    host = make_host(
        TimeoutPlugin(),
        tools=[sleeper(seconds=1, timeout_ms=100), sleeper("quick", timeout_ms=100_000)],
        config=config,
    )
    assert (await host.call("slow", {})).text == "done"  # 1 s < 5000 ms beats the tool's 100 ms
    started = trio.current_time()
    assert_timed_out(await host.call("quick", {}), 50)
    assert trio.current_time() - started == pytest.approx(0.05)


async def test_a_tool_with_no_budget_gets_default_ms(make_host, autojump_clock):
    host = make_host(TimeoutPlugin(), tools=[sleeper()], config=timeout_config(default_ms=300))
    assert_timed_out(await host.call("slow", {}), 300)
    assert trio.current_time() == pytest.approx(0.3)


@pytest.mark.parametrize("config", [None, {"default_ms": 0}])
async def test_no_default_ms_means_no_deadline(make_host, autojump_clock, config):
    """The seed's ``timeoutMs``: omit for no deadline. A tool that sets none runs to the end."""
    seen: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        seen.append((ctx.signal.deadline, trio.current_effective_deadline()))
        await trio.sleep(100_000)
        return "done"

    tool = define_tool(name="slow", description="", parameters={}, execute=body)
    table = None if config is None else timeout_config(**config)
    host = make_host(TimeoutPlugin(), tools=[tool], config=table)
    result = await host.call("slow", {})
    assert (result.is_error, result.text) == (False, "done")
    assert seen == [(math.inf, math.inf)]
    assert trio.current_time() == pytest.approx(100_000)


async def test_a_call_with_no_budget_is_handed_on_as_it_is(make_host):
    """The hot path: no coroutine, deadline, scope or ledger of the plugin's for such a call."""
    plugin = TimeoutPlugin()
    make_host(plugin, tools=[make_echo(), sleeper(timeout_ms=100)])
    downstream = object()
    handed: list[dict[str, Any]] = []

    def call_next(**kwargs: Any) -> Any:
        handed.append(kwargs)
        return downstream

    echo = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    assert plugin.dsh_tool_execute(echo, call_next) is downstream
    assert handed == [{}]  # no signal of ours
    timed = plugin.dsh_tool_execute(
        ToolExecution(call_id="d", name="slow", arguments={}), call_next
    )
    assert timed is not downstream  # a budget: the plugin's own coroutine sets the deadline
    timed.close()  # type: ignore[attr-defined]


async def test_a_tool_budget_still_applies_when_default_ms_is_off(make_host, autojump_clock):
    host = make_host(TimeoutPlugin(), tools=[sleeper(timeout_ms=100)])
    assert_timed_out(await host.call("slow", {}), 100)


async def test_a_tool_registered_with_a_budget_while_a_call_waits_runs_with_it(
    make_host, autojump_clock
):
    """The budget is read as the call is dispatched, not when it started: a tool swapped for
    one with a budget while the call waited for approval runs with that budget."""
    approve = trio.Event()

    class Asker:
        name = "asker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask("wait for it")

        @hookimpl
        async def dsh_tool_approve(self, request):
            await approve.wait()
            return ApprovalOutcome.ALLOWED_ONCE

    host = make_host(TimeoutPlugin(), Asker())
    remove = host.registry.register(sleeper())  # no budget
    results: list[ToolExecutionResult] = []

    async def call() -> None:
        results.append(await host.call("slow", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.sleep(1)  # the call waits for approval
        remove()
        host.registry.register(sleeper(timeout_ms=100))
        approve.set()
    assert_timed_out(results[0], 100)


async def test_the_scoped_view_decides_the_budget(make_host, autojump_clock):
    host = make_host(TimeoutPlugin(), tools=[sleeper(timeout_ms=100)])
    scope = Scope("agent")
    host.registry.register(sleeper(timeout_ms=200), scope)
    assert_timed_out(await host.call("slow", {}, scope=scope), 200)
    assert_timed_out(await host.call("slow", {}), 100)


async def test_a_fractional_tool_budget_is_reported_as_given(make_host, autojump_clock):
    host = make_host(TimeoutPlugin(), tools=[sleeper(timeout_ms=12.5)])
    assert (await host.call("slow", {})).error.message == "tool call timed out after 12.5ms"


async def test_an_unknown_tool_is_still_unknown(make_host, autojump_clock):
    result = await make_host(TimeoutPlugin()).call("nope", {})
    assert result.code == "UNKNOWN_TOOL"


# -- what the body does when the deadline fires -----------------------------------------------


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_whatever_a_timed_out_body_ends_with_the_result_is_tool_timeout(
    make_host, autojump_clock, ending
):
    async def execute(args, ctx):
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            if ending == "raises":
                raise DshError("fetch aborted", "WEB_ABORTED") from None
            return "partial output"  # swallowing the cancellation
        return "never"

    tool = define_tool(name="t", description="", parameters={}, execute=execute, timeout_ms=100)
    assert_timed_out(await make_host(TimeoutPlugin(), tools=[tool]).call("t", {}), 100)


async def test_the_body_sees_the_timeout_reason_on_its_signal(make_host, autojump_clock):
    reasons = []

    async def execute(args, ctx):
        try:
            await trio.sleep_forever()
        finally:
            reasons.append(ctx.signal.reason)

    tool = define_tool(name="t", description="", parameters={}, execute=execute, timeout_ms=100)
    host = make_host(TimeoutPlugin(), tools=[tool], config=timeout_config(grace_ms=500))
    await host.call("t", {})
    assert reasons == [ToolTimeoutReason(100, 500, pytest.approx(0.6))]
    assert str(reasons[0]) == "TOOL_TIMEOUT after 100ms"
    assert reasons[0].code == "TOOL_TIMEOUT"


async def test_a_sync_body_that_ignores_cancellation_times_out_on_time(make_host, autojump_clock):
    release = threading.Event()
    finished = threading.Event()

    def execute(args):
        release.wait()  # a worker thread: trio cannot interrupt it
        finished.set()
        return "late"

    tool = define_tool(name="t", description="", parameters={}, execute=execute, timeout_ms=250)
    host = make_host(TimeoutPlugin(), tools=[tool])
    try:
        result = await host.call("t", {})
        assert_timed_out(result, 250)
        assert trio.current_time() == pytest.approx(0.25)
        assert not finished.is_set()  # the thread is still running: it was not killed
    finally:
        release.set()
    assert await trio.to_thread.run_sync(finished.wait, 10)


# -- the grace period --------------------------------------------------------------------------


def cleaning_tool(cleanup_seconds: float, log: list[float], **kwargs):
    """A body that sleeps forever, then spends *cleanup_seconds* in shielded cleanup."""

    async def execute(args, ctx):
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(cleanup_seconds)
                log.append(trio.current_time())

    return define_tool(name="t", description="", parameters={}, execute=execute, **kwargs)


async def test_a_cleanup_shorter_than_grace_completes(make_host, autojump_clock, caplog):
    cleaned: list[float] = []
    host = make_host(TimeoutPlugin(), tools=[cleaning_tool(0.5, cleaned, timeout_ms=1000)])
    result = await host.call("t", {})
    assert cleaned == [pytest.approx(1.5)]  # the side effect of the cleanup is visible
    assert_timed_out(result, 1000)
    assert trio.current_time() == pytest.approx(1.5)  # deadline + cleanup time
    assert not [r for r in caplog.records if r.name == "dsh_plugins_builtin.timeout"]


async def test_a_shielded_cleanup_past_grace_is_awaited_and_warned_about(
    make_host, autojump_clock, caplog
):
    caplog.set_level(logging.WARNING, "dsh_plugins_builtin.timeout")
    cleaned: list[float] = []
    tool = cleaning_tool(5, cleaned, timeout_ms=1000)
    host = make_host(TimeoutPlugin(), tools=[tool], config=timeout_config(grace_ms=2000))
    result = await host.call("t", {}, call_id="c7")
    assert_timed_out(result, 1000)
    assert cleaned == [pytest.approx(6)]  # a started body is never abandoned
    assert trio.current_time() == pytest.approx(6)
    [record] = caplog.records
    assert record.getMessage().startswith(
        'timeout: tool "t" (call c7) timed out after 1000ms and was still running 2000ms later'
    )
    assert "grace_ms" in record.getMessage()


async def test_a_body_can_bound_its_cleanup_by_the_grace_deadline(make_host, autojump_clock):
    cleaned: list[str] = []

    async def execute(args, ctx):
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = getattr(ctx.signal.reason, "grace_deadline", math.inf)
                await trio.sleep(60)
                cleaned.append("finished")
            if cleanup.cancelled_caught:
                cleaned.append("cut short")

    tool = define_tool(name="t", description="", parameters={}, execute=execute, timeout_ms=100)
    host = make_host(TimeoutPlugin(), tools=[tool], config=timeout_config(grace_ms=400))
    assert_timed_out(await host.call("t", {}), 100)
    assert cleaned == ["cut short"]
    assert trio.current_time() == pytest.approx(0.5)


class StubbornRetry:
    """An inner wrapper that ignores the signal: it retries an aborted call after a back-off."""

    name = "stubborn-retry"

    def __init__(self) -> None:
        self.attempts = 0

    @hookimpl(trylast=True)
    async def dsh_tool_execute(self, execution, call_next):
        while True:
            self.attempts += 1
            result = await call_next()
            if result.code != "ABORTED":
                return result
            await trio.sleep(30)  # not shielded, but the body's cancel scope does not cover it


async def test_after_grace_the_plugin_cancels_what_ignores_the_signal(
    make_host, autojump_clock, caplog
):
    caplog.set_level(logging.WARNING, "dsh_plugins_builtin.timeout")
    retry = StubbornRetry()  # trylast and registered after the timeout: inside it
    host = make_host(
        TimeoutPlugin(), retry, tools=[sleeper(timeout_ms=100)], config=timeout_config(grace_ms=700)
    )
    assert_timed_out(await host.call("slow", {}), 100)
    assert trio.current_time() == pytest.approx(0.8)  # deadline + grace, not the 30 s back-off
    assert retry.attempts == 1
    assert len(caplog.records) == 1


async def test_grace_zero_cancels_at_the_deadline_without_a_warning(
    make_host, autojump_clock, caplog
):
    caplog.set_level(logging.WARNING, "dsh_plugins_builtin.timeout")
    host = make_host(
        TimeoutPlugin(), StubbornRetry(), tools=[sleeper(timeout_ms=100)],
        config=timeout_config(grace_ms=0),
    )  # fmt: skip
    assert_timed_out(await host.call("slow", {}), 100)
    assert trio.current_time() == pytest.approx(0.1)
    assert caplog.records == []


# -- caller aborts ----------------------------------------------------------------------------


async def test_a_caller_abort_before_the_deadline_stays_aborted(make_host, autojump_clock):
    cleaned: list[float] = []
    caller = AbortSignal()
    host = make_host(TimeoutPlugin(), tools=[cleaning_tool(1, cleaned, timeout_ms=500)])
    async with trio.open_nursery() as nursery:
        results = []

        async def run():
            results.append(await host.call("t", {}, signal=caller))

        nursery.start_soon(run)
        await trio.sleep(0.2)
        caller.abort("user pressed Esc")
    [result] = results
    assert result.code == "ABORTED"  # the deadline passed during cleanup, but the caller was first
    assert result.error.message == "tool call aborted"
    assert result.decided_by is None
    assert trio.current_time() == pytest.approx(1.2)


async def test_a_caller_abort_after_the_deadline_keeps_tool_timeout(make_host, autojump_clock):
    cleaned: list[float] = []
    caller = AbortSignal()
    host = make_host(TimeoutPlugin(), tools=[cleaning_tool(1, cleaned, timeout_ms=100)])
    results = []

    async def run():
        results.append(await host.call("t", {}, signal=caller))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(0.5)  # the deadline fired at 0.1; the body is cleaning up
        caller.abort("too late")
    assert_timed_out(results[0], 100)


async def test_an_outer_deadline_is_not_reported_as_ours(make_host, autojump_clock):
    class OuterDeadline:
        name = "outer"

        @hookimpl(tryfirst=True)
        async def dsh_tool_execute(self, execution, call_next):
            signal = AbortSignal()
            async with trio.open_nursery() as nursery:

                async def fire():
                    await trio.sleep(0.05)
                    signal.abort("outer budget")

                nursery.start_soon(fire)
                result = await call_next(signal=signal)
                nursery.cancel_scope.cancel()
            return result

    cleaned: list[float] = []
    tool = cleaning_tool(1, cleaned, timeout_ms=100)  # still cleaning up when ours would fire
    host = make_host(OuterDeadline(), TimeoutPlugin(), tools=[tool])
    result = await host.call("t", {})
    assert result.code == "ABORTED"
    assert cleaned == [pytest.approx(1.05)]


# -- position in the wrapper chain ------------------------------------------------------------


async def test_the_budget_covers_the_body_only_not_outer_wrappers(make_host, autojump_clock):
    class SlowOuter:
        name = "slow-outer"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            await trio.sleep(10)  # e.g. flushing a session log before dispatch
            return await call_next()

    # registered last, the timeout would be outermost were it not trylast
    host = make_host(SlowOuter(), TimeoutPlugin(), tools=[make_echo(timeout_ms=1000)])
    result = await host.call("echo", {"text": "hi"})
    assert result.text == "hi"


async def test_an_inner_wrapper_raising_stays_a_plugin_failure(make_host, autojump_clock):
    class Broken:
        name = "broken"

        @hookimpl(trylast=True)
        async def dsh_tool_execute(self, execution, call_next):
            raise RuntimeError("boom")

    host = make_host(TimeoutPlugin(), Broken(), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == "broken"
    assert result.error.message.startswith(  # then " (at FILE:LINE)", the plugin's line
        "plugin 'broken' failed in dsh_tool_execute: RuntimeError: boom (at "
    )


# -- configuration ------------------------------------------------------------------------------


def test_the_config_defaults():
    assert TimeoutConfig() == TimeoutConfig(default_ms=0, per_tool={}, grace_ms=2_000)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"default_ms": -1}, "default_ms must be zero or a positive number of milliseconds"),
        ({"grace_ms": -1}, "grace_ms must be zero or a positive number of milliseconds, got -1"),
        ({"per_tool": {"bash": -5}}, "per_tool.bash must be a positive number"),
        ({"per_tool": {"bash": "long"}}, "key 'per_tool.bash': expected an integer"),
        ({"default": 5}, "key 'default': unknown key (did you mean 'default_ms'?)"),
    ],
)
def test_bad_config_is_refused_at_load(make_host, table, words):
    with pytest.raises(ConfigError, match=r"\[plugin\.timeout\]") as info:
        make_host(TimeoutPlugin(), config=timeout_config(**table))
    assert words in str(info.value)
