"""`ToolRegistry`: scopes, shadowing, restrictions, schemas, execution modes."""

from __future__ import annotations

import pytest

from dsh_host import (
    ExecutionMode,
    Scope,
    ToolExecutionInput,
    ToolRegistry,
    ToolRestriction,
    define_tool,
)
from tests.conftest import make_echo


def names(registry, scope=None):
    return [t.name for t in registry.tools(scope)]


def returning(name, text):
    return define_tool(name=name, description=text, parameters={}, execute=lambda args: text)


async def test_scope_sees_global_then_ancestors_then_its_own_shadowing():
    registry = ToolRegistry()
    parent, child = Scope("parent"), Scope("child", Scope("parent"))
    registry.register(returning("bash", "global-bash"))
    registry.register(returning("read", "global-read"))
    registry.register(returning("bash", "parent-bash"), parent)
    registry.register(returning("mine", "child-mine"), child)
    assert names(registry) == ["bash", "read"]
    assert names(registry, parent) == ["bash", "read"]
    assert names(registry, child) == ["bash", "read", "mine"]
    assert registry.get("bash", child).description == "parent-bash"
    assert registry.get("mine") is None
    assert registry.get("mine", Scope("other")) is None
    call = ToolExecutionInput(call_id="1", name="bash", arguments={}, scope=child)
    assert (await registry.execute(call)).text == "parent-bash"


def test_register_returns_a_function_that_unregisters():
    registry = ToolRegistry()
    unregister = registry.register(make_echo())
    assert names(registry) == ["echo"]
    unregister()
    unregister()  # idempotent
    assert names(registry) == []


def test_duplicates_are_rejected_per_scope_naming_both_owners():
    registry = ToolRegistry()
    registry.register(make_echo(), owner="first-plugin")
    with pytest.raises(
        ValueError,
        match="'echo' is already registered globally by plugin 'first-plugin'; plugin 'second' registered it again",
    ):
        registry.register(make_echo(), owner="second")
    registry.register(make_echo(), Scope("a"))  # another scope may shadow it
    with pytest.raises(ValueError, match="in scope 'a'"):
        registry.register(make_echo(), Scope("a"))


def test_register_takes_only_tool_definitions():
    with pytest.raises(TypeError, match="takes a ToolDefinition"):
        ToolRegistry().register({"name": "x"})  # type: ignore[arg-type]


def test_restrictions_intersect_and_apply_to_descendants_not_own_tools():
    registry = ToolRegistry()
    for name in ("a", "b", "c"):
        registry.register(returning(name, name))
    parent, child = Scope("p"), Scope("c", Scope("p"))
    registry.register(returning("own", "own"), child)
    lift_allow = registry.restrict(ToolRestriction(allow=["a", "b"]), parent)
    registry.restrict(ToolRestriction(deny=["b"]), child)
    assert names(registry, parent) == ["a", "b"]
    assert names(registry, child) == ["a", "own"]
    lift_allow()
    assert names(registry, child) == ["a", "c", "own"]
    registry.register(returning("later", "later"))
    assert "later" in names(registry, child)  # a deny-list admits later tools


def test_restrict_errors_say_what_to_do():
    registry = ToolRegistry()
    registry.register(returning("real", "r"))
    with pytest.raises(ValueError, match="needs a scope"):
        registry.restrict(ToolRestriction(deny=["real"]), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is empty"):
        registry.restrict(ToolRestriction(), Scope("s"))
    with pytest.raises(ValueError, match='unknown global tool "reall"; known: real'):
        registry.restrict(ToolRestriction(allow=["reall"]), Scope("s"))
    with pytest.raises(ValueError, match='unknown global tools "ghost", "wraith"'):
        registry.restrict(ToolRestriction(deny=["wraith", "ghost"]), Scope("s"))
    with pytest.raises(TypeError, match="not a string"):
        ToolRestriction(allow="real")  # type: ignore[arg-type]


def test_schemas_project_only_the_model_fields_as_fresh_copies():
    registry = ToolRegistry()
    registry.register(
        make_echo(timeout_ms=5000, is_concurrency_safe=lambda a: True, present_call=lambda a: None)
    )
    [schema] = registry.schemas()
    assert schema.to_json() == {
        "name": "echo",
        "description": "echo arguments back",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    }
    schema.parameters["properties"]["text"]["type"] = "number"
    assert registry.schemas()[0].parameters["properties"]["text"]["type"] == "string"
    assert schema.to_openai()["function"]["name"] == "echo"
    assert schema.to_anthropic()["input_schema"]["required"] == ["text"]
    assert schema.to_mcp()["inputSchema"]["type"] == "object"


@pytest.mark.parametrize(
    ("classifier", "arguments", "mode"),
    [
        (None, {"text": "x"}, ExecutionMode.EXCLUSIVE),
        (lambda args: True, {"text": "x"}, ExecutionMode.PARALLEL),
        (lambda args: "yes", {"text": "x"}, ExecutionMode.EXCLUSIVE),
        (lambda args: 1, {"text": "x"}, ExecutionMode.EXCLUSIVE),
        (lambda args: 1 / 0, {"text": "x"}, ExecutionMode.EXCLUSIVE),
        (lambda args: True, {"text": 5}, ExecutionMode.EXCLUSIVE),  # invalid args
        (lambda args: args["text"] == "read", {"text": "read"}, ExecutionMode.PARALLEL),
        (lambda args: args["text"] == "read", {"text": "write"}, ExecutionMode.EXCLUSIVE),
    ],
)
def test_execution_mode_is_parallel_only_for_an_exact_true(classifier, arguments, mode):
    registry = ToolRegistry()
    registry.register(make_echo(is_concurrency_safe=classifier))
    assert (
        registry.execution_mode(ToolExecutionInput(call_id="1", name="echo", arguments=arguments))
        is mode
    )


def test_unknown_tool_is_exclusive():
    assert (
        ToolRegistry().execution_mode(ToolExecutionInput(call_id="1", name="x", arguments={}))
        is ExecutionMode.EXCLUSIVE
    )


def test_guards_are_listed_global_first_then_the_scope_chain():
    registry = ToolRegistry()
    parent, child = Scope("p"), Scope("c", Scope("p"))

    def g(e):
        return None

    registry.add_guard(g, child, name="child")
    registry.add_guard(g, name="global")
    remove = registry.add_guard(g, parent, name="parent")
    assert [n for _, n in registry.guards_for(child)] == ["global", "parent", "child"]
    remove()
    assert [n for _, n in registry.guards_for(child)] == ["global", "child"]
    assert [n for _, n in registry.guards_for(None)] == ["global"]


async def test_preview_runs_policy_only(make_host):
    from dsh_host import Deny, hookimpl

    ran = []

    class NoBig:
        name = "no-big"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return Deny("too big") if execution.arguments.get("text") == "big" else None

        @hookimpl
        def dsh_tool_result(self, execution, result):
            ran.append("observer")

    async def execute(args, ctx):
        ran.append("body")
        return "x"

    host = make_host(
        NoBig(), tools=[define_tool(name="t", description="", parameters={}, execute=execute)]
    )
    allowed = await host.registry.preview(ToolExecutionInput(call_id="1", name="t", arguments={}))
    denied = await host.registry.preview(
        ToolExecutionInput(call_id="2", name="t", arguments={"text": "big"})
    )
    assert allowed is None
    assert (denied.code, denied.decided_by) == ("DENIED", "no-big")
    assert ran == []


async def test_dry_run_names_who_allowed_and_runs_nothing(make_host):
    from dsh_host import Allow, Deny, DryRun, hookimpl

    ran = []

    class Rules:
        name = "rules"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            if execution.arguments.get("text") == "big":
                return Deny("too big")
            return Allow(detail="rule t in dsh.toml")

    async def execute(args, ctx):
        ran.append("body")
        return "x"

    host = make_host(
        Rules(), tools=[define_tool(name="t", description="", parameters={}, execute=execute)]
    )
    allowed = await host.registry.dry_run(ToolExecutionInput(call_id="1", name="t", arguments={}))
    denied = await host.registry.dry_run(
        ToolExecutionInput(call_id="2", name="t", arguments={"text": "big"})
    )
    assert isinstance(allowed, DryRun)
    assert (allowed.result, allowed.allowed_by, allowed.detail) == (
        None,
        "rules",
        "rule t in dsh.toml",
    )
    assert allowed.execution.dry_run
    assert allowed.execution.call_id == "1"
    assert (denied.result.code, denied.result.decided_by, denied.allowed_by) == (
        "DENIED",
        "rules",
        None,
    )
    assert ran == []


async def test_on_result_reports_each_call_in_model_order():
    registry = ToolRegistry()
    registry.register(make_echo(is_concurrency_safe=lambda a: True))
    seen = []
    inputs = [
        ToolExecutionInput(call_id=str(i), name="echo", arguments={"text": str(i)})
        for i in range(5)
    ]
    await registry.execute_batch(inputs, on_result=lambda i, r: seen.append((i, r.text)))
    assert seen == [(i, str(i)) for i in range(5)]
