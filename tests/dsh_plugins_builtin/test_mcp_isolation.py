"""A mounted server that misbehaves affects only itself, or only its tool (issue 24 rows 3-5, 7).

The misbehaving servers are `raw_mcp_server.py` (raw stdio) and the SDK server of
`test_mcp_mount`.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin

RAW = str(Path(__file__).with_name("raw_mcp_server.py"))


def raw(mode, *args, **config):
    return {"command": sys.executable, "args": [RAW, mode, *args], **config}


@pytest.fixture
def mounted():
    plugins = []

    def build(servers, sandbox=None):
        """A host mounting *servers*; with *sandbox* (its table), the sandbox plugin too."""
        plugin = McpPlugin()
        plugins.append(plugin)
        config = {"mcp": {"servers": servers}}
        extra = [] if sandbox is None else [SandboxPlugin()]
        if sandbox is not None:
            config["sandbox"] = sandbox
        host = Host({"plugin": config}, plugins=[*extra, plugin], load_entrypoints=False)
        return host, plugin

    yield build
    for plugin in plugins:
        plugin.close()


def _names(host):
    return sorted(t.name for t in host.registry.tools())


def test_a_duplicate_tool_name_mounts_the_first_and_reports_the_rest(mounted):
    host, plugin = mounted({"dup": raw("dup"), "ok": raw("plain")})
    assert _names(host) == ["mcp__dup__echo", "mcp__dup__other", "mcp__ok__echo"]
    assert host.registry.get("mcp__dup__echo").description == "the echo tool"  # the first
    status = plugin.status()["dup"]
    assert status["status"] == "running"
    assert status["problems"] == ["tool 'echo' is listed twice: the first is mounted"]
    [row] = [r for r in host.plugins() if r.name == "mcp"]
    assert "  tool 'echo' is listed twice: the first is mounted" in row.status_lines


def test_a_badly_listed_tool_affects_only_itself(mounted):
    host, plugin = mounted({"bad": raw("badschema")})
    assert _names(host) == ["mcp__bad__good"]
    problems = plugin.status()["bad"]["problems"]
    assert len(problems) == 3
    assert any("'noschema' not mounted" in p and "inputSchema" in p for p in problems)
    assert any("'arrayschema' not mounted" in p for p in problems)
    assert any("without a name" in p for p in problems)
    assert trio.run(host.call, "mcp__bad__good", {"text": "x"}).text == "echo: x"


def test_a_malformed_result_is_an_error_at_once_naming_server_and_tool(mounted):
    host, _ = mounted({"m": raw("malformed", timeout_ms=60_000)})
    started = time.monotonic()
    result = trio.run(host.call, "mcp__m__echo", {"text": "x"})
    assert time.monotonic() - started < 5  # not the 60 s budget
    assert result.code == "MCP_BAD_RESULT"
    assert "MCP server 'm'" in result.text
    assert "'echo'" in result.text
    assert "malformed result" in result.text
    assert len(result.text.splitlines()) == 1


def test_what_a_malformed_result_was_is_shown_in_the_trace_not_to_the_model(mounted):
    host, _ = mounted({"m": raw("malformed")})
    events = []
    result = trio.run(lambda: host.call("mcp__m__echo", {"text": "x"}, trace=events.append))
    assert result.code == "MCP_BAD_RESULT"
    assert "[1, 2, 3]" not in result.text  # the model gets one line
    (body,) = [event for event in events if event.stage == "body"]
    assert body.outcome.startswith("MCP_BAD_RESULT: ")
    assert "the result: [1, 2, 3]" in body.outcome  # what the server actually sent
    assert result.meta["detail"] in body.outcome


def test_a_malformed_results_detail_is_bounded_and_escaped(mounted):
    host, _ = mounted({"m": raw("malformed")})
    events = []
    result = trio.run(lambda: host.call("mcp__m__shout", {}, trace=events.append))
    assert result.code == "MCP_BAD_RESULT"
    (body,) = [event for event in events if event.stage == "body"]
    assert "content.0.TextContent.text: Field required" in body.outcome  # where it is wrong
    assert "\\u001b[2J" in body.outcome  # the escape, escaped
    assert "\x1b" not in body.outcome
    assert len(body.outcome) < 3_100  # bounded, not the 10,000 characters sent


def test_a_result_over_max_result_bytes_ends_the_call_within_a_second(mounted):
    host, _ = mounted({"h": raw("huge", max_result_bytes=1_000_000)})
    started = time.monotonic()
    result = trio.run(host.call, "mcp__h__echo", {})
    assert time.monotonic() - started < 1.5  # the bound, not the 5 s the server takes
    assert result.code == "MCP_BAD_RESULT"
    assert "max_result_bytes (1000000 bytes)" in result.text
    assert "[plugin.mcp.servers.h]" in result.text


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_servers_children_do_not_outlive_the_host(mounted, tmp_path):
    pidfile = tmp_path / "child.pid"
    os.mkfifo(pidfile)
    # Unconfined, so the process group is what reaps (a confined server's PID namespace dies
    # with it as a whole).
    host, plugin = mounted({"c": raw("children", str(pidfile), sandbox=False)})
    [row] = [r for r in host.plugins() if r.name == "mcp"]
    assert "UNCONFINED (sandbox = false" in row.status_lines[0]  # `dsh plugins` flags it

    async def read():
        with trio.fail_after(60):  # a bound, not a pace: the child writes it at once
            return await trio.to_thread.run_sync(pidfile.read_text, abandon_on_cancel=True)

    pid = int(trio.run(read))
    try:
        assert _alive(pid)
        plugin.close()
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _marked(marker):
    """The host's processes whose environment holds *marker*."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as file:
                    if marker.encode() in file.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return [pid for pid in found if _alive(pid)]


@pytest.fixture(params=["bwrap", "landlock"])
def backend(request, monkeypatch):
    """Each backend that confines a server: bubblewrap, and Landlock where bubblewrap fails."""
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    if request.param == "landlock":
        from dsh_plugins_builtin._mcp import _confine
        from dsh_plugins_builtin._sandbox._ruleset import landlock_abi

        if landlock_abi() < 4:
            pytest.skip("needs Landlock ABI 4 or later")
        monkeypatch.setattr(_confine, "resolve_bwrap", lambda policy: (None, "disabled"))
    return request.param


def test_a_confined_servers_daemonized_child_dies_with_it(mounted, tmp_path, backend):
    """A child that leaves the process group escapes a group kill, not the server's PID
    namespace (bwrap) or the supervisor that kills every descendant (Landlock): confined,
    every descendant is reaped when the host closes."""
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    marker = f"DSH_MCP_TEST_ESCAPE={tmp_path.name}-{os.getpid()}"
    server = raw("escape", str(fifo), read_roots=[str(tmp_path)], env=dict([marker.split("=")]))
    sandbox = None
    if backend == "landlock":  # Landlock, unlike a read-only bind, refuses to open a FIFO
        server = {**server, "writable_roots": [str(tmp_path)]}  # for writing outside them
        sandbox = {"protected": [], "mode": "read-only"}  # (it cannot protect a path in one)
    _, plugin = mounted({"e": server}, sandbox)
    assert plugin.status()["e"]["status"] == "running", plugin.status()
    assert plugin.status()["e"]["confined"] == backend

    async def started():
        with trio.fail_after(60):  # a bound, not a pace: the child writes at once
            return await trio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)

    assert trio.run(started) == "started"
    children = _marked(marker)
    assert children  # the daemon runs
    plugin.close()
    leaked = _marked(marker)
    for pid in leaked:
        os.kill(pid, signal.SIGKILL)
    assert leaked == []
