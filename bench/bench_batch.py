"""`execute_batch` against `execute`: what the batch machinery adds per call.

Method: one trio run; for each body (one that never suspends, one that checkpoints once), a
batch of ``--calls`` calls through ``execute_batch`` and the same calls awaited one after another
through ``execute`` are timed in alternation, ``--reps`` times, garbage collection paused while
timing. Figures are per call, minimum and median; ratios are taken within the run.

    python bench/bench_batch.py [--calls 10000] [--reps 7]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

import dsh_host


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

        async def sequential(inputs: list[Any] = inputs) -> None:
            for item in inputs:
                await reg.execute(item)

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
        for run, n in cases.values():  # warm up
            await _timed(run, n)
        for _ in range(reps):
            for label, (run, n) in cases.items():
                samples.setdefault(label, []).append(await _timed(run, n))
    return {label: (min(s), statistics.median(s)) for label, s in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=7)
    options = parser.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
