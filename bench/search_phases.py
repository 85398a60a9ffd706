"""Why ripgrep in the sandbox is slower than plain ``rg``: a bisection of the command line dsh runs.

Run with ``python bench/search_phases.py [--mb 30] [--rounds 11]`` (a helper of
`bench_search`, not a ``--check`` script).

The bwrap command line of one ``grep`` call of the default stack (`bench_search.default_host`)
is captured (`spawn_phases.captured`: its pinned descriptors replaced by their paths, a fresh
seccomp pipe per run) and run again without dsh, then taken apart one difference at a time:
ripgrep's flags, dsh's environment, ``bash -c``, the ``ulimit`` values (each alone too: ``-v``
is the address-space limit), bwrap with no seccomp filter, without ``--unshare-all``, a bare
``bwrap`` of the same namespaces, and the fixed cost alone (``true`` instead of ripgrep).
Every variant runs once per round, interleaved, gc paused, started with `subprocess.run` and
its output read from a pipe. Reported: min and median (ms) and each over plain ``rg``'s; and the
CPU time ripgrep itself used (user + system, bash's ``times`` after it), outside and inside
the sandbox, which no other process's load inflates.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import trio
from bench_search import PATTERN, build_tree, default_host, time_grep, tree_parent
from spawn_phases import captured

from dsh_plugins_builtin._sandbox._bwrap import seccomp_pipe
from dsh_plugins_builtin._sandbox._env import command_env
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf

RAW = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
RAW += ["--cap-drop", "ALL", "--new-session", "--die-with-parent"]
Variant = tuple[list[str], dict[str, str] | None, bool]  # argv, environment, seccomp filter


def timed(
    argv: list[str], cwd: str, env: dict[str, str] | None, seccomp: bool
) -> tuple[float, str]:
    """One run: wall time and what it printed last (``times``' lines, when asked)."""
    fds: tuple[int, ...] = ()
    if seccomp:
        fds = (seccomp_pipe(filter_bpf(True)),)
        at = argv.index("--")
        argv = [*argv[:at], "--seccomp", str(fds[0]), *argv[at:]]
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL, pass_fds=fds
        )
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
        for fd in fds:
            os.close(fd)
    return elapsed, done.stdout.decode(errors="replace")[-200:]


def variants(bwrap_argv: list[str], cwd: str, env: dict[str, str]) -> dict[str, Variant]:
    """The command lines between plain ``rg`` and dsh's, by name."""
    at = bwrap_argv.index("--")
    wrap, command = bwrap_argv[:at], bwrap_argv[at + 1 :]
    script = command[2]  # bash -c 'ulimit -H -S ... || exit 125; exec rg ...'
    limits, _, exec_rg = script.partition(" || exit 125; ")
    rg_argv = shlex.split(exec_rg)[1:]
    plain = [rg_argv[0], "--no-config", "-n", PATTERN, "./"]
    no_unshare = [a for a in wrap if a not in ("--unshare-all", "--unshare-user-try")]

    def bash(text: str) -> list[str]:
        return ["bash", "-c", text]

    out: dict[str, Variant] = {
        "rg (plain: -n PATTERN ./)": (plain, None, False),
        "rg with grep's flags": (rg_argv, None, False),
        "  + dsh's environment": (rg_argv, env, False),
        "  + bash -c 'exec rg ...'": (bash(exec_rg), env, False),
        "  + ulimit (dsh's command, unconfined)": (bash(script), env, False),
    }
    for flag in re.findall(r"-[a-zA-Z] \d+", limits.removeprefix("ulimit -H -S ")):
        out[f"    ulimit {flag.split()[0]} alone"] = (
            bash(f"ulimit -H -S {flag} || exit 125; {exec_rg}"), env, False
        )  # fmt: skip
    out |= {
        "bare bwrap (namespaces, ro /), plain rg": (
            [wrap[0], *RAW, "--chdir", cwd, "--", *plain], env, False
        ),
        "dsh's view, no seccomp": ([*wrap, "--", *command], env, False),
        "dsh's view + seccomp (what grep runs)": ([*wrap, "--", *command], env, True),
        "  the same without --unshare-all": ([*no_unshare, "--", *command], env, True),
        "  the same, plain rg, no bash": ([*wrap, "--", *plain], env, True),
        "fixed cost: dsh's view, true": ([*wrap, "--", "true"], env, True),
        "fixed cost: bare bwrap, true": ([wrap[0], *RAW, "--", "true"], env, False),
        "rg CPU, unconfined (bash times)": (bash(script.replace("exec ", "") + "; times"), env, False),
        "rg CPU, in the sandbox (bash times)": (
            [*wrap, "--", *bash(script.replace("exec ", "") + "; times")], env, True
        ),
    }  # fmt: skip
    return out


def cpu_ms(printed: str) -> float:
    """User + system time of bash's children from ``times``' last line (``0m0.010s 0m0.004s``)."""
    found = re.findall(r"(\d+)m([\d.]+)s", printed.strip().splitlines()[-1])
    return sum(int(m) * 60_000 + float(s) * 1000 for m, s in found)


async def bisect(mb: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="dsh-search-phases-", dir=tree_parent()))
    try:
        tree = tmp / "tree"
        tree.mkdir()
        build_tree(tree, mb)
        host = default_host(tree)

        async def call() -> float:
            return (await time_grep(host))[0]

        argv, _policy = await captured(call)
        env = command_env(os.environ, None, tmpdir="/tmp")  # what dsh gives the command
        table = variants(argv, str(tree), env)
        walls: dict[str, list[float]] = {name: [] for name in table}
        cpus: dict[str, list[float]] = {name: [] for name in table if "CPU" in name}
        for args, environ, seccomp in table.values():
            timed(args, str(tree), environ, seccomp)  # warm up (and the page cache)
        for _ in range(rounds):
            for name, (args, environ, seccomp) in table.items():
                elapsed, printed = timed(args, str(tree), environ, seccomp)
                walls[name].append(elapsed)
                if name in cpus:
                    cpus[name].append(cpu_ms(printed))
            MOUNT_POINTS.settle()
        return walls, cpus
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> None:
    base = walls["rg (plain: -n PATTERN ./)"]
    low, mid = min(base), statistics.median(base)
    print(f"{'variant':<42} {'min ms':>7} {'med ms':>7} {'x rg min':>9} {'x rg med':>9}")
    for name, values in walls.items():
        if name in cpus:
            continue
        a, b = min(values), statistics.median(values)
        print(f"{name:<42} {a * 1000:7.1f} {b * 1000:7.1f} {a / low:9.2f} {b / mid:9.2f}")
    for name, values in cpus.items():
        print(f"{name:<42} {min(values):7.1f} {statistics.median(values):7.1f}  (CPU ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=30, help="size of the generated tree (MB)")
    parser.add_argument("--rounds", type=int, default=11, help="interleaved rounds")
    args = parser.parse_args()
    walls, cpus = trio.run(bisect, args.mb, args.rounds)
    report(walls, cpus)


if __name__ == "__main__":
    main()
