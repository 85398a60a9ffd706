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


def test_plugins_report_their_status_lines_and_a_raising_one_is_shown(make_host):
    from dsh_host._cli._render import Style, render_plugins

    class Busy:
        name = "busy"

        @hookimpl
        def dsh_plugin_status(self):
            return ["queue: 3 rows", "link \x1b[2Kdown"]

    class Broken:
        name = "broken"

        @hookimpl
        def dsh_plugin_status(self):
            raise RuntimeError("no state")

    rows = {row.name: row for row in make_host(Busy(), Broken()).plugins()}
    assert rows["busy"].status_lines == ("queue: 3 rows", "link \x1b[2Kdown")
    assert rows["broken"].status_lines == ("dsh_plugin_status failed: RuntimeError: no state",)
    shown = render_plugins(rows.values(), "x", Style(False))
    assert "    status: queue: 3 rows" in shown
    assert "    status: link \\x1b[2Kdown" in shown  # model- or server-made text is escaped
