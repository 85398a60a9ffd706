"""The bridges' deferred approvals: an approval is honoured for exactly the call dsh deferred,
once, and the person's answer (approved or rejected) is in every observer's record."""

from __future__ import annotations

import asyncio
import json

from agents import Agent, RunConfig, Runner
from agents.tool_context import ToolContext
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart

import dsh_host.aio
from dsh_host import Ask, hookimpl
from dsh_host.bridges.openai_agents import function_tools
from dsh_host.bridges.pydantic_ai import DshToolset
from tests.conftest import make_echo
from tests.loops.test_openai_agents import Scripted, outputs
from tests.loops.test_pydantic_ai import scripted, tool_returns


class Policy:
    """Ask before anything that starts with ``push`` (unless ``allow``); record every result."""

    name = "policy"

    def __init__(self, *tools):
        self.tools = tools or (make_echo(),)
        self.allow = False
        self.rows = []

    @hookimpl
    def dsh_register_tools(self, register):
        for tool in self.tools:
            register(tool)

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        text = execution.arguments.get("text", "")
        return Ask("pushing needs a person") if text.startswith("push") and not self.allow else None

    @hookimpl
    def dsh_tool_result(self, execution, result):
        outcome = result.error.code if result.error else "ok"
        text = execution.arguments.get("text")
        self.rows.append(
            (execution.call_id, text, outcome, result.decided_by, execution.approved_by)
        )

    def ran(self):
        return [text for _, text, outcome, _, _ in self.rows if outcome == "ok"]


def run(coro):
    return asyncio.run(coro)


def deferring_agent(host, *steps):
    return PydanticAgent(
        scripted(*steps), toolsets=[DshToolset(host)], output_type=[str, DeferredToolRequests]
    )


def approve(first, answer=True):
    (pending,) = first.output.approvals
    return DeferredToolResults(approvals={pending.tool_call_id: answer})


def test_pydantic_ai_an_approval_is_not_honoured_for_arguments_swapped_in_the_history():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(host, [("echo", {"text": "push"})])
            first = await agent.run("go")
            history = first.all_messages()
            (part,) = history[-1].parts
            part.args = {"text": "push --force"}  # the history came back altered
            second = await agent.run(message_history=history, deferred_tool_results=approve(first))
        assert policy.ran() == []
        assert "push --force" not in tool_returns(second.all_messages())
        (pending,) = second.output.approvals  # asked again, about what would really run
        assert pending.args == {"text": "push --force"}

    run(main())


def test_pydantic_ai_override_args_ask_again():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(host, [("echo", {"text": "push"})])
            first = await agent.run("go")
            answer = ToolApproved(override_args={"text": "push --force"})
            results = approve(first, answer)
            second = await agent.run(
                message_history=first.all_messages(), deferred_tool_results=results
            )
        assert policy.ran() == []
        assert isinstance(second.output, DeferredToolRequests)

    run(main())


def test_pydantic_ai_an_approval_for_a_call_dsh_never_deferred_asks():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(host)
            history = [
                ModelRequest.user_text_prompt("go"),
                ModelResponse(parts=[ToolCallPart("echo", {"text": "push"}, tool_call_id="x")]),
            ]
            results = DeferredToolResults(approvals={"x": True})
            result = await agent.run(message_history=history, deferred_tool_results=results)
        assert policy.ran() == []
        assert isinstance(result.output, DeferredToolRequests)

    run(main())


def test_pydantic_ai_an_approval_is_used_once():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(host, [("echo", {"text": "push"})])
            first = await agent.run("go")
            results = approve(first)
            await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
            replay = await agent.run(
                message_history=first.all_messages(), deferred_tool_results=results
            )
        assert policy.ran() == ["push"]
        assert isinstance(replay.output, DeferredToolRequests)

    run(main())


def test_pydantic_ai_the_persons_answers_are_recorded_as_the_frameworks():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(
                host, [("echo", {"text": "push a"}), ("echo", {"text": "push b"})]
            )
            first = await agent.run("go")
            answers = {c.tool_call_id: c.args["text"] == "push a" for c in first.output.approvals}
            results = DeferredToolResults(approvals=answers)
            await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
        later = policy.rows[2:]
        assert sorted(row[1:] for row in later) == [
            ("push a", "ok", None, "pydantic-ai approval"),
            ("push b", "DENIED", "pydantic-ai approval", None),
        ]
        assert policy.ran() == ["push a"]

    run(main())


def test_pydantic_ai_a_rejected_call_is_recorded_and_never_runs_once_policy_allows_it():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            agent = deferring_agent(host, [("echo", {"text": "push"})])
            first = await agent.run("go")
            policy.allow = True  # policy no longer asks: dsh's guard still holds the rejection
            results = approve(first, False)
            await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
        assert policy.ran() == []
        assert policy.rows[-1][1:4] == ("push", "DENIED", "pydantic-ai approval")

    run(main())


def sdk_ctx(call_id, name, arguments):
    return ToolContext(context=None, tool_name=name, tool_call_id=call_id, tool_arguments=arguments)


def test_openai_agents_an_approval_is_for_that_tool_and_used_once():
    async def main():
        policy = Policy(make_echo(), make_echo("echo2"))
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            echo, echo2 = sorted(function_tools(host), key=lambda tool: tool.name)
            args = json.dumps({"text": "push"})
            assert await echo.needs_approval(None, {"text": "push"}, "c1")  # dsh deferred it
            other = await echo2.on_invoke_tool(sdk_ctx("c1", "echo2", args), args)
            assert other.startswith("Error:")  # approved for echo, not for echo2
            assert await echo.needs_approval(None, {"text": "push"}, "c2")
            assert await echo.on_invoke_tool(sdk_ctx("c2", "echo", args), args) == "push"
            replay = await echo.on_invoke_tool(sdk_ctx("c2", "echo", args), args)
            assert replay.startswith("Error:")
        assert policy.ran() == ["push"]

    run(main())


def test_openai_agents_the_persons_answers_are_recorded_as_the_frameworks():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            model = Scripted([("echo", {"text": "push a"}), ("echo", {"text": "push b"})])
            agent = Agent(name="a", model=model, tools=function_tools(host))
            config = RunConfig(tracing_disabled=True)
            first = await Runner.run(agent, "go", run_config=config)
            state = first.to_state()
            for item in first.interruptions:
                approved = json.loads(item.raw_item.arguments)["text"] == "push a"
                (state.approve if approved else state.reject)(item)
            second = await Runner.run(agent, state, run_config=config)
        assert outputs(second)[0] == "push a"
        assert sorted(row[1:] for row in policy.rows) == [
            ("push a", "ok", None, "openai-agents approval"),
            ("push b", "DENIED", "openai-agents approval", None),
        ]

    run(main())
