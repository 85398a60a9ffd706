"""``dsh mcp serve --http``: what one token may hold (sessions, calls in flight) and how long a
request body may take (security review #2 and #3). Small caps are injected (`HttpLimits`)."""

from __future__ import annotations

import collections
import json
import threading
from functools import partial

import httpx2
import trio

from dsh_host import define_tool
from dsh_host._mcp._auth import read_token_file
from dsh_host._mcp._service import serve_http

from .mcp_support import INIT

FULL = "full-access-token-0123456789abcdef"
OTHER = "another-token-0123456789abcdef"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OPEN = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def _tokens(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"{FULL}\n{OTHER}\n")
    path.chmod(0o600)
    return read_token_file(str(path))


def _limits(**caps):
    from dsh_host._mcp._limits import HttpLimits

    return HttpLimits(**caps)


async def _serving(host, tmp_path, client, **limits):
    async with trio.open_nursery() as nursery:
        serving = partial(serve_http, tokens=_tokens(tmp_path), limits=_limits(**limits))
        bound = await nursery.start(serving, host, "127.0.0.1:0")
        out = await trio.to_thread.run_sync(client, bound[0] + "/mcp")
        nursery.cancel_scope.cancel()
    return out


def _open(http, url, token):
    """A new session of *token*: its request headers."""
    auth = {**HEADERS, "authorization": f"Bearer {token}"}
    opened = http.post(url, headers=auth, json=OPEN)
    assert opened.status_code == 200, opened.text
    session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"]}
    session["mcp-protocol-version"] = INIT["protocolVersion"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url, headers=session, json=note).status_code == 202
    return session


def _answer(response) -> dict:
    """The JSON-RPC message of a POST's answer (plain JSON or one SSE event)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[6:] for line in text.splitlines() if line.startswith("data: "))
    return json.loads(text)


async def test_a_token_over_its_session_cap_ends_its_own_oldest_idle_session(make_host, tmp_path):
    """Cap 2: a third session of one token ends that token's least recently used idle one;
    another token's sessions are untouched; with none idle, the new one is 503."""
    host = make_host()

    def client(url):
        with httpx2.Client(timeout=30) as http:
            other = _open(http, url, OTHER)
            first, second = _open(http, url, FULL), _open(http, url, FULL)
            assert http.post(url, headers=first, json=PING).status_code == 200  # now: second oldest
            third = _open(http, url, FULL)
            statuses = [
                http.post(url, headers=s, json=PING).status_code
                for s in (first, second, third, other)
            ]
            with (
                http.stream("GET", url, headers=first) as a,  # open streams: not idle
                http.stream("GET", url, headers=third) as b,
            ):
                assert (a.status_code, b.status_code) == (200, 200)
                auth = {**HEADERS, "authorization": f"Bearer {FULL}"}
                refused = http.post(url, headers=auth, json=OPEN)
                extra_other = _open(http, url, OTHER)  # OTHER's cap is its own
            return statuses, refused, http.post(url, headers=extra_other, json=PING).status_code

    statuses, refused, other_ping = await _serving(host, tmp_path, client, sessions_per_token=2)
    assert statuses == [200, 404, 200, 200]
    assert refused.status_code == 503
    assert "too many open sessions for this token (at most 2)" in refused.text
    assert other_ping == 200


async def test_calls_in_flight_are_capped_per_session_and_per_token(make_host, tmp_path):
    """Beyond 2 calls in flight in a session, or 3 for a token, a call is refused at once with
    a JSON-RPC error; once they end, calls run again."""
    running = 0
    ran = threading.Condition()
    release = trio.Event()

    async def wait(args, ctx):
        nonlocal running
        with ran:
            running += 1
            ran.notify_all()
        await release.wait()
        return "done"

    host = make_host(tools=[define_tool(name="wait", description="", parameters={}, execute=wait)])
    ids = iter(range(10, 100))

    def call():  # each with its own id: ids are per session, and in flight never reused
        return {
            "jsonrpc": "2.0",
            "id": next(ids),
            "method": "tools/call",
            "params": {"name": "wait"},
        }

    def client(url):
        answers = []
        with httpx2.Client(timeout=30) as http:
            one, two = _open(http, url, FULL), _open(http, url, FULL)

            def calling(session, message):
                with httpx2.Client(timeout=30) as own:
                    answers.append(_answer(own.post(url, headers=session, json=message)))

            threads = [threading.Thread(target=calling, args=(s, call())) for s in (one, one, two)]
            for thread in threads:
                thread.start()
            with ran:
                assert ran.wait_for(lambda: running == 3, timeout=30)
            per_session = _answer(http.post(url, headers=one, json=call()))
            per_token = _answer(http.post(url, headers=two, json=call()))
            trio.from_thread.run_sync(release.set)
            for thread in threads:
                thread.join(30)
            after = _answer(http.post(url, headers=one, json=call()))
        return per_session, per_token, answers, after

    per_session, per_token, answers, after = await _serving(
        host, tmp_path, client, calls_per_session=2, calls_per_token=3
    )
    assert per_session["error"]["code"] == -32000
    assert "too many calls in flight in this session (at most 2)" in per_session["error"]["message"]
    assert "too many calls in flight for this token (at most 3)" in per_token["error"]["message"]
    assert [a["result"]["content"][0]["text"] for a in answers] == ["done"] * 3
    assert after["result"]["content"][0]["text"] == "done"
    assert running == 4


def _validating(**kwargs):
    from dsh_host._mcp._http import ValidatingApp

    seen = []

    async def inner(scope, receive, send):
        seen.append(await receive())

    return ValidatingApp(inner, max_body=1 << 20, **kwargs), seen


def _scope():
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": []}


async def _slow_body(chunk: bytes):
    """A client that sends *chunk* of a body, then nothing more, ever."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": chunk, "more_body": True}
        await trio.sleep_forever()

    return receive


async def test_a_body_that_does_not_arrive_in_time_is_408(autojump_clock):
    app, seen = _validating(body_timeout=30.0)
    replies = []

    async def send(message):
        replies.append(message)

    with trio.move_on_after(3600):  # a bound: without the timeout it would wait for ever
        await app(_scope(), await _slow_body(b'{"jsonrpc":'), send)
    assert replies[0]["status"] == 408
    assert (b"connection", b"close") in replies[0]["headers"]  # the rest of the body is unread
    assert b"did not arrive within 30 seconds" in replies[1]["body"]
    assert trio.current_time() == 30.0
    assert seen == []  # the SDK never saw it
    assert app.buffered == 0


async def test_bodies_held_at_once_are_bounded(autojump_clock):
    """With 100 bytes of bodies allowed in all, a second slow body of 80 is refused (503)
    while the first is held; once the first times out, the budget is free again."""
    app, _ = _validating(body_timeout=30.0, body_bytes=100)
    replies: dict[str, list] = {"first": [], "second": [], "third": []}

    def sender(name):
        async def send(message):
            replies[name].append(message)

        return send

    with trio.move_on_after(3600):  # a bound: without the timeout the first waits for ever
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app, _scope(), await _slow_body(b"x" * 80), sender("first"))
            await trio.testing.wait_all_tasks_blocked()
            assert app.buffered == 80
            await app(_scope(), await _slow_body(b"y" * 80), sender("second"))
    assert replies["second"][0]["status"] == 503
    assert b"too many request bodies" in replies["second"][1]["body"]
    assert replies["first"][0]["status"] == 408
    assert app.buffered == 0
    body = json.dumps(PING).encode()

    async def whole():
        return {"type": "http.request", "body": body, "more_body": False}

    await app(_scope(), whole, sender("third"))
    assert replies["third"] == []  # passed on to the SDK (here: a stub that answers nothing)


def _scope_of(token: str):
    return {**_scope(), "headers": [(b"authorization", f"Bearer {token}".encode())]}


async def test_one_token_saturating_its_body_share_does_not_refuse_another(
    tmp_path, autojump_clock
):
    """Each token has its own share of bodies being read (bytes, and bodies at once): a token
    that fills its share is refused (503); another token's bodies are still read (second
    security review: one read-only token's five slow bodies made every initialize 503)."""
    app, seen = _validating(
        tokens=_tokens(tmp_path), body_bytes=1000, token_body_bytes=100, token_bodies=2
    )
    replies: dict[str, list] = collections.defaultdict(list)

    def sender(name):
        async def send(message):
            replies[name].append(message)

        return send

    with trio.move_on_after(3600):  # a bound: without the timeout the slow ones wait for ever
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app, _scope_of(FULL), await _slow_body(b"x" * 80), sender("x"))
            nursery.start_soon(app, _scope_of(FULL), await _slow_body(b"x"), sender("y"))
            await trio.testing.wait_all_tasks_blocked()
            await app(_scope_of(FULL), await _slow_body(b"x" * 10), sender("big"))
            nursery.start_soon(app, _scope_of(OTHER), await _slow_body(b"z" * 30), sender("z"))
            await trio.testing.wait_all_tasks_blocked()
            assert app.buffered == 111
            body = json.dumps(PING).encode()

            async def whole():
                return {"type": "http.request", "body": body, "more_body": False}

            await app(_scope_of(OTHER), whole, sender("whole"))
            assert replies["whole"] == []  # read and passed on to the SDK (a silent stub)
            assert seen[-1]["body"] == body
    assert replies["big"][0]["status"] == 503
    assert b"this token has 2 request bodies being read" in replies["big"][1]["body"]
    assert app.buffered == 0
    assert not app.held
    assert not app.reading


async def test_a_token_over_its_share_of_body_bytes_is_refused(tmp_path, autojump_clock):
    app, _ = _validating(tokens=_tokens(tmp_path), body_bytes=1000, token_body_bytes=100)
    replies: list = []

    async def send(message):
        replies.append(message)

    with trio.move_on_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app, _scope_of(FULL), await _slow_body(b"x" * 80), send)
            await trio.testing.wait_all_tasks_blocked()
            await app(_scope_of(FULL), await _slow_body(b"x" * 80), send)
            assert replies[0]["status"] == 503
            assert b"this token's request bodies" in replies[1]["body"]
            nursery.cancel_scope.cancel()


async def test_a_slow_client_on_a_socket_is_cut_off(make_host, tmp_path, autojump_clock):
    """The whole server, a client socket that sends 10 bytes of a 1000-byte body and stops:
    it is answered 408 when the body timeout passes (time is trio's MockClock)."""
    host = make_host()
    async with trio.open_nursery() as nursery:
        serving = partial(serve_http, tokens=_tokens(tmp_path), limits=_limits(body_timeout=30))
        bound = await nursery.start(serving, host, "127.0.0.1:0")
        port = int(bound[0].rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        head = (
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {FULL}\r\ncontent-length: 1000\r\n\r\n"
        )
        start = trio.current_time()
        await stream.send_all(head.encode() + b'{"jsonrpc"')
        answer = b""
        with trio.move_on_after(3600):  # a bound: without the timeout, no answer ever comes
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive_some(4096)
        waited = trio.current_time() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert 30 <= waited < 31


async def test_a_body_without_a_known_token_is_never_read(make_host, tmp_path, autojump_clock):
    """A request with an unknown token that sends 10 bytes of a 1000-byte body and stops is
    answered 401 at once: its body is not waited for (nor counted in any budget)."""
    host = make_host()
    async with trio.open_nursery() as nursery:
        serving = partial(serve_http, tokens=_tokens(tmp_path), limits=_limits(body_timeout=30))
        bound = await nursery.start(serving, host, "127.0.0.1:0")
        port = int(bound[0].rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        head = (
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            "authorization: Bearer not-a-known-token-0123456789\r\ncontent-length: 1000\r\n\r\n"
        )
        start = trio.current_time()
        await stream.send_all(head.encode() + b'{"jsonrpc"')
        answer = b""
        with trio.move_on_after(3600):  # a bound: no answer would come if the body were awaited
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive_some(4096)
        waited = trio.current_time() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert waited < 1
