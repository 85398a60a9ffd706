"""The per-call cost of each built-in plugin of the default stack, in one run.

Run with ``python bench/bench_stack.py [--quick] [--calls N] [--reps N]``.

Method: one process, one trio run. Every host calls the same trivial ``echo`` tool (allowed by
a permission rule). The hosts are

* ``bare``: a `dsh_host.Host` with no built-in plugin (only the benchmark's tool plugin);
* ``stack`` / ``stack+audit``: the default stack as `dsh` loads it (entry points), audit off /
  on (``durability`` its default, and ``"sync"`` for comparison);
* ``-P``: the default stack without plugin *P* (its cost in the stack: ``stack - (-P)``);
* ``+P``: ``bare`` plus plugin *P* alone (its cost on its own: ``(+P) - bare``).

Hosts are timed round-robin, batch by batch (``--calls`` calls per batch), garbage collection
paused while a batch runs; figures are the minimum and the median of the per-batch per-call
times, and ratios are to ``bare``. The machine may be shared and noisy: compare ratios within a
run, and re-run before concluding. Not a test: nothing fails on a figure.
"""

from __future__ import annotations

import argparse
import gc
import math
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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
    """Registers the benchmark's echo tool at start, like any tool plugin."""

    name = "bench-tools"

    @dsh_host.hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        register(
            dsh_host.define_tool(
                name="echo",
                description="Echo the text back.",
                parameters={"text": {"type": "string", "required": True}, "n": {"type": "integer"}},
                execute=_body,
                is_concurrency_safe=lambda args: True,
            )
        )


def _host(where: pathlib.Path, plugins: tuple[str, ...], durability: str = "async") -> Any:
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
    if not plugins:
        return dsh_host.Host(config, plugins=[_BenchTools()], load_entrypoints=False, environ={})
    return dsh_host.Host(config, plugins=[_BenchTools()], environ={})


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


async def _time(hosts: dict[str, Any], calls: int, reps: int) -> dict[str, list[float]]:
    call = dsh_host.ToolExecutionInput(call_id="call-1", name="echo", arguments=ARGS)
    samples: dict[str, list[float]] = {key: [] for key in hosts}
    for key, host in hosts.items():
        result = await host.registry.execute(call)
        assert (result.is_error, result.text) == (False, "hello"), (key, result)
        for _ in range(calls):
            await host.registry.execute(call)
    for _ in range(reps):
        for key, host in hosts.items():
            execute = host.registry.execute
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
    for host in hosts.values():
        audit = host.pm.get_plugin("audit")
        if audit is not None:
            audit.close()  # commit what is queued
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
    for key in ("stack", "stack+audit", "stack+audit(sync)"):
        print(
            f"{key} / bare: min {best[key] / best['bare']:.2f}, median {median[key] / median['bare']:.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter batches")
    parser.add_argument("--calls", type=int, default=None, help="calls per timed batch")
    parser.add_argument("--reps", type=int, default=None, help="timed batches per host")
    parser.add_argument("--no-alone", action="store_true", help="skip the one-plugin hosts")
    options = parser.parse_args(argv)
    calls = options.calls or (300 if options.quick else 1_000)
    reps = options.reps or (5 if options.quick else 15)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-stack-") as tmp:
        hosts = _hosts(pathlib.Path(tmp), alone=not options.no_alone)
        print(f"dsh default stack, per plugin: {len(hosts)} hosts, {reps} x {calls} calls each")
        samples = trio.run(_time, hosts, calls, reps)
    _report(samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
