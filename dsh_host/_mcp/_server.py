"""The MCP server behind ``dsh mcp serve``: the host's gated tools on the official SDK's lowlevel server.

Every ``tools/call`` runs the whole pipeline (permissions, approval, guards, sandbox, audit).
What this module decides, once per host and tool list rather than per call:

- ``tools/list`` hides a tool that policy denies outright (a dry run with empty arguments ends
  ``DENIED`` by a pre-execute plugin) unless ``list_all``; annotations come from the definition
  (`annotations_for`).
- results: the content, then one text item per context note; an error keeps ``isError`` and
  ``_meta`` ``dsh/code``, ``dsh/decided_by``, ``dsh/decision_detail``. ``UNKNOWN_TOOL`` is the
  protocol's unknown-tool error (JSON-RPC ``-32602``).
- ``notifications/cancelled`` aborts the call's `AbortSignal`; the call runs to its (aborted)
  result, is audited, and the SDK sends no response over stdio (over HTTP its transport answers
  the request's open stream with ``-32800``).
- an ``Ask`` is put to the person at the client through elicitation when the client declared
  the capability; otherwise it is ``unavailable``.
"""

from __future__ import annotations

import contextvars
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError

from .. import (
    AbortSignal,
    ImageBlock,
    Scope,
    TextBlock,
    ToolDefinition,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRestriction,
    TraceEvent,
)
from ._approve import APPROVER_NAME, REQUEST, ClientApprover, how_to_allow
from ._auth import Tokens, grant_of
from ._limits import CallCaps, HttpLimits
from ._sessions import HttpSessions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .. import Host

__all__ = [
    "APPROVER_NAME",
    "CALL_GROUP",
    "CallGroup",
    "McpService",
    "annotations_for",
    "content_to_mcp",
]

logger = logging.getLogger("dsh_host.mcp")

INVALID_PARAMS, INTERNAL_ERROR = -32602, -32603


class CallGroup:
    """The calls running for one client connection: aborted together when the client leaves."""

    def __init__(self) -> None:
        self._signals: set[AbortSignal] = set()
        self.closed: str | None = None

    def add(self, signal: AbortSignal) -> None:
        if self.closed is not None:
            signal.abort(self.closed)
        self._signals.add(signal)

    def discard(self, signal: AbortSignal) -> None:
        self._signals.discard(signal)

    def abort_all(self, reason: str) -> None:
        """Abort every running call (and any that starts later) with *reason*."""
        self.closed = reason
        for signal in list(self._signals):
            signal.abort(reason)


CALL_GROUP: contextvars.ContextVar[CallGroup | None] = contextvars.ContextVar(
    "dsh_mcp_call_group", default=None
)
"""Set around one connection's SDK session; `McpService` files each call's signal in it."""


def _version() -> str:
    try:
        return version("dsh-host")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def annotations_for(tool: ToolDefinition) -> types.ToolAnnotations:
    """The MCP hints for *tool*, from what its definition declares.

    - ``readOnlyHint``: it declares path arguments, every one ``"read"``, and has an
      ``is_concurrency_safe``: a tool that names only files it reads and may run alongside
      others. Nothing undeclared is assumed read-only.
    - ``destructiveHint``: not read-only (the spec's conservative default).
    - ``idempotentHint``: read-only (repeating a read changes nothing); otherwise false.
    - ``openWorldHint``: it declares no path arguments, so nothing says it stays inside the
      workspace (``bash``, most plugin tools); a tool whose paths are declared is closed-world.
    """
    paths = dict(tool.paths)
    read_only = bool(paths) and set(paths.values()) == {"read"}
    read_only = read_only and tool.is_concurrency_safe is not None
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=not read_only,
        idempotent_hint=read_only,
        open_world_hint=not paths,
    )


def content_to_mcp(result: ToolExecutionResult) -> list[types.ContentBlock]:
    """MCP content for a result: its blocks, then each context note as one more text item."""
    out: list[types.ContentBlock] = []
    for block in result.content:
        if isinstance(block, TextBlock):
            out.append(types.TextContent(type="text", text=block.text))
        elif isinstance(block, ImageBlock):
            out.append(types.ImageContent(type="image", data=block.data, mime_type=block.mime_type))
    for context in result.additional_contexts:
        text = "\n".join(b.text for b in context.content if isinstance(b, TextBlock))
        if text:
            out.append(types.TextContent(type="text", text=text))
        out.extend(
            types.ImageContent(type="image", data=b.data, mime_type=b.mime_type)
            for b in context.content
            if isinstance(b, ImageBlock)
        )
    return out


def _result_to_mcp(result: ToolExecutionResult) -> types.CallToolResult:
    meta: dict[str, Any] | None = None
    if result.is_error:
        meta = {
            "dsh/code": result.code,
            "dsh/decided_by": result.decided_by,
            "dsh/decision_detail": result.decision_detail,
        }
    if result.additional_contexts:
        meta = {
            **(meta or {}),
            "dsh/context_sources": [c.source for c in result.additional_contexts],
        }
    return types.CallToolResult.model_validate(
        {"content": content_to_mcp(result), "isError": result.is_error, "_meta": meta}
    )


def _approver(host: Host) -> ClientApprover:
    """The elicitation approver of *host*, registered once."""
    approver = host.pm.get_plugin(APPROVER_NAME)
    if not isinstance(approver, ClientApprover):
        approver = ClientApprover()
        host.pm.register(approver, name=APPROVER_NAME)
    return approver


def _restrictions(tokens: Tokens | None) -> dict[Scope, ToolRestriction]:
    """Each token scope's restriction (the token file gives one per scope)."""
    grants = tokens.grants() if tokens is not None else []
    return {g.scope: g.restriction for g in grants if g.scope and g.restriction}


class _Server(Server[Any]):
    """The SDK server, announcing ``tools.listChanged`` by default (the HTTP session manager
    asks for its options without arguments)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class McpService:
    """The host's tools as an SDK `Server`; one per ``dsh mcp serve`` process, any number of sessions."""

    def __init__(
        self,
        host: Host,
        *,
        list_all: bool = False,
        tokens: Tokens | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self.host = host
        self.list_all = list_all
        self.tokens = tokens
        self.limits = limits or HttpLimits()
        self.in_flight = CallCaps(self.limits)
        """The HTTP calls running, per session and per token (capped by *limits*)."""
        self._listed: dict[Scope | None, tuple[tuple[ToolDefinition, ...], list[types.Tool]]] = {}
        self._calls = 0
        self._approver = _approver(host)
        for scope, restriction in _restrictions(tokens).items():
            host.registry.restrict(restriction, scope)  # ValueError: names an unknown tool
        self.http_sessions = HttpSessions()
        """The open HTTP sessions, told by `serve_http` when the tools change."""
        self.server: Server[Any] = _Server(
            "dsh",
            version=_version(),
            instructions="Tools served by dsh; every call passes its policy pipeline.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware = []  # no OpenTelemetry span per message on the hot path
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )

    async def _initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        self.http_sessions.remember(ctx)

    # -- tools/list ------------------------------------------------------------------------

    async def listed(self, scope: Scope | None = None) -> list[types.Tool]:
        """The tools offered in *scope*: computed once per set of tools, not per request."""
        tools = self.host.registry.tools(scope)
        cached = self._listed.get(scope)
        if (
            cached is not None
            and len(cached[0]) == len(tools)
            and all(a is b for a, b in zip(cached[0], tools, strict=True))
        ):
            return cached[1]
        offered = [
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=dict(tool.schema.parameters),
                annotations=annotations_for(tool),
            )
            for tool in await self._offered(tools, scope)
        ]
        self._listed[scope] = (tools, offered)
        return offered

    async def _offered(
        self, tools: Sequence[ToolDefinition], scope: Scope | None
    ) -> list[ToolDefinition]:
        if self.list_all:
            return list(tools)
        offered = []
        for tool in tools:
            if not await self._denied_outright(tool, scope):
                offered.append(tool)
        return offered

    async def _denied_outright(self, tool: ToolDefinition, scope: Scope | None) -> bool:
        """Whether a dry run of *tool* with no arguments ends DENIED by a pre-execute plugin."""
        events: list[TraceEvent] = []
        probe = ToolExecutionInput(
            call_id=f"mcp-list-{tool.name}", name=tool.name, arguments={}, scope=scope
        )
        token = REQUEST.set(_PROBE)
        try:
            result = await self.host.registry.preview(probe, trace=events.append)
        finally:
            REQUEST.reset(token)
        decided = result.decided_by if result is not None else None
        if result is None or result.code != "DENIED" or decided is None:
            return False
        return any(
            e.stage == "dsh_tool_pre_execute"
            and e.plugin is not None
            and (decided == e.plugin or decided.startswith(f"{e.plugin}:"))  # older `name: detail`
            and e.outcome.startswith("deny")
            for e in events
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.http_sessions.remember(ctx)
        return types.ListToolsResult(tools=await self.listed(self._scope(ctx)))

    def _scope(self, ctx: ServerRequestContext[Any]) -> Scope | None:
        """The scope of the token the request came with (``None`` without ``--token-file``)."""
        if self.tokens is None:
            return None
        grant = grant_of(ctx.request, self.tokens)
        if grant is None:  # the SDK's bearer middleware lets nothing else through
            raise MCPError(code=INVALID_PARAMS, message="not authenticated")
        return grant.scope

    # -- tools/call ------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        scope = self._scope(ctx)
        self.http_sessions.remember(ctx)
        with self.in_flight.admit(*self._caller(ctx)):
            return await self._run_call(ctx, params, scope)

    def _caller(self, ctx: ServerRequestContext[Any]) -> tuple[str | None, str | None]:
        """The HTTP session id and token principal of *ctx* (``None`` for each over stdio)."""
        headers = getattr(ctx.request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        grant = grant_of(ctx.request, self.tokens)
        token = grant.client_id if grant is not None else None
        return (session if isinstance(session, str) else None), token

    async def _run_call(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        scope: Scope | None,
    ) -> types.CallToolResult:
        self._calls += 1
        signal = AbortSignal()
        call_id = f"mcp-{self._calls}"
        group = CALL_GROUP.get()
        if group is not None:
            group.add(signal)
        box: list[ToolExecutionResult] = []
        failure: list[Exception] = []
        done = trio.Event()
        arguments = {} if params.arguments is None else params.arguments

        async def run() -> None:
            # Shielded: a cancelled request aborts the signal instead, so the call ends as an
            # ABORTED result (audited, its body awaited) rather than vanishing mid-pipeline.
            with trio.CancelScope(shield=True):
                REQUEST.set(ctx)
                try:
                    box.append(
                        await self.host.call(
                            params.name, arguments, call_id=call_id, scope=scope, signal=signal
                        )
                    )
                except Exception as exc:  # the host promises not to raise; if it does, say so
                    logger.exception("dsh mcp serve: tools/call %r raised", params.name)
                    failure.append(exc)
                finally:
                    if group is not None:
                        group.discard(signal)
                    done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            try:
                await done.wait()
            except trio.Cancelled:
                signal.abort("cancelled by the MCP client")
                raise
        if failure:
            text = f"dsh failed to run {params.name!r}: {type(failure[0]).__name__}: {failure[0]}"
            raise MCPError(code=INTERNAL_ERROR, message=text)
        result = box[0]
        if result.code == "UNKNOWN_TOOL":
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        answer = _result_to_mcp(result)
        if call_id in self._approver.unelicitable:
            self._approver.unelicitable.discard(call_id)
            if result.code == "DENIED":
                hint = how_to_allow(params.name, self.host.config.source)
                answer.content.append(types.TextContent(type="text", text=hint))
        return answer


class _Probe:
    """Stands in for a request context while tools/list probes policy (never elicits)."""


_PROBE: Any = _Probe()
