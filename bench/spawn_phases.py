"""Where a sandboxed ``bash -c true`` spends what a raw ``bwrap ... true`` does not (a helper of
``bench_tools.py``, not a script).

The bwrap command line one ``host.call`` ran is captured and run again without dsh (its pinned
descriptors replaced by their paths, a fresh seccomp pipe per run, started with a blocking
``subprocess.run`` as the raw spawn is), in interleaved rounds with ``host.call`` itself and the
raw spawn, gc paused during a sample. The steps up the ladder, each the difference of medians:

1. the raw spawn (the ratio's denominator);
2. dsh's view with ``true`` as the command: bwrap setting up (and the kernel tearing down) the
   mounts (masks, the private tmp, the writable roots, protected paths and their ``mkdir``\\s,
   ``deny_read``), the namespaces (a user namespace where it can), the seccomp filter;
3. the command dsh runs: ``bash -c 'ulimit ... || exit 125; true'`` instead of ``true``;
4. ``host.call``: dsh around the same command line (the pipeline, the fences, the argv, the
   spawn without a worker thread, the output pipe, the PID namespace's end, the result, audit);
5. the removal of the empty mount points over the missing protected paths (``rmdir`` each),
   timed after each replay: off the call since they are removed in the background.

`mount_costs` splits step 2 by kind of mount: the view against the same without that kind.
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dsh_plugins_builtin._sandbox import _confine
from dsh_plugins_builtin._sandbox._bwrap import layout_of, seccomp_pipe
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf

LADDER = (
    "raw bwrap ... true",
    "+ dsh's view (mounts, namespaces, seccomp), true",
    "+ bash -c with the limits (the command dsh runs)",
    "+ dsh around it: host.call",
)
RMDIR = "the mount points' rmdir (off the call)"


class Phases:
    """Wraps the steps of a sandboxed call to time them (per call: the sum of each step)."""

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        self.undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr)
        add = self._add
        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    add(label, time.perf_counter() - started)

            setattr(owner, attr, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    add(label, time.perf_counter() - started)

            setattr(owner, attr, timed)
        self.undo.append(lambda: setattr(owner, attr, original))

    def _add(self, label: str, seconds: float) -> None:
        self.now[label] = self.now.get(label, 0.0) + seconds

    def restore(self) -> None:
        for undo in reversed(self.undo):
            undo()


STEPS = (  # (module, attribute path, label): the leaves of a sandboxed call, in order
    ("_plugin", "SandboxPlugin.resolve_cwd", "cwd fence"),
    ("_confine", "check_pinned", "pins, backend, environment"),
    ("_confine", "select_backend", "pins, backend, environment"),
    ("_confine", "command_env", "pins, backend, environment"),
    ("_mountpoints", "_MountPoints.take", "protected mount points: take"),
    ("_confine", "open_roots", "pinned root descriptors"),
    ("_confine", "filter_bpf", "seccomp program (+ pipe)"),
    ("_confine", "seccomp_pipe", "seccomp program (+ pipe)"),
    ("_confine", "confine_argv", "argv"),
    ("_confine", "mount_plan", "mount plan + ruleset (cached)"),
    ("_confine", "_landlock_prepared", "mount plan + ruleset (cached)"),
    ("_run", "_start", "spawn (to exec; landlock: the fork server round trip)"),
    ("_run", "_watch", "the command runs (bwrap setup, bash, exit), output read"),
    ("_run", "_stop", "kill + reap"),
    ("_run", "_Namespace.wait_gone", "PID namespace gone"),
    ("_mountpoints", "_MountPoints.give_back", "protected mount points: given back"),
)
REMOVAL = "after the result, off the call: the mount points' rmdir (background)"
_INSIDE_WATCH = ("kill + reap", "PID namespace gone")


async def breakdown(call: Callable[[], Awaitable[float]], calls: int) -> dict[str, float]:
    """The median per call of each step (ms), and the rest of ``host.call``."""
    phases = Phases()
    for module, path, label in STEPS:
        try:
            owner: Any = importlib.import_module(f"dsh_plugins_builtin._sandbox.{module}")
            *outer, attr = path.split(".")
            for name in outer:
                owner = getattr(owner, name)
            phases.wrap(owner, attr, label)
        except (ImportError, AttributeError):
            continue  # another version of the sandbox: that step is not timed
    per_call: list[dict[str, float]] = []
    try:
        for _ in range(calls):
            phases.now = {}
            total = await call()
            watch = "the command runs (bwrap setup, bash, exit), output read"
            if watch in phases.now:
                phases.now[watch] -= sum(phases.now.get(k, 0.0) for k in _INSIDE_WATCH)
            phases.now["rest (pipeline, tool, result, audit)"] = total - sum(phases.now.values())
            phases.now["total host.call"] = total
            started = time.perf_counter()
            MOUNT_POINTS.settle()
            phases.now[REMOVAL] = time.perf_counter() - started
            per_call.append(phases.now)
    finally:
        phases.restore()
    labels = dict.fromkeys(label for call in per_call for label in call)
    return {
        label: statistics.median(call.get(label, 0.0) for call in per_call) * 1000
        for label in labels
    }


async def captured(call: Callable[[], Awaitable[float]]) -> tuple[list[str], Any]:
    """The bwrap command line of one *call*, its ``--bind-fd``\\s as ``--bind`` of their paths,
    without ``--info-fd`` and ``--seccomp`` (a fresh pipe is added per run); and its policy."""
    seen: list[tuple[list[str], dict[Path, int], Any]] = []
    real = _confine.confine_argv

    def spy(*args: Any, **kwargs: Any) -> list[str]:
        out = real(*args, **kwargs)
        seen.append((list(out), dict(kwargs.get("root_fds") or {}), args[1]))
        return out

    _confine.confine_argv = spy  # type: ignore[assignment]
    try:
        await call()
    finally:
        _confine.confine_argv = real
    MOUNT_POINTS.settle()
    argv, root_fds, policy = seen[-1]
    by_fd = {str(fd): str(path) for path, fd in root_fds.items()}
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--bind-fd":
            out += ["--bind", by_fd[argv[i + 1]], argv[i + 2]]
            i += 3
        elif argv[i] in ("--seccomp", "--info-fd"):
            i += 2
        elif argv[i] == "--":
            out += argv[i:]
            break
        else:
            out.append(argv[i])
            i += 1
    return out, policy


_OPS = {  # flag: words it takes
    "--tmpfs": 2, "--remount-ro": 2, "--ro-bind": 3, "--bind": 3, "--ro-bind-try": 3,
    "--dev-bind": 3,
}  # fmt: skip


def without(argv: list[str], paths: set[str]) -> list[str]:
    """*argv* without the mount operations whose destination is one of *paths* (with the
    ``--size N`` before a ``--tmpfs`` left out)."""
    out: list[str] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        n = _OPS.get(argv[i])
        if n is not None and argv[i + n - 1] in paths:
            if out[-2:-1] == ["--size"]:
                del out[-2:]
            i += n
            continue
        out.append(argv[i])
        i += 1
    return out + argv[i:]


def op_classes(argv: list[str], policy: Any) -> dict[str, set[str]]:
    """The destinations of each kind of mount dsh adds to the raw spawn's (from *policy*)."""
    layout = layout_of(policy)
    dests = {argv[i + _OPS[a] - 1] for i, a in enumerate(argv[: argv.index("--")]) if a in _OPS}
    denied = {str(p) for p in (*layout.denied, *layout.masked_denied, layout.locks)}
    classes = {
        "protected paths (missing: mkdir + tmpfs + remount-ro)": {
            str(p) for p in layout.protected if not os.path.lexists(p)
        },
        "protected paths (existing: ro-bind)": {str(p) for p in layout.protected}
        - {str(p) for p in layout.protected if not os.path.lexists(p)},
        "deny_read + dsh's state (ro-bind /dev/null, tmpfs + remount-ro)": denied,
        "host socket dirs hidden, the private /tmp": {str(p) for p in layout.masks} | {"/tmp"},
        "the machine's /proc parts read-only (ro-bind-try)": {
            "/proc/sys",
            "/proc/sysrq-trigger",
            "/proc/irq",
            "/proc/bus",
            "/proc/fs",
        },
        "a root host's own device nodes (dev-bind)": {
            f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom", "tty")
        },
        "/dev/shm sized, /dev read-only (tmpfs, remount-ro)": {"/dev/shm", "/dev"},
    }  # (not the writable roots: without them, bwrap would make the protected paths elsewhere)
    return {name: paths & dests for name, paths in classes.items() if paths & dests}


def _run(argv: list[str], cwd: str, placeholders: list[str], rmdirs: list[float]) -> float:
    fd = seccomp_pipe(filter_bpf(True))
    at = argv.index("--")
    full = [*argv[:at], "--seccomp", str(fd), *argv[at:]]
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        subprocess.run(full, check=True, pass_fds=(fd,), cwd=cwd, stdin=subprocess.DEVNULL)
        elapsed = time.perf_counter() - started
        started = time.perf_counter()
        for path in placeholders:
            os.rmdir(path)
        rmdirs.append(time.perf_counter() - started)
        return elapsed
    finally:
        gc.enable()
        os.close(fd)


async def ladder(
    call: Callable[[], Awaitable[float]], raw: list[str], cwd: str, rounds: int
) -> dict[str, dict[str, float]]:
    """Each step's min and median (ms) and its median over the step below (``over``)."""
    bash, _policy = await captured(call)
    at = bash.index("--")
    view = [*bash[:at], "--", "true"]
    placeholders = [  # the mount points bwrap makes (not a deny_read entry that is there)
        bash[i + 1]
        for i, arg in enumerate(bash)
        if arg == "--remount-ro" and not os.path.lexists(bash[i + 1])
    ]
    samples: dict[str, list[float]] = {name: [] for name in (*LADDER, RMDIR)}
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            subprocess.run(raw, check=True)
            samples[LADDER[0]].append(time.perf_counter() - started)
        finally:
            gc.enable()
        samples[LADDER[1]].append(_run(view, cwd, placeholders, samples[RMDIR]))
        samples[LADDER[2]].append(_run(bash, cwd, placeholders, samples[RMDIR]))
        samples[LADDER[3]].append(await call())
        MOUNT_POINTS.settle()
    out: dict[str, dict[str, float]] = {}
    below = None
    for name, values in samples.items():
        row = {"min": min(values) * 1000, "median": statistics.median(values) * 1000}
        if below is not None and name != RMDIR:
            row["over"] = row["median"] - below
        below = row["median"]
        out[name] = row
    return out


async def mount_costs(
    call: Callable[[], Awaitable[float]], cwd: str, rounds: int
) -> dict[str, dict[str, float]]:
    """What each kind of mount in dsh's view costs bwrap: the view (``true`` as the command)
    against the same without that kind, interleaved; ms, min and median of the difference."""
    bash, policy = await captured(call)
    view = [*bash[: bash.index("--")], "--", "true"]
    made = [
        a for i, a in enumerate(view) if view[i - 1] == "--remount-ro" and not os.path.lexists(a)
    ]
    variants = {"the view": view}
    for name, paths in op_classes(view, policy).items():
        variants[name] = without(view, paths)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, argv in variants.items():
            placeholders = [path for path in made if path in argv]
            samples[name].append(_run(argv, cwd, placeholders, []))
    whole = samples.pop("the view")
    return {
        name: {
            "min": (min(whole) - min(values)) * 1000,
            "median": (statistics.median(whole) - statistics.median(values)) * 1000,
        }
        for name, values in samples.items()
    }


def print_mount_costs(costs: dict[str, dict[str, float]]) -> None:
    print("what each kind of mount costs bwrap (the view minus the view without it; ms):")
    for name, row in costs.items():
        print(f"  {name:<66} {row['min']:6.2f} {row['median']:6.2f}")


def print_ladder(steps: dict[str, dict[str, float]]) -> None:
    print("where the gap to the raw spawn goes (interleaved; ms: min, median, + over the step):")
    for name, row in steps.items():
        over = f"  +{row['over']:6.2f}" if "over" in row else ""
        print(f"  {name:<50} {row['min']:7.2f} {row['median']:7.2f}{over}")
