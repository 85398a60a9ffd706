"""``otel``: one OpenTelemetry span per tool call (``pip install 'dsh-host[otel]'``).

::

    [plugin.otel]
    enabled = "auto"         # "auto": on when an OpenTelemetry tracer provider is configured
    capture_content = false  # true: arguments and results in spans (redacted as audit redacts)

Each call is a span named ``execute_tool {tool}`` (a call of a tool that does not exist:
``execute_tool``, its name escaped and cut to 100 characters in ``gen_ai.tool.name``) following the GenAI semantic conventions
(``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.type``; ``error.type`` is the outcome code), with ``dsh.decided_by`` and
``dsh.decision_detail`` (the rule) when policy stopped or changed the call. Its parent is the
caller's current context, so under an agent framework's span it nests there. Inside it:

* an event ``dsh.policy`` with the pre-execute decision (``allow``, ``deny``, ``ask``);
* a child span ``dsh.approval`` for the time an approver took to answer an ``Ask``;
* a child span ``dsh.execute`` around the execute wrappers and the body (the sandbox's spawn,
  a timeout, the tool itself), which is current while they run, so their own spans nest in it;
* an event ``dsh.result`` when the result reaches the observers (audit writes its row then).

With ``enabled = "auto"`` (the default) the plugin is off unless OpenTelemetry is installed and
a tracer provider other than the API's default no-op one is set when the host starts; off, it
takes its hooks out of the pipeline and costs nothing per call (``dsh plugins`` says why). ``enabled = true`` without OpenTelemetry is a
configuration error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Literal, final

import attrs

from dsh_host import (
    Allow,
    ApprovalRequest,
    Ask,
    ConfigError,
    Deny,
    Host,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
    printable,
    thaw,
)

from ._audit._writer import redact, scrub

__all__ = ["OtelConfig", "OtelPlugin"]

Enabled = bool | Literal["auto"]
_PER_CALL = (
    "dsh_tool_pre_execute", "dsh_tool_approve", "dsh_tool_guard", "dsh_tool_execute", "dsh_tool_result",
)  # fmt: skip


@final
@attrs.frozen
class OtelConfig:
    """``[plugin.otel]``: see the module docstring."""

    enabled: Enabled = "auto"
    capture_content: bool = False


class OtelPlugin:
    """Spans for tool calls; see the module docstring.

    Args:
        tracer_provider: the provider to use (default: OpenTelemetry's global one).
    """

    name = "otel"

    def __init__(self, tracer_provider: Any = None) -> None:
        self._provider = tracer_provider
        self._tracer: Any = None
        self._registry: Any = None
        self._capture = False
        self._calls: dict[object, _Call] = {}
        self._status = "not started"
        self.dsh_idle_hooks: set[str] = set()

    @hookimpl
    def dsh_plugin_config(self) -> type[OtelConfig]:
        return OtelConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        config: OtelConfig = host.config_for(self)
        if config.enabled == "auto" and self._provider is None and _unset():
            self._off(_NO_PROVIDER if _installed() else _NOT_INSTALLED)
            return
        try:
            from opentelemetry import trace
        except ImportError:
            if config.enabled is True:
                raise ConfigError(
                    "enabled = true, but OpenTelemetry is not installed: "
                    "pip install 'dsh-host[otel]' (or set enabled = \"auto\")",
                    path=host.config.source, plugin=self.name, key="enabled",
                ) from None  # fmt: skip
            self._off(_NOT_INSTALLED)
            return
        provider = self._provider or trace.get_tracer_provider()
        default = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        if config.enabled is False:
            self._off("enabled = false")
            return
        if config.enabled == "auto" and isinstance(provider, default):
            self._off(_NO_PROVIDER)
            return
        self._status = f"tracing to {type(provider).__name__}"
        self._registry = host.registry
        self._tracer = provider.get_tracer("dsh_host")
        self._capture = config.capture_content

    def _off(self, why: str) -> None:
        self._status = f"off: {why}"
        self.dsh_idle_hooks = set(_PER_CALL)  # the pipeline never calls them: no cost per call

    @hookimpl
    def dsh_plugin_status(self) -> list[str]:
        return [self._status]

    @hookimpl(tryfirst=True)
    async def dsh_tool_pre_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[Allow | Deny | Ask]]
    ) -> Allow | Deny | Ask:
        if execution.dry_run:  # a preview is no call: no span
            return await call_next()
        call = self._start(execution)
        decision = await call_next()
        kind = type(decision).__name__.lower()
        reason = getattr(decision, "reason", None)
        attributes = {"dsh.decision": kind}
        if reason and self._capture:
            attributes["dsh.reason"] = scrub(str(reason))
        call.span.add_event("dsh.policy", attributes)
        return decision

    @hookimpl(tryfirst=True)
    def dsh_tool_approve(self, request: ApprovalRequest) -> None:
        call = self._calls.get(request.execution.token)
        if call is not None and call.approval is None:
            call.approval = self._tracer.start_span(
                "dsh.approval",
                context=call.context,
                attributes={"dsh.asked_by": request.asked_by or ""},
            )

    @hookimpl(tryfirst=True)
    def dsh_tool_guard(self, execution: ToolExecution) -> None:
        call = self._calls.get(execution.token)
        if call is not None:
            call.end_approval()

    @hookimpl(tryfirst=True)
    async def dsh_tool_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[ToolExecutionResult]]
    ) -> ToolExecutionResult:
        from opentelemetry import trace

        call = self._calls.get(execution.token)
        if call is None:
            return await call_next()
        call.end_approval()
        with self._tracer.start_as_current_span("dsh.execute", context=call.context) as span:
            result = await call_next()
            if result.error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, result.error.code or "error"))
            return result

    @hookimpl
    def dsh_tool_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        call = self._calls.pop(execution.token, None) or self._start(execution, keep=False)
        call.end_approval()
        span = call.span
        span.add_event("dsh.result")
        if result.decided_by is not None:
            span.set_attribute("dsh.decided_by", result.decided_by)
        if result.decision_detail is not None:
            span.set_attribute("dsh.decision_detail", result.decision_detail)
        if self._capture:
            span.set_attribute(
                "gen_ai.tool.call.result", _json([b.to_json() for b in result.content])
            )
        if result.error is not None:
            from opentelemetry import trace

            code = result.error.code or "TOOL_FAILED"
            span.set_attribute("error.type", code)
            span.set_status(trace.Status(trace.StatusCode.ERROR, code))
        span.end()

    def _start(self, execution: ToolExecution, keep: bool = True) -> _Call:
        from opentelemetry import context, trace

        unknown = self._registry.get(execution.name, execution.scope) is None
        # A name no tool has is the model's own text: the span is not named after it (a name
        # per typo, or a 100 KB name, in every trace backend's span list) and it is cut.
        name = printable(execution.name[:_NAME_KEPT]) if unknown else execution.name
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": execution.call_id,
            "gen_ai.tool.type": "function",
        }
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = _json(redact(thaw(execution.arguments)))
        span = self._tracer.start_span(
            "execute_tool" if unknown else f"execute_tool {name}",
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        call = _Call(span, trace.set_span_in_context(span, context.get_current()))
        if keep and not execution.dry_run:
            self._calls[execution.token] = call
        return call


@attrs.define
class _Call:
    span: Any
    context: Any
    approval: Any = None

    def end_approval(self) -> None:
        if self.approval is not None:
            self.approval.end()
            self.approval = None


_NAME_KEPT = 100  # characters of an unknown tool's name kept in its span


def _json(value: Any) -> str:
    """*value* as JSON, with each credential found in it by its shape redacted (`scrub`)."""
    return scrub(json.dumps(value, ensure_ascii=False, default=repr))


_NOT_INSTALLED = "OpenTelemetry is not installed (pip install 'dsh-host[otel]')"
_NO_PROVIDER = "no OpenTelemetry tracer provider was configured before the host started"


def _unset() -> bool:
    """Whether no tracer provider can have been configured: nothing imported OpenTelemetry's
    API (setting a provider imports it) and ``OTEL_PYTHON_TRACER_PROVIDER`` names none. Then
    `dsh_host_started` need not import it to find the default (issue 27: cold start)."""
    return "opentelemetry.trace" not in sys.modules and "OTEL_PYTHON_TRACER_PROVIDER" not in (
        os.environ
    )


def _installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False
