"""What makes the default stack cheap per call, asserted as structure (nothing here is timed).

Each built-in does per call only what its configuration needs: hooks with nothing to do are
idle (the host never calls them), a decision no argument can change is looked up, a call with
no time budget is handed on as it is, and audit rows are queued, not awaited.
"""

from __future__ import annotations

import inspect
import pathlib
import sqlite3
from typing import Any

import pytest
import trio

import dsh_host
from dsh_host import ToolExecutionInput
from tests.conftest import make_echo

BUILTINS = ["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget"]
BUILTINS += ["hook_commands", "audit"]
PER_CALL = (
    "dsh_tool_pre_execute",
    "dsh_tool_approve",
    "dsh_tool_guard",
    "dsh_tool_execute",
    "dsh_tool_post_execute",
    "dsh_tool_result",
)


def default_stack(tmp_path: pathlib.Path, **tables: Any) -> dsh_host.Host:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    plugin = {
        "permissions": {"allow": ["echo"]},
        "sandbox": {"writable_roots": ["."]},
        "output_budget": {"spill_dir": str(tmp_path / "spill")},
        "audit": {"path": str(tmp_path / "db" / "audit.sqlite3")},
        **tables,
    }
    config = {"host": {"workspace": str(workspace)}, "plugins": {"enable": BUILTINS}}
    host = dsh_host.Host({**config, "plugin": plugin}, environ={})
    host.registry.register(make_echo())
    return host


def per_call(host: dsh_host.Host) -> dict[str, list[str]]:
    return {hook: [impl.plugin for impl in host.hooks.impls(hook)] for hook in PER_CALL}


@pytest.fixture
def host(tmp_path):
    host = default_stack(tmp_path)
    yield host
    host.pm.get_plugin("audit").close()


def test_the_default_stack_calls_only_the_hooks_its_configuration_needs(host):
    assert per_call(host) == {
        # hook_commands has no hook scripts configured: none of its hooks is called
        "dsh_tool_pre_execute": ["audit", "permissions"],
        "dsh_tool_approve": ["approval"],  # only for an Ask
        "dsh_tool_guard": ["guards"],
        "dsh_tool_execute": ["timeout"],  # bash declares a budget, so the wrapper stays
        "dsh_tool_post_execute": ["output_budget", "guards"],
        "dsh_tool_result": ["audit"],
    }


def test_configured_off_plugins_cost_no_per_call_hook(tmp_path):
    host = default_stack(tmp_path, guards={"repeat_thresholds": []}, audit={"enabled": False})
    found = per_call(host)
    assert found["dsh_tool_post_execute"] == ["output_budget"]
    assert found["dsh_tool_result"] == []
    assert found["dsh_tool_pre_execute"] == ["permissions"]


def test_the_links_that_usually_pass_a_call_on_are_plain_functions(host):
    """A plain function returning ``call_next()`` costs the host no coroutine of the plugin's."""
    for hook, plugin in (
        ("dsh_tool_execute", "timeout"),
        ("dsh_tool_post_execute", "guards"),
        ("dsh_tool_post_execute", "output_budget"),
    ):
        [impl] = [i for i in host.hooks.impls(hook) if i.plugin == plugin]
        assert not impl.is_async
        assert not inspect.iscoroutinefunction(impl.function)


async def test_a_call_of_the_default_stack_uses_no_worker_thread(host, monkeypatch):
    offloaded: list[Any] = []
    real = trio.to_thread.run_sync

    async def spy(fn: Any, *args: Any, **kwargs: Any) -> Any:
        offloaded.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", spy)
    for i in range(20):
        call = ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": str(i)})
        result = await host.registry.execute(call)
        assert (result.is_error, result.text) == (False, str(i))
    assert offloaded == []


async def test_a_call_of_the_default_stack_makes_no_waterfall_chain(host, monkeypatch):
    """Its pre-execute (audit, permissions) and post-execute (output_budget, guards) links are
    plain functions that answer at once or pass the call on: no `_Chain` per call."""
    from dsh_host._pipeline import _chain, _finish, _gate_now, _tail

    made: list[str] = []

    class Counted(_chain._Chain):
        def __init__(self, links: Any, *args: Any, **kwargs: Any) -> None:
            made.append(links.hook)
            super().__init__(links, *args, **kwargs)

    for module in (_chain, _finish, _gate_now, _tail):
        monkeypatch.setattr(module, "_Chain", Counted)
    for i in range(5):
        call = ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": str(i)})
        result = await host.registry.execute(call)
        assert (result.is_error, result.text) == (False, str(i))
    assert made == []


def test_every_audit_row_of_the_default_stack_is_committed_by_the_end_of_the_run(tmp_path):
    host = default_stack(tmp_path)
    size = 2_000

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(size):
                call = ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": "x"})
                nursery.start_soon(host.registry.execute, call)

    trio.run(main)  # no close: the end of the trio run commits what is queued
    connection = sqlite3.connect(tmp_path / "db" / "audit.sqlite3")
    try:
        found = connection.execute("SELECT count(*), count(DISTINCT call_id) FROM calls")
        assert found.fetchone() == (size, size)
    finally:
        connection.close()
    host.pm.get_plugin("audit").close()
