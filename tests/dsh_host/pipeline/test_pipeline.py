"""The routing of CONTRACT §4: one test per row, plus the invariants every call keeps."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio

from dsh_host import (
    AbortSignal,
    Accept,
    ApprovalOutcome,
    Ask,
    Block,
    Deny,
    DshError,
    HookContext,
    Scope,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRestriction,
    define_tool,
    hookimpl,
)
from tests.conftest import make_echo


@attrs.define
class Recorder:
    """Observes every stage of every call."""

    name: str = "recorder"
    stages: list[str] = attrs.Factory(list)
    results: list[ToolExecutionResult] = attrs.Factory(list)

    @hookimpl(trylast=True)
    def dsh_tool_pre_execute(self, execution):
        self.stages.append("pre")

    @hookimpl(trylast=True)
    async def dsh_tool_execute(self, execution, call_next):
        self.stages.append("execute")
        return await call_next()

    @hookimpl(trylast=True)
    def dsh_tool_post_execute(self, execution, result):
        self.stages.append("post")

    @hookimpl
    def dsh_tool_result(self, execution, result):
        self.stages.append("result")
        self.results.append(result)


class Raises:
    """Raises in the one hook it is built for."""

    def __init__(self, hook: str) -> None:
        self.name = f"raises-in-{hook}"
        error = RuntimeError("boom")

        def pre(execution):
            raise error

        def approve(request):
            raise error

        def guard(execution):
            raise error

        async def execute(execution, call_next):
            raise error

        def post(execution, result):
            raise error

        impls = {
            "dsh_tool_pre_execute": pre,
            "dsh_tool_approve": approve,
            "dsh_tool_guard": guard,
            "dsh_tool_execute": execute,
            "dsh_tool_post_execute": post,
        }
        setattr(self, hook, hookimpl(impls[hook]))


class AskAlways:
    name = "asker"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Ask("a human should look")


class Approver:
    def __init__(self, outcome: Any, name: str = "approver") -> None:
        self.outcome = outcome
        self.name = name

    @hookimpl
    def dsh_tool_approve(self, request):
        return self.outcome


# -- stage failures are FINAL ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("hook", "stages"),
    [
        ("dsh_tool_pre_execute", ["result"]),
        ("dsh_tool_guard", ["pre", "result"]),
        ("dsh_tool_execute", ["pre", "result"]),
    ],
)
async def test_plugin_raising_in_a_gate_stage_is_final(make_host, hook, stages):
    recorder = Recorder()
    host = make_host(recorder, Raises(hook), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.is_error
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == f"raises-in-{hook}"
    assert result.error.message.startswith(  # then " (at FILE:LINE)", the plugin's line
        f"plugin 'raises-in-{hook}' failed in {hook}: RuntimeError: boom (at {__file__}:"
    )
    assert result.text == f"Error: {result.error.message}"
    assert recorder.stages == stages  # post-execute skipped, exactly one observer round


async def test_plugin_raising_in_approval_is_final(make_host):
    recorder = Recorder()
    host = make_host(recorder, AskAlways(), Raises("dsh_tool_approve"), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "PLUGIN_FAILED"
    assert "dsh_tool_approve" in result.error.message
    assert recorder.stages == ["result"]


async def test_plugin_raising_in_post_execute_replaces_the_result(make_host):
    recorder = Recorder()
    host = make_host(recorder, Raises("dsh_tool_post_execute"), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == "raises-in-dsh_tool_post_execute"
    assert recorder.stages == ["pre", "execute", "result"]


async def test_registry_guard_raising_is_final(make_host):
    recorder = Recorder()
    host = make_host(recorder, tools=[make_echo()])

    def broken(execution):
        raise ValueError("bad guard")

    host.registry.add_guard(broken, name="broken-guard")
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == "broken-guard"
    assert recorder.stages == ["pre", "result"]


async def test_plugin_returning_a_wrong_type_is_a_plugin_failure(make_host):
    class Wrong:
        name = "wrong"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return "yes please"

    result = await make_host(Wrong(), tools=[make_echo()]).call("echo", {"text": "hi"})
    assert result.code == "PLUGIN_FAILED"
    assert "expected Allow(), Deny(reason), Ask() or None" in result.error.message


# -- denials are POST ------------------------------------------------------------------------


async def test_pre_execute_deny_reaches_post_execute(make_host):
    class Denier:
        name = "denier"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("not today")

    recorder = Recorder()
    host = make_host(recorder, Denier(), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.to_json()["error"] == {"message": "not today", "code": "DENIED", "name": None}
    assert result.text == "Error: not today"
    assert result.decided_by == "denier"
    assert recorder.stages == ["post", "result"]  # the denier stopped the chain; post saw it


async def test_ask_with_no_approver_is_unavailable_and_names_the_asker(make_host):
    recorder = Recorder()
    host = make_host(recorder, AskAlways(), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert result.error.message == (
        'tool "echo" requires approval, but no approval channel is available. '
        "Reason for asking: a human should look"
    )
    assert result.decided_by == "asker"
    assert recorder.stages == ["post", "result"]


async def test_ask_rejected_names_the_approver(make_host):
    host = make_host(AskAlways(), Approver(ApprovalOutcome.REJECTED, "static"), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert result.decided_by == "static"
    assert result.error.message == 'tool "echo" was rejected by static'


async def test_ask_cancelled_is_a_denial(make_host):
    host = make_host(AskAlways(), Approver("cancelled"), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert result.error.message == 'approval for tool "echo" was cancelled'
    assert result.decided_by == "approver"


async def test_ask_allowed_once_runs_the_tool_and_guards_still_apply(make_host):
    host = make_host(AskAlways(), Approver(ApprovalOutcome.ALLOWED_ONCE), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert (result.text, result.is_error, result.decided_by) == ("hi", False, None)
    host.registry.add_guard(lambda execution: "guarded", name="late-guard")
    result = await host.call("echo", {"text": "hi"})
    assert (result.code, result.decided_by) == ("DENIED", "late-guard")


async def test_approver_sees_the_request(make_host):
    seen = []

    class Looker:
        name = "looker"

        @hookimpl
        def dsh_tool_approve(self, request):
            seen.append((request.tool, request.call_id, request.reason, request.asked_by))
            return ApprovalOutcome.ALLOWED_ONCE

    host = make_host(AskAlways(), Looker(), tools=[make_echo()])
    await host.call("echo", {"text": "hi"}, call_id="c1")
    assert seen == [("echo", "c1", "a human should look", "asker")]


async def test_guard_hook_denies_and_cannot_be_overridden_by_an_allow(make_host):
    from dsh_host import Allow

    class AllowAll:
        name = "allow-all"

        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution):
            return Allow()

    class Guard:
        name = "size-guard"

        @hookimpl
        def dsh_tool_guard(self, execution):
            return "too big" if len(execution.arguments["text"]) > 3 else None

    recorder = Recorder()
    host = make_host(recorder, AllowAll(), Guard(), tools=[make_echo()])
    assert (await host.call("echo", {"text": "ok"})).text == "ok"
    result = await host.call("echo", {"text": "much too long"})
    assert (result.code, result.decided_by, result.text) == (
        "DENIED",
        "size-guard",
        "Error: too big",
    )


async def test_scoped_guard_applies_to_descendants_only(make_host):
    host = make_host(tools=[make_echo()])
    parent = Scope("parent")
    child = Scope("child", parent)
    host.registry.add_guard(lambda e: "parent says no", parent, name="parent-guard")
    assert (await host.call("echo", {"text": "x"})).is_error is False
    assert (await host.call("echo", {"text": "x"}, scope=child)).decided_by == "parent-guard"
    assert (await host.call("echo", {"text": "x"}, scope=Scope("other"))).is_error is False


# -- dispatch failures are POST --------------------------------------------------------------


async def test_unknown_tool_reaches_post_execute(make_host):
    recorder = Recorder()
    result = await make_host(recorder).call("nope", {})
    assert result.to_json()["error"] == {
        "message": 'unknown tool "nope"',
        "code": "UNKNOWN_TOOL",
        "name": "ToolNotFoundError",
    }
    assert recorder.stages == ["pre", "execute", "post", "result"]


async def test_restricted_away_tool_is_unknown_in_that_scope(make_host):
    host = make_host(tools=[make_echo(), make_echo("other")])
    scope = Scope("agent")
    host.registry.restrict(ToolRestriction(deny=["echo"]), scope)
    result = await host.call("echo", {"text": "hi"}, scope=scope)
    assert result.code == "UNKNOWN_TOOL"
    assert (await host.call("echo", {"text": "hi"})).text == "hi"


async def test_body_raising_a_dsh_error_keeps_its_code(make_host):
    async def execute(args, ctx):
        raise DshError("disk full", "ENOSPC")

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    recorder = Recorder()
    result = await make_host(recorder, tools=[tool]).call("t", {})
    assert result.to_json()["error"] == {
        "message": "disk full",
        "code": "ENOSPC",
        "name": "DshError",
    }
    assert result.text == "Error: disk full"
    assert "post" in recorder.stages


async def test_body_raising_a_plain_exception_is_tool_failed(make_host):
    async def execute(args, ctx):
        raise KeyError("missing")

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(tools=[tool]).call("t", {})
    assert result.code == "TOOL_FAILED"
    assert result.error.message == "KeyError: 'missing'"
    assert result.error.name == "KeyError"


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", object(), float("nan"), {"a": float("inf")}])
async def test_result_that_is_not_json_safe_is_invalid_tool_output(make_host, value):
    async def execute(args, ctx):
        return value

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(tools=[tool]).call("t", {})
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert result.error.message.startswith('tool "t" returned invalid output: ')
    json.dumps(result.to_json())


def _cycle() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"text": float("nan")}, "arguments.text is nan"),
        ({"text": {1, 2}}, "arguments.text is a set"),
        (_cycle(), "arguments.self contains itself"),
        ({"text": b"x"}, "arguments.text is a bytes"),
        ({1: "x"}, "has key 1"),
    ],
)
async def test_arguments_that_are_not_json_safe_are_final_invalid_args(make_host, arguments, where):
    recorder = Recorder()
    result = await make_host(recorder, tools=[make_echo()]).call("echo", arguments)
    assert result.code == "INVALID_ARGS"
    assert where in result.error.message
    assert recorder.stages == ["result"]


async def test_invalid_arguments_list_every_violation_after_policy_saw_them(make_host):
    tool = define_tool(
        name="read",
        description="",
        parameters={
            "path": {"type": "string", "required": True},
            "limit": {"type": "integer"},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
        execute=lambda args: "x",
    )
    recorder = Recorder()
    result = await make_host(recorder, tools=[tool]).call("read", {"limit": 1.5, "mode": "c"})
    assert result.error.message == (
        'invalid arguments: missing required property "path"; "limit" must be an integer; '
        '"mode" must be one of ["a","b"]'
    )
    assert recorder.stages == ["pre", "execute", "post", "result"]


# -- cancellation ----------------------------------------------------------------------------


async def test_pre_aborted_signal_is_final_and_touches_no_policy(make_host):
    recorder = Recorder()
    signal = AbortSignal()
    signal.abort("stop")
    result = await make_host(recorder, tools=[make_echo()]).call(
        "echo", {"text": "x"}, signal=signal
    )
    assert result.to_json()["error"] == {
        "message": "tool call aborted before dispatch",
        "code": "ABORTED_BEFORE_DISPATCH",
        "name": "AbortError",
    }
    assert recorder.stages == ["result"]


async def test_abort_during_pre_execute_gives_post_aborted_before_dispatch(make_host):
    signal = AbortSignal()
    ran = []

    class AbortsThenAllows:
        name = "slow-policy"

        @hookimpl
        async def dsh_tool_pre_execute(self, execution):
            signal.abort()
            await trio.sleep(0)

    async def execute(args, ctx):
        ran.append(True)
        return "ran"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    recorder = Recorder()
    host = make_host(recorder, AbortsThenAllows(), tools=[tool])
    result = await host.call("t", {}, signal=signal)
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    assert ran == []
    # The abort cut the stage short at its next wait: the later pre-execute hook never ran.
    assert recorder.stages == ["post", "result"]


async def test_deny_wins_over_an_abort_that_happened_meanwhile(make_host):
    signal = AbortSignal()

    class AbortsThenDenies:
        name = "deny-late"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            signal.abort()
            return Deny("policy denied the call")

    result = await make_host(AbortsThenDenies(), tools=[make_echo()]).call(
        "echo", {"text": "x"}, signal=signal
    )
    assert (result.code, result.error.message) == ("DENIED", "policy denied the call")


async def test_abort_while_approval_is_cancelled_is_aborted_before_dispatch(make_host):
    signal = AbortSignal()

    class CancellingApprover:
        name = "tty"

        @hookimpl
        def dsh_tool_approve(self, request):
            signal.abort()
            return ApprovalOutcome.CANCELLED

    host = make_host(AskAlways(), CancellingApprover(), tools=[make_echo()])
    result = await host.call("echo", {"text": "x"}, signal=signal)
    assert result.code == "ABORTED_BEFORE_DISPATCH"


async def test_abort_in_a_wrapper_before_call_next_does_not_run_the_body(make_host):
    signal = AbortSignal()
    ran = []

    class Wrapper:
        name = "wrapper"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            signal.abort()
            return await call_next()

    async def execute(args, ctx):
        ran.append(True)
        return "ran"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(Wrapper(), tools=[tool]).call("t", {}, signal=signal)
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    assert ran == []


async def test_abort_during_the_body_cancels_it_and_awaits_its_cleanup(make_host):
    signal = AbortSignal()
    events = []

    async def execute(args, ctx):
        ctx.defer_context("started")
        try:
            signal.abort("user pressed Esc")
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0)
                events.append("cleaned up")

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    recorder = Recorder()
    result = await make_host(recorder, tools=[tool]).call("t", {}, signal=signal)
    assert result.to_json()["error"]["code"] == "ABORTED"
    assert result.text == "Error: tool call aborted"
    assert events == ["cleaned up"]
    assert [c.source for c in result.additional_contexts] == ["t"]
    assert recorder.stages == ["pre", "execute", "post", "result"]


async def test_abort_replaces_only_successes(make_host):
    signal = AbortSignal()

    async def execute(args, ctx):
        signal.abort()
        raise DshError("tool failed", "TOOL_FAILURE")

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(tools=[tool]).call("t", {}, signal=signal)
    assert result.code == "TOOL_FAILURE"


async def test_abort_during_post_execute_replaces_a_success_keeping_contexts(make_host):
    signal = AbortSignal()

    class Post:
        name = "post"

        @hookimpl
        async def dsh_tool_post_execute(self, execution, result, call_next):
            await call_next()
            signal.abort()
            return Accept(additional_contexts=[HookContext("from post", "post")])

    result = await make_host(Post(), tools=[make_echo()]).call("echo", {"text": "x"}, signal=signal)
    assert result.code == "ABORTED"
    assert [c.source for c in result.additional_contexts] == ["post"]


class Deadline:
    """A minimal timeout wrapper: installs a deadline signal for the delegated lifetime."""

    name = "deadline"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @hookimpl
    async def dsh_tool_execute(self, execution, call_next):
        deadline = AbortSignal()
        async with trio.open_nursery() as nursery:

            async def fire():
                await trio.sleep(self.seconds)
                deadline.abort("deadline")

            nursery.start_soon(fire)
            result = await call_next(signal=deadline)
            nursery.cancel_scope.cancel()
        if deadline.aborted and not execution.signal.aborted:
            from dsh_host._model._outcomes import failure

            return failure(f"tool call timed out after {self.seconds}s", "TOOL_TIMEOUT")
        return result


async def test_hanging_body_under_a_wrapper_deadline_times_out_on_time(make_host, autojump_clock):
    async def execute(args, ctx):
        await trio.sleep_forever()

    tool = define_tool(name="hang", description="", parameters={}, execute=execute)
    host = make_host(Deadline(5.0), tools=[tool])
    started = trio.current_time()
    result = await host.call("hang", {})
    assert result.code == "TOOL_TIMEOUT"
    assert result.decided_by == "deadline"
    assert trio.current_time() - started == pytest.approx(5.0)


async def test_sync_body_that_never_returns_is_reported_on_time(make_host, autojump_clock):
    import threading

    release = threading.Event()

    def execute(args):
        release.wait(10)
        return "late"

    tool = define_tool(name="blocking", description="", parameters={}, execute=execute)
    host = make_host(Deadline(1.0), tools=[tool])
    result = await host.call("blocking", {})
    release.set()  # let the abandoned worker thread finish
    assert result.code == "TOOL_TIMEOUT"


async def test_wrapper_signal_is_fused_not_shared(make_host):
    seen = {}
    caller = AbortSignal()

    class Swap:
        name = "swap"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            seen["wrapper_initial"] = execution.signal
            seen["replacement"] = replacement = AbortSignal()
            return await call_next(signal=replacement)

    async def execute(args, ctx):
        seen["body"] = ctx.signal
        caller.abort()
        return "x"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(Swap(), tools=[tool]).call("t", {}, signal=caller)
    assert seen["wrapper_initial"] is caller
    assert seen["body"] is not caller
    assert seen["body"] is not seen["replacement"]
    assert seen["body"].aborted
    assert not seen["replacement"].aborted
    assert result.code == "ABORTED"


# -- post-execute decisions and contexts -----------------------------------------------------


async def test_contexts_are_ordered_body_wrapper_post(make_host):
    class Wrapper:
        name = "wrapper"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            result = await call_next()
            contexts = (*result.additional_contexts, HookContext("w", "wrapper"))
            return attrs.evolve(result, additional_contexts=contexts)

    class Post:
        name = "post"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(additional_contexts=[HookContext("p", "post")])

    async def execute(args, ctx):
        ctx.defer_context("one", source="nested-1")
        ctx.defer_context(HookContext("two", "nested-2"))
        return "ok"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(Wrapper(), Post(), tools=[tool]).call("t", {})
    assert [c.source for c in result.additional_contexts] == [
        "nested-1",
        "nested-2",
        "wrapper",
        "post",
    ]
    assert result.decided_by is None  # contexts alone change nothing a user must be told about


async def test_block_turns_the_result_into_an_error_and_drops_earlier_contexts(make_host):
    class Blocker:
        name = "blocker"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Block("output rejected: try again", [HookContext("why", "blocker")])

    async def execute(args, ctx):
        ctx.defer_context("nested")
        return "secret"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    result = await make_host(Blocker(), tools=[tool]).call("t", {})
    assert result.to_json() == {
        "content": [{"type": "text", "text": "output rejected: try again"}],
        "is_error": True,
        "error": {"message": "output rejected: try again", "code": "BLOCKED", "name": None},
        "additional_contexts": [
            {"content": [{"type": "text", "text": "why"}], "source": "blocker"}
        ],
        "meta": None,
        "decided_by": "blocker",
        "decision_detail": None,
    }


async def test_accept_with_content_replaces_it_and_names_the_plugin(make_host):
    class Redactor:
        name = "redactor"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(content="[redacted]")

    result = await make_host(Redactor(), tools=[make_echo()]).call("echo", {"text": "pw"})
    assert (result.text, result.is_error, result.decided_by) == ("[redacted]", False, "redactor")


async def test_waterfall_link_sees_the_downstream_decision_and_may_override_it(make_host):
    calls = []

    class Outer:
        name = "outer"

        @hookimpl(tryfirst=True)
        async def dsh_tool_pre_execute(self, execution, call_next):
            decision = await call_next()
            calls.append(decision)
            if isinstance(decision, Deny) and execution.arguments["text"] == "override":
                return None  # keep the inner decision
            return decision

    class Inner:
        name = "inner"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("inner says no")

    host = make_host(Inner(), Outer(), tools=[make_echo()])
    result = await host.call("echo", {"text": "override"})
    assert (result.code, result.decided_by) == ("DENIED", "inner")
    assert calls == [Deny("inner says no")]


async def test_firstresult_order_is_tryfirst_then_last_registered(make_host):
    def denier(name):
        class D:
            @hookimpl
            def dsh_tool_pre_execute(self, execution):
                return Deny(name)

        d = D()
        d.name = name
        return d

    host = make_host(denier("first"), denier("second"), tools=[make_echo()])
    assert (await host.call("echo", {"text": "x"})).decided_by == "second"


# -- observers -------------------------------------------------------------------------------


async def test_observers_are_isolated_and_see_the_returned_object(
    make_host, caplog, autojump_clock
):
    seen = []

    class Broken:
        name = "broken"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            raise RuntimeError("observer broke")

    class Hangs:
        name = "hangs"

        @hookimpl
        async def dsh_tool_result(self, execution, result):
            await trio.sleep_forever()

    class Good:
        name = "good"

        @hookimpl(trylast=True)
        def dsh_tool_result(self, execution, result):
            seen.append(result)

    host = make_host(Good(), Broken(), Hangs(), tools=[make_echo()])
    result = await host.call("echo", {"text": "hi"})
    assert seen == [result]
    assert seen[0] is result
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "observer 'broken' failed: raised RuntimeError: observer broke" in messages
    assert "observer 'hangs' (dsh_tool_result) did not finish within" in messages
    assert "observer_timeout = 10 s and was cut off" in messages


async def test_every_call_gets_exactly_one_result_notification(make_host):
    recorder = Recorder()
    host = make_host(recorder, AskAlways(), tools=[make_echo()])
    for args in ({"text": "x"}, {"text": float("nan")}, {}):
        await host.call("echo", args)
    await host.call("missing", {})
    assert recorder.stages.count("result") == 4


# -- snapshots and freezing ------------------------------------------------------------------


async def test_arguments_are_snapshotted_once_and_frozen(make_host):
    seen = {}

    class Looker:
        name = "looker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            seen["pre"] = execution.arguments

    async def execute(args, ctx):
        seen["body"] = args
        with pytest.raises(TypeError):
            args["items"] = []
        return "ok"

    tool = define_tool(
        name="t", description="", parameters={}, execute=execute, strict_arguments=False
    )
    original = {"items": [1, {"a": 2}]}
    await make_host(Looker(), tools=[tool]).call("t", original)
    assert seen["pre"] is seen["body"]
    assert seen["body"] == {"items": (1, {"a": 2})}
    original["items"].append(3)
    assert seen["body"]["items"] == (1, {"a": 2})
    with pytest.raises(TypeError):
        seen["body"]["items"][1]["a"] = 5


async def test_results_are_frozen(make_host):
    result = await make_host(tools=[make_echo()]).call("echo", {"text": "hi"})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.is_error = True  # type: ignore[misc]
    assert isinstance(result.content, tuple)


async def test_execute_input_with_execution_fields(make_host):
    host = make_host(tools=[make_echo()])
    input = ToolExecutionInput(call_id="c9", name="echo", arguments={"text": "x"})
    assert (await host.registry.execute(input)).text == "x"


async def test_decided_by_is_the_plugin_and_the_detail_has_its_own_field(make_host):
    class Rules:
        name = "permissions"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("rm is not allowed", detail="rule bash(rm:*) in dsh.toml")

    result = await make_host(Rules(), tools=[make_echo()]).call("echo", {"text": "x"})
    assert result.decided_by == "permissions"
    assert result.decision_detail == "rule bash(rm:*) in dsh.toml"
    assert result.error.message == "rm is not allowed"


async def test_link_that_only_adds_contexts_keeps_the_deciders_attribution(make_host):
    class Reminder:
        name = "reminder"

        @hookimpl(tryfirst=True)
        async def dsh_tool_post_execute(self, execution, result, call_next):
            decision = await call_next()
            contexts = (*decision.additional_contexts, HookContext("careful", "reminder"))
            return attrs.evolve(decision, additional_contexts=contexts)

    class Blocker:
        name = "blocker"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Block("withheld", detail="secret scanner")

    result = await make_host(Blocker(), Reminder(), tools=[make_echo()]).call("echo", {"text": "x"})
    assert result.code == "BLOCKED"
    assert (result.decided_by, result.decision_detail) == ("blocker", "secret scanner")
    assert [c.source for c in result.additional_contexts] == ["reminder"]


async def test_trace_shows_every_plugin_consulted_including_failures(make_host):
    events = []

    class Observer:
        name = "observer"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            raise RuntimeError("observer bug")

    host = make_host(AskAlways(), Observer(), tools=[make_echo()])
    await host.call("echo", {"text": "x"}, call_id="c1", trace=events.append)
    seen = [(e.call_id, e.stage, e.plugin, e.outcome) for e in events]
    assert ("c1", "dsh_tool_pre_execute", "asker", "ask: a human should look") in seen
    assert ("c1", "dsh_tool_approve", None, "unavailable: no approver answered") in seen
    assert (
        "c1",
        "dsh_tool_result",
        "observer",
        "raised RuntimeError: observer bug (contained)",
    ) in seen

    events.clear()
    host = make_host(Raises("dsh_tool_pre_execute"), tools=[make_echo()])
    host.registry.add_guard(lambda e: None, name="quiet-guard")
    await host.call("echo", {"text": "x"}, call_id="c2", trace=events.append)
    assert [(e.stage, e.plugin, e.outcome) for e in events] == [
        ("dsh_tool_pre_execute", "raises-in-dsh_tool_pre_execute", "raised RuntimeError: boom")
    ]
    events.clear()
    await make_host(tools=[make_echo()]).call(
        "echo", {"text": "x"}, call_id="c3", trace=events.append
    )
    host = make_host(tools=[make_echo()])
    host.registry.add_guard(lambda e: "no", name="strict-guard")
    await host.call("echo", {"text": "x"}, call_id="c4", trace=events.append)
    assert ("c4", "guard", "strict-guard", "deny: no") in [
        (e.call_id, e.stage, e.plugin, e.outcome) for e in events
    ]
    assert all(e.seconds >= 0 for e in events)


async def test_the_body_context_exposes_the_calls_identity(make_host):
    seen = {}

    def execute(args, ctx):
        seen.update(token=ctx.token, parent=ctx.parent, execution=ctx.execution)
        return "ok"

    tool = define_tool(name="t", description="", parameters={}, execute=execute)
    await make_host(tools=[tool]).call("t", {})
    assert seen["token"] is seen["execution"].token
    assert seen["parent"] is None


async def test_an_unknown_tools_name_is_repeated_escaped_and_cut(make_host) -> None:
    """A model's name for a tool nobody has comes back escaped and at most 100 characters long,
    the rest counted: a 100 KB name once came back as a 100 KB error."""
    host = make_host()
    result = await host.call("x" * 100_000 + "\x1b[2J", {})
    assert result.error is not None
    assert result.error.code == "UNKNOWN_TOOL"
    assert result.error.message == 'unknown tool "' + "x" * 100 + '… (100,004 characters)"'
    short = await host.call("no\x1bpe", {})
    assert short.error is not None
    assert short.error.message == 'unknown tool "no\\x1bpe"'


async def test_invalid_arguments_are_reported_escaped_cut_and_counted(make_host) -> None:
    """Violations repeat the model's keys: each is escaped and cut, and the message lists 20 and
    counts the rest (5,000 undeclared keys made a 340 KB message; a key's escape sequence
    reached the result raw)."""
    host = make_host(tools=(make_echo(strict_arguments=True),))
    many = await host.call("echo", {"text": "a", **{f"k{i}": 1 for i in range(5000)}})
    assert many.error is not None
    assert many.error.code == "INVALID_ARGS"
    assert len(many.error.message) < 3000
    assert many.error.message.endswith("; and 4,980 more")
    odd = await host.call("echo", {"text": "a", "z\x1b[2J" + "y" * 1000: 1})
    assert odd.error is not None
    assert odd.error.message.startswith('invalid arguments: "z\\x1b[2Jyyy')
    assert "(1,0" in odd.error.message
    assert odd.error.message.isprintable()
