"""``dsh mcp serve`` as a process: config lookup, EOF, Ctrl-C, and streamable HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial

import anyio
import pytest
import trio

from dsh_host._cli._main import main
from tests.dsh_host.mcp_support import AUTH, INIT, TOKENS, host_with_tools
from tests.trusted import write_config

SERVE = [sys.executable, "-m", "dsh_host", "mcp", "serve"]


class Proc:
    """A ``dsh mcp serve`` child process spoken to line by line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def request(self, id, method, params=None):
        message = {"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some(65536)
            assert chunk, "the server closed stdout"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    async def tool_names(self):
        await self.request(1, "initialize", INIT)
        reply = await self.request(2, "tools/list")
        return sorted(t["name"] for t in reply["result"]["tools"])


async def start(*args, cwd=None, env=None):
    return await trio.lowlevel.open_process(
        [*SERVE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


async def finish(process: trio.Process) -> tuple[int, bytes]:
    assert process.stderr is not None
    stderr = b""
    while chunk := await process.stderr.receive_some(65536):
        stderr += chunk
    return await process.wait(), stderr


@pytest.fixture
def config_dir(tmp_path):
    """A directory whose dsh.toml turns the built-in tools off (visible in tools/list)."""
    where = tmp_path / "project"
    where.mkdir()
    write_config(where / "dsh.toml", '[plugins]\ndisable = ["tools"]\n')
    return where


async def test_eof_on_stdin_is_a_clean_exit(tmp_path):
    process = await start("--no-entrypoints", cwd=tmp_path)
    proc = Proc(process)
    assert (await proc.request(1, "ping"))["result"] == {}
    assert process.stdin is not None
    await process.stdin.aclose()
    status, stderr = await finish(process)
    assert (status, stderr) == (0, b"")


async def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    process = await start("--no-entrypoints", cwd=tmp_path)
    proc = Proc(process)
    assert (await proc.request(1, "ping"))["result"] == {}  # serving: the handler is in place
    process.send_signal(signal.SIGINT)
    status, stderr = await finish(process)
    assert status == 130
    assert stderr == b"dsh mcp serve: interrupted\n"


def test_workspace_finds_the_config_there(tmp_path, config_dir, monkeypatch):
    """``--workspace DIR`` serves as if started in DIR: its dsh.toml, its default workspace."""
    from dsh_host._cli._common import UsageError
    from dsh_host._mcp._service import run_serve_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    seen = []

    def build_host(args):
        from dsh_host import Host

        host = Host.from_config(load_entrypoints=False)
        seen.append((host.config.source, host.workspace))
        raise UsageError("stop here")

    args = main_args("--workspace", str(config_dir))
    with pytest.raises(UsageError):
        run_serve_command(args, build_host, UsageError)
    assert seen == [(str(config_dir / "dsh.toml"), config_dir)]


def main_args(*argv):
    from dsh_host._cli._main import make_parser

    return make_parser().parse_args(["mcp", "serve", *argv])


async def test_dsh_config_works_as_for_other_commands(tmp_path, config_dir):
    process = await start(cwd=tmp_path, env={"DSH_CONFIG": str(config_dir / "dsh.toml")})
    assert "read_file" not in await Proc(process).tool_names()
    process.kill()
    await process.wait()


def test_bad_options_are_usage_errors(tmp_path, capsys):
    assert main(["mcp", "serve", "--no-entrypoints", "--http", "nowhere"]) == 2
    assert "--http takes HOST:PORT" in capsys.readouterr().err
    assert main(["mcp", "serve", "--no-entrypoints", "--workspace", str(tmp_path / "no")]) == 2
    assert "--workspace" in capsys.readouterr().err
    assert main(["mcp", "serve", "--no-entrypoints", "--max-message-bytes", "0"]) == 2
    assert "--max-message-bytes" in capsys.readouterr().err


@pytest.mark.parametrize("bind", ["0.0.0.0:8765", "[::]:8765", "192.168.1.5:80", "mcp.example:80"])
def test_http_on_an_address_other_machines_reach_needs_public(bind, capsys):
    """A bind others can reach is refused before anything is served, unless --public."""
    from dsh_host._mcp._service import parse_bind

    assert main(["mcp", "serve", "--no-entrypoints", "--http", bind]) == 2
    err = capsys.readouterr().err
    assert "is not a loopback address" in err
    assert "--public" in err
    assert parse_bind(bind, public=True)[1] in (80, 8765)  # --public lets it through
    for loopback in ("127.0.0.1:0", "127.0.0.2:0", "[::1]:0", "localhost:0"):
        assert parse_bind(loopback)[1] == 0


async def test_http_on_loopback_refuses_other_hosts_and_origins(make_host):
    """DNS rebinding: a web page whose name resolves to 127.0.0.x must not reach the tools. The
    SDK protects three exact spellings only; 127.0.0.2 is loopback too."""
    import httpx2

    from dsh_host._mcp._service import serve_http

    host = host_with_tools(make_host)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}

    def client(url: str) -> list[int]:
        port = url.rsplit(":", 1)[1].split("/")[0]
        with httpx2.Client(timeout=30, headers=AUTH) as http:
            return [
                http.post(url, headers={**headers, **extra}, json=init).status_code
                for extra in (
                    {"host": f"evil.example:{port}"},
                    {"origin": "http://evil.example"},
                    {"origin": f"http://127.0.0.2:{port}"},  # control: this machine
                    {},  # control
                )
            ]

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, tokens=TOKENS), host, "127.0.0.2:0")
        statuses = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    assert statuses == [421, 403, 200, 200]


async def test_streamable_http_serves_the_sdk_client(make_host):
    """The server runs under trio (hypercorn's trio worker); the SDK client on asyncio."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from dsh_host._mcp._service import serve_http

    host = host_with_tools(make_host)

    async def client(url):
        async with (
            httpx2.AsyncClient(headers=AUTH) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            called = await session.call_tool("echo", {"text": "over http"})
            missing = await session.call_tool("echo", {})
            return tools, called, missing

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, tokens=TOKENS), host, "127.0.0.1:0")
        url = bound[0] + "/mcp"
        tools, called, missing = await trio.to_thread.run_sync(anyio.run, client, url)
        nursery.cancel_scope.cancel()
    assert [t.name for t in tools.tools] == ["echo", "hang"]
    assert called.content[0].text == "echo: over http"
    assert missing.is_error is True
    assert missing.meta["dsh/code"] == "INVALID_ARGS"


async def test_hostile_http_bodies_get_json_rpc_errors(make_host):
    import httpx2

    from dsh_host._mcp._service import serve_http

    host = host_with_tools(make_host)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
    hostile = [
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', 400, None, -32600),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', 400, None, -32600),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', 400, None, -32600),
        (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', 400, None, -32700),
        (b'{"jsonrpc":"2.0","id":4,"method":null}', 400, 4, -32600),
        (b"[]", 400, None, -32600),
        (b"[" * 20_000 + b"]" * 20_000, 400, None, -32700),
        (
            b'{"jsonrpc":"2.0","id":5,"method":"ping","x":"' + b"a" * 70_000 + b'"}',
            413,
            None,
            -32600,
        ),
        (b"\xff", 400, None, -32700),
    ]

    def client(url):
        statuses = []
        with httpx2.Client(timeout=30, headers=AUTH) as http:
            opened = http.post(url, headers=headers, json=init)
            assert opened.status_code == 200
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            session["mcp-protocol-version"] = INIT["protocolVersion"]
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert http.post(url, headers=session, json=note).status_code == 202
            for body, status, reply_id, code in hostile:
                answer = http.post(url, headers=session, content=body)
                error = answer.json()
                statuses.append((answer.status_code, error["id"], error["error"]["code"]))
                assert statuses[-1] == (status, reply_id, code), body[:50]
                if b'"id":1.5' in body:  # over HTTP the SDK cannot echo a fractional id
                    expected = "the id must be a string or an integer, not the number 1.5"
                    assert error["error"]["message"] == expected
            bad_note = b'{"jsonrpc":"2.0","method":"notifications/x","params":3}'
            assert http.post(url, headers=session, content=bad_note).status_code == 202
            ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
            answer = http.post(url, headers=session, json=ping)
            assert answer.status_code == 200
            assert '"id":7' in answer.text
        return statuses

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            lambda task_status: serve_http(
                host, "127.0.0.1:0", tokens=TOKENS, max_body=65_536, task_status=task_status
            )
        )
        statuses = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    assert len(statuses) == len(hostile)
