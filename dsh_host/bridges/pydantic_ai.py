"""dsh for pydantic-ai (``pip install 'dsh-host[pydantic-ai]'``).

* `DshToolset` offers a dsh host's tools to an agent: ``Agent(model, toolsets=[DshToolset(host)])``.
* `guarded` wraps any pydantic-ai toolset (function tools, an MCP server) so each call goes
  through dsh's pipeline (pre-execute, approval, guards, execute wrappers, post-execute, audit)
  under the toolset's own tool names, with the toolset's own call as the body.

*host* is the asyncio host (``dsh_host.aio.open_host``): pydantic-ai runs on asyncio. An ``Ask`` that no approver answers becomes pydantic-ai's
deferred approval (``ApprovalRequired``: the run ends with ``DeferredToolRequests``). The
approved retry runs without asking again only if it is exactly the deferred call (tool, arguments,
scope; once, in the process that deferred it); a retry with other arguments (an altered message
history, ``override_args``) is deferred anew. Its ``approved_by`` is ``pydantic-ai approval``; a
call the person denied is recorded (``DENIED``, decided by ``pydantic-ai approval``) when the run
next lists its tools (see `dsh_host.bridges._common`). Any other error comes back to the model as
the tool's return value, ``Error: ...``, as dsh words it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

try:
    from pydantic_ai import BinaryContent, RunContext
    from pydantic_ai.exceptions import ApprovalRequired
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        f"dsh_host.bridges.pydantic_ai needs pydantic-ai ({exc}): "
        "pip install 'dsh-host[pydantic-ai]'"
    ) from exc

from dsh_host import Host, ImageBlock, Scope, ToolExecutionResult, ToolRunContext, define_tool, thaw

from ._common import (
    CURRENT,
    AnyHost,
    BridgeCall,
    Deferral,
    PathDeclarations,
    call,
    check_paths,
    deferral_of,
    record_rejection,
    run_in_asyncio,
    text_of,
)

__all__ = ["DshToolset", "guarded"]

BY = "pydantic-ai approval"
"""The `Deferral` of this bridge: approvals and rejections the person gave in pydantic-ai."""

_ANY_OBJECT = SchemaValidator(
    core_schema.dict_schema(
        keys_schema=core_schema.str_schema(), values_schema=core_schema.any_schema()
    )
)
"""pydantic-ai's own check lets any object through: dsh validates against the tool's schema."""


async def _call(
    host: AnyHost,
    name: str,
    tool_args: Any,
    ctx: RunContext[Any],
    scope: Scope | None,
    extra: Any = None,
) -> tuple[ToolExecutionResult, BridgeCall]:
    """The call through dsh: approved only if it is exactly the call dsh deferred, once."""
    deferral = deferral_of(host, BY)
    deferred = deferral.take(ctx.tool_call_id)  # each approval is used once
    result, state = await call(
        host, name, tool_args, call_id=ctx.tool_call_id, scope=scope, extra=extra, by=BY,
        approved=deferred if ctx.tool_call_approved else None,
    )  # fmt: skip
    if ctx.tool_call_id is not None and state.deferred(result):
        deferral.remember(ctx.tool_call_id, name, tool_args, scope)  # what the person will see
    return result, state


async def _record_denials(host: AnyHost, ctx: RunContext[Any], scope: Scope | None) -> None:
    """Record, once, each call dsh deferred that the person has since denied (in *ctx*'s history)."""
    deferral: Deferral = deferral_of(host, BY)
    if not deferral.waiting():
        return  # the common case: no history to read
    for message in ctx.messages:
        for part in getattr(message, "parts", ()):
            if not isinstance(part, ToolReturnPart) or getattr(part, "outcome", None) != "denied":
                continue
            deferred = deferral.peek(part.tool_call_id)
            if deferred is not None and (deferred.tool, deferred.scope) == (part.tool_name, scope):
                deferral.take(part.tool_call_id)
                await record_rejection(host, part.tool_call_id, deferred, BY)


def _output(result: ToolExecutionResult, state: BridgeCall, metadata: dict[str, Any]) -> Any:
    if state.deferred(result):
        asked = state.asked
        raise ApprovalRequired(
            metadata={
                **metadata,
                "reason": asked.reason if asked else None,
                "asked_by": result.decided_by,
            }
        )
    if not result.is_error and any(isinstance(b, ImageBlock) for b in result.content):
        return [
            BinaryContent(data=base64.b64decode(b.data), media_type=b.mime_type)
            if isinstance(b, ImageBlock)
            else b.text
            for b in result.content
        ]
    return text_of(result)


def _exclusive(host: Host, name: str, scope: Scope | None) -> bool:
    """A tool that never says it is concurrency-safe runs alone (dsh's exclusive barrier)."""
    tool = host.registry.get(name, scope)
    return tool is None or tool.is_concurrency_safe is None


class DshToolset(AbstractToolset[Any]):
    """The tools of a dsh host, for a pydantic-ai agent; see the module docstring.

    Args:
        host: ``dsh_host.aio.open_host(...)``'s host.
        scope: the dsh scope whose tools are offered and in which calls run.
        id: the toolset's id, for pydantic-ai (durable execution names).
        max_retries: how often pydantic-ai lets the model retry arguments it cannot parse.
    """

    def __init__(
        self,
        host: AnyHost,
        *,
        scope: Scope | None = None,
        id: str | None = None,
        max_retries: int = 1,
    ) -> None:
        self._host = host
        deferral_of(host, BY)
        self._plain: Host = host.host
        self._scope = scope
        self._id = id
        self._max_retries = max_retries

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        await _record_denials(self._host, ctx, self._scope)
        return {
            schema.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=schema.name,
                    description=schema.description,
                    parameters_json_schema=thaw(schema.parameters),
                    sequential=_exclusive(self._plain, schema.name, self._scope),
                ),
                max_retries=self._max_retries,
                args_validator=_ANY_OBJECT,
            )
            for schema in self._plain.registry.schemas(self._scope)
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        result, state = await _call(self._host, name, tool_args, ctx, self._scope)
        return _output(result, state, {"dsh_tool": name})


@dataclass
class _Guarded(WrapperToolset[Any]):
    """`guarded`'s toolset: the wrapped toolset's calls run as dsh tool bodies."""

    host: Any = None
    scope: Scope | None = None
    paths: PathDeclarations = field(default_factory=dict)
    registered: set[str] = field(default_factory=set)

    @property
    def _plain(self) -> Host:
        deferral_of(self.host, BY)
        return self.host.host  # type: ignore[no-any-return]

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        await _record_denials(self.host, ctx, self.scope)
        tools = await self.wrapped.get_tools(ctx)
        check_paths(self.paths, tools)
        for name, tool in tools.items():
            if name not in self.registered:
                body = _body(name, tool.tool_def.description or "", self.paths.get(name))
                self._plain.registry.register(body, self.scope, owner="pydantic-ai")
                self.registered.add(name)
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        raw: list[Any] = []

        async def run() -> Any:
            value = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            raw.append(value)
            return value

        result, state = await _call(self.host, name, tool_args, ctx, self.scope, (self.host, run))
        if raw and not result.is_error and result.decided_by is None:
            return raw[0]  # untouched by post-execute: the toolset's own value, not its text
        return _output(result, state, {"dsh_tool": name})


def _body(name: str, description: str, paths: Any) -> Any:
    async def execute(args: Any, ctx: ToolRunContext) -> Any:
        current = CURRENT.get()
        if current is None or current.extra is None:
            raise RuntimeError(f"{name!r} is a pydantic-ai tool; it runs only through its agent")
        host, run = current.extra
        value = await run_in_asyncio(host, run)  # the framework's own call, on its own loop
        return value if isinstance(value, str) else json.dumps(value, default=repr)

    return define_tool(
        name=name,
        description=description,
        parameters={},
        execute=execute,
        strict_arguments=False,
        paths=paths,
    )


def guarded(
    toolset: AbstractToolset[Any],
    host: AnyHost,
    *,
    scope: Scope | None = None,
    paths: PathDeclarations | None = None,
) -> AbstractToolset[Any]:
    """*toolset* with each call put through dsh's pipeline; see the module docstring.

    Its tools are registered in *host* under their own names, in *scope* (default: a scope of
    their own, so they never clash with the host's tools); rules and guards name them so.
    *paths* declares, per tool, which arguments are paths and how the tool uses them
    (``{"read_note": {"path": "read"}}``), as `define_tool`'s ``paths`` does: read and edit
    rules (``Read(./secrets/**)``) then apply to those calls. A tool it names that the toolset
    does not offer is an error (a rule that silently reached nothing would be worse).
    """
    deferral_of(host, BY)
    scope = scope or Scope(f"pydantic-ai:{id(toolset):x}")
    return _Guarded(toolset, host=host, scope=scope, paths=dict(paths or {}))
