"""The cost of reaching dsh from other loops, as ratios to ``host.call`` under trio.

Run with ``python bench/bench_loops.py [--quick] [--json] [--check]``. Not a test: nothing
fails. ``--check`` prints each figure against its target as a markdown table row
(``| figure | min | median | target |``).

Cases, in one process, on one host shape (an echo tool, no other plugin; entry points off):

* ``trio``: ``await host.call("echo", ...)`` under ``trio.run`` (the denominator);
* ``trio, signal``: the same with an ``AbortSignal`` (what the asyncio host passes, so that a
  cancelled asyncio task aborts the call): the pipeline's own cost of a cancellable call;
* ``asyncio``: ``await host.call(...)`` on ``dsh_host.aio.open_host()``'s host under
  ``asyncio.run`` (the trio guest run);
* ``pydantic-ai``: one agent run whose model asks for N echo calls in one step through
  ``DshToolset``, minus the same run asking for none, per call; beside it the same through a
  pydantic-ai ``FunctionToolset`` echo (pydantic-ai's own cost of a tool call). Against ``host.call`` under trio that figure is mostly pydantic-ai's own
  machinery (its function tool costs about as much); what dsh adds to an agent run is
  ``DshToolset`` against ``FunctionToolset``;
* ``otel off``: ``host.call`` with the ``otel`` plugin installed but off (no tracer provider),
  against the denominator: what an unconfigured ``otel`` costs per call.

Each case keeps its loop running in a thread of its own (`Lane`) and is timed in batches of
2000 calls (200 for an agent run; ``--quick``: 200 and 50), one batch of each case in turn, 20
rounds (``--quick``: 6); only one case runs at a time. Figures are the minimum and the median
per call over batches. Garbage collection is paused while a batch is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import queue
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

import dsh_host
import dsh_host.aio

Timer = Callable[[int], Awaitable[float]]


def echo_plugin() -> object:
    async def body(args: Any, ctx: Any) -> str:
        return str(args["text"])

    tool = dsh_host.define_tool(
        name="echo",
        description="echo",
        parameters={"text": {"type": "string", "required": True}},
        execute=body,
    )

    class Tools:
        @dsh_host.hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register(tool)

    return Tools()


class Lane(threading.Thread):
    """One case's event loop, kept running in a thread of its own and timing one batch at a time
    when asked (`batch`). Only one lane runs at a time (the others wait for their turn), so the
    batches of every case interleave, round by round, in one process: load that comes and goes
    on a shared machine hits each case alike, and no loop is restarted between batches."""

    def __init__(self, start: Callable[[Callable[[Timer], Awaitable[None]]], object]) -> None:
        super().__init__(daemon=True)
        self._loop = start
        self._asked: queue.Queue[int | None] = queue.Queue()
        self._timed: queue.Queue[float | BaseException] = queue.Queue()

    def run(self) -> None:
        try:
            self._loop(self._serve)
        except BaseException as exc:  # reach the caller waiting for a batch
            self._timed.put(exc)

    async def _serve(self, timer: Timer) -> None:
        while (calls := self._asked.get()) is not None:  # blocks this lane's loop: its turn
            try:
                self._timed.put(await timer(calls))
            except BaseException as exc:
                self._timed.put(exc)
                raise

    def batch(self, calls: int) -> float:
        """Seconds per call over one batch of *calls* calls (garbage collection paused)."""
        gc.collect()
        gc.disable()
        try:
            self._asked.put(calls)
            timed = self._timed.get()
        finally:
            gc.enable()
        if isinstance(timed, BaseException):
            raise timed
        return timed / calls

    def stop(self) -> None:
        self._asked.put(None)
        self.join()


def _agent_timer(agent: Any, wanted: list[int]) -> Timer:
    """One agent run whose model asks for *n* echo calls in one step, minus one asking none."""

    async def timer(n: int) -> float:
        wanted[0] = 0
        empty = math.inf
        for _ in range(3):  # the least of three: a run's fixed cost, without its noise
            start = time.perf_counter()
            await agent.run("go")
            empty = min(empty, time.perf_counter() - start)
        wanted[0] = n
        start = time.perf_counter()
        await agent.run("go")
        return time.perf_counter() - start - empty

    return timer


def host_timer(host: Any, signal: bool = False) -> Timer:
    async def timer(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            if signal:
                await host.call("echo", {"text": "hi"}, signal=dsh_host.AbortSignal())
            else:
                await host.call("echo", {"text": "hi"})
        return time.perf_counter() - start

    return timer


def trio_lane(plugins: tuple[object, ...] = (), signal: bool = False) -> Lane:
    def start(serve: Callable[[Timer], Awaitable[None]]) -> None:
        async def main() -> None:
            async with dsh_host.open_host(
                plugins=[echo_plugin(), *plugins], entry_points=False
            ) as host:
                await serve(host_timer(host, signal))

        trio.run(main)

    return Lane(start)


def asyncio_lane() -> Lane:
    def start(serve: Callable[[Timer], Awaitable[None]]) -> None:
        async def main() -> None:
            async with dsh_host.aio.open_host(plugins=[echo_plugin()], entry_points=False) as host:
                await serve(host_timer(host))

        asyncio.run(main())

    return Lane(start)


def pydantic_lane(dsh: bool) -> Lane:
    """An agent run through ``DshToolset`` (*dsh*) or through a pydantic-ai echo."""
    from pydantic_ai import Agent, FunctionToolset
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from dsh_host.bridges.pydantic_ai import DshToolset

    wanted = [0]

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1 and wanted[0]:
            parts = [
                ToolCallPart("echo", {"text": "hi"}, tool_call_id=f"c{i}") for i in range(wanted[0])
            ]
            return ModelResponse(parts=parts)
        return ModelResponse(parts=[TextPart("done")])

    native = FunctionToolset()

    @native.tool_plain(sequential=True)
    async def echo(text: str) -> str:
        return text

    def start(serve: Callable[[Timer], Awaitable[None]]) -> None:
        async def main() -> None:
            async with dsh_host.aio.open_host(plugins=[echo_plugin()], entry_points=False) as host:
                toolset = DshToolset(host) if dsh else native
                await serve(_agent_timer(Agent(FunctionModel(model), toolsets=[toolset]), wanted))

        asyncio.run(main())

    return Lane(start)


TRIO = "trio host.call"
CHECKS = (
    # (figure, numerator, denominator or None, target)
    ("asyncio host.call / trio host.call", "asyncio host.call", TRIO, "<= 1.3"),
    # A whole pydantic-ai agent run (model turn, validation, messages) over one host.call: no
    # target; what dsh adds to such a run is the DshToolset / FunctionToolset row below.
    ("pydantic-ai DshToolset call (a whole agent run) / trio host.call", "pydantic-ai DshToolset",
     TRIO, "—"),
    ("trio host.call, otel installed but off / trio host.call", "trio host.call, otel off", TRIO,
     "<= 1.05"),
    ("asyncio host.call / trio host.call with an AbortSignal (same pipeline work)",
     "asyncio host.call", "trio host.call, signal", "—"),
    ("pydantic-ai FunctionToolset call (pydantic-ai's own) / trio host.call",
     "pydantic-ai FunctionToolset", TRIO, "—"),
    ("pydantic-ai DshToolset call / pydantic-ai FunctionToolset call (what dsh adds to a run)",
     "pydantic-ai DshToolset", "pydantic-ai FunctionToolset", "<= 1.3"),
)  # fmt: skip


def measure(calls: int, rounds: int) -> dict[str, list[float]]:
    from dsh_plugins_builtin.otel import OtelPlugin

    agent_calls = max(calls // 10, 50)  # an agent run costs far more per call
    lanes = {
        TRIO: (trio_lane(), calls),
        "asyncio host.call": (asyncio_lane(), calls),
        "trio host.call, signal": (trio_lane(signal=True), calls),
        "trio host.call, otel off": (trio_lane((OtelPlugin(),)), calls),
        "pydantic-ai DshToolset": (pydantic_lane(dsh=True), agent_calls),
        "pydantic-ai FunctionToolset": (pydantic_lane(dsh=False), agent_calls),
    }
    cases: dict[str, list[float]] = {name: [] for name in lanes}
    for lane, _ in lanes.values():
        lane.start()
    try:
        for lane, n in lanes.values():
            lane.batch(max(n // 10, 1))  # warm-up
        for _ in range(rounds):  # a batch of each case in turn, every round
            for name, (lane, n) in lanes.items():
                cases[name].append(lane.batch(n))
    finally:
        for lane, _ in lanes.values():
            lane.stop()
    return cases


def check_rows(cases: dict[str, list[float]]) -> list[str]:
    rows = ["| figure | min | median | target |", "|---|---|---|---|"]
    for figure, top, bottom, target in CHECKS:
        low = min(cases[top]) / min(cases[bottom])
        mid = statistics.median(cases[top]) / statistics.median(cases[bottom])
        rows.append(f"| {figure} | {low:.2f} | {mid:.2f} | {target} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true", help="each figure against its target")
    args = parser.parse_args()
    calls, rounds = (200, 6) if args.quick else (2000, 20)
    cases = measure(calls, rounds)
    if args.check:
        print("\n".join(check_rows(cases)))
        return
    base_min, base_med = min(cases[TRIO]), statistics.median(cases[TRIO])
    rows = {
        name: {
            "min_us": min(t) * 1e6,
            "median_us": statistics.median(t) * 1e6,
            "ratio_min": min(t) / base_min,
            "ratio_median": statistics.median(t) / base_med,
        }
        for name, t in cases.items()
    }
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(
        f"{'case':32} {'min µs':>9} {'median µs':>10} {'/ trio (min)':>13} {'/ trio (median)':>16}"
    )
    for name, row in rows.items():
        print(
            f"{name:32} {row['min_us']:9.1f} {row['median_us']:10.1f} "
            f"{row['ratio_min']:13.2f} {row['ratio_median']:16.2f}"
        )


if __name__ == "__main__":
    main()
