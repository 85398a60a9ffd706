"""How stage D ended, as observers read it, and calls cut short: a trio caller's cancellation
(one observer round, then the cancellation goes on) and the caller's signal (hook stages that
wait are cut short, not left to their timeouts)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from dsh_host import (
    AbortSignal,
    ApprovalOutcome,
    Ask,
    ToolExecutionInput,
    ToolExecutionResult,
    define_tool,
    hookimpl,
)
from tests.conftest import make_echo


@attrs.define
class Observer:
    """Every result, with how stage D ended (`ToolExecution.approval`, `.approver`)."""

    name: str = "observer"
    seen: list[tuple[str, str | None, ApprovalOutcome | None, str | None]] = attrs.Factory(list)

    @hookimpl
    def dsh_tool_result(self, execution, result: ToolExecutionResult):
        # read so that a failing observer cannot hide what the cancellation tests check
        approval = getattr(execution, "approval", None)
        approver = getattr(execution, "approver", None)
        self.seen.append((execution.call_id, result.code, approval, approver))


class AskAlways:
    name = "asker"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Ask("a person should look")


class Approver:
    """Answers by the call's text: an outcome, ``crash``, ``honour`` (waits for the signal,
    then says cancelled), ``ignore`` (waits forever, whatever the signal), ``none``."""

    name = "approver"

    @hookimpl
    async def dsh_tool_approve(self, request):
        text = request.execution.arguments.get("text")
        if text == "crash":
            raise ValueError("approver bug")
        if text == "honour":
            await request.signal.wait()
            return ApprovalOutcome.CANCELLED
        if text == "ignore":
            await trio.sleep_forever()
        if text == "none":
            return None
        return ApprovalOutcome(text)


async def forever(args: Any) -> str:
    await trio.sleep_forever()
    return "never"


FOREVER = define_tool(name="forever", description="waits", parameters={}, execute=forever)


# -- how stage D ended -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "text", "asked", "seen"),
    [
        ("echo", "allowed-once", False, (None, None, None)),  # no Ask: not asked
        ("nosuch", "allowed-once", True, ("UNKNOWN_TOOL", None, None)),  # never put to one
        ("echo", "allowed-once", True, (None, ApprovalOutcome.ALLOWED_ONCE, "approver")),
        ("echo", "rejected", True, ("DENIED", ApprovalOutcome.REJECTED, "approver")),
        ("echo", "cancelled", True, ("DENIED", ApprovalOutcome.CANCELLED, "approver")),
        ("echo", "none", True, ("DENIED", ApprovalOutcome.UNAVAILABLE, None)),
        ("echo", "crash", True, ("PLUGIN_FAILED", None, None)),  # asking ended without one
    ],
)
async def test_observers_read_how_the_approval_ended(make_host, tool, text, asked, seen):
    observer = Observer()
    plugins = [observer, Approver()] + ([AskAlways()] if asked else [])
    host = make_host(*plugins, tools=[make_echo()])
    await host.call(tool, {"text": text}, call_id="c")
    assert observer.seen == [("c", *seen)]


async def test_an_approval_the_signal_ended_is_cancelled(make_host, autojump_clock):
    observer = Observer()
    host = make_host(observer, Approver(), AskAlways(), tools=[make_echo()])
    signal = AbortSignal()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: host.call("echo", {"text": "honour"}, call_id="c", signal=signal)
        )
        await trio.sleep(1)
        signal.abort("Esc")
    assert observer.seen == [
        ("c", "ABORTED_BEFORE_DISPATCH", ApprovalOutcome.CANCELLED, "approver")
    ]


# -- a trio caller's cancellation --------------------------------------------------------------


class SlowGuard:
    name = "slow-guard"

    @hookimpl
    async def dsh_tool_guard(self, execution):
        await trio.sleep_forever()


class SlowPost:
    name = "slow-post"

    @hookimpl
    async def dsh_tool_post_execute(self, execution, result):
        await trio.sleep_forever()


@pytest.mark.parametrize(
    ("where", "tool", "plugins", "seen"),
    [
        ("body", "forever", [], ("ABORTED", None, None)),
        ("approval", "echo", [AskAlways(), Approver()], ("ABORTED_BEFORE_DISPATCH",
                                                          ApprovalOutcome.CANCELLED, None)),
        ("guard", "echo", [SlowGuard()], ("ABORTED_BEFORE_DISPATCH", None, None)),
        ("post-execute", "echo", [SlowPost()], ("ABORTED", None, None)),
    ],
)  # fmt: skip
async def test_a_cancelled_trio_caller_still_gets_its_observer_round(
    make_host, autojump_clock, where, tool, plugins, seen
):
    observer = Observer()
    host = make_host(observer, *plugins, tools=[make_echo(), FOREVER])
    with trio.move_on_after(5) as scope:
        await host.call(tool, {"text": "ignore"} if tool == "echo" else {}, call_id=where)
    assert scope.cancelled_caught  # the cancellation went on to the caller
    assert observer.seen == [(where, *seen)]  # and the call had its one observer round
    assert trio.current_time() == pytest.approx(5)


async def test_a_body_never_starts_after_its_caller_was_cancelled_while_it_was_asked(
    make_host, autojump_clock
):
    # The approver cancelled the caller, then allowed at once: nothing checked the cancellation
    # between the gate and the body, so an async body ran up to its first await.
    ran: list[str] = []
    scope = trio.CancelScope()

    class CancelsThenAllows:
        name = "cancels"

        @hookimpl
        async def dsh_tool_approve(self, request):
            await trio.sleep(0)  # a hook that waited
            scope.cancel()
            return ApprovalOutcome.ALLOWED_ONCE

    async def body(args: Any) -> str:
        ran.append("body")  # a side effect before the body's first await
        await trio.sleep(0)
        return "done"

    tool = define_tool(name="act", description="", parameters={}, execute=body)
    observer = Observer()
    host = make_host(observer, AskAlways(), CancelsThenAllows(), tools=[tool])
    with scope:
        await host.call("act", {}, call_id="c")
    assert scope.cancelled_caught
    assert ran == []
    assert observer.seen == [
        ("c", "ABORTED_BEFORE_DISPATCH", ApprovalOutcome.ALLOWED_ONCE, "cancels")
    ]


async def test_the_round_of_a_cancelled_call_is_bounded(make_host, autojump_clock):
    class Hangs:
        name = "hangs"

        @hookimpl
        async def dsh_tool_result(self, execution, result):
            await trio.sleep_forever()

    observer = Observer()
    host = make_host(observer, Hangs(), tools=[FOREVER], config={"host": {"observer_timeout": 3}})
    with trio.move_on_after(1):
        await host.call("forever", {}, call_id="c")
    assert observer.seen == [("c", "ABORTED", None, None)]
    assert trio.current_time() <= 1 + 2 * 3  # shielded, but not for ever


async def test_a_body_error_is_kept_when_post_execute_is_cancelled(make_host, autojump_clock):
    async def fails(args: Any) -> Any:
        raise RuntimeError("broke")

    tool = define_tool(name="fails", description="", parameters={}, execute=fails)
    observer = Observer()
    host = make_host(observer, SlowPost(), tools=[tool])
    with trio.move_on_after(1):
        await host.call("fails", {}, call_id="c")
    assert observer.seen == [("c", "TOOL_FAILED", None, None)]


# -- the caller's signal cuts waiting hook stages short --------------------------------------


class WaitsInPre:
    name = "waits"

    @hookimpl
    async def dsh_tool_pre_execute(self, execution):
        await trio.sleep_forever()


class WaitsInLink:
    """A waterfall link that begins on the caller's frame, opens a nursery and waits in it."""

    name = "waits"

    @hookimpl
    async def dsh_tool_pre_execute(self, execution, call_next):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
        return await call_next()


class WaitsInGuard:
    name = "waits"

    @hookimpl
    async def dsh_tool_guard(self, execution):
        await trio.sleep_forever()


class WaitsInApproval:
    """An approver that never looks at the signal."""

    name = "waits"

    @hookimpl
    async def dsh_tool_approve(self, request):
        await trio.sleep_forever()


@pytest.mark.parametrize(
    ("plugins", "approval"),
    [
        ([WaitsInPre()], None),
        ([WaitsInLink()], None),
        ([WaitsInGuard()], None),
        ([WaitsInApproval(), AskAlways()], ApprovalOutcome.CANCELLED),
    ],
    ids=["pre-execute", "waterfall-link", "guard", "approval"],
)
async def test_the_callers_signal_cuts_a_waiting_hook_short(
    make_host, autojump_clock, plugins, approval
):
    observer = Observer()
    host = make_host(observer, *plugins, tools=[make_echo()])
    signal = AbortSignal()
    results: list[ToolExecutionResult] = []

    async def call() -> None:
        results.append(await host.call("echo", {"text": "x"}, call_id="c", signal=signal))

    with trio.move_on_after(100):  # a hook that outlives its bound must not hang the test
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(1)
            signal.abort("the task was cancelled")
    assert trio.current_time() == pytest.approx(1)  # not its 30 s (or 900 s) bound
    assert [r.code for r in results] == ["ABORTED_BEFORE_DISPATCH"]
    assert observer.seen == [("c", "ABORTED_BEFORE_DISPATCH", approval, None)]


class WaitsInPost:
    name = "waits"

    @hookimpl
    async def dsh_tool_post_execute(self, execution, result):
        await trio.sleep_forever()


async def test_the_callers_signal_cuts_a_waiting_post_execute_hook_short(make_host, autojump_clock):
    observer = Observer()
    host = make_host(observer, WaitsInPost(), tools=[make_echo()])
    signal = AbortSignal()
    results: list[ToolExecutionResult] = []

    async def call() -> None:
        results.append(await host.call("echo", {"text": "x"}, call_id="c", signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.sleep(1)
        signal.abort("the task was cancelled")
    assert trio.current_time() == pytest.approx(1)  # not its 30 s bound
    assert [r.code for r in results] == ["ABORTED"]  # the body ran; its success is replaced
    assert observer.seen == [("c", "ABORTED", None, None)]


async def test_post_execute_of_an_aborted_call_still_runs(make_host, autojump_clock):
    seen = []

    class SlowPost:
        name = "slow-post"

        @hookimpl
        async def dsh_tool_post_execute(self, execution, result):
            await trio.sleep(1)
            seen.append(result.code)

    signal = AbortSignal()
    signal.abort()
    host = make_host(SlowPost(), tools=[FOREVER])
    result = await host.call("forever", {}, call_id="c", signal=signal)
    assert (result.code, seen) == ("ABORTED_BEFORE_DISPATCH", [])  # B: FINAL, no post-execute
    late = AbortSignal()

    class AbortsInBody:
        name = "aborter"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            late.abort()  # the call is aborted before post-execute begins
            return await call_next()

    host = make_host(SlowPost(), AbortsInBody(), tools=[make_echo()])
    result = await host.call("echo", {"text": "x"}, call_id="d", signal=late)
    assert seen == ["ABORTED_BEFORE_DISPATCH"]  # an abort before the stage does not cut it


# -- a batch whose trio caller is cancelled ----------------------------------------------------


async def waits(args: Any) -> str:
    if args["n"] == 1:  # settles at once, but after call 0: waits for its turn to be finalised
        return "done"
    await trio.sleep_forever()
    return "never"


async def test_every_started_call_of_a_cancelled_batch_gets_its_round(make_host, autojump_clock):
    class SlowGuard:
        name = "slow-guard"

        @hookimpl
        async def dsh_tool_guard(self, execution):
            if execution.arguments.get("n") == 2:  # its gate holds the batch's turn
                await trio.sleep_forever()

    pool = define_tool(
        name="pool",
        description="",
        parameters={"n": {"type": "integer"}},
        execute=waits,
        is_concurrency_safe=lambda args: True,
    )
    observer = Observer()
    host = make_host(observer, SlowGuard(), tools=[pool])
    inputs = [
        ToolExecutionInput(call_id=f"c{n}", name="pool", arguments={"n": n}) for n in range(4)
    ]
    with trio.move_on_after(1) as scope:
        await host.registry.execute_batch(inputs)
    assert scope.cancelled_caught
    # c0 in its body, c1 settled but not finalised (c0 is first), c2 in its gate; c3 never began
    assert sorted(observer.seen) == [
        ("c0", "ABORTED", None, None),
        ("c1", "ABORTED", None, None),
        ("c2", "ABORTED_BEFORE_DISPATCH", None, None),
    ]


async def test_a_body_never_starts_after_a_wrapper_outlived_its_callers_cancellation(
    make_host, autojump_clock
):
    # A wrapper waited where the caller's cancellation could not reach it (shielded, as a
    # thread is), then called call_next: the body ran and the call returned a success after
    # its caller's deadline.
    ran: list[str] = []

    class ShieldedWrapper:
        name = "shielded"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            return await call_next()

    async def body(args: Any) -> str:
        ran.append("body")
        return "done"

    tool = define_tool(name="act", description="", parameters={}, execute=body)
    observer = Observer()
    host = make_host(observer, ShieldedWrapper(), tools=[tool])
    with trio.move_on_after(0.5) as scope:
        await host.call("act", {}, call_id="c")
    assert scope.cancelled_caught
    assert ran == []
    assert [row[:2] for row in observer.seen] == [("c", "ABORTED")]
