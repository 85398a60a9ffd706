r"""What the sandbox and the built-in search cost, measured through the whole dsh pipeline.

Run with ``python bench/bench_tools.py [--calls 30] [--runs 5] [--root DIR] [--json] [--check]``.

1. **Sandbox spawn.** ``bash -c true`` through ``host.call`` with the default stack (private
   tmp, protected paths, ``deny_read``, environment allowlist, limits, seccomp), once per
   configuration per round, rounds interleaved so drift hits every configuration alike, garbage
   collection paused during a sample: unconfined (``danger-full-access``), ``bwrap`` (started
   in a kept view, `_views`, as from a host's second command on), ``bwrap`` with a fresh bwrap
   per command (its fallback), ``landlock`` (started by the fork server; no protected paths,
   which it refuses), ``landlock`` forking the host (its fallback), and a raw ``bwrap ... true`` spawn (``--ro-bind / / --dev
   /dev --proc /proc --unshare-all --cap-drop ALL --new-session --die-with-parent``, no dsh, a
   blocking ``subprocess.run``). Reported: min and median per configuration, ratios of mins and
   of medians to the raw spawn, and landlock / bwrap.
2. **Where the time goes** (``--phases N`` calls per backend, after the timed rounds, bwrap's
   with a fresh bwrap per command; the
   instrumented functions cost a little themselves): the median per call of each step between
   ``host.call`` and the result: the cwd fence, pins + backend choice + environment, the
   protected mount points taken and given back (bwrap ``mkdir``\s them; their ``rmdir`` is
   done after the result, by a worker thread, and timed apart), the pinned root descriptors,
   the seccomp program, the argv, the spawn (up to ``exec``), the command's run (bwrap's setup,
   bash, its exit), the kill and reaping, the PID namespace's end, and the rest (pipeline,
   output, result, audit). Then the ladder (``spawn_phases.py``): the bwrap command line of a
   call run again without dsh, with ``true`` and with dsh's ``bash -c``, interleaved with the
   raw spawn and ``host.call``: what dsh's view (mounts, namespaces, seccomp), bash and dsh
   itself each add to the raw spawn; and what each kind of mount in dsh's view costs bwrap
   (the view with ``true`` against the same without that kind: protected paths, ``deny_read``
   and dsh's state, the hidden socket directories).
3. **``grep`` vs ``grep -rn``** (not with ``--check``; ``bench_search.py`` has the ripgrep
   row). The ``grep`` tool over ``--root`` through ``host.call``, against ``grep -rnE PATTERN
   ROOT`` and against ``grep -nE PATTERN FILES...`` over exactly the files the tool searches,
   median of ``--runs`` runs each, as ratios (tool / grep); a pattern that stops at the
   500-match cap and one that matches nothing (a full scan).

``--check`` prints the table rows of issue 27 this script owns: ``| figure | min | median |
target |``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
from spawn_phases import (  # bench/, beside this script
    breakdown,
    ladder,
    mount_costs,
    print_ladder,
    print_mount_costs,
)

from dsh_host import Host
from dsh_plugins_builtin._sandbox import _forkclient, _views
from dsh_plugins_builtin._sandbox._confine import probe_backends
from dsh_plugins_builtin._tools._walk import walk_files
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

NO_MATCH = "zq_no_such_token_[0-9]{40}"
HOST_FORK = "landlock (forking the host)"
FRESH = "bwrap (a fresh bwrap each)"
_VIEWLESS = (FRESH, "ladder", "phases")  # samples that run the old way: no kept view
RAW = "raw bwrap ... true"
TARGETS = {"bwrap": 1.2, "landlock / bwrap": 1.0}


def make_host(workspace: Path, **sandbox: Any) -> Host:
    config = {"host": {"workspace": str(workspace)}, "plugin": {"sandbox": sandbox}}
    return Host(config=config, plugins=[ToolsPlugin(), SandboxPlugin()], load_entrypoints=False)


async def time_call(host: Host, name: str, args: dict[str, Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await host.call(name, args)
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise SystemExit(f"{name} {args} failed: {result.text}")
    return elapsed, result


def bash_configs(workspace: Path) -> tuple[dict[str, Host], dict[str, str]]:
    """The hosts to compare (the default stack per backend) and the backends skipped."""
    probes = probe_backends()  # probed once up front, so no call pays for it
    configs: dict[str, Host] = {"unconfined": make_host(workspace, mode="danger-full-access")}
    skipped: dict[str, str] = {}
    for backend in ("bwrap", "landlock"):
        reason = probes["landlock-net" if backend == "landlock" else backend]
        if reason is not None:
            skipped[backend] = reason
            continue
        # Landlock refuses protected paths inside writable roots: measure it without any.
        extra: dict[str, Any] = (
            {"protected": [], "protect_config": False, "protect_install": False}
            if backend == "landlock"
            else {}
        )
        configs[backend] = make_host(workspace, backend=backend, **extra)
        if backend == "landlock":  # the fallback: the host forks the supervisor itself
            configs[HOST_FORK] = configs[backend]
        else:  # the fallback: a fresh bwrap per command, no kept view
            configs[FRESH] = configs[backend]
    return configs, skipped


def raw_bwrap() -> list[str] | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    raw = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
    return [*raw, "--cap-drop", "ALL", "--new-session", "--die-with-parent", "--", "true"]


async def bash_sample(name: str, host: Host | None, raw: list[str] | None) -> float:
    """One timed ``bash -c true`` (or the raw spawn), gc paused."""
    _forkclient.ENABLED = name != HOST_FORK
    _views.ENABLED = name not in _VIEWLESS
    gc.collect()
    gc.disable()
    try:
        if host is None:
            assert raw is not None
            started = time.perf_counter()
            subprocess.run(raw, check=True)
            return time.perf_counter() - started
        return (await time_call(host, "bash", {"command": "true"}))[0]
    finally:
        gc.enable()
        _forkclient.ENABLED = True
        _views.ENABLED = True


def ratio(samples: dict[str, list[float]], over: str, under: str) -> dict[str, float] | None:
    if not samples.get(over) or not samples.get(under):
        return None
    return {
        "min": min(samples[over]) / min(samples[under]),
        "median": statistics.median(samples[over]) / statistics.median(samples[under]),
    }


async def bench_bash(workspace: Path, calls: int, phases: int) -> dict[str, Any]:
    configs, skipped = bash_configs(workspace)
    raw = raw_bwrap()
    order: dict[str, Host | None] = {**configs, **({RAW: None} if raw is not None else {})}
    samples: dict[str, list[float]] = {name: [] for name in order}
    for name, host in order.items():  # warm-up: imports, first fork, the fork server
        await bash_sample(name, host, raw)
    for _ in range(calls):
        for name, host in order.items():
            samples[name].append(await bash_sample(name, host, raw))
    ratios = {name: ratio(samples, name, RAW) for name in configs}
    per_step = {  # bwrap's steps are those of a fresh bwrap (a kept view's are the server's)
        name: await breakdown(
            functools.partial(
                bash_sample, "phases" if name == FRESH else name, configs[name], None
            ),
            phases,
        )
        for name in (FRESH, "landlock")
        if name in configs and phases
    }
    steps = costs = None
    if "bwrap" in configs and raw is not None and phases:
        call = functools.partial(bash_sample, "ladder", configs["bwrap"], None)
        steps = await ladder(call, raw, str(workspace), phases)
        costs = await mount_costs(call, str(workspace), phases)
    return {
        "calls": calls,
        "ms": {
            name: {"min": min(v) * 1000, "median": statistics.median(v) * 1000}
            for name, v in samples.items()
        },
        "ratio_to_raw_bwrap": {k: v for k, v in ratios.items() if v is not None},
        "landlock_over_bwrap": ratio(samples, "landlock", "bwrap"),
        "phases": per_step,
        "ladder": steps,
        "mount_costs": costs,
        "skipped": skipped,
    }


def system_grep(argv: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    return elapsed, done.stdout.count(b"\n")


async def bench_grep(root: Path, runs: int) -> dict[str, Any]:
    host = make_host(root, mode="read-only")
    real = Path(os.path.realpath(root))
    same_files = [f"{real}/{r}" for r, e in walk_files(real, top=real) if not e.is_symlink()]
    out: dict[str, Any] = {
        "files_searched_by_tool": len(same_files),
        "files_under_root": sum(len(files) for _, _, files in os.walk(root)),
    }
    for label, pattern in (("def ", "def "), ("no match (full scan)", NO_MATCH)):
        rivals = {
            "grep_rn": ["grep", "-rnE", pattern, str(root)],
            "grep_n_same_files": ["grep", "-nE", "--", pattern, *same_files],
        }
        ours: list[float] = []
        theirs: dict[str, list[float]] = {name: [] for name in rivals}
        lines: dict[str, int] = {}
        matches = 0
        await time_call(host, "grep", {"pattern": pattern})  # warm the page cache
        for _ in range(runs):
            elapsed, result = await time_call(host, "grep", {"pattern": pattern})
            ours.append(elapsed)
            matches = result.meta["count"]
            for name, argv in rivals.items():
                elapsed, lines[name] = system_grep(argv)
                theirs[name].append(elapsed)
        tool_ms = statistics.median(ours) * 1000
        row: dict[str, Any] = {"tool_ms": round(tool_ms, 2), "tool_matches": matches}
        for name in rivals:
            rival_ms = statistics.median(theirs[name]) * 1000
            row[name] = {
                "ms": round(rival_ms, 2),
                "lines": lines[name],
                "ratio": round(tool_ms / rival_ms, 2),
            }
        out[label] = row
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workspace = Path(args.workspace).resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
        },
        "bash_true": await bench_bash(workspace, args.calls, 0 if args.check else args.phases),
    }
    if not (args.check or args.no_grep):
        report["grep"] = await bench_grep(Path(args.root).resolve(), args.runs)
    return report


def check_rows(bash: dict[str, Any]) -> list[str]:
    """The rows of issue 27's table this script owns, ``| figure | min | median | target |``."""
    rows = ["| figure | min | median | target |", "|---|---|---|---|"]
    figures = (
        ("`bash -c true` through host.call, default stack + bwrap / raw `bwrap … true`", "bwrap"),
        ("the same with Landlock / bwrap", "landlock / bwrap"),
    )
    for figure, key in figures:
        got = bash["landlock_over_bwrap"] if key == "landlock / bwrap" else None
        got = got if got is not None else bash["ratio_to_raw_bwrap"].get(key)
        if got is None:
            rows.append(f"| {figure} | n/a | n/a | <= {TARGETS[key]:.1f} |")
        else:
            rows.append(
                f"| {figure} | {got['min']:.2f} | {got['median']:.2f} | <= {TARGETS[key]:.1f} |"
            )
    return rows


def print_bash(bash: dict[str, Any]) -> None:
    print(f"bash -c true through host.call, {bash['calls']} interleaved rounds (ms; x raw bwrap):")
    for name, ms in bash["ms"].items():
        got = bash["ratio_to_raw_bwrap"].get(name)
        extra = f"  x{got['min']:.2f} / x{got['median']:.2f}" if got is not None else ""
        print(f"  {name:<28} min {ms['min']:7.2f}  median {ms['median']:7.2f}{extra}")
    for name, reason in bash["skipped"].items():
        print(f"  {name:<28} skipped: {reason}")
    if bash["landlock_over_bwrap"] is not None:
        got = bash["landlock_over_bwrap"]
        print(f"  landlock / bwrap: min {got['min']:.2f}, median {got['median']:.2f} (<= 1.0)")
    for name, steps in bash["phases"].items():
        print(f"where a {name} call's time goes (median per call of each step, ms):")
        for label, ms in steps.items():
            print(f"  {label:<58} {ms:7.3f}")
    if bash["ladder"] is not None:
        print_ladder(bash["ladder"])
    if bash["mount_costs"] is not None:
        print_mount_costs(bash["mount_costs"])


def print_grep(grep: dict[str, Any], root: str, runs: int) -> None:
    print(f"grep tool vs grep over {root} (median of {runs} runs; ratio = tool / grep):")
    for label in ("def ", "no match (full scan)"):
        row = grep[label]
        print(f"  pattern {label!r}: tool {row['tool_ms']:.2f} ms ({row['tool_matches']} matches)")
        for name in ("grep_rn", "grep_n_same_files"):
            rival = row[name]
            print(
                f"    {name:<18} {rival['ms']:8.2f} ms ({rival['lines']} lines)  "
                f"ratio {rival['ratio']}"
            )
    print(
        f"  files: the tool searches {grep['files_searched_by_tool']} "
        f"(.gitignore honoured, no .git); grep -rn reads {grep['files_under_root']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="interleaved rounds of bash calls")
    parser.add_argument("--phases", type=int, default=30, help="calls timed step by step")
    parser.add_argument("--runs", type=int, default=5, help="grep runs per side")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--workspace", default="/tmp/dsh-bench-tools")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true", help="print the table rows only")
    parser.add_argument("--no-grep", action="store_true", help="only the sandbox spawn")
    args = parser.parse_args(argv)
    report = trio.run(main_async, args)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.check:
        print("\n".join(check_rows(report["bash_true"])))
    else:
        print(f"load average: {' '.join(f'{x:.2f}' for x in report['machine']['load'])}")
        print_bash(report["bash_true"])
        if "grep" in report:
            print_grep(report["grep"], args.root, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
