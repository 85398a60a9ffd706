"""``dsh mcp serve --http --token-file``: bearer tokens, per-token tools, 401 and 404 (issue 24 row 9)."""

from __future__ import annotations

import anyio
import httpx2
import pytest
import trio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from dsh_host._cli._main import main
from dsh_host._mcp._auth import TokenFileError, read_token_file
from dsh_host._mcp._service import serve_http

from .mcp_support import INIT, host_with_tools

FULL = "full-access-token-0123456789abcdef"
REVIEW = "reviewer-token-0123456789abcdef"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OPEN = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}


def _tokens(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# who may connect\n{FULL}\n{REVIEW}  reviewers  allow=echo\n")
    path.chmod(0o600)
    return read_token_file(str(path))


async def _serving(make_host, tmp_path, client, *args):
    host = host_with_tools(make_host)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            lambda task_status: serve_http(
                host, "127.0.0.1:0", tokens=_tokens(tmp_path), task_status=task_status
            )
        )
        out = await trio.to_thread.run_sync(client, bound[0], *args)
        nursery.cancel_scope.cancel()
    return out


async def test_a_request_without_a_known_token_is_401_and_its_body_unread(make_host, tmp_path):
    def client(base):
        with httpx2.Client(timeout=30) as http:
            answers = [
                http.post(f"{base}/mcp", headers={**HEADERS, **extra}, json=OPEN)
                for extra in (
                    {},
                    {"authorization": "Bearer not-a-token-of-this-server"},
                    {"authorization": f"Basic {FULL}"},
                    {"authorization": f"Bearer {FULL}x"},
                )
            ]
            bad_body = http.post(f"{base}/mcp", headers=HEADERS, content=b"{not json")
            good = http.post(
                f"{base}/mcp", headers={**HEADERS, "authorization": f"Bearer {FULL}"}, json=OPEN
            )
            return answers, bad_body, good

    answers, bad_body, good = await _serving(make_host, tmp_path, client)
    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert all(a.headers["www-authenticate"].startswith("Bearer") for a in answers)
    assert bad_body.status_code == 401  # authentication comes before anything is parsed
    assert good.status_code == 200
    # Each refused body is left unread, so its connection closes after the answer: said in
    # the answer, or a client sends its next request on the closing connection, and loses it.
    assert [a.headers.get("connection") for a in [*answers, bad_body]] == ["close"] * 5
    assert good.headers.get("connection") != "close"


async def test_unknown_paths_are_404(make_host, tmp_path):
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}

    def client(base):
        auth = {**HEADERS, "authorization": f"Bearer {FULL}"}
        with httpx2.Client(timeout=30) as http:
            return [
                http.post(f"{base}/other", headers=auth, json=note).status_code,
                http.post(f"{base}/", headers=HEADERS, json=OPEN).status_code,
                http.get(f"{base}/mcp/x", headers=auth).status_code,
            ]

    assert await _serving(make_host, tmp_path, client) == [404, 404, 404]


async def test_each_token_sees_the_tools_of_its_scope(make_host, tmp_path):
    async def session_of(url, token):
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = [t.name for t in (await session.list_tools()).tools]
            hidden = None
            if "hang" not in tools:
                with pytest.raises(MCPError) as caught:  # as if it did not exist
                    await session.call_tool("hang", {})
                hidden = caught.value
            echoed = await session.call_tool("echo", {"text": "hi"})
            return tools, hidden, echoed

    def client(base):
        url = f"{base}/mcp"
        return anyio.run(session_of, url, FULL), anyio.run(session_of, url, REVIEW)

    full, review = await _serving(make_host, tmp_path, client)
    assert full[0] == ["echo", "hang"]
    assert review[0] == ["echo"]
    assert "Unknown tool: hang" in str(review[1])
    assert review[2].content[0].text == "echo: hi"


async def test_a_session_belongs_to_the_token_that_opened_it(make_host, tmp_path):
    def client(base):
        with httpx2.Client(timeout=30) as http:
            auth = {**HEADERS, "authorization": f"Bearer {FULL}"}
            opened = http.post(f"{base}/mcp", headers=auth, json=OPEN)
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            other = {**HEADERS, **session, "authorization": f"Bearer {REVIEW}"}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            return http.post(f"{base}/mcp", headers=other, json=ping).status_code

    assert await _serving(make_host, tmp_path, client) == 404


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no token in it"),
        ("short\n", "at least 16 characters"),
        (f"{FULL}\n{FULL} again\n", "already on an earlier line"),
        (f"{FULL} allow=echo\n", "give a scope name"),
        (f"{FULL} s allow=a\n{REVIEW} s deny=b\n", "another restriction"),
        (f"{FULL} s only=a\n", "is not allow="),
    ],
)
def test_a_bad_token_file_names_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(TokenFileError, match=message) as caught:
        read_token_file(str(path))
    assert str(path) in str(caught.value)


def test_public_needs_a_token_file(tmp_path, capsys):
    assert main(["mcp", "serve", "--no-entrypoints", "--http", "0.0.0.0:8765", "--public"]) == 2
    assert "--public needs --token-file" in capsys.readouterr().err
    path = tmp_path / "tokens"
    path.write_text(f"{FULL} s allow=no_such_tool\n")
    path.chmod(0o600)
    argv = ["mcp", "serve", "--no-entrypoints", "--http", "127.0.0.1:0", "--token-file", str(path)]
    assert main(argv) == 2
    assert "no_such_tool" in capsys.readouterr().err
