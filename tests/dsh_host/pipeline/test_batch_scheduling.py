"""`execute_batch`'s scheduling: a few workers instead of a task per call, and every ordering,
cap, barrier, abort and cancellation rule kept under hostile schedules."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from dsh_host import (
    AbortSignal,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
    hookspecs,
)
from dsh_host._registry._hooks import HookRelay, make_plugin_manager
from tests.conftest import soak_size


class Spawns(trio.abc.Instrument):
    """Counts the tasks trio starts while installed."""

    def __init__(self) -> None:
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


class Bodies:
    """What the bodies did: how many ran at once, in what order they started and ended."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.log: list[str] = []
        self.exclusive_running = False
        self.overlapped_exclusive = False

    def enter(self, name: str, exclusive: bool = False) -> None:
        if self.exclusive_running or (exclusive and self.running):
            self.overlapped_exclusive = True
        self.running += 1
        self.most = max(self.most, self.running)
        self.exclusive_running = exclusive
        self.log.append(f"start:{name}")

    def leave(self, name: str) -> None:
        self.running -= 1
        self.exclusive_running = False
        self.log.append(f"end:{name}")


def registry_with(bodies: Bodies, *plugins: object) -> ToolRegistry:
    """``read`` (concurrency-safe, sleeps ``delay`` seconds; 0 means it never suspends) and
    ``write`` (exclusive, same), both recording into *bodies*."""
    pm = make_plugin_manager(hookspecs)
    for plugin in plugins:
        pm.register(plugin, name=type(plugin).__name__.lower())
    registry = ToolRegistry(hooks=HookRelay(pm))

    def make(exclusive: bool) -> Any:
        async def body(args: Any, ctx: Any) -> str:
            name = ctx.execution.call_id
            bodies.enter(name, exclusive)
            try:
                if args["delay"]:
                    await trio.sleep(args["delay"])
            finally:
                bodies.leave(name)
            return name

        return body

    params = {"delay": {"type": "number", "required": True}}
    registry.register(
        define_tool(
            name="read",
            description="",
            parameters=params,
            execute=make(False),
            is_concurrency_safe=lambda a: True,
        )
    )
    registry.register(
        define_tool(name="write", description="", parameters=params, execute=make(True))
    )
    return registry


def calls(spec: list[tuple[str, float]]) -> list[ToolExecutionInput]:
    return [
        ToolExecutionInput(call_id=f"c{i}", name=name, arguments={"delay": delay})
        for i, (name, delay) in enumerate(spec)
    ]


async def counted(registry: ToolRegistry, inputs: list[Any], **kwargs: Any) -> tuple[Any, int]:
    spawns = Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        results = await registry.execute_batch(inputs, **kwargs)
    finally:
        trio.lowlevel.remove_instrument(spawns)
    return results, spawns.count


# -- tasks: a few workers, not one per call --------------------------------------------------------


async def test_a_thousand_parallel_calls_use_at_most_max_parallel_plus_one_extra_tasks(
    autojump_clock,
):
    bodies = Bodies()
    registry = registry_with(bodies)
    rng = random.Random(11)
    inputs = calls([("read", rng.choice([1, 2, 3])) for _ in range(1000)])
    results, spawned = await counted(registry, inputs, max_parallel=8)
    assert [r.text for r in results] == [f"c{i}" for i in range(1000)]
    assert spawned <= 8 + 1  # the caller's task is a worker too
    assert bodies.most == 8  # and the pool is kept full


async def test_calls_that_never_suspend_start_no_task_at_all():
    bodies = Bodies()
    registry = registry_with(bodies)
    results, spawned = await counted(registry, calls([("read", 0)] * 500), max_parallel=10)
    assert [r.text for r in results] == [f"c{i}" for i in range(500)]
    assert spawned == 0


async def test_at_most_max_parallel_bodies_overlap(autojump_clock):
    for max_parallel in (1, 2, 5):
        bodies = Bodies()
        registry = registry_with(bodies)
        await registry.execute_batch(calls([("read", 1)] * 20), max_parallel=max_parallel)
        assert bodies.most == max_parallel


async def test_results_come_back_in_model_order_when_later_calls_finish_first(autojump_clock):
    bodies = Bodies()
    registry = registry_with(bodies)
    seen: list[int] = []
    inputs = calls([("read", 50 - i) for i in range(50)])
    results = await registry.execute_batch(
        inputs, max_parallel=50, on_result=lambda i, r: seen.append(i)
    )
    assert [r.text for r in results] == [f"c{i}" for i in range(50)]
    assert seen == list(range(50))
    ends = [entry for entry in bodies.log if entry.startswith("end:")]
    assert ends == [f"end:c{i}" for i in reversed(range(50))]


# -- ordering of policy and finalisation, under random schedules -----------------------------------


class Recorder:
    """Pre-execute and guard that may suspend, post-execute, observer: records their order and
    checks that policy never overlaps policy."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.log: list[str] = []
        self.in_policy = False
        self.policy_overlapped = False

    async def _maybe_suspend(self) -> None:
        if self.rng.random() < 0.3:
            await trio.sleep(self.rng.choice([0, 0.5]))

    @hookimpl
    async def dsh_tool_pre_execute(self, execution: Any) -> None:
        if self.in_policy:
            self.policy_overlapped = True
        self.in_policy = True
        try:
            self.log.append(f"pre:{execution.call_id}")
            await self._maybe_suspend()
        finally:
            self.in_policy = False

    @hookimpl
    async def dsh_tool_post_execute(self, execution: Any, result: Any) -> None:
        self.log.append(f"post:{execution.call_id}")
        await self._maybe_suspend()

    @hookimpl
    async def dsh_tool_result(self, execution: Any, result: Any) -> None:
        self.log.append(f"observed:{execution.call_id}")
        await self._maybe_suspend()


def _random_batch(rng: random.Random, size: int) -> list[tuple[str, float]]:
    return [
        (
            "write" if rng.random() < 0.15 else "read",
            rng.choice([0, 0, 0.25, 1, 3]),
        )
        for _ in range(size)
    ]


async def _check_random_batch(seed: int, size: int) -> None:
    rng = random.Random(seed)
    bodies = Bodies()
    recorder = Recorder(rng)
    registry = registry_with(bodies, recorder)
    spec = _random_batch(rng, size)
    max_parallel = rng.choice([1, 2, 3, 7])
    seen: list[int] = []
    results, spawned = await counted(
        registry, calls(spec), max_parallel=max_parallel, on_result=lambda i, r: seen.append(i)
    )
    order = [f"c{i}" for i in range(size)]
    assert [r.text for r in results] == order
    assert seen == list(range(size))
    for stage in ("pre", "post", "observed"):
        assert [e.split(":")[1] for e in recorder.log if e.startswith(stage)] == order
    assert not recorder.policy_overlapped
    assert not bodies.overlapped_exclusive
    assert bodies.most <= max_parallel
    assert spawned <= max_parallel + 1
    # Every call ran once; an exclusive call only once every earlier call's body had ended.
    for i, (name, _delay) in enumerate(spec):
        assert bodies.log.count(f"start:c{i}") == 1
        if name == "write":
            start = bodies.log.index(f"start:c{i}")
            assert all(bodies.log.index(f"end:c{j}") < start for j in range(i))


@pytest.mark.parametrize("seed", range(6))
async def test_random_schedules_keep_every_ordering_rule(autojump_clock, seed):
    await _check_random_batch(seed, 40)


@pytest.mark.soak
async def test_random_schedules_keep_every_ordering_rule_soak(autojump_clock):
    for seed in range(soak_size(20, 500)):
        await _check_random_batch(1000 + seed, soak_size(60, 300))


async def test_a_finalisation_that_waits_does_not_hold_up_starting_later_calls(autojump_clock):
    """An observer of call 0 that waits for call 3's body: the batch must start call 3 while it
    waits (finalisation is not policy), else this deadlocks until the observer times out."""
    started = trio.Event()
    log: list[str] = []

    class Waiter:
        @hookimpl
        async def dsh_tool_result(self, execution: Any, result: Any) -> None:
            if execution.call_id == "c0":
                with trio.fail_after(1):
                    await started.wait()
                log.append("c0 observed after c3 started")

    class Bodies3(Bodies):
        def enter(self, name: str, exclusive: bool = False) -> None:
            super().enter(name, exclusive)
            if name == "c3":
                started.set()

    registry = registry_with(Bodies3(), Waiter())
    results = await registry.execute_batch(calls([("read", 0)] * 5))
    assert [r.code for r in results] == [None] * 5
    assert log == ["c0 observed after c3 started"]


# -- abort and cancellation -----------------------------------------------------------------------


async def test_abort_mid_batch_starts_no_new_body_and_reports_the_rest(autojump_clock):
    bodies = Bodies()
    registry = registry_with(bodies)
    signal = AbortSignal()

    async def abort_later() -> None:
        await trio.sleep(1.5)
        signal.abort("user pressed Esc")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(abort_later)
        results = await registry.execute_batch(
            calls([("read", 1)] * 10), max_parallel=2, signal=signal
        )
    codes = [r.code for r in results]
    # c0, c1 ran to the end at t=1; c2, c3 were running at t=1.5 and were aborted.
    assert codes[:2] == [None, None]
    assert codes[2:4] == ["ABORTED", "ABORTED"]
    assert codes[4:] == ["ABORTED_BEFORE_DISPATCH"] * 6
    assert [e for e in bodies.log if e.startswith("start")] == [f"start:c{i}" for i in range(4)]


async def test_cancelling_the_caller_cancels_every_running_call(autojump_clock):
    bodies = Bodies()
    registry = registry_with(bodies)
    with trio.move_on_after(2.5) as scope:
        await registry.execute_batch(calls([("read", 10)] * 30), max_parallel=4)
    assert scope.cancelled_caught
    assert bodies.running == 0
    assert bodies.log.count("start:c0") == 1
    assert len([e for e in bodies.log if e.startswith("start")]) == 4


async def test_an_on_result_that_raises_comes_out_as_itself(autojump_clock):
    bodies = Bodies()
    registry = registry_with(bodies)

    def on_result(index: int, result: Any) -> None:
        if index == 2:
            raise LookupError("progress display broke")

    with pytest.raises(LookupError, match="progress display broke"):
        await registry.execute_batch(calls([("read", 1)] * 6), on_result=on_result)
    assert bodies.running == 0  # the others were cancelled, not abandoned


async def test_a_parallel_call_after_an_exclusive_one_waits_for_it(autojump_clock):
    bodies = Bodies()
    registry = registry_with(bodies)
    spec = [("read", 2), ("read", 0), ("write", 1), ("read", 0), ("read", 1)]
    results = await registry.execute_batch(calls(spec))
    assert [r.text for r in results] == [f"c{i}" for i in range(5)]
    assert bodies.log == [
        "start:c0",
        "start:c1",
        "end:c1",
        "end:c0",
        "start:c2",
        "end:c2",
        "start:c3",
        "end:c3",
        "start:c4",
        "end:c4",
    ]
    assert not bodies.overlapped_exclusive


async def test_a_batch_with_nothing_to_overlap_opens_no_nursery(monkeypatch, autojump_clock):
    """Exclusive calls, and a parallel call that comes last, cannot overlap anything: no
    nursery is opened for them (it costs more than a call)."""
    opened: list[Any] = []
    open_nursery = trio.open_nursery

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return open_nursery(*args, **kwargs)

    monkeypatch.setattr(trio, "open_nursery", counting)
    bodies = Bodies()
    registry = registry_with(bodies)
    results = await registry.execute_batch(calls([("write", 1), ("write", 0), ("read", 1)]))
    assert [r.text for r in results] == ["c0", "c1", "c2"]
    assert opened == []
    results = await registry.execute_batch(calls([("write", 1), ("read", 2), ("read", 1)]))
    assert [r.text for r in results] == ["c0", "c1", "c2"]
    assert len(opened) == 1
    assert bodies.log[-4:] == ["start:c1", "start:c2", "end:c2", "end:c1"]


async def test_no_call_starts_once_the_caller_cancelled_the_batch(autojump_clock):
    """Call 0's observer cancels the caller's scope just after call 0's end woke the worker
    waiting to start call 1: that worker must not run call 1's policy (nor its body)."""
    prepared: list[str] = []
    scope = trio.CancelScope()

    class Pre:
        @hookimpl
        def dsh_tool_pre_execute(self, execution: Any) -> None:
            prepared.append(execution.call_id)

    class Canceller:
        @hookimpl
        def dsh_tool_result(self, execution: Any, result: Any) -> None:
            if execution.call_id == "c0":
                scope.cancel()

    bodies = Bodies()
    registry = registry_with(bodies, Pre(), Canceller())
    with scope:
        await registry.execute_batch(calls([("read", 1), ("read", 0), ("read", 0)]), max_parallel=1)
    assert scope.cancelled_caught
    assert prepared == ["c0"]
    assert bodies.log == ["start:c0", "end:c0"]


def test_the_hot_path_copy_of_an_input_is_what_evolve_makes():
    import attrs

    from dsh_host._model._json import freeze
    from dsh_host._pipeline._inputs import with_arguments as _with_arguments

    signal = AbortSignal()
    original = ToolExecutionInput(
        call_id="c", name="read", arguments={"a": [1]}, parent=None, signal=signal
    )
    frozen = freeze(original.arguments)
    copy = _with_arguments(original, frozen)
    assert copy == attrs.evolve(original, arguments=frozen)
    assert copy.arguments is frozen
    assert copy.signal is signal
    assert original.arguments == {"a": [1]}  # the caller's input is untouched
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.name = "other"  # type: ignore[misc]


async def test_a_batch_holds_little_beyond_the_results_it_returns():
    """Each call's frozen input, classification and execution are let go as soon as the call
    is finalised: at its peak a batch holds only a few list slots per call beyond its results."""
    import gc
    import tracemalloc

    registry = registry_with(Bodies())
    inputs = calls([("read", 0)] * 3000)
    await registry.execute_batch(inputs[:10])  # anything built lazily, built now
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        results = await registry.execute_batch(inputs)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(results) == 3000
    assert kept > before
    assert (peak - kept) / 3000 < 64  # bytes per call; a task per call held about 900


class Passes(trio.abc.Instrument):
    """Counts trio's scheduler passes and task steps while installed."""

    def __init__(self) -> None:
        self.passes = 0
        self.steps = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_calls_that_suspend_start_many_to_a_scheduler_pass():
    """200 bodies that each pass through the scheduler once, 10 at a time: about 20 passes and
    one task step per call (a worker handing the baton to one other per call took a pass and
    two steps per call; a task per call, four)."""

    async def checkpointing(args: Any, ctx: Any) -> str:
        await trio.lowlevel.checkpoint()
        return ctx.execution.call_id

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="cp",
            description="",
            parameters={},
            execute=checkpointing,
            is_concurrency_safe=lambda a: True,
        )
    )
    inputs = [ToolExecutionInput(call_id=f"c{i}", name="cp", arguments={}) for i in range(200)]
    passes = Passes()
    trio.lowlevel.add_instrument(passes)
    try:
        results = await registry.execute_batch(inputs, max_parallel=10)
    finally:
        trio.lowlevel.remove_instrument(passes)
    assert [r.text for r in results] == [f"c{i}" for i in range(200)]
    assert passes.passes <= 40
    assert passes.steps <= 260


async def test_arguments_changed_by_the_caller_mid_batch_reach_policy_and_body_alike(
    autojump_clock,
):
    """A careless (or hostile) caller changes call 1's argument dict while call 0 runs: after
    call 1 (exclusive) was classified - its arguments frozen and validated - and before its
    policy ran. Policy and body must see one snapshot: the body may never run arguments other
    than those the policy approved."""
    seen_by_policy: list[Any] = []
    seen_by_body: list[Any] = []
    arguments = {"path": "notes.txt"}

    class Policy:
        @hookimpl
        def dsh_tool_pre_execute(self, execution: Any) -> None:
            if execution.call_id == "c1":
                seen_by_policy.append(dict(execution.arguments))

    async def body(args: Any, ctx: Any) -> str:
        if ctx.execution.call_id == "c0":
            await trio.sleep(1)
            arguments["path"] = "/etc/shadow"
        else:
            seen_by_body.append(dict(args))
        return "ok"

    pm = make_plugin_manager(hookspecs)
    pm.register(Policy(), name="policy")
    registry = ToolRegistry(hooks=HookRelay(pm))
    params = {"path": {"type": "string", "required": True}}
    for name, safe in (("read", True), ("write", False)):
        registry.register(
            define_tool(
                name=name,
                description="",
                parameters=params,
                execute=body,
                is_concurrency_safe=lambda a, safe=safe: safe,
            )
        )
    inputs = [
        ToolExecutionInput(call_id="c0", name="read", arguments={"path": "a"}),
        ToolExecutionInput(call_id="c1", name="write", arguments=arguments),
    ]
    await registry.execute_batch(inputs)
    assert arguments["path"] == "/etc/shadow"  # the change happened while c1 waited
    assert len(seen_by_body) == 1
    assert seen_by_policy == seen_by_body


async def test_finalisation_is_skipped_when_no_hook_would_see_it(monkeypatch):
    """As `execute` does: with no post-execute and no observer, `Pipeline.finalize` is not
    entered at all (its answer would be the result itself)."""
    bodies = Bodies()
    registry = registry_with(bodies)
    finalised: list[str] = []
    finalize = registry._pipeline.finalize

    async def counting(execution: Any, *args: Any) -> Any:
        finalised.append(execution.call_id)
        return await finalize(execution, *args)

    monkeypatch.setattr(registry._pipeline, "finalize", counting)
    results = await registry.execute_batch(calls([("read", 0), ("write", 0), ("read", 0)]))
    assert [r.text for r in results] == ["c0", "c1", "c2"]
    assert finalised == []

    class Observer:
        @hookimpl
        def dsh_tool_result(self, execution: Any, result: Any) -> None:
            pass

    observed = registry_with(bodies, Observer())
    finalize = observed._pipeline.finalize
    monkeypatch.setattr(observed._pipeline, "finalize", counting)
    await observed.execute_batch(calls([("read", 0), ("write", 0), ("read", 0)]))
    assert finalised == ["c0", "c1", "c2"]
