"""The per-call cost of each built-in plugin of the default stack, in one run.

Run with ``python bench/bench_stack.py [--quick] [--calls N] [--reps N] [--no-alone] [--check]``;
``--check`` also prints the stack's ratios as markdown rows against issue 27's targets.

Method: one process, one trio run. Every host calls the same trivial ``echo`` tool (allowed by
a permission rule). The hosts are

* ``bare``: a `dsh_host.Host` with no built-in plugin (only the benchmark's tool plugin);
* ``stack`` / ``stack+audit``: the default stack as `dsh` loads it (entry points), audit off /
  on (``durability`` its default, and ``"sync"`` for comparison);
* ``-P``: the default stack without plugin *P* (its cost in the stack: ``stack - (-P)``);
* ``+P``: ``bare`` plus plugin *P* alone (its cost on its own: ``(+P) - bare``);
* ``floor`` / ``floor+audit``: the stack's floor. Each call goes through ``bare``, then the
  stack's per-call hook functions are called directly on that call's own execution and result,
  in the stack's order, each waterfall link with a ``call_next`` that answers at once: the
  plugins' own work, in the same process and cache state as the stack, with none of the host's
  machinery around the hooks (chains, budgets, watchdog, checks, credit). ``stack - floor`` is
  what the host spends on the hook links; ``floor / bare`` is the least any host could reach
  with these plugins.

"In stack" and "alone" include what the host spends on the plugin's hook links (a waterfall
link or an execute wrapper costs the core far more than a plain hook). "Own work" separates
the plugin's part: its per-call hook functions of the ``stack+audit`` host called directly,
with the execution and result of a real echo call and a ``call_next`` that answers at once,
so it is the plugin's own code per call (for audit, the trio side only: building and
committing rows happens in the writer thread).

Hosts are timed round-robin, batch by batch (``--calls`` calls per batch), garbage collection
paused while a batch runs; figures are the minimum and the median of the per-batch per-call
times, and ratios are to ``bare``. The machine may be shared and noisy: compare ratios within a
run, and re-run before concluding. Not a test: nothing fails on a figure.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import math
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from typing import Any

import trio

import dsh_host

BUILTINS = (
    "tools",
    "sandbox",
    "permissions",
    "approval",
    "timeout",
    "guards",
    "output_budget",
    "hook_commands",
)
ARGS: dict[str, Any] = {"text": "hello", "n": 3}


async def _body(args: Any, ctx: Any) -> Any:
    return args["text"]


class _BenchTools:
    """Registers the benchmark's echo tool (*body*) at start, like any tool plugin."""

    name = "bench-tools"

    def __init__(self, body: Callable[[Any, Any], Any] = _body) -> None:
        self.body = body

    @dsh_host.hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        register(
            dsh_host.define_tool(
                name="echo",
                description="Echo the text back.",
                parameters={"text": {"type": "string", "required": True}, "n": {"type": "integer"}},
                execute=self.body,
                is_concurrency_safe=lambda args: True,
            )
        )


def _host(
    where: pathlib.Path,
    plugins: tuple[str, ...],
    durability: str = "async",
    tools: Any = None,
) -> Any:
    where.mkdir(parents=True, exist_ok=True)
    workspace = where / "ws"
    workspace.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "host": {"workspace": str(workspace)},
        "plugins": {"enable": list(plugins)},
        "plugin": {
            "permissions": {"allow": ["echo"]},
            "sandbox": {"writable_roots": ["."]},
            "guards": {"max_argument_bytes": 1_000_000},
            "audit": {"path": str(where / "audit.sqlite3"), "durability": durability},
        },
    }
    own = [_BenchTools() if tools is None else tools]
    if not plugins:
        return dsh_host.Host(config, plugins=own, load_entrypoints=False, environ={})
    return dsh_host.Host(config, plugins=own, environ={})


class _Ready:
    """A ``call_next`` that answers at once, without suspending (the floor's downstream)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, **_: Any) -> _Ready:
        return self

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator that never suspends


class _Floor:
    """The floor of a stack host (see the module docstring): call with a call input."""

    def __init__(self, stack: Any, where: pathlib.Path) -> None:
        self.execution: Any = None

        async def stashing(args: Any, ctx: Any) -> Any:  # `_body`, keeping the call's execution
            self.execution = ctx.execution
            return args["text"]

        self.execute = _host(where, (), tools=_BenchTools(stashing)).registry.execute
        self.body_result = _Ready(None)
        ready = {
            "dsh_tool_pre_execute": _Ready(dsh_host.Allow()),
            "dsh_tool_execute": self.body_result,
            "dsh_tool_post_execute": _Ready(dsh_host.Accept()),
        }
        self.hooks = [
            (impl.function, impl.argnames, ready.get(hook))
            for hook in PER_CALL
            for impl in stack.hooks.impls(hook)
        ]

    async def __call__(self, call: Any) -> Any:
        result = await self.execute(call)
        execution = self.execution
        self.body_result.value = result
        for function, names, nxt in self.hooks:
            if names == _E:
                value = function(execution)
            elif names == _EN:
                value = function(execution, nxt)
            elif names == _ERN:
                value = function(execution, result, nxt)
            else:
                given = {"execution": execution, "result": result, "call_next": nxt}
                value = function(*[given[name] for name in names])
            if value is not None and inspect.isawaitable(value):
                await value
        return result


_E, _EN, _ERN = ("execution",), ("execution", "call_next"), ("execution", "result", "call_next")


def _hosts(where: pathlib.Path, alone: bool) -> dict[str, Any]:
    hosts = {
        "bare": _host(where / "bare", ()),
        "stack": _host(where / "stack", BUILTINS),
        "stack+audit": _host(where / "audit", (*BUILTINS, "audit")),
        "stack+audit(sync)": _host(where / "audit-sync", (*BUILTINS, "audit"), "sync"),
    }
    for name in BUILTINS:
        if name != "tools":  # without it, the stack has no tools plugin: not a default stack
            rest = tuple(p for p in BUILTINS if p != name)
            hosts[f"-{name}"] = _host(where / f"no-{name}", rest)
    if alone:
        for name in (*BUILTINS, "audit"):
            hosts[f"+{name}"] = _host(where / f"only-{name}", (name,))
    return hosts


async def _time(
    runs: dict[str, Callable[[Any], Any]], calls: int, reps: int
) -> dict[str, list[float]]:
    call = dsh_host.ToolExecutionInput(call_id="call-1", name="echo", arguments=ARGS)
    samples: dict[str, list[float]] = {key: [] for key in runs}
    for key, execute in runs.items():
        result = await execute(call)
        assert (result.is_error, result.text) == (False, "hello"), (key, result)
        for _ in range(calls):
            await execute(call)
    for _ in range(reps):
        for key, execute in runs.items():
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter_ns()
                for _ in range(calls):
                    await execute(call)
                elapsed = time.perf_counter_ns() - started
            finally:
                gc.enable()
            samples[key].append(elapsed / calls / 1000)
    return samples


class _Capture:
    """Keeps the execution and result of one call, for calling hooks directly."""

    name = "capture"
    seen: tuple[Any, Any] | None = None

    @dsh_host.hookimpl
    def dsh_tool_result(self, execution: Any, result: Any) -> None:
        self.seen = (execution, result)


PER_CALL = (
    "dsh_tool_pre_execute",
    "dsh_tool_guard",
    "dsh_tool_execute",
    "dsh_tool_post_execute",
    "dsh_tool_result",
)


async def _own_work(host: Any, calls: int, reps: int) -> dict[str, list[float]]:
    """µs per call of each plugin's per-call hook functions, called directly."""
    capture = _Capture()
    probe = dsh_host.Host(plugins=[_BenchTools(), capture], load_entrypoints=False)
    await probe.call("echo", ARGS)
    assert capture.seen is not None
    execution, result = capture.seen
    allow, accept = dsh_host.Allow(), dsh_host.Accept()

    async def next_pre(**_: Any) -> Any:
        return allow

    async def next_post(**_: Any) -> Any:
        return accept

    async def next_execute(**_: Any) -> Any:
        return result

    given = {
        "dsh_tool_pre_execute": {"execution": execution, "call_next": next_pre},
        "dsh_tool_guard": {"execution": execution},
        "dsh_tool_execute": {"execution": execution, "call_next": next_execute},
        "dsh_tool_post_execute": {"execution": execution, "result": result, "call_next": next_post},
        "dsh_tool_result": {"execution": execution, "result": result},
    }
    by_plugin: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for hook in PER_CALL:
        for impl in host.hooks.impls(hook):
            kwargs = {name: given[hook][name] for name in impl.argnames}
            by_plugin.setdefault(impl.plugin, []).append((impl.function, kwargs))
    samples: dict[str, list[float]] = {name: [] for name in by_plugin}
    for _ in range(reps):
        for name, hooks in by_plugin.items():
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter_ns()
                for _ in range(calls):
                    for function, kwargs in hooks:
                        value = function(**kwargs)
                        if value is not None and inspect.isawaitable(value):
                            await value
                elapsed = time.perf_counter_ns() - started
            finally:
                gc.enable()
            samples[name].append(elapsed / calls / 1000)
    return samples


def _report(samples: dict[str, list[float]]) -> None:
    best = {key: min(values) for key, values in samples.items()}
    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"{'host':<24}{'min µs':>10}{'median µs':>11}{'x bare':>8}")
    for key in samples:
        ratio = median[key] / median["bare"]
        print(f"{key:<24}{best[key]:>10.2f}{median[key]:>11.2f}{ratio:>8.2f}")
    print()
    print(f"{'plugin':<16}{'in stack µs':>12}{'(median)':>10}{'alone µs':>10}{'(median)':>10}")
    costs: list[tuple[float, str]] = []
    for name in (*BUILTINS, "audit"):
        if name == "audit":
            in_min = best["stack+audit"] - best["stack"]
            in_med = median["stack+audit"] - median["stack"]
        elif f"-{name}" in samples:
            in_min = best["stack"] - best[f"-{name}"]
            in_med = median["stack"] - median[f"-{name}"]
        else:
            in_min = in_med = math.nan
        alone_min = alone_med = math.nan
        if f"+{name}" in samples:
            alone_min = best[f"+{name}"] - best["bare"]
            alone_med = median[f"+{name}"] - median["bare"]
        costs.append((in_med if not math.isnan(in_med) else alone_med, name))
        print(f"{name:<16}{in_min:>12.2f}{in_med:>10.2f}{alone_min:>10.2f}{alone_med:>10.2f}")
    print()
    top = sorted((c for c in costs if not math.isnan(c[0])), reverse=True)[:5]
    print("top five (median, in the stack): " + ", ".join(f"{n} {c:.1f} µs" for c, n in top))
    for key in ("stack", "stack+audit", "stack+audit(sync)", "floor", "floor+audit"):
        print(
            f"{key} / bare: min {best[key] / best['bare']:.2f}, median {median[key] / median['bare']:.2f}"
        )
    for stack, floor in (("stack", "floor"), ("stack+audit", "floor+audit")):
        print(
            f"{stack}: the host's hook links (stack - floor) min {best[stack] - best[floor]:.2f} µs,"
            f" median {median[stack] - median[floor]:.2f} µs; the plugins' own work (floor - bare)"
            f" min {best[floor] - best['bare']:.2f} µs, median {median[floor] - median['bare']:.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter batches")
    parser.add_argument("--calls", type=int, default=None, help="calls per timed batch")
    parser.add_argument("--reps", type=int, default=None, help="timed batches per host")
    parser.add_argument("--no-alone", action="store_true", help="skip the one-plugin hosts")
    parser.add_argument("--check", action="store_true", help="print each figure against its target")
    options = parser.parse_args(argv)
    calls = options.calls or (300 if options.quick else 1_000)
    reps = options.reps or (5 if options.quick else 15)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-stack-") as tmp:
        hosts = _hosts(pathlib.Path(tmp), alone=not options.no_alone)
        print(f"dsh default stack, per plugin: {len(hosts)} hosts, {reps} x {calls} calls each")
        runs = {key: host.registry.execute for key, host in hosts.items()}
        runs["floor"] = _Floor(hosts["stack"], pathlib.Path(tmp) / "floor")
        runs["floor+audit"] = _Floor(hosts["stack+audit"], pathlib.Path(tmp) / "floor-audit")
        samples = trio.run(_time, runs, calls, reps)
        own = trio.run(_own_work, hosts["stack+audit"], calls, reps)
        for host in hosts.values():
            audit = host.pm.get_plugin("audit")
            if audit is not None:
                audit.close()  # commit what is queued
    _report(samples)
    print()
    print(f"{'own work':<16}{'min µs':>10}{'median µs':>11}")
    for name, values in sorted(own.items(), key=lambda item: -statistics.median(item[1])):
        print(f"{name:<16}{min(values):>10.2f}{statistics.median(values):>11.2f}")
    if options.check:
        _print_check(samples)
    return 0


CHECKS = (
    ("default stack, audit on / bare host", "stack+audit", "bare", 3.0),
    ("default stack, audit off / bare host", "stack", "bare", 2.0),
    (
        "the stack's floor (its plugins' own work), audit on / bare host",
        "floor+audit",
        "bare",
        None,
    ),
    ("the stack's floor (its plugins' own work), audit off / bare host", "floor", "bare", None),
)


def _print_check(samples: dict[str, list[float]]) -> None:
    """The ratios as markdown rows, ``| figure | min | median | target |`` (see bench/check.py).

    The bare host here is a `Host` with only the benchmark's tool plugin, which is what
    bench_pipeline.py's "bare pipeline" is for a registry; its targets are issue 27's.
    """
    print()
    print("| figure | min | median | target |")
    print("|---|---|---|---|")
    for figure, over, under, target in CHECKS:
        a, b = samples[over], samples[under]
        best = min(a) / min(b)
        median = statistics.median(a) / statistics.median(b)
        shown = "-" if target is None else f"<= {target:g}"
        print(f"| {figure} | {best:.2f} | {median:.2f} | {shown} |")


if __name__ == "__main__":
    sys.exit(main())
