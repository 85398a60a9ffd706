"""The ``otel`` plugin: GenAI-convention spans per call, tested with the SDK's in-memory exporter."""

from __future__ import annotations

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import dsh_host
from dsh_host import Ask, Deny, hookimpl
from dsh_plugins_builtin.otel import OtelPlugin
from tests.conftest import make_echo


class Policy:
    name = "policy"

    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        text = execution.arguments.get("text") if isinstance(execution.arguments, dict) else None
        if text == "rm":
            return Deny("no rm", detail="rule Bash(rm:*) in dsh.toml")
        if text == "push":
            return Ask("needs a person")
        return None


class Approver:
    name = "approver"

    @hookimpl
    async def dsh_tool_approve(self, request):
        await trio.sleep(1)  # a person thinking (on the mock clock)
        return dsh_host.ApprovalOutcome.ALLOWED_ONCE


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def config(capture=False, enabled="auto"):
    return {"plugin": {"otel": {"capture_content": capture, "enabled": enabled}}}


async def test_one_span_per_call_with_the_genai_attributes_under_the_callers_span(traced):
    provider, exporter = traced
    plugins = [OtelPlugin(provider), Policy()]
    async with dsh_host.open_host(config(), plugins=plugins, entry_points=False) as host:
        with provider.get_tracer("agent").start_as_current_span("invoke_agent"):
            await host.call("echo", {"text": "hi", "api_key": "sk-1"}, call_id="call-1")
            await host.call("echo", {"text": "rm"}, call_id="call-2")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    agent = spans["invoke_agent"]
    ok = next(
        s
        for s in exporter.get_finished_spans()
        if s.attributes.get("gen_ai.tool.call.id") == "call-1"
    )
    denied = next(
        s
        for s in exporter.get_finished_spans()
        if s.attributes.get("gen_ai.tool.call.id") == "call-2"
    )
    assert ok.name == "execute_tool echo"
    assert ok.kind is trace.SpanKind.INTERNAL
    assert dict(ok.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
    }  # no content: capture_content is off
    assert ok.parent.span_id == agent.context.span_id
    assert [e.name for e in ok.events] == ["dsh.policy", "dsh.result"]
    assert ok.events[0].attributes["dsh.decision"] == "allow"
    execute = spans["dsh.execute"]
    assert execute.parent.span_id == ok.context.span_id
    assert denied.attributes["error.type"] == "DENIED"
    assert denied.attributes["dsh.decided_by"] == "policy"
    assert denied.attributes["dsh.decision_detail"] == "rule Bash(rm:*) in dsh.toml"
    assert denied.status.status_code is trace.StatusCode.ERROR
    assert denied.events[0].attributes["dsh.decision"] == "deny"


async def test_a_tool_that_does_not_exist_names_no_span(traced):
    """The model's name for a tool nobody has is neither a span name (one per typo in every
    trace backend's list) nor kept whole: it once made a 100 KB span name."""
    provider, exporter = traced
    async with dsh_host.open_host(
        config(), plugins=[OtelPlugin(provider)], entry_points=False
    ) as host:
        await host.call("x" * 100_000 + "\x1b[2J", {}, call_id="call-9")
    [span] = [s for s in exporter.get_finished_spans() if s.name != "dsh.execute"]
    assert span.name == "execute_tool"
    assert span.attributes["gen_ai.tool.name"] == "x" * 100
    assert span.attributes["error.type"] == "UNKNOWN_TOOL"


async def test_capture_content_records_redacted_arguments_and_the_result(traced):
    provider, exporter = traced
    plugins = [OtelPlugin(provider), Policy()]
    async with dsh_host.open_host(
        config(capture=True), plugins=plugins, entry_points=False
    ) as host:
        await host.call("echo", {"text": "hi", "api_key": "sk-1"})
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert (
        span.attributes["gen_ai.tool.call.arguments"] == '{"text": "hi", "api_key": "[REDACTED]"}'
    )
    assert span.attributes["gen_ai.tool.call.result"] == '[{"type": "text", "text": "hi"}]'


async def test_the_approval_wait_is_a_child_span(traced, autojump_clock):
    provider, exporter = traced
    plugins = [OtelPlugin(provider), Policy(), Approver()]
    async with dsh_host.open_host(config(), plugins=plugins, entry_points=False) as host:
        result = await host.call("echo", {"text": "push"})
    assert not result.is_error
    spans = {s.name: s for s in exporter.get_finished_spans()}
    approval = spans["dsh.approval"]
    assert approval.parent.span_id == spans["execute_tool echo"].context.span_id
    assert (approval.end_time - approval.start_time) >= 0  # ended, before the body ran
    assert approval.end_time <= spans["dsh.execute"].start_time


async def test_off_when_no_tracer_provider_is_configured():
    plugin = OtelPlugin()  # the global provider: the API's default, a no-op
    async with dsh_host.open_host(plugins=[plugin, Policy()], entry_points=False) as host:
        hooks = (
            "dsh_tool_pre_execute",
            "dsh_tool_approve",
            "dsh_tool_guard",
            "dsh_tool_execute",
            "dsh_tool_result",
        )
        assert not [i for h in hooks for i in host.hooks.impls(h) if i.plugin == "otel"]  # no cost
        (row,) = [row for row in host.plugins() if row.name == "otel"]
        assert row.status_lines == (
            "off: no OpenTelemetry tracer provider was configured before the host started",
        )
        assert (await host.call("echo", {"text": "hi"})).content[0].text == "hi"


async def test_enabled_false_turns_it_off_even_with_a_provider(traced):
    provider, exporter = traced
    async with dsh_host.open_host(
        config(enabled=False), plugins=[OtelPlugin(provider), Policy()], entry_points=False
    ) as host:
        await host.call("echo", {"text": "hi"})
    assert exporter.get_finished_spans() == ()


async def test_under_asyncio_the_span_nests_under_the_asyncio_callers_span(traced):
    import asyncio

    import dsh_host.aio

    provider, exporter = traced

    async def main():
        async with dsh_host.aio.open_host(
            config(), plugins=[OtelPlugin(provider), Policy()], entry_points=False
        ) as host:
            with provider.get_tracer("agent").start_as_current_span("invoke_agent"):
                await host.call("echo", {"text": "hi"})

    await trio.to_thread.run_sync(asyncio.run, main())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["execute_tool echo"].parent.span_id == spans["invoke_agent"].context.span_id


async def test_captured_content_loses_credentials_found_by_their_shape(traced):
    """Redacting by key missed a token inside a text: a command's ``Authorization`` header,
    the password of a URL. The echo tool returns its text, so the result is checked too."""
    provider, exporter = traced
    token = "ghp_" + "a1B2c3D4" * 5
    text = f'curl -H "Authorization: Bearer {token}" https://bob:hunter2@example.com/x'
    async with dsh_host.open_host(
        config(capture=True), plugins=[OtelPlugin(provider), Policy()], entry_points=False
    ) as host:
        await host.call("echo", {"text": text})
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    arguments = span.attributes["gen_ai.tool.call.arguments"]
    result = span.attributes["gen_ai.tool.call.result"]
    for captured in (arguments, result):
        assert token not in captured
        assert "hunter2" not in captured
        assert "Bearer [REDACTED]" in captured
        assert "https://bob:[REDACTED]@example.com/x" in captured
