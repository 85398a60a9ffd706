"""The plugin author's test kit: hosts, stub tools, scripted approvers and policy simulation.

Installing ``dsh-host`` also installs a pytest plugin (entry point ``pytest11``) with the fixtures
``dsh_host`` and ``dsh_tmp_workspace``; everything here works without pytest too. Async tests
need an async runner: with pytest-trio, set ``trio_mode = true`` under ``[tool.pytest.ini_options]``.

A permission plugin's whole test::

    from dsh_host.testing import make_host, simulate, stub_tool

    async def test_rm_is_denied():
        host = make_host(NoRm(), tools=[stub_tool("bash")])
        decision = await simulate(host, "bash", {"command": "rm -rf /"})
        assert (decision.allowed, decision.decided_by) == (False, "no-rm")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, final

import attrs

from . import (  # the public names only, as a plugin author's tests would import them
    ApprovalOutcome,
    ApprovalRequest,
    Host,
    Scope,
    ToolDefinition,
    ToolExecutionInput,
    ToolExecutionResult,
    TraceEvent,
    define_tool,
    hookimpl,
    new_call_id,
)

__all__ = [
    "ScriptedApprover",
    "Simulation",
    "StubTool",
    "approve_with",
    "make_host",
    "simulate",
    "stub_tool",
]


@final
@attrs.frozen
class StubTool:
    """A tool for tests: it records every call's arguments and returns or raises what it is told.

    ``definition`` is the `ToolDefinition` to register (`make_host` accepts a `StubTool` as it
    is); ``calls`` lists the validated arguments of each call that reached the body, in order.
    """

    definition: ToolDefinition
    calls: list[Any] = attrs.field(factory=list, eq=False)

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.definition.name


def stub_tool(
    name: str = "stub",
    *,
    returns: Any = "ok",
    raises: BaseException | None = None,
    parameters: Any = None,
    **definition: Any,
) -> StubTool:
    """A `StubTool` named *name*.

    Args:
        name: What the model calls it.
        returns: What the body returns (a string, content blocks, a JSON value, or a
            `ToolExecutionResult`); a callable is called with the arguments instead.
        raises: An exception the body raises instead of returning.
        parameters: Its parameters (the dict DSL, an attrs class or a JSON Schema); by default
            an open object that accepts any arguments.
        **definition: Further `define_tool` keywords (``timeout_ms``, ``is_concurrency_safe``,
            ``paths``, ``claude_name``, ...).
    """
    calls: list[Any] = []

    async def execute(args: Any) -> Any:
        calls.append(args)
        if raises is not None:
            raise raises
        return returns(args) if callable(returns) else returns

    schema = parameters if parameters is not None else {"type": "object"}
    tool = define_tool(
        name=name, description=f"stub tool {name}", parameters=schema, execute=execute,
        **definition,
    )  # fmt: skip
    return StubTool(tool, calls)


def make_host(
    *plugins: object,
    tools: Iterable[ToolDefinition | StubTool] = (),
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    entry_points: bool = False,
    workspace: str | os.PathLike[str] | None = None,
) -> Host:
    """A `Host` with only what the test gives it.

    Args:
        *plugins: Plugin objects, registered in order (the last one is consulted first, as in
            pluggy; use ``tryfirst``/``trylast`` to say otherwise).
        tools: Tools registered globally (`ToolDefinition` or `StubTool`).
        config: A dict of the ``dsh.toml`` structure, or a path to a TOML file.
        entry_points: Also load installed plugins (off: a test sees only its own plugins).
        workspace: ``[host] workspace``, when *config* is a dict or ``None``.
    """
    if workspace is not None:
        if config is not None and not isinstance(config, Mapping):
            raise TypeError("give workspace= with a dict config (or put it in the TOML file)")
        table = dict(config or {})
        table["host"] = {**dict(table.get("host", {})), "workspace": os.fspath(workspace)}
        config = table
    host = Host(config=config, plugins=plugins, load_entrypoints=entry_points)
    for tool in tools:
        host.registry.register(tool.definition if isinstance(tool, StubTool) else tool)
    return host


@final
@attrs.frozen
class Simulation:
    """What policy made of one call in `simulate`: stages pre-execute, approval and guards.

    Attributes:
        allowed: Whether the call would reach its tool.
        asked: Whether a plugin asked, so an approver was consulted.
        decided_by: The plugin that denied (or, for an allowed call, the plugin whose ``Allow``
            let it through), or ``None``.
        detail: The decision's detail (the rule, the file), or ``None``.
        reason: The model-facing reason of a denial, or ``None``.
        code: The denial's error code (``DENIED``, ``PLUGIN_FAILED``...), or ``None``.
        result: The error result a denied call would end with, or ``None``.
        events: Every plugin consulted, with its own answer, in order.
    """

    allowed: bool
    asked: bool
    decided_by: str | None
    detail: str | None
    reason: str | None
    code: str | None
    result: ToolExecutionResult | None
    events: tuple[TraceEvent, ...]


async def simulate(
    host: Host, name: str, arguments: Any, *, scope: Scope | None = None
) -> Simulation:
    """Run *name*'s policy stages on *arguments* (pre-execute, approval, guards), not the tool.

    Nothing is executed: the execution is marked ``dry_run``, so well-behaved hooks have no side
    effects. Use `approve_with` to script the approver.
    """
    events: list[TraceEvent] = []
    input = ToolExecutionInput(call_id=new_call_id(), name=name, arguments=arguments, scope=scope)
    result = await host.registry.preview(input, trace=events.append)
    asked = any(e.stage == "dsh_tool_approve" for e in events)
    if result is None:
        allower = next(
            (
                e
                for e in reversed(events)
                if e.stage == "dsh_tool_pre_execute" and e.outcome.startswith("allow")
            ),
            None,
        )
        detail = None
        if allower is not None and allower.outcome.startswith("allow: "):
            detail = allower.outcome.removeprefix("allow: ")
        return Simulation(
            allowed=True, asked=asked, decided_by=allower.plugin if allower else None,
            detail=detail, reason=None, code=None, result=None, events=tuple(events),
        )  # fmt: skip
    error = result.error
    return Simulation(
        allowed=False, asked=asked, decided_by=result.decided_by, detail=result.decision_detail,
        reason=error.message if error is not None else None,
        code=error.code if error is not None else None, result=result, events=tuple(events),
    )  # fmt: skip


@final
class ScriptedApprover:
    """A plugin that answers every approval request with one outcome, recording the requests.

    Build it with `approve_with`.
    """

    def __init__(self, outcome: ApprovalOutcome, name: str) -> None:
        """Answer *outcome*; register as *name*."""
        self.outcome = outcome
        self.name = name
        self.requests: list[ApprovalRequest] = []

    @hookimpl
    def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome:
        """Record *request* and answer the scripted outcome."""
        self.requests.append(request)
        return self.outcome


def approve_with(outcome: ApprovalOutcome | str, *, name: str = "approver") -> ScriptedApprover:
    """An approver plugin that answers *outcome* (``"allowed-once"``, ``"rejected"``, ...).

    Example::

        approver = approve_with("allowed-once")
        host = make_host(AskForBash(), approver, tools=[stub_tool("bash")])
        assert (await simulate(host, "bash", {"command": "ls"})).allowed
        assert approver.requests[0].reason == "bash asks"
    """
    return ScriptedApprover(ApprovalOutcome(outcome), name)
