"""What the sandbox and the built-in search cost, measured through the whole dsh pipeline.

Run with ``python bench/bench_tools.py [--calls 20] [--runs 5] [--root /work/main] [--json]``.

1. **Sandbox overhead of ``bash``.** ``bash -c true`` through ``host.call`` (validation, the tool
   body, the sandbox plugin, ``run_confined``), once per configuration per round, rounds
   interleaved so drift hits every configuration alike: unconfined (``danger-full-access``),
   ``bwrap``, ``landlock`` (started by the fork server), ``landlock`` forking the host (its
   fallback), and a raw ``bwrap ... true`` spawn (the same profile minus the seccomp filter, no
   dsh at all). Reported: the median of ``--calls`` calls, the cost each backend adds over the
   unconfined median, each median as a ratio to the raw bwrap spawn, and landlock / bwrap
   (target <= 1.2, issue 11).
2. **``grep`` vs ``grep -rn``.** The ``grep`` tool over ``--root`` through ``host.call``, against
   ``grep -rnE PATTERN ROOT`` and against ``grep -nE PATTERN FILES...`` over exactly the files
   the tool searches (the tool skips ``.git`` and ``.gitignore``d files; ``grep -rn`` reads
   everything), output captured, alternated, median of ``--runs`` runs each, as ratios
   (tool / grep). Two patterns: ``def `` (the tool stops at its 500-match cap, as a model would
   see it) and a pattern that matches nothing (every file is read: full-scan throughput).
"""

from __future__ import annotations

import argparse
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

from dsh_host import Host
from dsh_plugins_builtin._sandbox import _forkclient
from dsh_plugins_builtin._sandbox._confine import probe_backends
from dsh_plugins_builtin._tools._walk import walk_files
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

NO_MATCH = "zq_no_such_token_[0-9]{40}"
HOST_FORK = "landlock (forking the host)"


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


async def bench_bash(workspace: Path, calls: int) -> dict[str, Any]:
    probes = probe_backends()  # probed once up front, so no call pays for it
    configs: dict[str, Host] = {"unconfined": make_host(workspace, mode="danger-full-access")}
    skipped: dict[str, str] = {}
    for backend in ("bwrap", "landlock"):
        reason = probes["landlock-net" if backend == "landlock" else backend]
        if reason is None:
            # Landlock refuses protected paths inside writable roots: measure it without any.
            extra: dict[str, Any] = (
                {"protected": [], "protect_config": False} if backend == "landlock" else {}
            )
            configs[backend] = make_host(workspace, backend=backend, writable_roots=["."], **extra)
            if backend == "landlock":  # the fallback: the host forks the supervisor itself
                configs[HOST_FORK] = configs[backend]
        else:
            skipped[backend] = reason
    bwrap = shutil.which("bwrap")
    raw = None
    if bwrap is not None:
        raw = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
        raw += ["--cap-drop", "ALL", "--new-session", "--die-with-parent", "--", "true"]
    samples: dict[str, list[float]] = {name: [] for name in configs}
    raw_samples: list[float] = []
    for name, host in configs.items():  # warm-up: imports, first fork
        _forkclient.ENABLED = name != HOST_FORK
        await time_call(host, "bash", {"command": "true"})
    for _ in range(calls):
        for name, host in configs.items():
            _forkclient.ENABLED = name != HOST_FORK
            elapsed, _result = await time_call(host, "bash", {"command": "true"})
            samples[name].append(elapsed)
        _forkclient.ENABLED = True
        if raw is not None:
            started = time.perf_counter()
            await trio.run_process(raw)
            raw_samples.append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["unconfined"]
    raw_median = statistics.median(raw_samples) if raw_samples else None
    return {
        "calls": calls,
        "median_ms": {name: round(m * 1000, 2) for name, m in medians.items()},
        "added_ms": {
            name: round((m - base) * 1000, 2) for name, m in medians.items() if name != "unconfined"
        },
        "landlock_over_bwrap": round(medians["landlock"] / medians["bwrap"], 2)
        if "landlock" in medians and "bwrap" in medians
        else None,
        "raw_bwrap_true_ms": None if raw_median is None else round(raw_median * 1000, 2),
        "ratio_to_raw_bwrap": {}
        if raw_median is None
        else {name: round(m / raw_median, 2) for name, m in medians.items()},
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
    same_files = [e.path for _, e in walk_files(real, top=real) if not e.is_symlink()]
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
    return {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "bash_true": await bench_bash(workspace, args.calls),
        "grep": await bench_grep(Path(args.root).resolve(), args.runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="bash calls per configuration")
    parser.add_argument("--runs", type=int, default=5, help="grep runs per side")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--workspace", default="/tmp/dsh-bench-tools")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = trio.run(main_async, args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    bash = report["bash_true"]
    print(f"bash -c true through host.call, median of {bash['calls']} calls:")
    for name, ms in bash["median_ms"].items():
        added = bash["added_ms"].get(name)
        extra = f"  (+{added} ms over unconfined)" if added is not None else ""
        ratio = bash["ratio_to_raw_bwrap"].get(name)
        extra += f"  x{ratio} a raw bwrap spawn" if ratio is not None else ""
        print(f"  {name:<28} {ms:8.2f} ms{extra}")
    if bash["raw_bwrap_true_ms"] is not None:
        print(f"  {'raw bwrap':<28} {bash['raw_bwrap_true_ms']:8.2f} ms  (bwrap ... true, no dsh)")
    for name, reason in bash["skipped"].items():
        print(f"  {name:<28} skipped: {reason}")
    if bash["landlock_over_bwrap"] is not None:
        print(f"  landlock / bwrap (median): {bash['landlock_over_bwrap']:.2f}  (target <= 1.2)")
    grep = report["grep"]
    print(f"grep tool vs grep over {args.root} (median of {args.runs} runs; ratio = tool / grep):")
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
