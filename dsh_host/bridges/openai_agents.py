"""dsh for the OpenAI Agents SDK (``pip install 'dsh-host[openai-agents]'``).

* `function_tools` gives the SDK a ``FunctionTool`` for each of a dsh host's tools:
  ``Agent(name=..., tools=function_tools(host))``. Each call runs through dsh's whole pipeline.
  An ``Ask`` is the SDK's approval: ``needs_approval`` previews the call (pre-execute and guards,
  as a dry run) and answers ``True`` when dsh would ask, so the run stops with an interruption;
  once ``RunState.approve`` let it through, the call runs without asking again only if it is
  exactly the call dsh deferred (tool, arguments, scope; once): any other call under that
  approval (another tool or changed arguments for the call id, a replay) is asked about anew,
  so with no approver it is denied, never run. Its ``approved_by`` is ``openai-agents approval``.
  A call ``RunState.reject`` rejected is recorded (``DENIED``, decided by
  ``openai-agents approval``) when the resumed run lists its tools; it never runs.
* `tool_guardrail` gives a ``ToolInputGuardrail`` that puts the SDK's own function tools to
  dsh's policy under their own names: a denial (or an ``Ask``, which a guardrail cannot turn into
  an approval) rejects the call with dsh's reason, and the model reads it.

*host* is the asyncio host, ``dsh_host.aio.open_host(...)``.
"""

from __future__ import annotations

from typing import Any

try:
    from agents import FunctionTool, RunContextWrapper, ToolGuardrailFunctionOutput
    from agents.tool_context import ToolContext
    from agents.tool_guardrails import ToolInputGuardrail, ToolInputGuardrailData
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        f"dsh_host.bridges.openai_agents needs the OpenAI Agents SDK ({exc}): "
        "pip install 'dsh-host[openai-agents]'"
    ) from exc

from dsh_host import (
    AbortSignal,
    Scope,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolSchema,
    arguments_of,
    define_tool,
    thaw,
)

from ..aio import AsyncioHost
from ._common import (
    CURRENT,
    BridgeCall,
    PathDeclarations,
    call,
    deferral_of,
    plain_host,
    record_rejection,
    text_of,
)

__all__ = ["function_tools", "tool_guardrail"]

BY = "openai-agents approval"
"""The `Deferral` of this bridge: approvals and rejections the person gave in the SDK."""


async def preview(
    host: AsyncioHost, name: str, arguments: Any, call_id: str, scope: Scope | None
) -> tuple[ToolExecutionResult | None, BridgeCall]:
    """What dsh's policy makes of a call without running it (approvers are not asked)."""
    plain = plain_host(host, BY)
    state = BridgeCall(by=BY, preview=True)
    arguments = arguments_of(arguments)
    input = ToolExecutionInput(call_id=call_id, name=name, arguments=arguments, scope=scope)

    async def job(signal: AbortSignal) -> ToolExecutionResult | None:
        token = CURRENT.set(state)
        try:
            return await plain.registry.preview(input)
        finally:
            CURRENT.reset(token)

    return await host._run(job), state


class _Tools:
    """The SDK tools of one host: the calls dsh deferred are remembered by its `Deferral`."""

    def __init__(self, host: AsyncioHost, scope: Scope | None) -> None:
        self.host = host
        self.scope = scope
        self.deferral = deferral_of(host, BY)

    def tool(self, schema: ToolSchema) -> FunctionTool:
        name = schema.name

        async def needs_approval(
            ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            result, state = await preview(self.host, name, params, call_id, self.scope)
            if result is not None and state.deferred(result):
                self.deferral.remember(call_id, name, params, self.scope)  # if the person agrees
                return True
            self.deferral.take(call_id)  # a stale approval never carries over
            return False

        async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            waiting = self.deferral.pending(name, self.scope) if self.deferral.waiting() else []
            for call_id, deferred in waiting:
                if ctx.is_tool_approved(name, call_id) is False:  # RunState.reject
                    self.deferral.take(call_id)
                    await record_rejection(self.host, call_id, deferred, BY)
            return True

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            result, _ = await call(
                self.host, name, arguments,
                call_id=ctx.tool_call_id, scope=self.scope, by=BY,
                approved=self.deferral.take(ctx.tool_call_id),  # once, for exactly that call
            )  # fmt: skip
            return text_of(result)

        return FunctionTool(
            name=name,
            description=schema.description,
            params_json_schema=thaw(schema.parameters),
            on_invoke_tool=invoke,
            strict_json_schema=False,
            is_enabled=is_enabled,
            needs_approval=needs_approval,
        )


def function_tools(host: AsyncioHost, *, scope: Scope | None = None) -> list[FunctionTool]:
    """A ``FunctionTool`` for each tool of *host* in *scope*; see the module docstring."""
    tools = _Tools(host, scope)
    return [tools.tool(schema) for schema in plain_host(host, BY).registry.schemas(scope)]


def tool_guardrail(
    host: AsyncioHost, *, scope: Scope | None = None, paths: PathDeclarations | None = None
) -> ToolInputGuardrail[Any]:
    """A ``ToolInputGuardrail`` running dsh's policy for the SDK's own function tools.

    Add it to a tool's ``tool_input_guardrails``. The tool's name is registered in *host* (in a
    scope of its own by default) as a stand-in that never runs, so rules name it as the SDK does.
    *paths* declares, per tool name, which arguments are paths and how the tool uses them
    (``{"read_note": {"path": "read"}}``, as `define_tool`'s ``paths``), so read and edit rules
    apply to its calls.
    """
    declared = dict(paths or {})
    plain = plain_host(host, BY)
    scope = scope or Scope("openai-agents")
    known: set[str] = set()

    async def dsh_policy(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        name = context.tool_name
        if name not in known and plain.registry.get(name, scope) is None:
            stand_in = _stand_in(name, declared.get(name))
            plain.registry.register(stand_in, scope, owner="openai-agents")
        known.add(name)
        arguments = context.tool_arguments
        result, _ = await preview(host, name, arguments, context.tool_call_id, scope)
        if result is None:
            return ToolGuardrailFunctionOutput.allow(output_info={"dsh": "allowed"})
        info = {"dsh": result.error.code if result.error else "refused", "by": result.decided_by}
        return ToolGuardrailFunctionOutput.reject_content(text_of(result), output_info=info)

    return ToolInputGuardrail(guardrail_function=dsh_policy, name="dsh")


def _stand_in(name: str, paths: Any) -> Any:
    async def execute(args: Any) -> str:  # never runs: the guardrail only previews
        raise RuntimeError(f"{name!r} is an Agents SDK tool; the SDK runs it")

    return define_tool(
        name=name,
        description="an OpenAI Agents SDK tool, judged by dsh",
        parameters={},
        execute=execute,
        strict_arguments=False,
        paths=paths,
    )
