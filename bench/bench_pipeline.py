"""The dsh hot path, measured against a bare ``await``, pluggy, and peer frameworks, in one run.

Run with ``nox -s bench`` (or ``python bench/bench_pipeline.py [--quick] [--json] [--check]``).
``--check`` prints each figure of the hot-path table against its target. Benchmarks are not
tests: nothing fails on a missed target; the exit status is 0 either way.

Method: everything runs in one process. Each case is timed in batches (``--calls`` calls per
batch); a case's figures are the minimum and the median of its per-batch per-call times. The
cases of one event loop are timed round-robin, batch by batch, and the trio loop (dsh) and the
asyncio loop (the peers) alternate over ``--rounds`` rounds, so drift on a shared machine hits
every case alike. Garbage collection is paused while a batch is timed and run between batches.
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
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy
import trio

import dsh_host

try:
    from pydantic_ai import RunContext, Tool
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

try:
    from langchain_core.tools import StructuredTool
except ImportError as exc:
    LANGCHAIN_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    LANGCHAIN_ERROR = None

try:
    from agents import function_tool
    from agents.tool_context import ToolContext
except ImportError as exc:
    AGENTS_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    AGENTS_ERROR = None

TEXT = "hello"
VALID_ARGS: dict[str, Any] = {"text": TEXT, "n": 3}
VALID_JSON = json.dumps(VALID_ARGS)
INVALID_ARGS: dict[str, Any] = {"n": 3}  # "text" is required
NESTED_ARGS: dict[str, Any] = {
    "path": "src/app/main.py",
    "limit": 2.5,
    "tags": ["alpha", "beta", "gamma"],
    "flags": {"recursive": True, "hidden": False, "follow": True},
}
"""Realistic nested arguments: a path, a number, a list of strings, an object of booleans."""
NESTED_PARAMETERS: dict[str, Any] = {
    "path": {"type": "string", "required": True},
    "limit": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "flags": {
        "type": "object",
        "properties": {
            "recursive": {"type": "boolean"},
            "hidden": {"type": "boolean"},
            "follow": {"type": "boolean"},
        },
    },
}
EXTRA_IMPLS = 8
"""How many extra trivial pre-execute implementations the per-impl cost is measured over."""
PARKED = 10_000
"""How many in-flight calls the memory figure parks."""
READ_BYTES = 1_400

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
        return statistics.median(self.samples) / 1000 if self.samples else math.nan

    def best_us(self) -> float:
        return min(self.samples) / 1000 if self.samples else math.nan


async def _time_round_robin(cases: list[Case], awaits: int, reps: int, warmup: int) -> None:
    """Warm each case up, then time *reps* batches of *awaits* awaits each, cycling the cases.

    Each case is awaited at least 8 times first: CPython 3.11 specializes a function only after
    its 8th call, and an `execute_batch` runs its loop once per batch (``bench_batch.py``)."""
    for case in cases:
        for _ in range(max(8, warmup // case.calls_per_await)):
            await case.call()
    for _ in range(reps):
        for case in cases:
            call = case.call
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter_ns()
                for _ in range(awaits):
                    await call()
                elapsed = time.perf_counter_ns() - started
            finally:
                gc.enable()
            case.samples.append(elapsed / (awaits * case.calls_per_await))


# -- dsh -----------------------------------------------------------------------------------------


async def body(args: Any, ctx: Any) -> Any:
    """The echo tool body: every dsh case runs this."""
    return args["text"]


async def nested_body(args: Any, ctx: Any) -> Any:
    """The nested-arguments tool body: answers the path."""
    return args["path"]


class PreExecute:
    @dsh_host.hookimpl
    def dsh_tool_pre_execute(self, execution: dsh_host.ToolExecution) -> None:
        return None


class Guard:
    @dsh_host.hookimpl
    def dsh_tool_guard(self, execution: dsh_host.ToolExecution) -> None:
        return None


class ExecuteWrapper:
    @dsh_host.hookimpl
    async def dsh_tool_execute(
        self,
        execution: dsh_host.ToolExecution,
        call_next: Callable[[], Awaitable[dsh_host.ToolExecutionResult]],
    ) -> dsh_host.ToolExecutionResult:
        return await call_next()


class PostExecute:
    @dsh_host.hookimpl
    def dsh_tool_post_execute(
        self, execution: dsh_host.ToolExecution, result: dsh_host.ToolExecutionResult
    ) -> None:
        return None


def _named(plugin: Any, name: str) -> Any:
    plugin.name = name  # a host registers each plugin under its own name
    return plugin


def _echo_tool() -> dsh_host.ToolDefinition:
    return dsh_host.define_tool(
        name="echo",
        description="Echo the text back.",
        parameters={"text": {"type": "string", "required": True}, "n": {"type": "integer"}},
        execute=body,
        is_concurrency_safe=lambda args: True,
    )


def _nested_tool() -> dsh_host.ToolDefinition:
    return dsh_host.define_tool(
        name="nested",
        description="Answer the path.",
        parameters=NESTED_PARAMETERS,
        execute=nested_body,
    )


def _host(plugins: list[object]) -> dsh_host.Host:
    host = dsh_host.Host(plugins=plugins, load_entrypoints=False)
    host.registry.register(_echo_tool())
    host.registry.register(_nested_tool())
    return host


BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]
BUILTINS += ["hook_commands"]


def _default_stack(
    where: pathlib.Path, *, audit: bool, extra: tuple[dsh_host.ToolDefinition, ...] = ()
) -> dsh_host.Host:
    """The built-ins as `dsh` loads them (entry points), with echo allowed by a permission rule.

    The workspace is *where*/ws, the only writable root, so the audit database beside it lies
    outside every writable root, as the audit plugin requires.
    """
    workspace = where / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    config = {
        "host": {"workspace": str(workspace)},
        "plugins": {"enable": [*BUILTINS, "audit"] if audit else BUILTINS},
        "plugin": {
            "permissions": {"allow": ["echo", "read_file", *(t.name for t in extra)]},
            "sandbox": {"writable_roots": ["."]},
            "guards": {"max_argument_bytes": 1_000_000},
            **({"audit": {"path": str(where / "audit.sqlite3")}} if audit else {}),
        },
    }
    return dsh_host.Host(config, plugins=[_BenchTools((_echo_tool(), *extra))], environ={})


class _BenchTools:
    """Registers the benchmark's tools at start, like any tool plugin (so rules can see them)."""

    name = "bench-tools"

    def __init__(self, tools: tuple[dsh_host.ToolDefinition, ...]) -> None:
        self.tools = tools

    @dsh_host.hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        for tool in self.tools:
            register(tool)


@dataclass
class DshSetup:
    """The per-call cases, the batch cases, and the registries behind them."""

    cases: list[Case]
    batches: list[Case]
    registries: dict[str, dsh_host.ToolRegistry]
    read_path: pathlib.Path


def _dsh_setup(settings: Settings, where: pathlib.Path) -> DshSetup:
    """Build the registries and cases (outside any event loop)."""
    bare = dsh_host.ToolRegistry()
    bare.register(_echo_tool())
    registries = {
        "valid": bare,
        "host0": _host([]).registry,
        "plugins4": _host([PreExecute(), Guard(), ExecuteWrapper(), PostExecute()]).registry,
        "impls": _host([_named(PreExecute(), f"pre-{i}") for i in range(EXTRA_IMPLS)]).registry,
        "default": _default_stack(where / "audit-on", audit=True).registry,
        "default_no_audit": _default_stack(where / "audit-off", audit=False).registry,
    }
    tools_host = _default_stack(where / "read", audit=False)
    read_path = where / "read" / "ws" / "notes.txt"
    read_path.write_text(("x" * 69 + "\n") * (READ_BYTES // 70))
    registries["read_file"] = tools_host.registry

    def execute(key: str, arguments: Any = VALID_ARGS, name: str = "echo") -> Call:
        call = dsh_host.ToolExecutionInput(call_id="call-1", name=name, arguments=arguments)
        return functools.partial(registries[key].execute, call)

    async def plain_read() -> str:
        with open(read_path, encoding="utf-8") as file:
            return file.read()

    cases = [
        Case("bare", "bare await of the tool body", functools.partial(body, VALID_ARGS, None)),
        Case("valid", "execute: valid call, no plugins", execute("valid")),
        Case("host0", "execute: valid call, a Host with no plugins", execute("host0")),
        Case(
            "plugins4",
            "execute: 4 trivial plugins (pre, guard, wrapper, post)",
            execute("plugins4"),
        ),
        Case(
            "plugins4_nested",
            "execute: 4 trivial plugins, nested arguments",
            execute("plugins4", NESTED_ARGS, "nested"),
        ),
        Case("impls", f"execute: {EXTRA_IMPLS} trivial pre-execute impls", execute("impls")),
        Case("default", "execute: the default stack, audit on", execute("default")),
        Case(
            "default_no_audit", "execute: the default stack, audit off", execute("default_no_audit")
        ),
        Case(
            "invalid", "execute: invalid call (no text), no plugins", execute("valid", INVALID_ARGS)
        ),
        Case("plain_read", f"open().read() of a {READ_BYTES:,}-byte file", plain_read),
        Case(
            "read_file",
            "read_file through tools + sandbox (default stack)",
            execute("read_file", {"path": "notes.txt"}, "read_file"),
        ),
    ]
    many = [
        dsh_host.ToolExecutionInput(call_id=f"call-{i}", name="echo", arguments=VALID_ARGS)
        for i in range(settings.batch_size)
    ]
    one = many[:1]
    batches = [
        Case(
            "batch",
            f"execute_batch: {settings.batch_size:,} calls, per call",
            functools.partial(bare.execute_batch, many),
            calls_per_await=settings.batch_size,
        ),
        Case(
            "execute_seq",
            f"execute: {settings.batch_size:,} calls one after another, per call",
            functools.partial(_sequential, bare, many),
            calls_per_await=settings.batch_size,
        ),
        Case("batch1", "execute_batch: a batch of 1", functools.partial(bare.execute_batch, one)),
    ]
    return DshSetup(cases, batches, registries, read_path)


async def _sequential(registry: dsh_host.ToolRegistry, inputs: list[Any]) -> list[Any]:
    """*inputs* through `execute` one after another, their results kept in a list, as
    `execute_batch` returns them (a loop that dropped them would skip a cost the batch pays)."""
    results = []
    for item in inputs:
        results.append(await registry.execute(item))
    return results


async def _check_dsh(setup: DshSetup) -> None:
    """Fail loudly if a case does not do what its label says."""
    by_key = {case.key: case for case in setup.cases}
    assert await by_key["bare"].call() == TEXT
    for key in ("valid", "host0", "plugins4", "impls", "default", "default_no_audit"):
        result = await by_key[key].call()
        assert not result.is_error, (key, result)
        assert result.text == TEXT, (key, result)
    result = await by_key["plugins4_nested"].call()
    assert (result.is_error, result.text) == (False, NESTED_ARGS["path"]), result
    result = await by_key["invalid"].call()
    assert result.code == "INVALID_ARGS", result
    read = await by_key["read_file"].call()
    assert not read.is_error, read
    assert "xxx" in read.text, read
    events: list[dsh_host.TraceEvent] = []
    check = dsh_host.ToolExecutionInput(call_id="check", name="echo", arguments=VALID_ARGS)
    await setup.registries["plugins4"].execute(check, trace=events.append)
    stages = [e.stage for e in events]
    for hook in ("dsh_tool_pre_execute", "dsh_tool_execute", "dsh_tool_post_execute"):
        assert stages.count(hook) == 1, stages
    assert len(setup.registries["impls"].hooks.impls("dsh_tool_pre_execute")) == EXTRA_IMPLS


async def _dsh_round(setup: DshSetup, settings: Settings, first: bool) -> None:
    if first:
        await _check_dsh(setup)
    reps = settings.per_round(settings.reps)
    await _time_round_robin(setup.cases, settings.calls, reps, settings.warmup)
    reps = settings.per_round(settings.batch_reps)
    await _time_round_robin(setup.batches[:2], 1, reps, settings.batch_size)
    await _time_round_robin(setup.batches[2:], settings.calls, reps, settings.warmup)


# -- pluggy's own cost per implementation --------------------------------------------------------


def _pluggy_per_impl(settings: Settings) -> tuple[float, float]:
    """Nanoseconds per extra implementation of a plain pluggy hook call: (min, median)."""
    spec = pluggy.HookspecMarker("benchpluggy")
    impl = pluggy.HookimplMarker("benchpluggy")

    class Spec:
        @spec
        def hook(self, execution: Any) -> None: ...

    class Impl:
        @impl
        def hook(self, execution: Any) -> None:
            return None

    def manager(n: int) -> Any:
        pm = pluggy.PluginManager("benchpluggy")
        pm.add_hookspecs(Spec)
        for _ in range(n):
            pm.register(Impl())
        return pm.hook.hook

    zero, many = manager(0), manager(EXTRA_IMPLS)
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(settings.reps):
        for hook, out in ((zero, samples[0]), (many, samples[1])):
            gc.disable()
            started = time.perf_counter_ns()
            for _ in range(settings.calls):
                hook(execution=None)
            out.append((time.perf_counter_ns() - started) / settings.calls)
            gc.enable()
    best = (min(samples[1]) - min(samples[0])) / EXTRA_IMPLS
    median = (statistics.median(samples[1]) - statistics.median(samples[0])) / EXTRA_IMPLS
    return best, median


# -- memory per in-flight call -------------------------------------------------------------------


async def _parked_bytes(where: pathlib.Path, *, dsh: bool) -> float:
    """Traced bytes per parked call: a default-stack call blocked in its body, or a bare task."""
    release = trio.Event()
    parked = 0

    async def park(args: Any, ctx: Any) -> str:
        nonlocal parked
        parked += 1
        await release.wait()
        return "ok"

    async def bare_task() -> None:
        nonlocal parked
        parked += 1
        await release.wait()

    tool = dsh_host.define_tool(name="park", description="", parameters={}, execute=park)
    host = _default_stack(where, audit=True, extra=(tool,)) if dsh else None
    if host is not None:
        await host.call("echo", VALID_ARGS)  # the first call builds any lazy state
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        for i in range(PARKED):
            if host is not None:
                nursery.start_soon(functools.partial(host.call, "park", {}, call_id=f"p{i}"))
            else:
                nursery.start_soon(bare_task)
        while parked < PARKED:
            await trio.sleep(0)
        gc.collect()
        during = tracemalloc.get_traced_memory()[0]
        release.set()
    tracemalloc.stop()
    return (during - before) / PARKED


def _memory(where: pathlib.Path) -> dict[str, float]:
    return {
        "dsh_bytes_per_call": trio.run(functools.partial(_parked_bytes, where / "mem", dsh=True)),
        "trio_bytes_per_task": trio.run(functools.partial(_parked_bytes, where / "mem", dsh=False)),
    }


# -- peers: pydantic-ai, LangChain, OpenAI Agents ---------------------------------------------------------------------------------


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


PEER_LABELS = {
    "pyd0": "pydantic-ai handle_call: no capabilities",
    "pyd3": "pydantic-ai handle_call: 3 capabilities",
    "pyd0_nested": "pydantic-ai handle_call: no capabilities, nested arguments",
    "langchain": "LangChain StructuredTool.ainvoke",
    "agents": "OpenAI Agents FunctionTool.on_invoke_tool",
}


async def pyd_nested(
    ctx: RunContext[None],
    path: str,
    limit: float | None = None,
    tags: list[str] | None = None,
    flags: dict[str, bool] | None = None,
) -> str:
    """The nested-arguments tool for pydantic-ai: the same parameters, typed."""
    return path


async def peer_echo(text: str, n: int | None = None) -> str:
    """Echo the text back."""
    return text


async def _peer_round(cases: dict[str, Case], settings: Settings, first: bool) -> None:
    """Build each peer's tool once per round and time one call of it per await.

    * ``pyd0``/``pyd3``: ``ToolManager(FunctionToolset([Tool(echo)]), root_capability=...)``
      ``.for_run_step(RunContext(...))`` (how ``Agent.iter`` builds a step's manager), with no
      capabilities and with trivial ``before``/``wrap``/``after`` capabilities, timed on
      ``handle_call`` of one prebuilt ``ToolCallPart`` with dict arguments.
    * ``langchain``: ``StructuredTool.from_function(coroutine=echo).ainvoke(args)``.
    * ``agents``: ``function_tool(echo).on_invoke_tool(ToolContext(...), json_args)``.
    """
    timed: list[Case] = []
    if PYDANTIC_AI_ERROR is None:
        caps = _pyd_capabilities()
        three = CombinedCapability([caps["before"](), caps["wrap"](), caps["after"]()])
        call = ToolCallPart(tool_name="echo", args=dict(VALID_ARGS), tool_call_id="call-1")
        for key, root in (("pyd0", None), ("pyd3", three)):
            ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
            toolset = FunctionToolset[None]([_pyd_tool()])
            manager = await ToolManager[None](toolset, root_capability=root).for_run_step(ctx)
            if first:
                assert await manager.handle_call(call) == TEXT, key
            cases[key].call = functools.partial(manager.handle_call, call)
            timed.append(cases[key])
        ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
        toolset = FunctionToolset[None]([Tool(pyd_nested, name="nested", takes_ctx=True)])
        manager = await ToolManager[None](toolset).for_run_step(ctx)
        nested = ToolCallPart(tool_name="nested", args=dict(NESTED_ARGS), tool_call_id="call-2")
        if first:
            assert await manager.handle_call(nested) == NESTED_ARGS["path"]
        cases["pyd0_nested"].call = functools.partial(manager.handle_call, nested)
        timed.append(cases["pyd0_nested"])
    if LANGCHAIN_ERROR is None:
        lc = StructuredTool.from_function(coroutine=peer_echo, name="echo")
        cases["langchain"].call = functools.partial(lc.ainvoke, dict(VALID_ARGS))
        timed.append(cases["langchain"])
    if AGENTS_ERROR is None:
        tool = function_tool(peer_echo)
        ctx = ToolContext(
            context=None, tool_name="echo", tool_call_id="call-1", tool_arguments=VALID_JSON
        )
        cases["agents"].call = functools.partial(tool.on_invoke_tool, ctx, VALID_JSON)
        timed.append(cases["agents"])
    for case in timed:
        if first and case.key != "pyd0_nested":
            assert await case.call() == TEXT, case.key
    await _time_round_robin(
        timed, settings.calls, settings.per_round(settings.reps), settings.warmup
    )


# -- reporting -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One figure of the hot-path table: a ratio, its target, and how it was measured."""

    figure: str
    best: float
    median: float
    target: float | None

    @property
    def verdict(self) -> str:
        if self.target is None or math.isnan(self.median):
            return "-"
        return "met" if self.median <= self.target else "NOT met"


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def _rows(
    by: dict[str, Case], pluggy_ns: tuple[float, float], memory: dict[str, float]
) -> list[Row]:
    def pair(a: str, b: str) -> tuple[float, float]:
        if a not in by or b not in by:
            return math.nan, math.nan
        return _ratio(by[a].best_us(), by[b].best_us()), _ratio(
            by[a].median_us(), by[b].median_us()
        )

    def per_impl(stat: Callable[[Case], float]) -> float:
        return (stat(by["impls"]) - stat(by["host0"])) * 1000 / EXTRA_IMPLS

    impl_best = _ratio(per_impl(Case.best_us), pluggy_ns[0])
    impl_median = _ratio(per_impl(Case.median_us), pluggy_ns[1])
    memory_ratio = _ratio(memory["dsh_bytes_per_call"], memory["trio_bytes_per_task"])
    table = [
        (
            "valid call, 4 trivial plugins, realistic nested arguments / pydantic-ai handle_call"
            " with no capabilities",
            *pair("plugins4_nested", "pyd0_nested"),
            0.4,
        ),
        ("4 trivial plugins / pydantic-ai, no capabilities", *pair("plugins4", "pyd0"), 0.4),
        ("4 trivial plugins / pydantic-ai, 3 capabilities", *pair("plugins4", "pyd3"), 0.2),
        ("4 trivial plugins / LangChain StructuredTool", *pair("plugins4", "langchain"), None),
        ("4 trivial plugins / OpenAI Agents FunctionTool", *pair("plugins4", "agents"), None),
        ("valid call, no plugins / bare await", *pair("valid", "bare"), 20.0),
        ("each extra trivial impl / pluggy's own per impl", impl_best, impl_median, 1.5),
        ("default stack, audit on / bare pipeline", *pair("default", "valid"), 3.0),
        ("default stack, audit off / bare pipeline", *pair("default_no_audit", "valid"), 2.0),
        ("memory per parked call, default stack / bare trio task", memory_ratio, memory_ratio, 2.5),
        ("execute_batch per call / execute (10,000 calls)", *pair("batch", "execute_seq"), 1.1),
        ("execute_batch of 1 / execute", *pair("batch1", "valid"), 1.5),
        (
            "read_file of a 1.4 KB file, default stack / open().read()",
            *pair("read_file", "plain_read"),
            3.0,
        ),
    ]
    return [Row(figure, best, median, target) for figure, best, median, target in table]


def _report(
    settings: Settings,
    cases: list[Case],
    pluggy_ns: tuple[float, float],
    memory: dict[str, float],
    elapsed: float,
) -> dict[str, Any]:
    by = {case.key: case for case in cases if case.samples}
    base = by["bare"].median_us()
    versions = {"dsh-host": importlib.metadata.version("dsh-host")}
    for dist, error in (
        ("pydantic-ai-slim", PYDANTIC_AI_ERROR),
        ("langchain-core", LANGCHAIN_ERROR),
        ("openai-agents", AGENTS_ERROR),
    ):
        versions[dist] = importlib.metadata.version(dist) if error is None else f"missing: {error}"
    return {
        "python": platform.python_version(),
        "trio": trio.__version__,
        "pluggy": pluggy.__version__,
        "cpus": os.cpu_count(),
        "versions": versions,
        "settings": settings.__dict__,
        "seconds": elapsed,
        "cases": [
            {
                "case": case.key,
                "label": case.label,
                "best_us_per_call": case.best_us(),
                "median_us_per_call": case.median_us(),
                "x_bare_await": _ratio(case.median_us(), base),
                "batches": len(case.samples),
            }
            for case in by.values()
        ],
        "pluggy_ns_per_impl": {"best": pluggy_ns[0], "median": pluggy_ns[1]},
        "memory": memory,
        "table": [{**row.__dict__, "verdict": row.verdict} for row in _rows(by, pluggy_ns, memory)],
    }


def _print_cases(report: dict[str, Any]) -> None:
    s = report["settings"]
    print(
        f"dsh hot path - Python {report['python']}, trio {report['trio']}, pluggy "
        f"{report['pluggy']}, {report['cpus']} CPUs, {report['seconds']:.1f} s"
    )
    print(
        f"per-batch per-call times: {s['reps']} batches x {s['calls']:,} calls, "
        f"{s['rounds']} rounds (trio and asyncio alternating), gc paused while timing"
    )
    print()
    width = max(len(c["label"]) for c in report["cases"]) + 2
    print(f"{'case':<{width}} {'min µs':>9} {'median µs':>10} {'x bare await':>13}")
    for c in report["cases"]:
        print(
            f"{c['label']:<{width}} {c['best_us_per_call']:>9.2f} "
            f"{c['median_us_per_call']:>10.2f} {c['x_bare_await']:>13.1f}"
        )
    p, m = report["pluggy_ns_per_impl"], report["memory"]
    print(f"pluggy, per extra implementation: {p['best']:.0f} ns min, {p['median']:.0f} ns median")
    print(
        f"memory per parked call: dsh default stack {m['dsh_bytes_per_call']:,.0f} B, "
        f"bare trio task {m['trio_bytes_per_task']:,.0f} B"
    )
    for dist, version in report["versions"].items():
        if version.startswith("missing"):
            print(f"{dist} not measured ({version}); install the `bench` extra")


def _print_check(report: dict[str, Any]) -> None:
    """The figures as markdown rows, ``| figure | min | median | target |`` (see bench/check.py)."""
    print()
    print("| figure | min | median | target |")
    print("|---|---|---|---|")
    for r in report["table"]:
        target = f"<= {r['target']:g}" if r["target"] is not None else "-"
        print(f"| {r['figure']} | {r['best']:.2f} | {r['median']:.2f} | {target} |")


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--check", action="store_true", help="print each figure against its target")
    parser.add_argument("--reps", type=int, help="batches per case (default 20; quick 6)")
    parser.add_argument("--calls", type=int, help="calls per batch (default 2000)")
    parser.add_argument("--rounds", type=int, help="trio/asyncio alternations (default 4; quick 1)")
    options = parser.parse_args(argv)
    settings = Settings(
        reps=options.reps or (6 if options.quick else 20),
        calls=options.calls or (500 if options.quick else 2000),
        batch_reps=3 if options.quick else 8,
        batch_size=10_000,
        warmup=200 if options.quick else 2000,
        rounds=options.rounds or (1 if options.quick else 4),
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        where = pathlib.Path(tmp)
        setup = _dsh_setup(settings, where)
        peers = {key: Case(key, label, _unset) for key, label in PEER_LABELS.items()}
        for index in range(settings.rounds):
            trio.run(_dsh_round, setup, settings, index == 0)
            asyncio.run(_peer_round(peers, settings, index == 0))
        pluggy_ns = _pluggy_per_impl(settings)
        memory = _memory(where)
        report = _report(
            settings,
            [*setup.cases, *setup.batches, *peers.values()],
            pluggy_ns,
            memory,
            time.perf_counter() - started,
        )
    if options.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    _print_cases(report)
    if options.check:
        _print_check(report)
    return 0


async def _unset() -> None:
    raise AssertionError("case timed before its call was set")


if __name__ == "__main__":
    sys.exit(main())
