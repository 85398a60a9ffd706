"""`dsh_host.bridges.openai_agents`: dsh's tools and policy in the OpenAI Agents SDK, no network."""

from __future__ import annotations

import asyncio
import json

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import dsh_host.aio
from dsh_host import Ask, Deny, hookimpl
from dsh_host.bridges.openai_agents import function_tools, tool_guardrail
from tests.conftest import make_echo


class Policy:
    name = "policy"

    def __init__(self):
        self.seen = []

    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        args = execution.arguments if isinstance(execution.arguments, dict) else {}
        text = args.get("text") or args.get("word")
        self.seen.append((execution.name, text, execution.dry_run))
        if text == "rm":
            return Deny("no rm here")
        if text == "push":
            return Ask("pushing needs a person")
        return None


class Scripted(Model):
    """A model that makes the given function calls, one turn each, then answers "done"."""

    def __init__(self, *turns):
        self.turns = list(turns)
        self.step = 0

    async def get_response(self, *args, **kwargs):
        step, self.step = self.step, self.step + 1
        if step < len(self.turns):
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{step}_{i}",
                    name=name,
                    arguments=json.dumps(arguments),
                    id=f"fc_{step}_{i}",
                )
                for i, (name, arguments) in enumerate(self.turns[step])
            ]
        else:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            output = [
                ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def outputs(result):
    return [
        item.output
        for item in result.new_items
        if getattr(item, "type", "") == "tool_call_output_item"
    ]


def run(coro):
    return asyncio.run(coro)


def test_function_tools_are_the_hosts_tools_and_invoke_through_dsh():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            (tool,) = function_tools(host)
            assert isinstance(tool, FunctionTool)
            assert (tool.name, tool.params_json_schema["required"]) == ("echo", ["text"])
            ctx = ToolContext(
                context=None, tool_name="echo", tool_call_id="c1", tool_arguments='{"text": "hi"}'
            )
            assert await tool.on_invoke_tool(ctx, '{"text": "hi"}') == "hi"
            assert (await tool.on_invoke_tool(ctx, '{"text": ')).startswith(
                "Error: invalid arguments"
            )
            assert await tool.on_invoke_tool(ctx, '{"text": "rm"}') == "Error: no rm here"

    run(main())


def test_a_runner_with_a_scripted_model_and_the_approval_flow():
    async def main():
        policy = Policy()
        async with dsh_host.aio.open_host(plugins=[policy], entry_points=False) as host:
            model = Scripted(
                [("echo", {"text": "hi"}), ("echo", {"text": "rm"}), ("echo", {"text": "push"})]
            )
            agent = Agent(name="a", model=model, tools=function_tools(host))
            first = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
            assert outputs(first) == ["hi", "Error: no rm here"]
            (pending,) = first.interruptions  # dsh's Ask is the SDK's approval
            assert pending.tool_name == "echo"
            state = first.to_state()
            state.approve(pending)
            second = await Runner.run(agent, state, run_config=RunConfig(tracing_disabled=True))
        assert second.final_output == "done"
        assert outputs(second)[-1] == "push"
        real = [(text, dry) for name, text, dry in policy.seen if text == "push"]
        assert real[-1] == ("push", False)  # it ran through the pipeline, approved, not asked again

    run(main())


def test_tool_guardrail_puts_the_sdks_own_tools_to_dsh_policy():
    async def main():
        ran = []
        async with dsh_host.aio.open_host(plugins=[Policy()], entry_points=False) as host:

            @function_tool(tool_input_guardrails=[tool_guardrail(host)])
            def say(word: str) -> str:
                """Say a word."""
                ran.append(word)
                return word

            model = Scripted(
                [("say", {"word": "hello"}), ("say", {"word": "rm"}), ("say", {"word": "push"})]
            )
            agent = Agent(name="a", model=model, tools=[say])
            result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
        assert ran == ["hello"]
        out = outputs(result)
        assert out[0] == "hello"
        assert out[1] == "Error: no rm here"
        assert "pushing needs a person" in out[2]

    run(main())


def test_tool_guardrail_paths_let_read_rules_reach_the_sdks_tools(tmp_path):
    from dsh_plugins_builtin.permissions import PermissionsPlugin

    (tmp_path / "secrets").mkdir()
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {"permissions": {"deny": ["Read(./secrets/**)"], "default": "allow"}},
    }

    async def main():
        ran = []
        async with dsh_host.aio.open_host(
            config, plugins=[PermissionsPlugin()], entry_points=False
        ) as host:
            guardrail = tool_guardrail(host, paths={"read_note": {"path": "read"}})

            @function_tool(tool_input_guardrails=[guardrail])
            def read_note(path: str) -> str:
                """Read a note."""
                ran.append(path)
                return f"contents of {path}"

            model = Scripted(
                [("read_note", {"path": "secrets/key"})], [("read_note", {"path": "a"})]
            )
            agent = Agent(name="a", model=model, tools=[read_note])
            result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
        assert ran == ["a"]
        out = outputs(result)
        assert "secrets" in out[0]
        assert out[1] == "contents of a"

    run(main())
