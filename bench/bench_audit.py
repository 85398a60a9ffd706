"""What the audit plugin costs per call, and what many concurrent audited calls cost.

Run with ``python bench/bench_audit.py [--quick] [--before REV] [--json]``.

Part 1, per call, in one process: sequential ``host.call`` of an echo tool through

- ``none``: a host with no plugin (the baseline every audit cost is relative to);
- ``sync`` / ``async``: the audit plugin with ``durability = "sync"`` / ``"async"``;
- ``disabled``: the audit plugin with ``enabled = false``;
- ``default+sync`` / ``default+async`` / ``default+off``: the default stack (every built-in,
  echo allowed by a permission rule) with audit on (either durability), and without audit; ``bare``: ``registry.execute`` on a
  ``ToolRegistry()`` with no host, the "bare pipeline" of the performance issue;

and, with ``--before REV``, the same audit cases with the audit plugin as it was at git revision
*REV* (``before:sync``, ``before:disabled``, ``default+before``), loaded from ``git show``, so that
before and after are measured side by side. Cases are timed round-robin in batches with garbage
collection paused during each batch; the figures are the minimum and median of the per-batch
per-call times. Audit's own cost is a case minus ``none``.

Part 2, load: for 10,000 and 100,000 concurrent calls (``--sizes``) through the default stack with
audit on, a fresh subprocess per implementation and size reports calls per second, peak resident
memory (``ru_maxrss``, and its growth over the process before the calls), and how many rows the
database holds afterwards.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import pathlib
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

import trio

import dsh_host

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]


async def body(args: Any, ctx: Any) -> Any:
    return args["text"]


def _echo() -> dsh_host.ToolDefinition:
    return dsh_host.define_tool(
        name="echo",
        description="Echo the text back.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body,
        is_concurrency_safe=lambda args: True,
    )


def _load_before(rev: str) -> types.ModuleType:
    """``dsh_plugins_builtin/audit.py`` as it was at *rev*, as a module of this package."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:dsh_plugins_builtin/audit.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader("dsh_plugins_builtin._audit_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "dsh_plugins_builtin"
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:dsh_plugins_builtin/audit.py", "exec"), module.__dict__)
    return module


def _plugin(impl: str) -> Any:
    if impl == "after":
        from dsh_plugins_builtin.audit import AuditPlugin

        return AuditPlugin()
    return sys.modules["dsh_plugins_builtin._audit_before"].AuditPlugin()


def _audit_host(impl: str, table: dict[str, Any]) -> dsh_host.Host:
    where = pathlib.Path(tempfile.mkdtemp(prefix="dsh-bench-audit-"))
    config = {"plugin": {"audit": {"path": str(where / "audit.sqlite3"), **table}}}
    host = dsh_host.Host(config, plugins=[_plugin(impl)], load_entrypoints=False)
    host.registry.register(_echo())
    return host


def _default_stack(impl: str | None, **audit: Any) -> dsh_host.Host:
    """The built-ins as ``dsh`` loads them (entry points), audit from *impl* (or none).

    The workspace is a fresh temporary directory with only itself writable; the database lies
    outside it, in a sibling directory, as the audit plugin requires.
    """
    base = pathlib.Path(tempfile.mkdtemp(prefix="dsh-bench-audit-"))
    (base / "ws").mkdir()
    config: dict[str, Any] = {
        "host": {"workspace": str(base / "ws")},
        "plugins": {"enable": BUILTINS},
        "plugin": {
            "sandbox": {"writable_roots": ["."]},
            "permissions": {"allow": ["echo"]},
            "guards": {"max_argument_bytes": 1_000_000},
            "output_budget": {"spill_dir": str(base / "spill")},
        },
    }
    plugins = []
    if impl is not None:
        config["plugin"]["audit"] = {"path": str(base / "db" / "audit.sqlite3"), **audit}
        plugins.append(_plugin(impl))
    host = dsh_host.Host(config, plugins=plugins, environ={})
    host.registry.register(_echo())
    return host


# -- part 1: per call ----------------------------------------------------------------------------


def _cases(before: bool) -> dict[str, Callable[[], Awaitable[Any]]]:
    args = {"text": "hello"}
    hosts: dict[str, dsh_host.Host] = {
        "none": dsh_host.Host(load_entrypoints=False),
        "sync": _audit_host("after", {"durability": "sync"}),
        "async": _audit_host("after", {"durability": "async"}),
        "disabled": _audit_host("after", {"enabled": False}),
        "default+sync": _default_stack("after", durability="sync"),
        "default+async": _default_stack("after", durability="async"),
        "default+off": _default_stack(None),
    }
    hosts["none"].registry.register(_echo())
    if before:
        hosts["before:sync"] = _audit_host("before", {})
        hosts["before:disabled"] = _audit_host("before", {"enabled": False})
        hosts["default+before"] = _default_stack("before")
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        name: (lambda host=host: host.call("echo", args)) for name, host in hosts.items()
    }
    bare = dsh_host.ToolRegistry()
    bare.register(_echo())
    call = dsh_host.ToolExecutionInput(call_id="c", name="echo", arguments=args)
    cases["bare"] = lambda: bare.execute(call)
    return cases


async def _per_call(before: bool, reps: int, calls: int) -> dict[str, dict[str, float]]:
    cases = _cases(before)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for call in cases.values():  # warm up: open databases, start writer threads, fill caches
        for _ in range(200):
            await call()
    for _ in range(reps):
        for name, call in cases.items():
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter_ns()
                for _ in range(calls):
                    await call()
                elapsed = time.perf_counter_ns() - started
            finally:
                gc.enable()
            samples[name].append(elapsed / calls / 1000)
    return {
        name: {"min_us": min(values), "median_us": statistics.median(values)}
        for name, values in samples.items()
    }


# -- part 2: load (one subprocess per implementation and size) -----------------------------------


def _child(impl: str, size: int, before: str | None) -> None:
    if before is not None:
        _load_before(before)
    host = _default_stack(impl)
    plugin = host.pm.get_plugin("audit")
    db = pathlib.Path(plugin.path)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def main() -> float:
        await host.call("echo", {"text": "warm-up"})
        errors = 0

        async def one(i: int) -> None:
            nonlocal errors
            result = await host.call("echo", {"text": str(i)}, call_id=f"c{i}")
            errors += result.is_error

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(size):
                nursery.start_soon(one, i)
        elapsed = time.perf_counter() - started
        if errors:
            print(f"{errors} error results", file=sys.stderr)
        return elapsed

    elapsed = trio.run(main)
    plugin.close()
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    connection = sqlite3.connect(db)
    rows = connection.execute("SELECT count(*) FROM calls").fetchone()[0] - 1  # the warm-up
    connection.close()
    report = {
        "impl": impl,
        "size": size,
        "calls_per_second": size / elapsed,
        "peak_rss_mb": rss_peak / 1024,
        "rss_growth_mb": (rss_peak - rss_before) / 1024,
        "rows": rows,
    }
    print(json.dumps(report))


def _load(sizes: list[int], before: str | None) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        for impl in ["before", "after"] if before is not None else ["after"]:
            argv = [sys.executable, __file__, "--child", impl, str(size)]
            if before is not None:
                argv += ["--before", before]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                out.append({"impl": impl, "size": size, "error": done.stderr.strip()[-500:]})
                continue
            out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


# -- report --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure audit.py as of git REV")
    parser.add_argument("--quick", action="store_true", help="few samples, 10,000 calls only")
    parser.add_argument("--sizes", default=None, help="comma-separated load sizes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.before)
        return 0
    if args.before is not None:
        _load_before(args.before)
    reps, calls = (5, 500) if args.quick else (15, 2000)
    per_call = trio.run(_per_call, args.before is not None, reps, calls)
    default_sizes = "10000" if args.quick else "10000,100000"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",") if s]
    load = _load(sizes, args.before)
    report = {"per_call": per_call, "load": load}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    none = per_call["none"]
    print(f"{'case':<18} {'min µs':>8} {'median µs':>10} {'audit own (median)':>22}")
    for name, figures in per_call.items():
        own = ""
        if name in ("sync", "async", "disabled", "before:sync", "before:disabled"):
            own = f"{figures['median_us'] - none['median_us']:+.1f} µs"
        elif name.startswith("default+") and name != "default+off":
            own = f"{figures['median_us'] - per_call['default+off']['median_us']:+.1f} µs"
        print(f"{name:<18} {figures['min_us']:>8.1f} {figures['median_us']:>10.1f} {own:>22}")
    bare = per_call["bare"]["median_us"]
    for name in ("default+sync", "default+async", "default+before", "default+off"):
        if name in per_call:
            print(f"{name} / bare pipeline: {per_call[name]['median_us'] / bare:.1f}x")
    print()
    print(f"{'impl':<8} {'calls':>8} {'calls/s':>10} {'peak RSS MB':>12} {'growth MB':>10} rows")
    for row in load:
        if "error" in row:
            print(f"{row['impl']:<8} {row['size']:>8} failed: {row['error']}")
            continue
        print(
            f"{row['impl']:<8} {row['size']:>8} {row['calls_per_second']:>10.0f} "
            f"{row['peak_rss_mb']:>12.0f} {row['rss_growth_mb']:>10.0f} {row['rows']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
