"""`execute_batch` against `execute`: what the batch machinery adds per call.

Method: one trio run; for each body (one that never suspends, one that checkpoints once), a
batch of ``--calls`` calls through ``execute_batch`` and the same calls awaited one after another
through ``execute`` are timed in alternation, ``--reps`` times, garbage collection paused while
timing. Both keep their results, as a caller does (``execute_batch`` returns its list; the
``execute`` loop appends each result to one: keeping 10,000 results costs either side about
0.15-0.3 µs a call, which a loop that dropped them would not pay). Figures are per call, minimum and median; ratios are taken within the run.

    python bench/bench_batch.py [--calls 10000] [--reps 7] [--check]

``--check`` also prints the ratios as markdown rows against their targets (issue 27).

Each case runs `QUICKENED` times before it is timed. CPython 3.11 specializes a function's
bytecode only after its eighth call (a loop inside it does not count), and the loop of a batch's
calls is one call per batch: the first seven batches of a process run it unspecialized, about 25%
slower per call here, while ``execute`` is warm after its first eight calls. Timing from the
second batch on measured that warm-up, not the steady state (Python 3.12 and later specialize
from the start).

``--parked N`` instead lists what a parked call holds: N calls of the default stack (as in
``bench_pipeline.py``'s memory figure, through ``Host.call``) are parked in their body, and a
`tracemalloc` snapshot taken then is compared with one taken before, grouped by the line that
allocated; ``--parked-in-batch N`` does the same for N calls parked in one ``execute_batch``
(bare registry, ``max_parallel=N``) next to N calls parked each in its own task.

    python bench/bench_batch.py --parked 10000 [--top 40]
"""

from __future__ import annotations

import argparse
import functools
import gc
import linecache
import pathlib
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import trio

import dsh_host

QUICKENED = 8
"""Runs of each case before timing: CPython 3.11 specializes a function after its 8th call."""


async def instant(args: Any, ctx: Any) -> Any:
    return args["text"]


async def checkpoint(args: Any, ctx: Any) -> Any:
    await trio.lowlevel.checkpoint()
    return args["text"]


def registry() -> dsh_host.ToolRegistry:
    reg = dsh_host.ToolRegistry()
    for name, body in (("instant", instant), ("checkpoint", checkpoint)):
        reg.register(
            dsh_host.define_tool(
                name=name,
                description="",
                parameters={"text": {"type": "string", "required": True}},
                execute=body,
                is_concurrency_safe=lambda args: True,
            )
        )
    return reg


async def _timed(run: Callable[[], Awaitable[Any]], calls: int) -> float:
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter_ns()
        await run()
        return (time.perf_counter_ns() - started) / calls / 1000
    finally:
        gc.enable()


async def main_async(calls: int, reps: int) -> dict[str, tuple[float, float]]:
    reg = registry()
    samples: dict[str, list[float]] = {}
    for name in ("instant", "checkpoint"):
        inputs = [
            dsh_host.ToolExecutionInput(call_id=f"c{i}", name=name, arguments={"text": "x"})
            for i in range(calls)
        ]

        async def batch(inputs: list[Any] = inputs) -> None:
            await reg.execute_batch(inputs)

        async def sequential(inputs: list[Any] = inputs) -> list[Any]:
            results = []  # kept, as `execute_batch` keeps them: like for like
            for item in inputs:
                results.append(await reg.execute(item))
            return results

        async def one(inputs: list[Any] = inputs) -> None:
            for item in inputs[:1000]:
                await reg.execute_batch([item])

        async def single(inputs: list[Any] = inputs) -> None:
            for item in inputs[:1000]:
                await reg.execute(item)

        cases = {
            f"{name}: execute_batch, per call": (batch, calls),
            f"{name}: execute, one after another": (sequential, calls),
            f"{name}: execute_batch of 1": (one, 1000),
            f"{name}: execute, the same 1,000": (single, 1000),
        }
        for run, n in cases.values():  # warm up: see the module docstring (QUICKENED)
            for _ in range(QUICKENED):
                await _timed(run, n)
        for _ in range(reps):
            for label, (run, n) in cases.items():
                samples.setdefault(label, []).append(await _timed(run, n))
    return {label: (min(s), statistics.median(s)) for label, s in samples.items()}


# -- what a parked call holds ---------------------------------------------------------------------


async def _parked(count: int, top: int, where: pathlib.Path) -> None:
    """Park *count* default-stack calls in their body; print the lines that allocated most."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import bench_pipeline  # the same default stack as the memory figure there

    release = trio.Event()
    parked = 0

    async def park(args: Any, ctx: Any) -> str:
        nonlocal parked
        parked += 1
        await release.wait()
        return "ok"

    tool = dsh_host.define_tool(name="park", description="", parameters={}, execute=park)
    host = bench_pipeline._default_stack(where, audit=True, extra=(tool,))
    await host.call("echo", bench_pipeline.VALID_ARGS)  # anything built lazily, built now
    async with trio.open_nursery() as nursery:  # and the parked path once
        nursery.start_soon(functools.partial(host.call, "park", {}, call_id="warm"))
        while parked < 1:
            await trio.sleep(0)
        release.set()
    release, parked = trio.Event(), 0
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(functools.partial(host.call, "park", {}, call_id=f"p{i}"))
        while parked < count:
            await trio.sleep(0)
        gc.collect()
        during = tracemalloc.take_snapshot()
        release.set()
    tracemalloc.stop()
    _print_holders(during.compare_to(before, "lineno"), count, top)


async def _parked_in_batch(count: int) -> None:
    """Bytes per call parked in one `execute_batch`, and per call parked in its own task."""
    for in_batch in (True, False):
        held = await _held_while_parked(count, in_batch)
        label = "in one execute_batch" if in_batch else "each in its own task (execute)"
        print(f"parked {label}: {held / count:,.0f} B per call")


async def _held_while_parked(count: int, in_batch: bool) -> int:
    release = trio.Event()
    parked = 0

    async def park(args: Any, ctx: Any) -> str:
        nonlocal parked
        parked += 1
        await release.wait()
        return "ok"

    reg = dsh_host.ToolRegistry()
    reg.register(
        dsh_host.define_tool(
            name="park",
            description="",
            parameters={},
            execute=park,
            is_concurrency_safe=lambda args: True,
        )
    )
    inputs = [
        dsh_host.ToolExecutionInput(call_id=f"p{i}", name="park", arguments={})
        for i in range(count)
    ]
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        if in_batch:
            nursery.start_soon(functools.partial(reg.execute_batch, inputs, count))
        else:
            for item in inputs:
                nursery.start_soon(reg.execute, item)
        while parked < count:
            await trio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        release.set()
    tracemalloc.stop()
    return held


def _print_holders(stats: list[tracemalloc.StatisticDiff], count: int, top: int) -> None:
    total = sum(s.size_diff for s in stats)
    print(f"{total / count:,.0f} B per parked call; the lines that allocated it:")
    for stat in stats[:top]:
        frame = stat.traceback[0]
        line = linecache.getline(frame.filename, frame.lineno).strip()
        where = "/".join(pathlib.Path(frame.filename).parts[-2:])
        print(
            f"{stat.size_diff / count:7.0f} B {stat.count_diff / count:5.2f} blocks  "
            f"{where}:{frame.lineno}  {line[:70]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--parked", type=int, help="list what N parked default-stack calls hold")
    parser.add_argument("--parked-in-batch", type=int, help="N calls parked in one batch")
    parser.add_argument("--top", type=int, default=40, help="lines to list with --parked")
    parser.add_argument("--check", action="store_true", help="print each figure against its target")
    options = parser.parse_args(argv)
    if options.parked:
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
            trio.run(_parked, options.parked, options.top, pathlib.Path(tmp))
        return 0
    if options.parked_in_batch:
        trio.run(_parked_in_batch, options.parked_in_batch)
        return 0
    figures = trio.run(main_async, options.calls, options.reps)
    for label, (best, median) in figures.items():
        print(f"{label:<45} {best:8.2f} µs min {median:8.2f} µs median")
    for name in ("instant", "checkpoint"):
        b, s = (
            figures[f"{name}: execute_batch, per call"],
            figures[f"{name}: execute, one after another"],
        )
        o, e = figures[f"{name}: execute_batch of 1"], figures[f"{name}: execute, the same 1,000"]
        print(
            f"{name}: batch / execute {b[0] / s[0]:.2f} (min) {b[1] / s[1]:.2f} (median), "
            f"+{b[0] - s[0]:.2f} µs per call; batch of 1 / execute {o[0] / e[0]:.2f} (min) "
            f"{o[1] / e[1]:.2f} (median)"
        )
    if options.check:
        _print_check(figures)
    return 0


CHECKS = (
    ("execute_batch per call / execute (10,000 calls)", "instant", "execute_batch, per call",
     "execute, one after another", 1.1),
    ("execute_batch per call / execute, a body that checkpoints", "checkpoint",
     "execute_batch, per call", "execute, one after another", None),
    ("execute_batch of 1 / execute", "instant", "execute_batch of 1", "execute, the same 1,000",
     1.5),
)  # fmt: skip


def _print_check(figures: dict[str, tuple[float, float]]) -> None:
    """The ratios as markdown rows, ``| figure | min | median | target |`` (see bench/check.py)."""
    print()
    print("| figure | min | median | target |")
    print("|---|---|---|---|")
    for figure, body, over, under, target in CHECKS:
        a, b = figures[f"{body}: {over}"], figures[f"{body}: {under}"]
        shown = "-" if target is None else f"<= {target:g}"
        print(f"| {figure} | {a[0] / b[0]:.2f} | {a[1] / b[1]:.2f} | {shown} |")


if __name__ == "__main__":
    sys.exit(main())
