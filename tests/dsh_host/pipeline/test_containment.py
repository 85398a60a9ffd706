"""Containment and bounds (CONTRACT §14): a plugin raising anything, or hanging, ends its own call
``PLUGIN_FAILED`` naming the plugin and the hook; siblings and the caller's own cancellation are
untouched; a real Ctrl-C still stops everything."""

from __future__ import annotations

import io
import signal
import time

import pytest
import trio
import trio.testing

from dsh_host import (
    Allow,
    Ask,
    ConfigError,
    Deny,
    Host,
    ToolExecutionInput,
    hookimpl,
)
from dsh_host._pipeline import _answers, _calling, _chain, _dispatch, _tail
from dsh_host._pipeline._contain import Watchdog, real_interrupt
from tests.conftest import make_echo


class Custom(BaseException):
    """A BaseException no one expects."""


def _leak_cancelled() -> BaseException:
    """A genuine `trio.Cancelled`, caught from a scope that is over (as a plugin might leak it)."""
    return trio.Cancelled._create()


RAISES = {
    "KeyboardInterrupt": lambda: KeyboardInterrupt(),
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": lambda: GeneratorExit(),
    "Custom": lambda: Custom("odd"),
    "Cancelled": _leak_cancelled,
    "RuntimeError": lambda: RuntimeError("plain"),
}

STAGES = (
    "dsh_tool_pre_execute",
    "dsh_tool_approve",
    "dsh_tool_guard",
    "dsh_tool_execute",
    "dsh_tool_post_execute",
)


def raising_plugin(stage: str, make_exc, *, is_async: bool = True):
    """A plugin named ``bad`` whose *stage* hook raises ``make_exc()`` for tool ``victim`` only."""

    def fail(name: str) -> None:
        if name == "victim":
            raise make_exc()

    class Bad:
        name = "bad"

    if stage == "dsh_tool_pre_execute":

        async def pre(self, execution):
            fail(execution.name)

        Bad.dsh_tool_pre_execute = hookimpl(pre)
    elif stage == "dsh_tool_approve":

        async def approve(self, request):
            fail(request.tool)

        Bad.dsh_tool_approve = hookimpl(approve)

        async def ask(self, execution):
            return Ask("check") if execution.name == "victim" else None

        Bad.dsh_tool_pre_execute = hookimpl(ask)
    elif stage == "dsh_tool_guard":

        def guard(self, execution):
            fail(execution.name)

        Bad.dsh_tool_guard = hookimpl(guard)
    elif stage == "dsh_tool_execute":

        async def wrap(self, execution, call_next):
            fail(execution.name)
            return await call_next()

        Bad.dsh_tool_execute = hookimpl(wrap)
    else:

        async def post(self, execution, result):
            fail(execution.name)

        Bad.dsh_tool_post_execute = hookimpl(post)
    return Bad()


def host_with(*plugins, config=None) -> Host:
    host = Host(config=config, plugins=plugins, load_entrypoints=False)
    for name in ("victim", "echo"):
        host.registry.register(make_echo(name))
    return host


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("kind", sorted(RAISES))
async def test_anything_a_plugin_raises_ends_only_its_call(stage, kind):
    host = host_with(raising_plugin(stage, RAISES[kind]))
    inputs = [
        ToolExecutionInput(call_id="a", name="echo", arguments={"text": "before"}),
        ToolExecutionInput(call_id="b", name="victim", arguments={"text": "x"}),
        ToolExecutionInput(call_id="c", name="echo", arguments={"text": "after"}),
    ]
    results = await host.registry.execute_batch(inputs)
    assert [r.text for r in (results[0], results[2])] == ["before", "after"]
    failed = results[1]
    assert failed.code == "PLUGIN_FAILED", failed
    assert failed.decided_by == "bad"
    assert stage in failed.error.message
    assert kind in failed.error.message or kind == "Cancelled"


async def test_a_tool_body_raising_a_base_exception_fails_only_that_call(make_host):
    from dsh_host import define_tool

    async def body(args):
        raise SystemExit(1)

    tool = define_tool(name="exits", description="", parameters={}, execute=body)
    host = make_host(tools=[tool, make_echo()])
    result = await host.call("exits", {})
    assert (result.code, result.error.name) == ("TOOL_FAILED", "SystemExit")
    assert (await host.call("echo", {"text": "still here"})).text == "still here"


async def test_observers_raising_base_exceptions_are_contained(make_host, caplog):
    seen = []

    class Exits:
        name = "exits"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            raise SystemExit(2)

    class Interrupts:
        name = "interrupts"

        @hookimpl
        async def dsh_tool_result(self, execution, result):
            raise KeyboardInterrupt

    class Good:
        name = "good"

        @hookimpl(trylast=True)
        def dsh_tool_result(self, execution, result):
            seen.append(result.text)

    host = make_host(Exits(), Interrupts(), Good(), tools=[make_echo()])
    assert (await host.call("echo", {"text": "hi"})).text == "hi"
    assert seen == ["hi"]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "observer 'exits' failed: raised SystemExit" in messages
    assert "observer 'interrupts' failed: raised KeyboardInterrupt" in messages


async def test_the_callers_own_cancellation_propagates(make_host):
    class Slow:
        name = "slow"

        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep_forever()

    host = make_host(Slow(), tools=[make_echo()])
    with trio.move_on_after(1) as scope:
        await host.call("echo", {"text": "x"})
        pytest.fail("the call should have been cancelled by its caller")
    assert scope.cancelled_caught


def test_a_real_ctrl_c_stops_the_call_and_is_not_a_plugin_failure():
    class PressesCtrlC:
        name = "ctrl_c"

        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            signal.raise_signal(signal.SIGINT)  # what the terminal sends
            await trio.sleep_forever()

    host = host_with(PressesCtrlC())
    with pytest.raises(KeyboardInterrupt):
        trio.run(host.call, "echo", {"text": "x"})


def test_a_raised_keyboard_interrupt_is_told_from_a_real_one():
    with pytest.raises(KeyboardInterrupt) as info:
        raise KeyboardInterrupt
    assert not real_interrupt(info.value)
    assert real_interrupt(KeyboardInterrupt())  # no frames: raised by C (the default handler)


# -- bounded stages --------------------------------------------------------------------------


def hanging_plugin(stage: str):
    class Hangs:
        name = "hangs"

    if stage == "dsh_tool_pre_execute":

        async def pre(self, execution):
            await trio.sleep_forever()

        Hangs.dsh_tool_pre_execute = hookimpl(pre)
    elif stage == "dsh_tool_approve":

        async def approve(self, request):
            await trio.sleep_forever()

        async def ask(self, execution):
            return Ask("check")

        Hangs.dsh_tool_approve = hookimpl(approve)
        Hangs.dsh_tool_pre_execute = hookimpl(ask)
    elif stage == "dsh_tool_guard":

        async def guard(self, execution):
            await trio.sleep_forever()

        Hangs.dsh_tool_guard = hookimpl(guard)
    elif stage == "dsh_tool_execute":

        async def wrap(self, execution, call_next):
            result = await call_next()
            await trio.sleep_forever()
            return result

        Hangs.dsh_tool_execute = hookimpl(wrap)
    else:

        async def post(self, execution, result):
            await trio.sleep_forever()

        Hangs.dsh_tool_post_execute = hookimpl(post)
    return Hangs()


@pytest.mark.parametrize("stage", STAGES)
async def test_a_hung_hook_ends_its_call_after_hook_timeout(stage, autojump_clock):
    config = {"host": {"hook_timeout": 5, "approval_timeout": 60}}
    host = host_with(hanging_plugin(stage), config=config)
    started = trio.current_time()
    result = await host.call("echo", {"text": "x"})
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == "hangs"
    bound = "60 s" if stage == "dsh_tool_approve" else "5 s"
    assert f"hangs did not answer {stage} within {bound}" in result.error.message
    assert trio.current_time() - started == pytest.approx(float(bound.split()[0]))


async def test_the_time_a_wrapper_waits_for_the_body_is_not_its_own(autojump_clock):
    from dsh_host import define_tool

    async def slow(args):
        await trio.sleep(100)
        return "done"

    class Wraps:
        name = "wraps"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            await trio.sleep(2)
            result = await call_next()  # 100 s of body: not the wrapper's own time
            await trio.sleep(2)
            return result

    host = Host(config={"host": {"hook_timeout": 5}}, plugins=[Wraps()], load_entrypoints=False)
    host.registry.register(define_tool(name="slow", description="", parameters={}, execute=slow))
    assert (await host.call("slow", {})).text == "done"


async def test_a_waterfall_link_is_blamed_only_for_its_own_time(autojump_clock):
    class Link:
        name = "link"

        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            return await call_next()

    class Stuck:
        name = "stuck"

        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            await trio.sleep_forever()

    host = host_with(Link(), Stuck(), config={"host": {"hook_timeout": 2}})
    result = await host.call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "stuck")


async def test_a_blocking_sync_hook_is_reported_by_name_and_fails_closed(make_host):
    stream = io.StringIO()
    events = []

    class Blocks:
        name = "blocks"

        def __init__(self) -> None:
            self.pipeline = None

        @hookimpl
        def dsh_tool_guard(self, execution):
            watchdog = self.pipeline.watchdog
            # What the watchdog thread sees while this hook holds the loop 31 s later:
            report = watchdog.check(watchdog.started + 31)
            assert report is not None
            watchdog.started -= 31  # and the hook returns 31 s after it started
            return None

    plugin = Blocks()
    host = make_host(plugin, tools=[make_echo()])
    plugin.pipeline = host.registry._pipeline
    plugin.pipeline.watchdog.stream = stream
    result = await host.call("echo", {"text": "x"}, trace=events.append)
    assert result.code == "PLUGIN_FAILED"
    assert "blocks did not answer dsh_tool_guard within 30 s" in result.error.message
    text = stream.getvalue()
    assert "plugin 'blocks' has blocked the event loop for 31.0 s" in text
    assert "Synchronous hooks must not block" in text
    assert any(e.plugin == "blocks" and "did not answer" in e.outcome for e in events)


class _Late:
    """Plain hooks of each kind that answer 31 s after they start (on a clock the test moves)."""

    name = "blocks"

    def __init__(self, hook: str, clock: list[float]) -> None:
        self.hook, self.clock = hook, clock

    def _blocks(self, hook: str) -> None:
        if hook == self.hook:
            self.clock[0] += 31

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        self._blocks("dsh_tool_pre_execute")

    @hookimpl
    def dsh_tool_guard(self, execution):
        self._blocks("dsh_tool_guard")

    @hookimpl
    def dsh_tool_execute(self, execution, call_next):
        self._blocks("dsh_tool_execute")
        return call_next()

    @hookimpl
    def dsh_tool_post_execute(self, execution, result):
        self._blocks("dsh_tool_post_execute")


class _LateLinks(_Late):
    """The same, with pre- and post-execute as waterfall links that pass the call on."""

    @hookimpl
    def dsh_tool_pre_execute(self, execution, call_next):
        self._blocks("dsh_tool_pre_execute")
        return call_next()

    @hookimpl
    def dsh_tool_post_execute(self, execution, result, call_next):
        self._blocks("dsh_tool_post_execute")
        return call_next()


@pytest.mark.parametrize(
    ("kind", "hook"),
    [
        (_Late, "dsh_tool_pre_execute"),
        (_LateLinks, "dsh_tool_pre_execute"),
        (_Late, "dsh_tool_guard"),
        (_Late, "dsh_tool_execute"),
        (_Late, "dsh_tool_post_execute"),
        (_LateLinks, "dsh_tool_post_execute"),
    ],
)
async def test_a_sync_hook_that_answers_late_is_reported_even_if_the_thread_missed_it(
    make_host, monkeypatch, kind, hook
):
    """The watching thread looks a few times a second; a hook found late only when it returns
    is reported then, once per plugin and hook, with the same warning (the failure alone would
    not say that it held the loop), whichever path the call took."""
    clock = [0.0]
    real = time.monotonic
    for module in (_answers, _calling, _chain, _dispatch, _tail):
        monkeypatch.setattr(module, "_clock", lambda: real() + clock[0])
    stream = io.StringIO()
    host = make_host(kind(hook, clock), tools=[make_echo()])
    watchdog = host.registry._pipeline.watchdog
    watchdog.stream = stream
    watchdog.enter("warm-up", "-", "-")  # registered: from now on the calls time on `_clock`
    watchdog.leave()
    for _ in range(2):
        result = await host.call("echo", {"text": "x"})
        assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "blocks")
        assert f"blocks did not answer {hook} within 30 s" in result.error.message
    text = stream.getvalue()
    assert text.count("plugin 'blocks' has blocked the event loop for 31.0 s") == 1
    assert f'in its synchronous {hook} (tool "echo")' in text


def test_the_watchdog_reports_once_per_plugin_and_hook():
    stream = io.StringIO()
    watchdog = Watchdog(2.0, stream)
    watchdog.enter("p", "dsh_tool_guard", "bash")
    assert watchdog.check(watchdog.started + 1) is None
    assert watchdog.check(watchdog.started + 3) is not None
    assert watchdog.check(watchdog.started + 9) is None
    watchdog.leave()
    assert watchdog.check(watchdog.started + 99) is None
    assert stream.getvalue().count("\n") == 1


@pytest.mark.parametrize("key", ["hook_timeout", "observer_timeout", "approval_timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 0, True])
def test_timeouts_must_be_finite_and_positive(key, value):
    with pytest.raises(ConfigError) as info:
        Host(config={"host": {key: value}}, load_entrypoints=False)
    assert key in str(info.value)


async def test_an_observer_cut_off_is_reported_once_per_plugin(make_host, autojump_clock, capsys):
    events = []

    class Slow:
        name = "slow_audit"

        @hookimpl
        async def dsh_tool_result(self, execution, result):
            await trio.sleep_forever()

    host = make_host(Slow(), tools=[make_echo()])
    for _ in range(3):
        await host.call("echo", {"text": "x"}, trace=events.append)
    err = capsys.readouterr().err
    assert err.count("observer 'slow_audit' (dsh_tool_result) did not finish") == 1
    assert "observer_timeout = 10 s and was cut off" in err
    cut = [e for e in events if e.stage == "dsh_tool_result"]
    assert len(cut) == 3
    assert all("cut off" in e.outcome for e in cut)


# -- unknown tools and attribution -----------------------------------------------------------


async def test_an_ask_for_an_unknown_tool_is_never_put_to_an_approver(make_host):
    asked = []

    class Asks:
        name = "asks"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask("who knows")

    class Approver:
        name = "approver"

        @hookimpl
        def dsh_tool_approve(self, request):
            asked.append(request.tool)

    host = make_host(Asks(), Approver(), tools=[make_echo()])
    result = await host.call("nonexistent", {})
    assert result.code == "UNKNOWN_TOOL"
    assert asked == []
    await host.call("echo", {"text": "x"})
    assert asked == ["echo"]


async def test_pre_execute_still_sees_and_may_deny_an_unknown_tool(make_host):
    class Denies:
        name = "denies"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("not that")

    result = await make_host(Denies()).call("nonexistent", {})
    assert (result.code, result.decided_by) == ("DENIED", "denies")


async def test_a_link_passing_an_ask_on_keeps_the_askers_name_reason_and_detail(make_host):
    events = []

    class Link:
        name = "link"

        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            return await call_next()

    class Asker:
        name = "asker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Ask("the rule says so", detail="rule echo in dsh.toml")

    result = await make_host(Link(), Asker(), tools=[make_echo()]).call(
        "echo", {"text": "x"}, trace=events.append
    )
    assert (result.code, result.decided_by) == ("DENIED", "asker")
    assert result.decision_detail == "rule echo in dsh.toml"
    assert "Reason for asking: the rule says so" in result.error.message
    link = [e.outcome for e in events if e.plugin == "link"]
    assert link == ["passed on ask: the rule says so from asker"]


async def test_a_body_decided_by_with_a_detail_is_split(make_host):
    from dsh_host import ToolExecutionResult, ToolFailure, define_tool

    class Sandbox:
        name = "sandbox"

        @hookimpl  # a plugin must implement a hook to be registered
        def dsh_host_started(self):
            pass

    async def body(args):
        return ToolExecutionResult(
            content="no", is_error=True, error=ToolFailure("no", "SANDBOX_DENIED"),
            decided_by="sandbox: read-only mode",
        )  # fmt: skip

    tool = define_tool(name="w", description="", parameters={}, execute=body)
    result = await make_host(Sandbox(), tools=[tool]).call("w", {})
    assert (result.decided_by, result.decision_detail) == ("sandbox", "read-only mode")


async def test_a_dry_run_names_who_allowed(make_host):
    class Rules:
        name = "rules"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Allow(detail="rule echo")

    host = make_host(Rules(), tools=[make_echo()])
    input = ToolExecutionInput(call_id="a", name="echo", arguments={"text": "x"})
    prepared = await host.registry._pipeline.prepare(input, None, dry_run=True)
    assert (prepared.result, prepared.allowed_by, prepared.detail) == (None, "rules", "rule echo")


async def test_path_policy_and_presenters_contain_base_exceptions(make_host):
    class Broken:
        name = "broken"

        @hookimpl
        def dsh_path_denied(self, execution, path, access):
            raise SystemExit(1)

        @hookimpl
        def dsh_present_call(self, tool, args):
            raise KeyboardInterrupt

    host = make_host(Broken(), tools=[make_echo()])
    from dsh_host import ToolExecution

    execution = ToolExecution(call_id="c", name="echo", arguments={})
    assert "withheld" in host.path_denied(execution, "/x", "read")
    assert host.present_call("echo", {"text": "x"}).title == "echo"


def test_a_plugin_raising_base_exceptions_at_start_is_dropped():
    class Exits:
        name = "exits"

        @hookimpl
        def dsh_register_tools(self, register):
            raise SystemExit(1)

    host = Host(plugins=[Exits()], load_entrypoints=False)
    (row,) = host.plugins()
    assert row.status.value == "failed"
    assert "SystemExit" in row.error
