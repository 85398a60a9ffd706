"""`execute_batch`: rolling pool, exclusive barriers, model order, abort."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dsh_host import (
    AbortSignal,
    Accept,
    HookContext,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)


def call(i, name, **arguments):
    return ToolExecutionInput(call_id=f"c{i}", name=name, arguments=arguments)


def make_tools(log, *, events=None):
    async def read(args, ctx):
        log.append(f"start:{args['n']}")
        if events is not None:
            await events[args["n"]].wait()
        else:
            await trio.sleep(10 - args["n"])  # later calls settle first
        log.append(f"end:{args['n']}")
        ctx.defer_context(f"ctx{args['n']}")
        return f"read {args['n']}"

    async def write(args, ctx):
        log.append(f"write:{args['n']}")
        return f"wrote {args['n']}"

    params = {"n": {"type": "integer", "required": True}}
    return [
        define_tool(
            name="read",
            description="",
            parameters=params,
            execute=read,
            is_concurrency_safe=lambda a: True,
        ),
        define_tool(name="write", description="", parameters=params, execute=write),
    ]


async def test_results_and_contexts_come_back_in_model_order(autojump_clock):
    log = []
    registry = ToolRegistry()
    for t in make_tools(log):
        registry.register(t)
    results = await registry.execute_batch([call(i, "read", n=i) for i in range(4)])
    assert [r.text for r in results] == ["read 0", "read 1", "read 2", "read 3"]
    assert [r.additional_contexts[0].content[0].text for r in results] == [
        "ctx0",
        "ctx1",
        "ctx2",
        "ctx3",
    ]
    assert log[:4] == ["start:0", "start:1", "start:2", "start:3"]  # all overlapped
    assert log[4:] == ["end:3", "end:2", "end:1", "end:0"]  # settled in reverse


async def test_exclusive_call_is_a_barrier(autojump_clock):
    log = []
    registry = ToolRegistry()
    for t in make_tools(log):
        registry.register(t)
    inputs = [
        call(0, "read", n=0),
        call(1, "read", n=1),
        call(2, "write", n=2),
        call(3, "read", n=3),
    ]
    results = await registry.execute_batch(inputs)
    assert log == ["start:0", "start:1", "end:1", "end:0", "write:2", "start:3", "end:3"]
    assert [r.text for r in results] == ["read 0", "read 1", "wrote 2", "read 3"]


async def test_pool_is_capped_and_replenished(autojump_clock):
    log = []
    registry = ToolRegistry()
    for t in make_tools(log):
        registry.register(t)
    await registry.execute_batch([call(i, "read", n=i) for i in range(3)], max_parallel=2)
    assert log[:2] == ["start:0", "start:1"]
    assert log.index("start:2") > log.index("end:1")


async def test_policy_and_post_execute_run_in_model_order():
    log = []
    events = [trio.Event() for _ in range(3)]

    class Policy:
        name = "policy"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            log.append(f"pre:{execution.call_id}")

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            log.append(f"post:{execution.call_id}")
            return Accept(additional_contexts=[HookContext(execution.call_id, "policy")])

    from dsh_host import hookspecs
    from dsh_host._registry._hooks import HookRelay, make_plugin_manager

    pm = make_plugin_manager(hookspecs)
    pm.register(Policy(), name="policy")
    registry = ToolRegistry(hooks=HookRelay(pm))
    for t in make_tools(log, events=events):
        registry.register(t)

    async with trio.open_nursery() as nursery:
        results = []

        async def run():
            results.extend(await registry.execute_batch([call(i, "read", n=i) for i in range(3)]))

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        for event in reversed(events):
            event.set()
            await trio.testing.wait_all_tasks_blocked()
    assert [x for x in log if x.startswith("pre")] == ["pre:c0", "pre:c1", "pre:c2"]
    assert [x for x in log if x.startswith("post")] == ["post:c0", "post:c1", "post:c2"]
    assert [r.additional_contexts[-1].source for r in results] == ["policy"] * 3


async def test_abort_stops_starting_calls_and_reports_the_rest(autojump_clock):
    log = []
    registry = ToolRegistry()
    signal = AbortSignal()

    async def write(args, ctx):
        log.append(args["n"])
        if args["n"] == 1:
            signal.abort("user pressed Esc")
        return "ok"

    registry.register(
        define_tool(
            name="write", description="", parameters={"n": {"type": "integer"}}, execute=write
        )
    )
    results = await registry.execute_batch([call(i, "write", n=i) for i in range(4)], signal=signal)
    assert log == [0, 1]
    assert [r.code for r in results] == [
        None,
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED_BEFORE_DISPATCH",
    ]


@pytest.mark.parametrize("waits", [False, True], ids=["instant", "parked"])
async def test_abort_during_a_parallel_body_reports_it_aborted_after_dispatch(
    autojump_clock, waits
):
    """A parallel call with no wrapper runs its body without `dispatch` around it: the end of
    `dispatch` (an aborted signal after the body ran) is still applied."""
    signal = AbortSignal()

    async def read(args, ctx):
        if waits:
            await trio.sleep(1 + args["n"])  # each settles in its own turn
        if args["n"] == 1:
            signal.abort("user pressed Esc")
        return "ok"

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="read",
            description="",
            parameters={"n": {"type": "integer"}},
            execute=read,
            is_concurrency_safe=lambda a: True,
        )
    )
    results = await registry.execute_batch([call(i, "read", n=i) for i in range(3)], signal=signal)
    assert [r.code for r in results] == [
        None,
        "ABORTED",
        "ABORTED" if waits else "ABORTED_BEFORE_DISPATCH",  # parked: it had started already
    ]


async def test_a_parallel_body_naming_a_plugin_is_attributed_as_execute_does():
    from dsh_host import Host, ToolExecutionResult, ToolFailure

    class Named:
        name = "judge"

        @hookimpl  # a plugin must implement a hook to be registered
        def dsh_host_started(self):
            pass

    async def read(args, ctx):
        return ToolExecutionResult(
            content="no", is_error=True, error=ToolFailure("no", "DENIED"),
            decided_by="judge: said no",
        )  # fmt: skip

    host = Host(plugins=[Named()], load_entrypoints=False)
    host.registry.register(
        define_tool(
            name="read",
            description="",
            parameters={},
            execute=read,
            is_concurrency_safe=lambda a: True,
        )
    )
    inputs = [ToolExecutionInput(call_id=f"c{i}", name="read", arguments={}) for i in range(2)]
    batched = await host.registry.execute_batch(inputs)
    alone = await host.registry.execute(inputs[0])
    assert [(r.decided_by, r.decision_detail) for r in batched] == [("judge", "said no")] * 2
    assert (alone.decided_by, alone.decision_detail) == ("judge", "said no")


async def test_denied_and_unknown_calls_take_their_slot_in_order(autojump_clock):
    log = []
    registry = ToolRegistry()
    for t in make_tools(log):
        registry.register(t)
    results = await registry.execute_batch(
        [call(0, "read", n=0), call(1, "nope"), call(2, "read", n="x")]
    )
    assert [r.code for r in results] == [None, "UNKNOWN_TOOL", "INVALID_ARGS"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
async def test_max_parallel_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_parallel must be a positive integer"):
        await ToolRegistry().execute_batch([], max_parallel=bad)


def _nested(depth):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("policy", [False, True])
async def test_hostile_arguments_end_a_batched_call_as_they_end_execute(policy):
    """Arguments the batch cannot freeze (too deep, an oversized integer, a set, a cycle) end
    their call INVALID_ARGS with the very result `execute` gives, with policy hooks (the calls
    go through `prepare`) and without (they are admitted on the worker's frame); odd but valid
    text (a lone surrogate, control characters, a NUL) reaches the body unchanged."""
    from dsh_host import hookspecs
    from dsh_host._registry._hooks import HookRelay, make_plugin_manager

    seen: list = []

    class Policy:
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            seen.append(execution.call_id)

    async def echo(args):
        return args["text"] if isinstance(args.get("text"), str) else "other"

    cycle: list = []
    cycle.append(cycle)
    hostile = [
        {"text": _nested(600)},
        {"text": 10**5000},
        {"text": {1, 2}},
        {"text": cycle},
        {"text": "lone \udcff surrogate"},
        {"text": "bell \x07 nul \x00 escape \x1b[2J"},
    ]
    hooks = None
    if policy:
        pm = make_plugin_manager(hookspecs)
        pm.register(Policy(), name="policy")
        hooks = HookRelay(pm)
    registry = ToolRegistry(hooks=hooks)
    registry.register(
        define_tool(
            name="echo", description="", parameters={"text": {"type": "string"}}, execute=echo,
            is_concurrency_safe=lambda a: True,
        )
    )  # fmt: skip
    inputs = [
        ToolExecutionInput(call_id=f"c{i}", name="echo", arguments=arguments)
        for i, arguments in enumerate(hostile)
    ]
    batched = await registry.execute_batch(inputs)
    one_by_one = [await registry.execute(input) for input in inputs]
    assert [r.code for r in batched] == ["INVALID_ARGS"] * 4 + [None, None]
    assert batched == one_by_one
    assert batched[4].text == "lone \udcff surrogate"
    assert batched[5].text == "bell \x07 nul \x00 escape \x1b[2J"
    if policy:  # policy sees every call the pipeline could freeze, in model order, once each
        assert seen == ["c4", "c5", "c4", "c5"]
