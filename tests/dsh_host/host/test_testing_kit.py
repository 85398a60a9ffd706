"""`dsh_host.testing` and the pytest plugin: the kit plugin authors test with."""

from __future__ import annotations

import textwrap

import pytest

from dsh_host import Ask, Deny, hookimpl
from dsh_host.testing import approve_with, make_host, simulate, stub_tool

pytest_plugins = ["pytester"]


class NoRm:
    name = "no-rm"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        if execution.arguments.get("command", "").startswith("rm "):
            return Deny("no rm", detail="rule rm")
        if execution.arguments.get("command") == "ls":
            return Ask("ls asks")
        return None


async def test_a_permission_plugin_is_tested_in_five_lines():
    host = make_host(NoRm(), tools=[stub_tool("bash")])
    decision = await simulate(host, "bash", {"command": "rm -rf /"})
    assert (decision.allowed, decision.decided_by, decision.code) == (False, "no-rm", "DENIED")
    assert (decision.reason, decision.detail) == ("no rm", "rule rm")
    assert decision.result is not None


async def test_simulate_runs_no_tool_and_reports_asks_and_the_approver():
    bash = stub_tool("bash")
    approver = approve_with("allowed-once")
    host = make_host(NoRm(), approver, tools=[bash])
    decision = await simulate(host, "bash", {"command": "ls"})
    assert decision.allowed
    assert decision.asked
    assert approver.requests[0].reason == "ls asks"
    assert approver.requests[0].execution.dry_run
    assert bash.calls == []
    rejected = await simulate(
        make_host(NoRm(), approve_with("rejected"), tools=[bash]), "bash", {"command": "ls"}
    )
    assert (rejected.allowed, rejected.asked, rejected.decided_by) == (False, True, "approver")
    plain = await simulate(host, "bash", {"command": "echo"})
    assert (plain.allowed, plain.asked, plain.decided_by) == (True, False, None)


async def test_stub_tools_record_calls_and_return_or_raise_what_they_are_told():
    ok = stub_tool("ok", returns=lambda args: f"got {args['x']}")
    boom = stub_tool("boom", raises=RuntimeError("broken"))
    host = make_host(tools=[ok, boom])
    assert (await host.call("ok", {"x": 1})).text == "got 1"
    assert ok.calls == [{"x": 1}]
    result = await host.call("boom", {})
    assert result.code == "TOOL_FAILED"
    assert "broken" in result.text
    assert boom.name == "boom"


def test_make_host_sets_the_workspace_and_loads_no_entry_points(tmp_path):
    host = make_host(workspace=tmp_path)
    assert host.workspace == tmp_path
    assert host.plugins() == []
    with pytest.raises(TypeError, match="dict config"):
        make_host(config=tmp_path / "dsh.toml", workspace=tmp_path)


def test_an_approver_outcome_must_be_one_of_the_four():
    with pytest.raises(ValueError, match="'maybe'"):
        approve_with("maybe")


def test_the_pytest_plugin_gives_fixtures_to_an_authors_project(pytester):
    """What a plugin author's project gets from ``pip install dsh-host``, copied verbatim."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        test_author=textwrap.dedent(
            """
            from dsh_host import Deny, hookimpl
            from dsh_host.testing import simulate, stub_tool

            class Policy:
                name = "policy"

                @hookimpl
                def dsh_tool_pre_execute(self, execution):
                    return Deny("never")

            async def test_denied(dsh_host, dsh_tmp_workspace):
                host = dsh_host(Policy(), tools=[stub_tool("t")])
                assert host.workspace == dsh_tmp_workspace
                assert (await simulate(host, "t", {})).decided_by == "policy"
            """
        )
    )
    # pytest-asyncio is in dsh's test extra, not in an author's project: left out here
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:asyncio").assert_outcomes(passed=1)
