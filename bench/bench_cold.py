"""Cold start: whole ``dsh`` processes, wall time, as ratios to ``python -c pass`` (issue 27).

Run with ``python bench/bench_cold.py [--rounds 15] [--json] [--check]``. ``--check`` prints each
figure against its target as markdown table rows. Benchmarks are not tests: nothing fails on a
missed target; the exit status is 0 either way.

Rows (each a fresh process of this interpreter, stdout and stderr captured):

* ``python -c pass``: the denominator, the interpreter's own start;
* ``import dsh_host``: ``python -c 'import dsh_host'``;
* ``dsh call read_file``: ``dsh call read_file '{"path": "a.txt"}'`` in a fresh workspace (a new
  directory holding ``a.txt`` and no config, every time), with the installed plugins;
* ``dsh hook claude``: one ``PreToolUse`` payload (Claude Code's ``Bash`` tool, ``git status``)
  on stdin, in a fresh workspace.

Method: one round runs every row once, in an order rotated each round, so that load from
elsewhere on the machine hits every row alike; garbage collection is off in this process while
it waits. Each row reports the minimum and the median of its wall times; each ratio is min/min
and median/median. The processes run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` is
dropped; a warm-up round writes the caches: the ``.pyc`` files and, beside them, the methods
attrs generates, which the console script keeps (``dsh_host._attrs_code``)) and with ``XDG_STATE_HOME`` and ``XDG_CACHE_HOME``
in a temporary directory that lives for the whole run: a user's state directory persists, so
the entry-point cache is warm after the first run, as it is for a user; the audit rows land
there and not in the user's own log.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

PAYLOAD = {
    "session_id": "bench",
    "transcript_path": "/dev/null",
    "cwd": ".",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "git status", "description": "Show the working tree status"},
    "tool_use_id": "toolu_bench",
}

BASE = "python -c pass"
# row -> target as a ratio to BASE (None: the denominator)
TARGETS: dict[str, float | None] = {
    BASE: None,
    "import dsh_host": 8.0,
    "dsh call read_file, fresh workspace": 15.0,
    "dsh hook claude, one PreToolUse": 12.0,
}


def _dsh() -> list[str]:
    """The ``dsh`` console script beside this interpreter, else ``python -m dsh_host``."""
    script = pathlib.Path(sys.executable).with_name("dsh")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dsh_host"]


def _workspace(root: pathlib.Path) -> pathlib.Path:
    place = pathlib.Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    (place / "a.txt").write_text("hello\n" * 20)
    return place


Run = Callable[[], float]


def _timed(argv: list[str], env: dict[str, str], cwd: pathlib.Path | None, stdin: bytes) -> float:
    started = time.perf_counter_ns()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, cwd=cwd, check=False)
    elapsed = (time.perf_counter_ns() - started) / 1e6
    if done.returncode != 0:
        raise SystemExit(
            f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}"
        )
    return elapsed


def _rows(root: pathlib.Path, env: dict[str, str]) -> dict[str, Run]:
    python = sys.executable
    dsh = _dsh()
    payload = json.dumps(PAYLOAD).encode()

    def fresh(argv: list[str], stdin: bytes = b"") -> Run:
        return lambda: _timed(argv, env, _workspace(root), stdin)

    return {
        BASE: lambda: _timed([python, "-c", "pass"], env, None, b""),
        "import dsh_host": lambda: _timed([python, "-c", "import dsh_host"], env, None, b""),
        "dsh call read_file, fresh workspace": fresh(
            [*dsh, "call", "read_file", '{"path": "a.txt"}']
        ),
        "dsh hook claude, one PreToolUse": fresh([*dsh, "hook", "claude"], payload),
    }


def measure(rounds: int) -> dict[str, list[float]]:
    """Wall times (ms) of each row, *rounds* each, interleaved (after one warm-up round)."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="dsh-bench-cold-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"XDG_STATE_HOME": str(root / "state"), "XDG_CACHE_HOME": str(root / "cache")}
    env.pop("DSH_CONFIG", None)
    rows = _rows(root, env)
    names = list(rows)
    samples: dict[str, list[float]] = {name: [] for name in names}
    try:
        for name in names:  # warm-up: bytecode caches, the entry-point cache
            rows[name]()
        gc.collect()
        gc.disable()
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(rows[name]())
    finally:
        gc.enable()
        shutil.rmtree(root, ignore_errors=True)
    return samples


def report(samples: dict[str, list[float]]) -> dict[str, Any]:
    base_min, base_med = min(samples[BASE]), statistics.median(samples[BASE])
    table = []
    for name, times in samples.items():
        low, mid = min(times), statistics.median(times)
        target = TARGETS[name]
        table.append(
            {
                "figure": name,
                "min_ms": low,
                "median_ms": mid,
                "ratio_min": low / base_min,
                "ratio_median": mid / base_med,
                "target": target,
            }
        )
    return {"rounds": len(samples[BASE]), "load": _load(), "table": table}


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def print_plain(result: dict[str, Any]) -> None:
    print(f"cold start, {result['rounds']} interleaved rounds, load average {result['load']}")
    print(f"{'row':<40} {'min ms':>8} {'median':>8} {'x min':>7} {'x median':>9} {'target':>7}")
    for r in result["table"]:
        target = f"<= {r['target']:g}" if r["target"] is not None else ""
        print(
            f"{r['figure']:<40} {r['min_ms']:>8.1f} {r['median_ms']:>8.1f} "
            f"{r['ratio_min']:>7.2f} {r['ratio_median']:>9.2f} {target:>7}"
        )


def print_check(result: dict[str, Any]) -> None:
    """Markdown rows ``| figure | min | median | target |`` (ratios to ``python -c pass``)."""
    print("| figure | min | median | target |")
    print("|---|---|---|---|")
    for r in result["table"]:
        if r["target"] is None:
            continue
        figure = f"{r['figure']} / {BASE}"
        print(f"| {figure} | {r['ratio_min']:.2f} | {r['ratio_median']:.2f} | <= {r['target']:g} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="3 rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--check", action="store_true", help="print each figure against its target")
    options = parser.parse_args(argv)
    result = report(measure(3 if options.quick else max(1, options.rounds)))
    if options.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    elif options.check:
        print_check(result)
    else:
        print_plain(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
