"""`Host` composition: entry-point instances, the path policy, dry-run executions."""

from __future__ import annotations

from dsh_host import Host, ToolExecution, ToolExecutionInput, define_tool, hookimpl


def test_class_entry_points_are_instantiated_once_per_host():
    env = {"DSH_PLUGINS": "hook_commands"}
    first, second = Host(environ=env), Host(environ=env)
    a, b = first.pm.get_plugin("hook_commands"), second.pm.get_plugin("hook_commands")
    assert a is not None
    assert b is not None
    assert not isinstance(a, type)
    assert a is not b
    assert [r.name for r in first.plugins() if r.status.value == "enabled"] == ["hook_commands"]


async def test_path_denied_asks_plugins_and_a_raising_plugin_withholds(make_host):
    class Secrets:
        name = "secrets"

        @hookimpl
        def dsh_path_denied(self, execution, path, access):
            if path.startswith("/boom"):
                raise RuntimeError("broken")
            return "no secrets" if "/secrets/" in path and access == "read" else None

    host = make_host(Secrets())
    execution = ToolExecution(call_id="c", name="grep", arguments={})
    assert host.path_denied(execution, "/w/secrets/k", "read") == "no secrets"
    assert host.path_denied(execution, "/w/secrets/k", "write") is None
    assert host.path_denied(execution, "/w/src/a.py", "read") is None
    assert "path policy failed" in host.path_denied(execution, "/boom", "read")
    assert make_host().path_denied(execution, "/w/secrets/k", "read") is None


async def test_preview_marks_the_execution_as_a_dry_run(make_host):
    seen = []

    class Spy:
        name = "spy"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            seen.append(execution.dry_run)

    tool = define_tool(name="t", description="", parameters={}, execute=lambda args: "ok")
    host = make_host(Spy(), tools=[tool])
    await host.registry.preview(ToolExecutionInput(call_id="a", name="t", arguments={}))
    await host.call("t", {})
    assert seen == [True, False]
