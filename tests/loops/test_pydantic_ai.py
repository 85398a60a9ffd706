"""`dsh_host.bridges.pydantic_ai`: dsh's tools and policy in a pydantic-ai agent, no network."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, FunctionToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import dsh_host.aio
from dsh_host import Ask, Deny, hookimpl
from dsh_host.bridges.pydantic_ai import DshToolset, guarded
from tests.conftest import make_echo


class Policy:
    """Deny ``rm``, ask before ``push``; count what reaches each stage."""

    name = "policy"

    def __init__(self):
        self.seen = []
        self.approvals = 0

    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        text = execution.arguments.get("text") if isinstance(execution.arguments, dict) else None
        self.seen.append((execution.name, text))
        if text == "rm":
            return Deny("no rm here")
        if text == "push":
            return Ask("pushing needs a person")
        return None

    @hookimpl
    def dsh_tool_approve(self, request):
        self.approvals += 1  # asked, but answers nothing: no approver here
        return None


def scripted(*steps):
    """A model that makes the given tool calls, one step each, then says "done"."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        if step < len(steps):
            return ModelResponse(
                parts=[
                    ToolCallPart(name, args, tool_call_id=f"c{step}-{i}")
                    for i, (name, args) in enumerate(steps[step])
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model)


def tool_returns(messages):
    return [
        p.content
        for m in messages
        for p in getattr(m, "parts", [])
        if isinstance(p, ToolReturnPart)
    ]


def run(coro):
    return asyncio.run(coro)


def test_test_model_calls_every_dsh_tool():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = Agent(TestModel(), toolsets=[DshToolset(host)])
            result = await agent.run("go")
        assert [name for name, _ in policy.seen] == ["echo"]
        assert tool_returns(result.all_messages()) == [policy.seen[0][1]]

    run(main())


def test_denials_reach_the_model_as_dsh_words_them():
    async def main():
        async with dsh_host.aio.open_host(plugins=[Policy()], entry_points=False) as host:
            agent = Agent(
                scripted([("echo", {"text": "hi"}), ("echo", '{"text": "rm"}')]),
                toolsets=[DshToolset(host)],
            )
            result = await agent.run("go")
        assert tool_returns(result.all_messages()) == ["hi", "Error: no rm here"]

    run(main())


def test_an_unanswered_ask_is_deferred_and_the_approved_retry_runs_once():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = Agent(
                scripted([("echo", {"text": "push"})]),
                toolsets=[DshToolset(host)],
                output_type=[str, DeferredToolRequests],
            )
            first = await agent.run("go")
            assert isinstance(first.output, DeferredToolRequests)
            (pending,) = first.output.approvals
            assert pending.tool_name == "echo"
            assert first.output.metadata[pending.tool_call_id]["reason"] == "pushing needs a person"
            assert policy.approvals == 1
            results = DeferredToolResults(approvals={pending.tool_call_id: True})
            second = await agent.run(
                message_history=first.all_messages(), deferred_tool_results=results
            )
        assert second.output == "done"
        assert tool_returns(second.all_messages())[-1] == "push"
        assert policy.approvals == 1  # the approved retry was not asked again

    run(main())


def test_approval_is_for_exactly_those_arguments():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            toolset = DshToolset(host)
            # A nested call with other arguments during an approved call is asked about anew.
            from dsh_host.bridges._common import Deferred, call

            approved = Deferred("echo", '{"text":"push"}', None)
            result, state = await call(host, "echo", {"text": "push"}, approved=approved, by="t")
            assert not result.is_error
            other, state = await call(
                host, "echo", {"text": "push", "extra": 1}, approved=approved, by="t"
            )
            assert state.deferred(other)
            assert toolset.id is None

    run(main())


def test_guarded_puts_function_tools_through_dsh():
    async def main():
        policy = Policy()
        ran = []
        tools = FunctionToolset()

        @tools.tool_plain
        async def shout(text: str) -> dict:
            ran.append(text)
            return {"loud": text.upper()}

        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = Agent(
                scripted([("shout", {"text": "hi"}), ("shout", {"text": "rm"})]),
                toolsets=[guarded(tools, host)],
            )
            result = await agent.run("go")
        assert ran == ["hi"]  # the denied call never reached the function
        assert tool_returns(result.all_messages()) == [{"loud": "HI"}, "Error: no rm here"]
        assert ("shout", "rm") in policy.seen

    run(main())


def test_guarded_defers_an_ask_too():
    async def main():
        tools = FunctionToolset()
        ran = []

        @tools.tool_plain
        def shout(text: str) -> str:
            ran.append(text)
            return text.upper()

        async with dsh_host.aio.open_host(plugins=[Policy()], entry_points=False) as host:
            agent = Agent(
                scripted([("shout", {"text": "push"})]),
                toolsets=[guarded(tools, host)],
                output_type=[str, DeferredToolRequests],
            )
            first = await agent.run("go")
            assert isinstance(first.output, DeferredToolRequests)
            assert ran == []
            (pending,) = first.output.approvals
            results = DeferredToolResults(approvals={pending.tool_call_id: True})
            await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
        assert ran == ["push"]

    run(main())


async def test_a_trio_host_is_refused_with_what_to_do():
    async with dsh_host.open_host(plugins=[Policy()], entry_points=False) as host:
        with pytest.raises(TypeError, match=r"pass the host of `dsh_host.aio.open_host\(\)`"):
            DshToolset(host)


def test_importing_dsh_host_imports_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, dsh_host, dsh_host.aio\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic_ai', 'agents', 'opentelemetry', 'openai')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])
def test_bridges_are_modules_of_their_own(name):
    import importlib

    assert importlib.import_module(f"dsh_host.bridges.{name}").__all__


def _read_rules_host(tmp_path):
    from dsh_plugins_builtin.permissions import PermissionsPlugin

    (tmp_path / "secrets").mkdir()
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {"permissions": {"deny": ["Read(./secrets/**)"], "default": "allow"}},
    }
    return dsh_host.aio.open_host(config, plugins=[PermissionsPlugin()], entry_points=False)


def _note_tools(ran):
    tools = FunctionToolset()

    @tools.tool_plain
    def read_note(path: str) -> str:
        ran.append(path)
        return f"contents of {path}"

    return tools


@pytest.mark.parametrize("declared", [True, False])
def test_guarded_tools_declare_their_path_arguments_so_read_rules_reach_them(tmp_path, declared):
    async def main():
        ran = []
        paths = {"read_note": {"path": "read"}} if declared else None
        async with _read_rules_host(tmp_path) as host:
            agent = Agent(
                scripted([("read_note", {"path": "secrets/key"}), ("read_note", {"path": "a"})]),
                toolsets=[guarded(_note_tools(ran), host, paths=paths)],
            )
            result = await agent.run("go")
        return ran, tool_returns(result.all_messages())

    ran, returns = run(main())
    if declared:  # the deny rule reads the declared path argument
        assert ran == ["a"]
        (denied,) = [r for r in returns if r.startswith("Error:")]
        assert "secrets" in denied
        assert "contents of a" in returns
    else:  # undeclared, a read rule has no path to match: why the declaration is needed
        assert sorted(ran) == ["a", "secrets/key"]


def test_guarded_paths_naming_a_tool_the_toolset_lacks_is_an_error(tmp_path):
    async def main():
        async with _read_rules_host(tmp_path) as host:
            toolset = guarded(_note_tools([]), host, paths={"read_nte": {"path": "read"}})
            agent = Agent(scripted([("read_note", {"path": "a"})]), toolsets=[toolset])
            await agent.run("go")

    with pytest.raises(ValueError, match=r"does not offer: read_nte \(its tools: read_note\)"):
        run(main())
