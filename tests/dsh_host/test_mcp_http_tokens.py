"""Every ``dsh mcp serve --http`` client authenticates, on loopback too: without ``--token-file``
a token is made in a private file (security review: any local user could call tools)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import httpx2
import pytest
import trio

from dsh_host._cli._main import main
from dsh_host._mcp._auth import TokenFileError, read_token_file

from .mcp_support import INIT

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OPEN = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
TOKEN = "a-token-of-the-operator-0123456789"


def _read(path: str) -> str:
    with open(path) as file:
        return file.read().strip()


async def _serving_line(process: trio.Process) -> str:
    """The URL of the line ``dsh mcp serve`` writes on stderr once it listens."""
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(60):  # a bound, not a pace: the line comes as soon as it listens
        while b"\n" not in seen:
            chunk = await process.stderr.receive_some(4096)
            assert chunk, f"dsh mcp serve ended: {seen!r}"
            seen += chunk
    line = seen.split(b"\n", 1)[0].decode()
    assert line.startswith("dsh mcp serve: serving http://"), line
    return line


async def _start(state, bind: str) -> trio.Process:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    argv = [sys.executable, "-m", "dsh_host", "mcp", "serve", "--no-entrypoints"]
    return await trio.lowlevel.open_process(
        [*argv, "--http", bind], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )


async def test_loopback_http_without_a_token_file_needs_the_made_token(tmp_path):
    """``--http 127.0.0.1:0`` alone: a request without the token is 401; the token is in a new
    0600 file (in a 0700 directory) named for the port bound, that stderr names, and it works."""
    state = tmp_path / "state"
    process = await _start(state, "127.0.0.1:0")
    try:
        line = await _serving_line(process)
        url = line.split("serving ", 1)[1].split(";", 1)[0]
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        assert port != 0
        path = state / "dsh" / "mcp-http" / f"{port}.token"
        assert f'"Authorization: Bearer $(cat {path})"' in line

        def client():
            with httpx2.Client(timeout=30) as http:
                bare = http.post(url, headers=HEADERS, json=OPEN)
                token = path.read_text().strip()
                auth = {**HEADERS, "authorization": f"Bearer {token}"}
                return bare, http.post(url, headers=auth, json=OPEN)

        bare, good = await trio.to_thread.run_sync(client)
    finally:
        process.kill()
        await process.wait()
    assert bare.status_code == 401
    assert bare.headers["www-authenticate"].startswith("Bearer")
    assert good.status_code == 200
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(path.read_text().strip()) >= 43  # secrets.token_urlsafe(32)


async def test_a_second_server_on_a_used_port_leaves_the_first_one_s_token(tmp_path):
    """Second security review: a second ``dsh mcp serve --http`` on a port in use overwrote the
    running server's token file (its clients then got 401), then failed with "internal error".
    Now the port is bound first: the second says "address in use" and touches no file; the
    first's token goes on working; at exit (Ctrl-C) the first removes its file."""
    state = tmp_path / "state"
    first = await _start(state, "127.0.0.1:0")
    try:
        line = await _serving_line(first)
        url = line.split("serving ", 1)[1].split(";", 1)[0]
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        path = state / "dsh" / "mcp-http" / f"{port}.token"
        token = path.read_text()
        second = await _start(state, f"127.0.0.1:{port}")
        assert second.stderr is not None
        told = b""
        async for chunk in second.stderr:
            told += chunk
        assert await second.wait() == 2, told
        assert path.read_text() == token

        def client():
            auth = {**HEADERS, "authorization": f"Bearer {token.strip()}"}
            with httpx2.Client(timeout=30) as http:
                return http.post(url, headers=auth, json=OPEN)

        answer = await trio.to_thread.run_sync(client)
        first.send_signal(signal.SIGINT)
        assert await first.wait() == 130
    finally:
        first.kill()
        await first.wait()
    assert b"address in use" in told, told
    assert b"internal error" not in told
    assert answer.status_code == 200
    assert not path.exists()  # removed at exit
    assert os.listdir(path.parent) == []


def test_the_made_token_file_is_removed_only_while_it_is_this_run_s(tmp_path):
    from dsh_host._mcp._listen import made_token

    with made_token(8765, tmp_path) as (path, _), open(path) as file:
        assert file.read().strip()
    assert not os.path.exists(path)
    first, later = made_token(8765, tmp_path), made_token(8765, tmp_path)
    path, _ = first.__enter__()
    again, _ = later.__enter__()
    assert again == path  # a later start's file replaced the first's
    first.__exit__(None, None, None)
    assert os.path.exists(again)  # the later one's: not the first's to remove
    later.__exit__(None, None, None)
    assert not os.path.exists(again)


def test_the_made_token_is_new_each_start_and_replaces_the_file(tmp_path):
    from dsh_host._mcp._gentoken import generate_token_file

    first_path, _ = generate_token_file(8765, tmp_path)
    first_token = _read(first_path)
    second_path, second = generate_token_file(8765, tmp_path)
    second_token = _read(second_path)
    assert first_path == second_path == str(tmp_path / "mcp-http" / "8765.token")
    assert first_token != second_token
    assert second.find(second_token) is not None
    assert second.find(first_token) is None
    assert os.listdir(tmp_path / "mcp-http") == ["8765.token"]  # no scratch file left


def test_the_made_token_is_never_written_through_a_link_or_an_open_directory(tmp_path):
    from dsh_host._mcp._gentoken import generate_token_file

    directory = tmp_path / "mcp-http"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    with pytest.raises(TokenFileError, match="must be yours with mode 0700"):
        generate_token_file(1, tmp_path)
    directory.chmod(0o700)
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    (directory / "1.token").symlink_to(target)
    path, tokens = generate_token_file(1, tmp_path)  # the link is replaced, not followed
    assert target.read_text() == "keep me\n"
    assert not os.path.islink(path)
    assert tokens.find(_read(path)) is not None
    directory.rename(tmp_path / "real-dir")
    directory.symlink_to(tmp_path / "real-dir")
    with pytest.raises(TokenFileError, match="cannot make the token directory"):
        generate_token_file(1, tmp_path)  # the directory itself may not be a link either


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_token_file_others_may_read_or_write_is_refused(tmp_path, mode):
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n")
    path.chmod(mode)
    with pytest.raises(TokenFileError, match="chmod 600"):
        read_token_file(str(path))
    path.chmod(0o600)
    assert read_token_file(str(path)).find(TOKEN) is not None


def test_a_token_file_that_is_a_symlink_is_refused(tmp_path, capsys):
    real = tmp_path / "real"
    real.write_text(f"{TOKEN}\n")
    real.chmod(0o600)
    link = tmp_path / "tokens"
    link.symlink_to(real)
    with pytest.raises(TokenFileError, match="symbolic link"):
        read_token_file(str(link))
    argv = ["mcp", "serve", "--no-entrypoints", "--http", "127.0.0.1:0", "--token-file", str(link)]
    assert main(argv) == 2
    assert "symbolic link" in capsys.readouterr().err
