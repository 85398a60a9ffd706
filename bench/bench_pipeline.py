"""Per-call overhead of the dsh tool pipeline, as ratios to a bare ``await`` of the tool body.

Run with ``nox -s bench`` (or ``python bench/bench_pipeline.py [--quick] [--json]``).

Everything is measured in one process. Each case is timed in batches (``--calls`` calls per
batch, ``--reps`` batches); a case's figure is the median of the per-batch per-call times. The
cases of one event loop are timed round-robin, batch by batch, and the trio (dsh) and asyncio
(pydantic-ai) loops alternate over ``--rounds`` rounds, so drift on a shared machine hits every
case alike.

Cases:

1. a bare ``await`` of the tool body (the baseline every ratio is relative to);
2. ``registry.execute`` of a valid call, no plugins;
3. the same through three trivial plugins (pre-execute, execute wrapper, post-execute + result
   observer); 3b is the same with every hook ``async def``; 3c puts all four hooks on one plugin;
4. ``registry.execute`` of an invalid call (a required argument missing), no plugins;
5. 10,000 concurrency-safe calls through one ``registry.execute_batch``, per call;
6. pydantic-ai's ``ToolManager.handle_call`` of the same valid call with trivial
   ``before_tool_execute`` / ``wrap_tool_execute`` / ``after_tool_execute`` capabilities
   (see `_pydantic_ai_round` for exactly how its ``ToolManager`` is built).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

import dsh_host

try:
    from pydantic_ai import Agent, RunContext, Tool
    from pydantic_ai.capabilities import AbstractCapability, CombinedCapability
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tool_manager import ToolManager
    from pydantic_ai.tools import ToolDefinition as PydToolDefinition
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import RunUsage
except ImportError as exc:  # the `bench` extra installs it
    PYDANTIC_AI_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    PYDANTIC_AI_ERROR = None

TARGET = 0.5
"""The three-plugin valid call should cost at most this fraction of pydantic-ai's."""

TEXT = "hello"
VALID_ARGS: dict[str, Any] = {"text": TEXT, "n": 3}
INVALID_ARGS: dict[str, Any] = {"n": 3}  # "text" is required

Call = Callable[[], Awaitable[Any]]


# -- settings and samples ------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    reps: int
    calls: int
    batch_reps: int
    batch_size: int
    warmup: int
    rounds: int

    def per_round(self, total: int) -> int:
        return max(1, math.ceil(total / self.rounds))


@dataclass
class Case:
    """One measured case: a zero-argument coroutine factory and how many calls one await makes."""

    key: str
    label: str
    call: Call
    calls_per_await: int = 1
    samples: list[float] = field(default_factory=list)  # ns per call, one per batch

    def median_us(self) -> float:
        return statistics.median(self.samples) / 1000

    def best_us(self) -> float:
        return min(self.samples) / 1000

    def spread(self) -> float:
        """Interquartile range over the median, as a fraction."""
        if len(self.samples) < 4:
            return (max(self.samples) - min(self.samples)) / statistics.median(self.samples)
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / statistics.median(self.samples)


async def _time_round_robin(cases: list[Case], awaits: int, reps: int, warmup: int) -> None:
    """Warm each case up, then time *reps* batches of *awaits* awaits each, cycling the cases."""
    for case in cases:
        for _ in range(max(1, warmup // case.calls_per_await)):
            await case.call()
    for _ in range(reps):
        for case in cases:
            call = case.call
            started = time.perf_counter_ns()
            for _ in range(awaits):
                await call()
            elapsed = time.perf_counter_ns() - started
            case.samples.append(elapsed / (awaits * case.calls_per_await))


# -- dsh -----------------------------------------------------------------------------------------


async def body(args: Any, ctx: Any) -> Any:
    """The echo tool body: every dsh case runs this."""
    return args["text"]


class PreExecute:
    @dsh_host.hookimpl
    def dsh_tool_pre_execute(self, execution: dsh_host.ToolExecution) -> None:
        return None


class ExecuteWrapper:
    @dsh_host.hookimpl
    async def dsh_tool_execute(
        self,
        execution: dsh_host.ToolExecution,
        call_next: Callable[[], Awaitable[dsh_host.ToolExecutionResult]],
    ) -> dsh_host.ToolExecutionResult:
        return await call_next()


class PostExecuteAndObserve:
    @dsh_host.hookimpl
    def dsh_tool_post_execute(
        self, execution: dsh_host.ToolExecution, result: dsh_host.ToolExecutionResult
    ) -> None:
        return None

    @dsh_host.hookimpl
    def dsh_tool_result(
        self, execution: dsh_host.ToolExecution, result: dsh_host.ToolExecutionResult
    ) -> None:
        return None


class AsyncPreExecute:
    @dsh_host.hookimpl
    async def dsh_tool_pre_execute(self, execution: dsh_host.ToolExecution) -> None:
        return None


class AsyncPostExecuteAndObserve:
    @dsh_host.hookimpl
    async def dsh_tool_post_execute(
        self, execution: dsh_host.ToolExecution, result: dsh_host.ToolExecutionResult
    ) -> None:
        return None

    @dsh_host.hookimpl
    async def dsh_tool_result(
        self, execution: dsh_host.ToolExecution, result: dsh_host.ToolExecutionResult
    ) -> None:
        return None


class AllHooks(PreExecute, ExecuteWrapper, PostExecuteAndObserve):
    """One plugin object implementing all four hooks (the counterpart of pydantic-ai case 6b)."""


def _echo_tool() -> dsh_host.ToolDefinition:
    return dsh_host.define_tool(
        name="echo",
        description="Echo the text back.",
        parameters={"text": {"type": "string", "required": True}, "n": {"type": "integer"}},
        execute=body,
        is_concurrency_safe=lambda args: True,
    )


def _host(plugins: list[object]) -> dsh_host.Host:
    host = dsh_host.Host(plugins=plugins, load_entrypoints=False)
    host.registry.register(_echo_tool())
    return host


BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]


def _default_stack(*, audit: bool) -> dsh_host.Host:
    """The built-ins as `dsh` loads them (entry points), with echo allowed by a permission rule.

    Audit writes to a database in a temporary directory, like a user's would.
    """
    where = pathlib.Path(tempfile.mkdtemp(prefix="dsh-bench-"))
    config = {
        "host": {"workspace": str(where)},
        "plugins": {"enable": [*BUILTINS, "audit"] if audit else BUILTINS},
        "plugin": {
            "permissions": {"allow": ["echo"]},
            "guards": {"max_argument_bytes": 1_000_000},
            "output_budget": {"spill_dir": str(where / "spill")},
            **({"audit": {"path": str(where / "audit.sqlite3")}} if audit else {}),
        },
    }
    host = dsh_host.Host(config, environ={})
    host.registry.register(_echo_tool())
    return host


@dataclass
class DshSetup:
    """The per-call cases, the batch case, and the registries the plugin cases run on."""

    cases: list[Case]
    batch: Case
    plugged: dict[str, dsh_host.ToolRegistry]


def _dsh_setup(settings: Settings) -> DshSetup:
    """Build the registries and cases (outside any event loop)."""
    bare = dsh_host.ToolRegistry()
    bare.register(_echo_tool())
    plugged = {
        "plugins": _host([PreExecute(), ExecuteWrapper(), PostExecuteAndObserve()]).registry,
        "plugins_async": _host(
            [AsyncPreExecute(), ExecuteWrapper(), AsyncPostExecuteAndObserve()]
        ).registry,
        "plugin_one": _host([AllHooks()]).registry,
        "default": _default_stack(audit=True).registry,
        "default_no_audit": _default_stack(audit=False).registry,
    }
    valid = dsh_host.ToolExecutionInput(call_id="call-1", name="echo", arguments=VALID_ARGS)
    invalid = dsh_host.ToolExecutionInput(call_id="call-1", name="echo", arguments=INVALID_ARGS)
    batch = [
        dsh_host.ToolExecutionInput(call_id=f"call-{i}", name="echo", arguments=VALID_ARGS)
        for i in range(settings.batch_size)
    ]
    cases = [
        Case("bare", "bare await of the tool body", functools.partial(body, VALID_ARGS, None)),
        Case("valid", "execute: valid call, no plugins", functools.partial(bare.execute, valid)),
        Case(
            "plugins",
            "execute: valid call, 3 plugins",
            functools.partial(plugged["plugins"].execute, valid),
        ),
        Case(
            "plugins_async",
            "execute: valid call, 3 plugins, all hooks async",
            functools.partial(plugged["plugins_async"].execute, valid),
        ),
        Case(
            "plugin_one",
            "execute: valid call, 1 plugin, all 4 hooks",
            functools.partial(plugged["plugin_one"].execute, valid),
        ),
        Case(
            "default",
            "execute: valid call, default stack (audit included)",
            functools.partial(plugged["default"].execute, valid),
        ),
        Case(
            "default_no_audit",
            "execute: valid call, default stack without audit",
            functools.partial(plugged["default_no_audit"].execute, valid),
        ),
        Case(
            "invalid",
            "execute: invalid call (no text), no plugins",
            functools.partial(bare.execute, invalid),
        ),
    ]
    batch_case = Case(
        "batch",
        f"execute_batch: {settings.batch_size:,} calls, per call",
        functools.partial(bare.execute_batch, batch),
        calls_per_await=settings.batch_size,
    )
    return DshSetup(cases, batch_case, plugged)


async def _check_dsh(setup: DshSetup) -> None:
    """Fail loudly if a case does not do what its label says."""
    by_key = {case.key: case for case in setup.cases}
    assert await by_key["bare"].call() == TEXT
    for key in ("valid", *setup.plugged):
        result = await by_key[key].call()
        assert not result.is_error, (key, result)
        assert result.text == TEXT, (key, result)
    result = await by_key["invalid"].call()
    assert result.is_error, result
    assert result.code == "INVALID_ARGS", result
    results = await setup.batch.call()
    assert len(results) == setup.batch.calls_per_await
    assert all(not r.is_error and r.text == TEXT for r in results)
    # The plugin cases consult every hook (observers are not traced: count their impls instead).
    for key, registry in setup.plugged.items():
        if key.startswith("default"):
            continue
        events: list[dsh_host.TraceEvent] = []
        check = dsh_host.ToolExecutionInput(call_id="check", name="echo", arguments=VALID_ARGS)
        await registry.execute(check, trace=events.append)
        stages = [e.stage for e in events]
        for hook in ("dsh_tool_pre_execute", "dsh_tool_execute", "dsh_tool_post_execute"):
            assert stages.count(hook) == 1, (key, stages)
        assert len(registry.hooks.impls("dsh_tool_result")) == 1, key


async def _dsh_round(setup: DshSetup, settings: Settings, first: bool) -> None:
    if first:
        await _check_dsh(setup)
    reps = settings.per_round(settings.reps)
    await _time_round_robin(setup.cases, settings.calls, reps, settings.warmup)
    reps = settings.per_round(settings.batch_reps)
    await _time_round_robin([setup.batch], 1, reps, settings.batch_size)


# -- pydantic-ai ---------------------------------------------------------------------------------


async def pyd_echo(ctx: RunContext[None], text: str, n: int | None = None) -> str:
    """The same echo tool for pydantic-ai (typed arguments, run context like dsh's ``ctx``)."""
    return text


def _pyd_tool() -> Tool[None]:
    return Tool(pyd_echo, name="echo", takes_ctx=True)


def _pyd_capabilities() -> dict[str, type[Any]]:
    """Trivial capabilities, one hook each, plus one holding all three hooks."""

    class BeforeExecute(AbstractCapability[None]):
        async def before_tool_execute(
            self,
            ctx: RunContext[None],
            *,
            call: ToolCallPart,
            tool_def: PydToolDefinition,
            args: dict[str, Any],
        ) -> dict[str, Any]:
            return args

    class WrapExecute(AbstractCapability[None]):
        async def wrap_tool_execute(
            self,
            ctx: RunContext[None],
            *,
            call: ToolCallPart,
            tool_def: PydToolDefinition,
            args: dict[str, Any],
            handler: Callable[[dict[str, Any]], Awaitable[Any]],
        ) -> Any:
            return await handler(args)

    class AfterExecute(AbstractCapability[None]):
        async def after_tool_execute(
            self,
            ctx: RunContext[None],
            *,
            call: ToolCallPart,
            tool_def: PydToolDefinition,
            args: dict[str, Any],
            result: Any,
        ) -> Any:
            return result

    class AllThree(BeforeExecute, WrapExecute, AfterExecute):
        pass

    return {
        "before": BeforeExecute,
        "wrap": WrapExecute,
        "after": AfterExecute,
        "all": AllThree,
    }


PYD_LABELS = {
    "pyd3": "pydantic-ai handle_call: 3 capabilities",
    "pyd1": "pydantic-ai handle_call: 1 capability, 3 hooks",
    "pyd_agent": "pydantic-ai handle_call: 3 caps, Agent-built",
}


PYD_DISPATCH: dict[str, list[str]] = {}
"""The root capability's dispatch order per pydantic-ai case, recorded by the first round."""


def _dispatch_names(manager: Any) -> list[str]:
    root = manager.root_capability
    members = getattr(root, "_dispatch", None) or getattr(root, "capabilities", [root])
    return [type(c).__name__ for c in members]


async def _pydantic_ai_round(cases: dict[str, Case], settings: Settings, first: bool) -> None:
    """Build pydantic-ai ToolManagers for a run step and time ``handle_call`` on each.

    * ``pyd3`` (case 6, the headline), no Agent::

          toolset = FunctionToolset([Tool(pyd_echo, name="echo", takes_ctx=True)])
          root = CombinedCapability([BeforeExecute(), WrapExecute(), AfterExecute()])
          ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
          manager = await ToolManager(toolset, root_capability=root).for_run_step(ctx)

      ``CombinedCapability`` is what an Agent wraps its capabilities in, and
      ``ToolManager(...).for_run_step(run_context)`` is how ``Agent.iter`` builds a step's manager.
    * ``pyd1`` (case 6b): the same with one capability class implementing all three hooks.
    * ``pyd_agent`` (case 6c): the manager a real run builds, from
      ``Agent(TestModel(call_tools=[]), tools=[the same Tool], capabilities=[the three])``:
      ``run.ctx.deps.tool_manager`` inside ``agent.iter(...)`` once the step resolved its tools.
      It also dispatches the agent's own capabilities (ToolSearch, PendingMessageDrain).

    Only ``handle_call`` is timed, on one prebuilt ``ToolCallPart`` with dict arguments.
    """
    caps = _pyd_capabilities()
    three = [caps["before"](), caps["wrap"](), caps["after"]()]

    async def hand_built(root: Any) -> Any:
        ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
        toolset = FunctionToolset[None]([_pyd_tool()])
        return await ToolManager[None](toolset, root_capability=root).for_run_step(ctx)

    managers: dict[str, Any] = {
        "pyd3": await hand_built(CombinedCapability(three)),
        "pyd1": await hand_built(CombinedCapability([caps["all"]()])),
    }
    agent = Agent(TestModel(call_tools=[]), tools=[_pyd_tool()], capabilities=three)
    call = ToolCallPart(tool_name="echo", args=dict(VALID_ARGS), tool_call_id="call-1")
    async with agent.iter("benchmark") as run:
        async for _node in run:
            manager = run.ctx.deps.tool_manager
            if manager.tools:
                managers["pyd_agent"] = manager
                break
        assert "pyd_agent" in managers, "the agent run never resolved its tools"
        for key, manager in managers.items():
            if first:
                assert await manager.handle_call(call) == TEXT, key
                names = _dispatch_names(manager)
                wanted = (
                    ["AllThree"]
                    if key == "pyd1"
                    else ["BeforeExecute", "WrapExecute", "AfterExecute"]
                )
                assert all(n in names for n in wanted), (key, names)
                PYD_DISPATCH[key] = names
            cases[key].call = functools.partial(manager.handle_call, call)
        await _time_round_robin(
            list(cases.values()), settings.calls, settings.per_round(settings.reps), settings.warmup
        )


# -- reporting -----------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _report(
    settings: Settings,
    dsh_cases: list[Case],
    pyd_cases: dict[str, Case],
    elapsed: float,
) -> dict[str, Any]:
    base = dsh_cases[0].median_us()
    numbered = dict(zip(["1", "2", "3", "3b", "3c", "3d", "3e", "4", "5"], dsh_cases, strict=True))
    numbered.update(zip(["6", "6b", "6c"], pyd_cases.values(), strict=False))
    rows = [
        {
            "id": num,
            "case": case.key,
            "label": case.label,
            "us_per_call": case.median_us(),
            "best_us_per_call": case.best_us(),
            "iqr_fraction": case.spread(),
            "ratio_to_bare_await": _ratio(case.median_us(), base),
            "batches": len(case.samples),
            "samples_ns_per_call": [round(x, 1) for x in case.samples],
        }
        for num, case in numbered.items()
    ]
    plugins = numbered["3"].median_us()
    stack = {
        "default_over_bare_pipeline": _ratio(numbered["3d"].median_us(), numbered["2"].median_us()),
        "default_without_audit_over_bare_pipeline": _ratio(
            numbered["3e"].median_us(), numbered["2"].median_us()
        ),
    }
    comparison: dict[str, Any] = {"available": PYDANTIC_AI_ERROR is None, "target": TARGET}
    if PYDANTIC_AI_ERROR is None:
        comparison["version"] = importlib.metadata.version("pydantic-ai-slim")
        comparison["ratios"] = {
            key: _ratio(plugins, case.median_us()) for key, case in pyd_cases.items()
        }
        comparison["ratio"] = comparison["ratios"]["pyd3"]
        comparison["ratio_fastest_batches"] = _ratio(
            numbered["3"].best_us(), pyd_cases["pyd3"].best_us()
        )
        comparison["one_plugin_vs_one_capability"] = _ratio(
            numbered["3c"].median_us(), pyd_cases["pyd1"].median_us()
        )
        comparison["capabilities"] = PYD_DISPATCH
        comparison["meets_target"] = comparison["ratio"] <= TARGET
    else:
        comparison["skipped"] = PYDANTIC_AI_ERROR
    return {
        "python": platform.python_version(),
        "trio": trio.__version__,
        "cpus": os.cpu_count(),
        "settings": settings.__dict__,
        "seconds": elapsed,
        "cases": rows,
        "default_stack": stack,
        "pydantic_ai": comparison,
    }


def _print_table(report: dict[str, Any]) -> None:
    s = report["settings"]
    print(
        f"dsh pipeline per-call overhead - Python {report['python']}, trio {report['trio']}, "
        f"{report['cpus']} CPUs"
    )
    print(
        f"median of per-batch per-call times: {s['reps']} batches x {s['calls']:,} calls "
        f"(execute_batch: {s['batch_reps']} x {s['batch_size']:,}), {s['rounds']} rounds, "
        f"{report['seconds']:.1f} s"
    )
    print()
    width = max(len(r["label"]) for r in report["cases"]) + 2
    print(f"{'':<4}{'case':<{width}} {'µs/call':>9} {'IQR':>6} {'x bare await':>13} {'fastest':>8}")
    print("-" * (width + 43))
    for row in report["cases"]:
        if row["id"] == "6":
            print()
        print(
            f"{row['id']:<4}{row['label']:<{width}} {row['us_per_call']:>9.2f} "
            f"{row['iqr_fraction']:>6.0%} {row['ratio_to_bare_await']:>13.1f} "
            f"{row['best_us_per_call']:>8.2f}"
        )
    print()
    stack = report["default_stack"]
    print(
        f"default stack / bare pipeline (case 3d / case 2): {stack['default_over_bare_pipeline']:.1f}x; "
        f"without audit (3e / 2): {stack['default_without_audit_over_bare_pipeline']:.1f}x"
    )
    comparison = report["pydantic_ai"]
    if not comparison["available"]:
        print(
            f"pydantic-ai comparison skipped: cannot import pydantic_ai ({comparison['skipped']}); "
            "install the `bench` extra (pip install -e '.[bench]', as `nox -s bench` does)"
        )
        return
    verdict = "met" if comparison["meets_target"] else "NOT met"
    ratios = comparison["ratios"]
    print(
        f"dsh/pydantic-ai {comparison['version']} (3 plugins, case 3 / case 6): "
        f"{comparison['ratio']:.2f}x  (target <= {TARGET:.2f}x: {verdict}; "
        f"fastest batches: {comparison['ratio_fastest_batches']:.2f}x)"
    )
    print(
        f"  sensitivity: 3 vs 6c (Agent-built manager) {ratios['pyd_agent']:.2f}x; "
        f"3 vs 6b (one capability) {ratios['pyd1']:.2f}x; "
        f"3c vs 6b (one plugin vs one capability) {comparison['one_plugin_vs_one_capability']:.2f}x"
    )
    for num, key in (("6", "pyd3"), ("6b", "pyd1"), ("6c", "pyd_agent")):
        names = " > ".join(comparison["capabilities"].get(key, []))
        print(f"  {num:<2} root capability dispatch: {names}")


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--reps", type=int, help="batches per case (default 20; quick 6)")
    parser.add_argument("--calls", type=int, help="calls per batch (default 2000)")
    parser.add_argument("--rounds", type=int, help="trio/asyncio alternations (default 4; quick 1)")
    options = parser.parse_args(argv)
    settings = Settings(
        reps=options.reps or (6 if options.quick else 20),
        calls=options.calls or 2000,
        batch_reps=3 if options.quick else 8,
        batch_size=10_000,
        warmup=500 if options.quick else 2000,
        rounds=options.rounds or (1 if options.quick else 4),
    )
    started = time.perf_counter()
    setup = _dsh_setup(settings)
    pyd_cases = (
        {key: Case(key, label, _unset) for key, label in PYD_LABELS.items()}
        if PYDANTIC_AI_ERROR is None
        else {}
    )
    for index in range(settings.rounds):
        gc.collect()
        trio.run(_dsh_round, setup, settings, index == 0)
        if pyd_cases:
            gc.collect()
            asyncio.run(_pydantic_ai_round(pyd_cases, settings, index == 0))
    report = _report(
        settings, [*setup.cases, setup.batch], pyd_cases, time.perf_counter() - started
    )
    if options.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        _print_table(report)
    return 0


async def _unset() -> None:
    raise AssertionError("case timed before its call was set")


if __name__ == "__main__":
    sys.exit(main())
