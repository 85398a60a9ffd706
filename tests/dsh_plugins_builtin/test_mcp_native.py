"""A host opened by ``open_host`` runs its mounted sessions in its own trio run (issue 24's
benchmark): no ``dsh-mcp`` thread, a call awaits the session in the calling task, and every
guarantee of the mount thread holds (cancellation, list changes, reaping at close)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading

import pytest
import trio
import trio.testing
from mcp.client.session import ClientSession

import dsh_host
import dsh_host.aio
from dsh_plugins_builtin.mcp import McpPlugin

from .test_mcp_mount import SERVER, _fifo, abort_then_change

PIDFILE = "import os; open(os.environ['PIDFILE'], 'w').write(str(os.getpid()))\n"


def _config(tmp_path, marker="m"):
    script = tmp_path / "server.py"
    script.write_text(PIDFILE + SERVER)
    server = {
        "command": sys.executable,
        "args": [str(script), "ok", str(tmp_path / marker)],
        "env": {"PIDFILE": str(tmp_path / "pid")},
        "sandbox": False,
    }
    return {"plugin": {"mcp": {"servers": {"t": server}}}}


def _mount_threads():
    return [t.name for t in threading.enumerate() if t.name == "dsh-mcp"]


def test_a_mounted_call_under_open_host_runs_in_the_calling_task(tmp_path, monkeypatch):
    sent_from = []
    call_tool = ClientSession.call_tool

    async def spy(self, *args, **kwargs):
        sent_from.append((threading.get_ident(), trio.lowlevel.current_task()))
        return await call_tool(self, *args, **kwargs)

    monkeypatch.setattr(ClientSession, "call_tool", spy)

    async def main():
        plugin = McpPlugin()
        async with dsh_host.open_host(
            _config(tmp_path), plugins=[plugin], entry_points=False
        ) as host:
            result = await host.call("mcp__t__echo", {"text": "hi"})
            threads = _mount_threads()
            caller = (threading.get_ident(), trio.lowlevel.current_task())
        return result, threads, caller

    result, threads, caller = trio.run(main)
    assert result.text == "echo: hi"
    assert threads == []  # no mount thread
    assert sent_from == [caller]  # sent by the calling task itself
    pid = int((tmp_path / "pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # ended and reaped when the host closed
    else:
        raise AssertionError(f"the server (pid {pid}) outlived the host")


def test_abort_and_list_changes_under_open_host(tmp_path):
    marker = _fifo(tmp_path / "cancelled")
    _fifo(tmp_path / "cancelled.started")

    async def main():
        async with dsh_host.open_host(
            _config(tmp_path, "cancelled"), plugins=[McpPlugin()], entry_points=False
        ) as host:
            return await abort_then_change(host, tmp_path, marker)

    aborted, said, changed, extra = trio.run(main)
    assert aborted.code == "ABORTED"
    assert said == "cancelled"  # the server saw notifications/cancelled
    assert changed.text == "changed"
    assert extra.text == "extra!"  # registered after tools/list_changed


def test_an_asyncio_host_mounts_in_its_trio_guest_run(tmp_path):
    async def main():
        async with dsh_host.aio.open_host(
            _config(tmp_path), plugins=[McpPlugin()], entry_points=False
        ) as host:
            return await host.call("mcp__t__echo", {"text": "hi"}), _mount_threads()

    result, threads = asyncio.run(main())
    assert result.text == "echo: hi"
    assert threads == []


def test_a_run_in_virtual_time_keeps_the_mount_thread(tmp_path):
    """MockClock time is not the servers' time: their timeouts stay real, in the thread."""

    async def main():
        async with dsh_host.open_host(
            _config(tmp_path), plugins=[McpPlugin()], entry_points=False
        ) as host:
            return _mount_threads(), sorted(t.name for t in host.registry.tools())

    clock = trio.testing.MockClock(autojump_threshold=0)
    threads, names = trio.run(main, clock=clock)
    assert threads == ["dsh-mcp"]
    assert "mcp__t__echo" in names


def test_http_servers_stay_in_the_mount_thread_beside_native_stdio_sessions(tmp_path):
    """The SDK's HTTP client leaves async generators to the loop's finalizer (trio warns of
    each): an HTTP server keeps the mount thread, with its bound; stdio ones run natively."""

    from .test_mcp_http_mount import HEADERS, serving_huge_and_small

    bound, ready, stop, thread = serving_huge_and_small()

    async def main():
        config = _config(tmp_path)
        servers = config["plugin"]["mcp"]["servers"]
        servers["h"] = {"url": bound[0] + "/mcp", "max_result_bytes": 10_000, "headers": HEADERS}
        plugin = McpPlugin()
        async with dsh_host.open_host(config, plugins=[plugin], entry_points=False) as host:
            calls = [
                await host.call(name, arguments)
                for name, arguments in (
                    ("mcp__h__huge", {}),
                    ("mcp__h__small", {}),
                    ("mcp__t__echo", {"text": "hi"}),
                )
            ]
            return calls, _mount_threads(), type(plugin._mount.links["t"].runner).__name__

    try:
        assert ready.wait(60)  # a bound, not a pace: set as soon as it listens
        (over, small_result, echo), threads, runner = trio.run(main)
    finally:
        stop.set()
        thread.join(10)
    assert over.code == "MCP_BAD_RESULT"
    assert "max_result_bytes (10000 bytes)" in over.text
    assert small_result.text == "ok"  # the session goes on
    assert echo.text == "echo: hi"
    assert threads == ["dsh-mcp"]  # the HTTP server's
    assert runner == "NativeMount"  # the stdio server's


def test_a_link_stopped_before_it_runs_starts_no_server(tmp_path):
    """A host closed while its services were still starting (``open_host``'s body cancelled
    at once) starts no server, rather than one that waits for a goodbye already said."""
    from dsh_plugins_builtin._mcp._mount import Link, McpServerConfig

    marker = tmp_path / "started"
    script = f"open({str(marker)!r}, 'w').close()"
    link = Link("t", McpServerConfig(command=sys.executable, args=("-c", script), sandbox=False))
    link.stop()

    async def main():
        import anyio

        ready = anyio.Event()
        with trio.fail_after(60):  # a bound, not a pace: it returns at once
            await link.run(ready)
        return ready.is_set()

    try:
        assert trio.run(main) is True
    finally:
        link.close()
    assert link.status == "failed"
    assert not marker.exists()


def test_under_open_host_a_failed_server_affects_only_itself_and_others_run_confined(
    tmp_path, capsys
):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    servers = {
        "bad": {"command": sys.executable, "args": [str(script), "crash-on-start", "m"]},
        "good": {"command": sys.executable, "args": [str(script), "ok", "m"]},  # confined
    }
    plugin = McpPlugin()

    async def main():
        config = {"plugin": {"mcp": {"servers": servers}}}
        async with dsh_host.open_host(config, plugins=[plugin], entry_points=False) as host:
            return await host.call("mcp__good__echo", {"text": "hi"}), plugin.status()

    result, status = trio.run(main)
    assert result.text == "echo: hi"
    assert status["good"]["status"] == "running"
    assert status["good"]["confined"] is not None
    assert status["bad"]["status"] == "failed"
    assert "cannot open the frobnicator" in status["bad"]["error"]
    assert "MCP server 'bad'" in capsys.readouterr().err


def test_under_open_host_every_descendant_is_reaped_when_the_host_closes(tmp_path):
    """Row 7 natively: an unconfined server's child (its process group) and a confined
    server's daemonized child (bwrap's PID namespace, or Landlock's supervisor) end with the
    host."""
    from .test_mcp_isolation import _alive, _marked, raw

    pidfile, fifo = tmp_path / "child.pid", tmp_path / "started"
    os.mkfifo(pidfile)
    os.mkfifo(fifo)
    marker = f"DSH_MCP_TEST_ESCAPE={tmp_path.name}-{os.getpid()}"
    servers = {
        "c": raw("children", str(pidfile), sandbox=False),
        "e": raw("escape", str(fifo), read_roots=[str(tmp_path)], env=dict([marker.split("=")])),
    }
    plugin = McpPlugin()

    async def read(path):
        with trio.fail_after(60):  # a bound, not a pace: the child writes it at once
            return await trio.to_thread.run_sync(path.read_text, abandon_on_cancel=True)

    async def main():
        config = {"plugin": {"mcp": {"servers": servers}}}
        async with dsh_host.open_host(config, plugins=[plugin], entry_points=False):
            status = plugin.status()
            pid, started = int(await read(pidfile)), await read(fifo)
            alive = (_alive(pid), bool(_marked(marker)))
        return status, pid, started, alive

    status, pid, started, alive = trio.run(main)
    leaked = [pid] if _alive(pid) else []
    leaked += _marked(marker)
    for each in leaked:
        os.kill(each, signal.SIGKILL)
    assert status["e"]["confined"] is not None, status
    assert (started, alive) == ("started", (True, True))
    assert leaked == []


def test_dsh_mcp_serve_owns_its_host_and_mounts_in_its_run(tmp_path, monkeypatch):
    """``dsh mcp serve`` makes its host inside its trio run (`own_host`): a mounted call there
    runs in the calling task, and the host is closed (servers reaped) when serving ends."""
    from dsh_host import Host
    from dsh_host._cli._common import UsageError
    from dsh_host._cli._main import make_parser
    from dsh_host._mcp import _service

    seen = []

    async def serve_stdio(host, **options):  # the client: one call, then it goes away
        result = await host.call("mcp__t__echo", {"text": "hi"})
        seen.append((result.text, _mount_threads(), host.services is not None))

    monkeypatch.setattr(_service, "serve_stdio", serve_stdio)
    config = _config(tmp_path)

    def build_host(args):
        return Host(config, plugins=[McpPlugin()], load_entrypoints=False)

    args = make_parser().parse_args(["mcp", "serve", "--no-entrypoints"])
    assert _service.run_serve_command(args, build_host, UsageError) == 0
    assert seen == [("echo: hi", [], True)]
    pid = int((tmp_path / "pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # ended and reaped when serving ended
    else:
        raise AssertionError(f"the server (pid {pid}) outlived dsh mcp serve")


def test_own_host_refuses_a_host_made_before():
    from dsh_host import Host, own_host

    made = Host(load_entrypoints=False)

    async def main():
        async with own_host(lambda: made):
            pass

    with pytest.raises(ValueError, match=r"make\(\) must make the host"):
        trio.run(main)
