"""The ``mcp`` plugin: MCP servers mounted behind dsh's policy (issue 12 items 1, 3, 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import trio

from dsh_host import AbortSignal, ConfigError, Deny, Host, hookimpl
from dsh_plugins_builtin.mcp import McpPlugin

# A small SDK server for the failure cases; its behaviour is chosen by argv[1].
SERVER = """
import os, sys, anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

mode, marker = sys.argv[1], sys.argv[2]
if mode == "crash-on-start":
    sys.stderr.write("cannot open the frobnicator\\n")
    sys.exit(3)

def tool(name, read_only=False):
    return types.Tool(
        name=name, description=f"the {name} tool",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        annotations=types.ToolAnnotations(read_only_hint=read_only),
    )

tools = [tool("echo", read_only=True), tool("crash"), tool("slow"), tool("fail"),
         tool("huge"), tool("change")]

async def list_tools(ctx, params):
    cursor = params.cursor if params is not None else None
    if cursor is None:  # two pages: the client must follow the cursor
        return types.ListToolsResult(tools=tools[:3], next_cursor="page-2")
    return types.ListToolsResult(tools=tools[3:])

async def call_tool(ctx, params):
    name, args = params.name, params.arguments or {}
    text = lambda t: types.CallToolResult(content=[types.TextContent(type="text", text=t)])
    if name == "echo":
        return text("echo: " + args.get("text", ""))
    if name == "crash":
        os._exit(7)
    if name == "slow":
        open(marker + ".started", "w").close()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            open(marker, "w").write("cancelled")
            raise
    if name == "fail":
        return types.CallToolResult(content=[types.TextContent(type="text", text="it broke")], is_error=True)
    if name == "huge":
        return text("x" * 5_000_000)
    if name == "change":
        tools.append(tool("extra"))
        await ctx.session.send_tool_list_changed()
        return text("changed")
    return text("extra!")

server = Server("test", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


@pytest.fixture
def server_script(tmp_path):
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


@pytest.fixture
def mounted():
    """``mounted(servers, *plugins)``: a host with the mcp plugin; closed after the test."""
    plugins = []

    def build(servers, *others):
        plugin = McpPlugin()
        plugins.append(plugin)
        config = {"plugin": {"mcp": {"servers": servers}}}
        host = Host(config, plugins=[plugin, *others], load_entrypoints=False)
        return host, plugin

    yield build
    for plugin in plugins:
        plugin.close()


def test_sdk_server_tools_are_mounted_and_called(mounted, server_script, tmp_path):
    command = {"command": sys.executable, "args": [str(server_script), "ok", str(tmp_path / "m")]}
    host, _ = mounted({"t": command})
    names = sorted(t.name for t in host.registry.tools())
    assert names == [f"mcp__t__{n}" for n in ("change", "crash", "echo", "fail", "huge", "slow")]
    echo = host.registry.get("mcp__t__echo")
    assert echo.is_concurrency_safe({}) is True  # readOnlyHint
    assert host.registry.get("mcp__t__fail").is_concurrency_safe is None

    async def calls():
        ok = await host.call("mcp__t__echo", {"text": "hi"})
        bad = await host.call("mcp__t__echo", {"text": 5})  # dsh validates first
        failed = await host.call("mcp__t__fail", {})
        huge = await host.call("mcp__t__huge", {})
        return ok, bad, failed, huge

    ok, bad, failed, huge = trio.run(calls)
    assert ok.text == "echo: hi"
    assert bad.code == "INVALID_ARGS"
    assert (failed.code, failed.text) == ("MCP_TOOL_ERROR", "Error: it broke")
    assert len(huge.text) == 5_000_000


def _fifo(path):
    """A named pipe at *path*: the server's ``open(path, "w")`` meets the test's read."""
    os.mkfifo(path)
    return path


async def _until(path):
    """Wait, without polling, for another process to write *path* (a FIFO) and close it."""

    def read():
        with open(path) as pipe:
            return pipe.read()

    with trio.fail_after(60):  # a bound, not a pace: the read returns as soon as it is written
        return await trio.to_thread.run_sync(read, abandon_on_cancel=True)


async def abort_then_change(host, tmp_path, marker):
    """Abort the test server's ``slow`` call once it started, read what the server was told
    (*marker*), then call ``change`` (which lists a new tool) and that new tool, ``extra``."""
    signal = AbortSignal()
    results = []
    async with trio.open_nursery() as nursery:

        async def slow():
            results.append(await host.call("mcp__t__slow", {}, signal=signal))

        nursery.start_soon(slow)
        await _until(tmp_path / "cancelled.started")
        signal.abort("enough")
    said = await _until(marker)
    changed = await host.call("mcp__t__change", {})
    extra = await host.call("mcp__t__extra", {})
    return results[0], said, changed, extra


def test_abort_sends_cancelled_and_list_changes_reregister(mounted, server_script, tmp_path):
    marker = _fifo(tmp_path / "cancelled")
    _fifo(tmp_path / "cancelled.started")
    host, _ = mounted(
        {"t": {"command": sys.executable, "args": [str(server_script), "ok", str(marker)]}}
    )

    aborted, said, changed, extra = trio.run(abort_then_change, host, tmp_path, marker)
    assert aborted.code == "ABORTED"
    assert said == "cancelled"  # the server saw notifications/cancelled
    assert changed.text == "changed"
    assert extra.text == "extra!"  # registered after tools/list_changed, no waiting


def test_a_crash_mid_call_is_a_clear_error_and_the_host_runs_on(mounted, server_script, tmp_path):
    host, _ = mounted(
        {"t": {"command": sys.executable, "args": [str(server_script), "ok", str(tmp_path / "m")]}}
    )
    crashed = trio.run(host.call, "mcp__t__crash", {})
    assert crashed.is_error
    assert crashed.code in {"MCP_SERVER_FAILED", "MCP_SERVER_UNAVAILABLE"}
    assert "'t'" in crashed.text
    again = trio.run(host.call, "mcp__t__echo", {"text": "x"})
    assert again.is_error
    assert "'t'" in again.text


def test_a_server_that_fails_to_start_is_reported_and_others_run(
    mounted, server_script, tmp_path, capsys
):
    args = [str(server_script), "crash-on-start", str(tmp_path / "m")]
    ok = {"command": sys.executable, "args": [str(server_script), "ok", str(tmp_path / "m")]}
    host, plugin = mounted({"broken": {"command": sys.executable, "args": args}, "t": ok})
    status = plugin.status()
    assert status["broken"]["status"] == "failed"
    assert "cannot open the frobnicator" in status["broken"]["error"]
    assert status["t"]["status"] == "running"
    assert "dsh: mcp: MCP server 'broken'" in capsys.readouterr().err
    assert trio.run(host.call, "mcp__t__echo", {"text": "x"}).text == "echo: x"
    # `dsh plugins` shows it: the mcp row's status lines, with the server's stderr tail.
    [row] = [r for r in host.plugins() if r.name == "mcp"]
    broken, running = row.status_lines
    assert broken.startswith("server broken: failed, 0 tools; ")
    assert "cannot open the frobnicator" in broken
    backend = status["t"]["confined"]
    assert backend in ("bwrap", "landlock")  # confined by default, by whichever works here
    assert running == f"server t: running, 6 tools, confined ({backend})"
    assert row.to_json()["status_lines"] == [broken, running]


def test_tools_allow_list_and_disabled_servers(mounted, server_script, tmp_path):
    base = {"command": sys.executable, "args": [str(server_script), "ok", str(tmp_path / "m")]}
    host, _ = mounted({"t": {**base, "tools": ["echo"]}, "off": {**base, "enabled": False}})
    assert [t.name for t in host.registry.tools()] == ["mcp__t__echo"]


@pytest.mark.parametrize(
    ("server", "key", "words"),
    [
        ({"comand": "x"}, "comand", "comand"),
        ({}, "servers.s.command", "missing"),
        ({"command": "x", "url": "http://h/mcp"}, "servers.s.url", "not both"),
        ({"command": "x", "timeout_ms": -1}, "servers.s.timeout_ms", "positive"),
    ],
)
def test_config_errors_name_the_server_and_key(server, key, words):
    config = {"plugin": {"mcp": {"servers": {"s": server}}}}
    with pytest.raises(ConfigError) as caught:
        Host(config, plugins=[McpPlugin()], load_entrypoints=False)
    assert key in str(caught.value)
    assert words in str(caught.value)
    assert "[plugin.mcp]" in str(caught.value)


def test_real_pypi_servers_time_and_git(mounted, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hello")

    class NoConvert:
        name = "no-convert"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            if execution.name == "mcp__time__convert_time":
                return Deny("not today")
            return None

    host, plugin = mounted(
        {
            "time": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            },
            "git": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_git", "--repository", str(repo)],
                "read_roots": [str(repo)],  # confined: /tmp is private, this is shown
            },
        },
        NoConvert(),
    )
    assert {s["status"] for s in plugin.status().values()} == {"running"}

    async def calls():
        now = await host.call("mcp__time__get_current_time", {"timezone": "UTC"})
        denied = await host.call(
            "mcp__time__convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"},
        )
        status = await host.call("mcp__git__git_status", {"repo_path": str(repo)})
        return now, denied, status

    now, denied, status = trio.run(calls)
    assert json.loads(now.text)["timezone"] == "UTC"
    assert (denied.code, denied.decided_by) == ("DENIED", "no-convert")
    assert "a.txt" in status.text


def test_chain_client_to_dsh_mcp_serve_to_a_mounted_server(tmp_path):
    """The official client -> `dsh mcp serve` (real process) -> mcp-server-time (real process)."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    config = tmp_path / "dsh.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [plugins]
            enable = ["mcp", "permissions"]

            [plugin.permissions]
            allow = ["mcp__time__get_current_time"]
            deny = ["mcp__time__convert_time"]

            [plugin.mcp.servers.time]
            command = {json.dumps(sys.executable)}
            args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
            """
        )
    )

    async def client():
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "dsh_host", "mcp", "serve", "--config", str(config)],
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            now = await session.call_tool("mcp__time__get_current_time", {"timezone": "UTC"})
            return [t.name for t in tools.tools], now

    names, now = anyio.run(client)
    assert names == ["mcp__time__get_current_time"]  # convert_time is denied outright: hidden
    assert now.is_error is False
    assert json.loads(now.content[0].text)["timezone"] == "UTC"


def test_a_tool_name_a_hostile_server_chose_is_never_mounted(capsys):
    from types import SimpleNamespace

    from mcp import types

    from dsh_plugins_builtin._mcp._mount import McpServerConfig

    registered = []
    plugin = McpPlugin()
    plugin._register = registered.append
    plugin._mount = SimpleNamespace()
    schema = {"type": "object", "properties": {}}
    names = ["ok_tool", "evil\x1b[2Kname", "a b", "x" * 129, ""]
    link = SimpleNamespace(
        name="s",
        config=McpServerConfig(command="x"),
        tools=[types.Tool(name=n, input_schema=schema) for n in names],
        error=None,
        guard=None,
        tool_problems=[],
    )
    plugin._mount_tools(link)
    assert [d.name for d in registered] == ["mcp__s__ok_tool"]
    err = capsys.readouterr().err
    assert err.count("not mounted") == 4
    assert "\x1b" not in err  # the hostile name is shown escaped, never raw


def test_a_server_program_a_tool_could_rewrite_is_refused_at_start(server_script, tmp_path):
    """An unconfined server's script must not lie in a writable root (like a hook's); a refused
    server is reported and not started, and the host starts without it (issue 24 row 2)."""
    from dsh_plugins_builtin.sandbox import SandboxPlugin

    ws = tmp_path / "ws"
    ws.mkdir()
    planted = ws / "server.py"
    planted.write_text(server_script.read_text())

    def host_for(script, plugin):
        config = {
            "host": {"workspace": str(ws)},
            "plugin": {
                "sandbox": {"writable_roots": ["."]},
                "mcp": {
                    "servers": {
                        "t": {
                            "command": sys.executable,
                            "args": [str(script), "ok", str(tmp_path / "m")],
                        }
                    }
                },
            },
        }
        return Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)

    refused = McpPlugin()
    try:
        host = host_for(planted, refused)  # the host starts: one refused server is not fatal
        status = refused.status()["t"]
        assert status["status"] == "failed"
        assert "servers.t.command" in status["error"]
        assert "inside a writable root" in status["error"]
        assert not [t.name for t in host.registry.tools() if t.name.startswith("mcp__")]
    finally:
        refused.close()
    control = McpPlugin()
    try:
        host = host_for(server_script, control)  # outside the workspace: mounted, and run
        assert "mcp__t__echo" in [t.name for t in host.registry.tools()]
    finally:
        control.close()


def test_a_host_with_no_mcp_server_does_not_import_the_sdk(tmp_path):
    """The SDK (about a second of pydantic models) is imported only when a server is mounted:
    every `dsh call` starts the mcp plugin, and most configure no server."""
    code = textwrap.dedent(
        f"""
        import sys, trio
        from dsh_host import Host
        host = Host({{"host": {{"workspace": {str(tmp_path)!r}}}}}, environ={{}})
        assert "mcp" in [name for name, _ in host.pm.list_name_plugin()]
        trio.run(host.call, "read_file", {{"path": "missing.txt"}})
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types"))
        print(loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_rule_on_a_mounted_tool_is_not_said_to_name_a_missing_tool(
    mounted, server_script, tmp_path, caplog
):
    # The permissions plugin starts before the servers are mounted: its start warned that a
    # rule on a mounted tool "names a tool that is not installed". With a path specifier the
    # tool cannot be judged by, the deny rule catches every call of it (fail closed).
    from dsh_plugins_builtin.permissions import PermissionsPlugin
    from dsh_plugins_builtin.tools import ToolsPlugin

    command = {"command": sys.executable, "args": [str(server_script), "ok", str(tmp_path / "m")]}
    plugin = McpPlugin()
    config = {
        "plugin": {
            "mcp": {"servers": {"t": command}},
            "permissions": {"default": "allow", "deny": ["mcp__t__echo(text=secret)"]},
        }
    }
    try:
        with caplog.at_level("WARNING"):
            host = Host(
                config, plugins=[PermissionsPlugin(), ToolsPlugin(), plugin], load_entrypoints=False
            )
        assert "mcp__t__echo" not in caplog.text
        result = trio.run(host.call, "mcp__t__echo", {"text": "secret"})
        assert result.code == "DENIED", result
        assert "cannot be judged" in result.error.message
    finally:
        plugin.close()


def test_a_servers_image_no_provider_takes_is_left_out_with_a_note():
    # A server's image with invalid base64 crashed a pydantic-ai run; one of another type (a
    # PDF) went out as an image. It is said instead, as text; a sound one stays an image.
    import mcp_types as types

    from dsh_host import ImageBlock, TextBlock
    from dsh_plugins_builtin._mcp._content import content_blocks

    result = types.CallToolResult(
        content=[
            types.ImageContent(type="image", data="not base64!", mime_type="image/png"),
            types.ImageContent(type="image", data="aGk=", mime_type="application/pdf"),
            types.ImageContent(
                type="image",
                data="iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA",
                mime_type="image/png",
            ),
        ]
    )
    bad_data, bad_type, good = content_blocks(result, "srv")
    assert isinstance(bad_data, TextBlock)
    assert "an image from srv was left out: data is not strict base64" in bad_data.text
    assert isinstance(bad_type, TextBlock)
    assert "application/pdf" in bad_type.text
    assert good == ImageBlock("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", "image/png")
