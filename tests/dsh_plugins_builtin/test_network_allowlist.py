"""``network = [names]``: the proxy's decisions (driven directly, hostile) and real commands
behind it under bubblewrap (curl and python against a server on 127.0.0.1 under a test name).

Nothing here contacts an outside address: test names are pinned to 127.0.0.1 (``network_hosts``)
and the only name resolved for real is ``localhost``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dsh_plugins_builtin._sandbox._allow import Allowlist, allowlist
from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
from dsh_plugins_builtin._sandbox._confine import probe_backends, run_confined
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._proxy import HEAD_LIMIT, HEAD_TIMEOUT, MAX_CONNECTIONS, Session
from dsh_plugins_builtin.sandbox import sandbox_check_command
from tests.dsh_plugins_builtin.conftest import patch_probes, tools_host
from tests.dsh_plugins_builtin.test_sandbox_plugin import PROBES_OK, project, write_config

__all__ = ["project"]  # a fixture, used by name


class Upstream:
    """A local HTTP server on 127.0.0.1: answers each request with its head, then closes."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.port = 0

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._one, listeners)

    async def _one(self, stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in data and (chunk := await stream.receive_some(65536)):
                data += chunk
        self.heads.append(data)
        body = b"seen: " + data
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await stream.aclose()


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> AsyncIterator[Upstream]:
    server = Upstream()
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def other(nursery: trio.Nursery) -> AsyncIterator[Upstream]:
    server = Upstream()
    await nursery.start(server.serve)
    return server


def _allow(up: Upstream, *names: str, **pins: str) -> Allowlist:
    hosts = {"api.test": "127.0.0.1", **{k.replace("_", "."): v for k, v in pins.items()}}
    return allowlist(names or ("api.test",), (up.port, 443, 80), hosts)


async def _exchange(allow: Allowlist, request: bytes) -> tuple[bytes, list[str]]:
    session = Session(allow)
    client, server = trio.testing.memory_stream_pair()
    data = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.handle, server)
        await client.send_all(request)
        await client.send_eof()
        while chunk := await client.receive_some(65536):
            data += chunk
    return data, session.denials


# -- allowed ------------------------------------------------------------------------------------


async def test_plain_http_to_an_allowed_name_is_forwarded_in_origin_form(
    upstream: Upstream,
) -> None:
    request = (
        b"GET http://api.test:%d/x?y HTTP/1.1\r\nhost: evil.test\r\nproxy-authorization: s\r\n\r\n"
    )
    data, denials = await _exchange(_allow(upstream), request % upstream.port)
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert not denials
    head = upstream.heads[0]
    assert head.startswith(b"GET /x?y HTTP/1.1\r\nhost: api.test:%d\r\n" % upstream.port)
    assert b"evil.test" not in head
    assert b"proxy-authorization" not in head


async def test_connect_and_socks5_to_an_allowed_name(upstream: Upstream) -> None:
    allow = _allow(upstream)
    data, denials = await _exchange(
        allow, b"CONNECT API.test.:%d HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n" % upstream.port
    )
    assert data.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
    name = b"api.test"
    socks = b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name
    data, denials = await _exchange(
        allow, socks + upstream.port.to_bytes(2, "big") + b"GET / HTTP/1.1\r\n\r\n"
    )
    assert data.startswith(b"\x05\x00\x05\x00")
    assert b"HTTP/1.1 200 OK" in data
    assert not denials


async def test_a_pipelined_request_for_another_name_reaches_only_the_first(
    upstream: Upstream, other: Upstream
) -> None:
    """Whatever follows the first request goes to the destination already checked."""
    allow = _allow(upstream, other_test="127.0.0.1")
    request = (
        b"GET http://api.test:%d/ HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        b"GET http://other.test:%d/ HTTP/1.1\r\n\r\n" % (upstream.port, other.port)
    )
    await _exchange(allow, request)
    assert other.heads == []


# -- refused ------------------------------------------------------------------------------------

HOSTILE = [
    # names not listed, look-alikes, IDN tricks
    (b"CONNECT other.test:443 HTTP/1.1\r\n\r\n", "other.test:443 (name not in network)"),
    (b"CONNECT api.test.evil.test:443 HTTP/1.1\r\n\r\n", "name not in network"),
    (b"CONNECT evilapi.test:443 HTTP/1.1\r\n\r\n", "name not in network"),
    ("CONNECT \u0430pi.test:443 HTTP/1.1\r\n\r\n".encode(), "not a plain ASCII host name"),
    ("CONNECT api\u3002test:443 HTTP/1.1\r\n\r\n".encode(), "not a plain ASCII host name"),
    (b"CONNECT api.test%00.x:443 HTTP/1.1\r\n\r\n", "not a plain ASCII host name"),
    (b"CONNECT user@api.test:443 HTTP/1.1\r\n\r\n", "credentials in the URL"),
    # IP literals in every spelling
    (b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n", "address not in network"),
    (b"CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", "2130706433:443 (address not in network)"),
    (b"CONNECT 0x7f.1:443 HTTP/1.1\r\n\r\n", "address not in network"),
    (b"CONNECT 127.1:443 HTTP/1.1\r\n\r\n", "address not in network"),
    (b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", "address not in network"),
    (b"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n", "address not in network"),
    (b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n", "address not in network"),
    (b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x01\xbb", "127.0.0.1:443 (address not in"),
    (b"\x05\x01\x00\x05\x01\x00\x04" + bytes(15) + b"\x01\x01\xbb", "::1:443 (address not in"),
    # ports
    (b"CONNECT api.test:22 HTTP/1.1\r\n\r\n", "api.test:22 (port 22 is not in network_ports)"),
    (b"CONNECT api.test:\xb2 HTTP/1.1\r\n\r\n", "bad port"),  # a superscript two: not ASCII
    ("CONNECT api.test:\u0664\u0664\u0663 HTTP/1.1\r\n\r\n".encode(), "bad port"),
    # smuggling and malformed heads
    (
        b"GET http://api.test/ HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
        "conflicting",
    ),
    (
        b"GET http://api.test/ HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
        "conflicting",
    ),
    (b"GET http://api.test/ HTTP/1.1\r\nx: a\nhost: other\r\n\r\n", "bare CR or LF"),
    (b"GET http://api.test/ HTTP/1.1\r\nx: a\r\n folded\r\n\r\n", "malformed header line"),
    (b"GET http://api.test/ HTTP/1.1\r\nbad name: a\r\n\r\n", "malformed header line"),
    (b"GET http://api.test/ HTTP/1.1\r\nx: a\x00b\r\n\r\n", "malformed header line"),
    (b"GET  http://api.test/ HTTP/1.1\r\n\r\n", "malformed request line"),
    (b"GET https://api.test/ HTTP/1.1\r\n\r\n", "absolute http:// URL"),
    (b"GET / HTTP/1.1\r\nhost: api.test\r\n\r\n", "absolute http:// URL"),
    (b"GET http://api.test/ HTTP/2\r\n\r\n", "malformed request line"),
    (b"CONNECT api.test HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
    (b"GET http://api.test/" + b"a" * HEAD_LIMIT + b" HTTP/1.1\r\n\r\n", "request head over"),
    (b"GET http://api.test/ HTTP/1.1\r\n" + b"x: y\r\n" * 4000, "request head over"),
    (b"\x05\x01\x02", "SOCKS5 without the no-authentication method"),
    (b"\x05\x01\x00\x05\x02\x00\x03\x08api.test\x01\xbb", "only SOCKS5 CONNECT"),
    (b"GET http://api.test/", "the client closed the connection"),
    # what the result shows is escaped: no forged line, no terminal escape
    (
        b"\x05\x01\x00\x05\x01\x00\x03\x0ea\nnetwork: x\x1b[\x01\xbb",
        "a\\nnetwork: x\\x1b[:443 (not a",
    ),
    (b"CONNECT a\x1b[2J" + b"x" * 200 + b":443 HTTP/1.1\r\n\r\n", "a\\x1b[2Jxxx"),
]


@pytest.mark.parametrize(("request_bytes", "reason"), HOSTILE)
async def test_hostile_requests_are_refused_and_reported(
    upstream: Upstream, request_bytes: bytes, reason: str
) -> None:
    data, denials = await _exchange(_allow(upstream), request_bytes)
    assert len(denials) == 1
    assert denials[0].startswith("network: blocked ")
    assert denials[0].isascii()
    assert denials[0].isprintable()
    assert len(denials[0]) < 250
    assert reason in denials[0]
    assert upstream.heads == []
    assert b"200" not in data


async def test_a_request_no_check_foresaw_is_refused_and_the_session_goes_on(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception nothing expected (a parser's ValueError) blocks that request only: it once
    ended the whole session, and the command's output and denials with it."""
    from dsh_plugins_builtin._sandbox import _proxy

    def broken(text: bytes, default: int | None) -> tuple[str, int]:
        raise ValueError("invalid literal for int()")

    monkeypatch.setattr(_proxy, "_authority", broken)
    _, denials = await _exchange(_allow(upstream), b"CONNECT api.test:443 HTTP/1.1\r\n\r\n")
    assert denials == ["network: blocked a malformed request (ValueError)"]
    assert upstream.heads == []


async def test_a_name_resolving_to_loopback_is_refused_unless_pinned(upstream: Upstream) -> None:
    """``localhost`` resolves (locally) to a loopback address: refused although listed."""
    allow = allowlist(("localhost",), (upstream.port,), {})
    _, denials = await _exchange(allow, b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % upstream.port)
    assert "resolves to a non-public address" in denials[0]
    pinned = allowlist(("localhost",), (upstream.port,), {"localhost": "127.0.0.1"})
    data, denials = await _exchange(
        pinned, b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % upstream.port
    )
    assert data.startswith(b"HTTP/1.1 200")
    assert not denials


async def test_a_listed_ip_literal_and_wildcards() -> None:
    allow = allowlist(("10.1.2.3", "*.example.test"), (443,), {})
    assert allow.check("10.1.2.3", 443) == "10.1.2.3"
    assert allow.check("a.b.example.test", 443) == "a.b.example.test"
    for host in ("example.test", "xexample.test", "10.1.2.4"):
        with pytest.raises(Exception, match="not in network"):
            allow.check(host, 443)


async def _trickle(client: trio.abc.Stream) -> None:
    while True:
        await trio.sleep(1)
        await client.send_all(b"a")


@pytest.mark.parametrize("trickle", [False, True])
async def test_a_slow_client_times_out(
    trickle: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Nothing, or a byte a second forever: cut after HEAD_TIMEOUT either way."""
    session = Session(allowlist(("api.test",), (443,), {}))
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.handle, server)
        await client.send_all(b"GET ")
        if trickle:
            with pytest.raises(trio.BrokenResourceError):  # closed by the proxy
                await _trickle(client)
        else:
            assert await client.receive_some() == b""  # closed by the proxy
        assert trio.current_time() >= HEAD_TIMEOUT
    assert session.denials == [
        f"network: blocked a request (not complete within {HEAD_TIMEOUT:g} s)"
    ]


async def test_a_socks4_client_is_refused_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """A SOCKS4 request (``curl socks4://``) gets SOCKS4's "rejected" reply right away; it
    waited for the HTTP head's timeout (10 s) and was then cut without an answer."""
    session = Session(allowlist(("api.test",), (443,), {}))
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.handle, server)
        await client.send_all(b"\x04\x01\x01\xbb\x00\x00\x00\x01\x00api.test\x00")
        assert await client.receive_some(8) == b"\x00\x5b" + bytes(6)
        assert trio.current_time() < 1
    assert session.denials == [
        "network: blocked a request (SOCKS4: only SOCKS5 and HTTP proxying are served)"
    ]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("\u0430pi.test", "not a plain ASCII"),
        ("*.10.0.0.1", "wildcard"),
        ("a_b.test", "not a plain"),
    ],
)
def test_config_refuses_bad_entries(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        SandboxConfig(network=(entry,))
    with pytest.raises(ValueError, match="network_ports"):
        SandboxConfig(network=("a.test",), network_ports=(0,))
    with pytest.raises(ValueError, match="network_hosts"):
        SandboxConfig(network=("a.test",), network_hosts={"a.test": "nowhere"})


# -- real commands under bubblewrap -------------------------------------------------------------


@pytest.fixture
def bwrap_ok() -> Iterator[None]:
    reason = probe_backends()["bwrap"]
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bwrap must work on CI: {reason}")
        pytest.skip(f"bwrap does not work here: {reason}")
    return


async def _run(ws: Path, up: Upstream, command: str, backend: str = "bwrap") -> Any:
    config = SandboxConfig(
        network=("api.test",),
        network_ports=(up.port,),
        network_hosts={"api.test": "127.0.0.1"},
        protected=() if backend == "landlock" else SandboxConfig().protected,
        protect_install=backend != "landlock",
        protect_config=backend != "landlock",
    )
    return await run_confined(
        command.replace("PORT", str(up.port)),
        cwd=ws,
        policy=build_policy(config, ws),
        backend=backend,
        timeout=60,
    )


async def test_curl_reaches_the_allowed_name_only(
    bwrap_ok: None, ws: Path, upstream: Upstream
) -> None:
    done = await _run(
        ws,
        upstream,
        "curl -sS http://api.test:PORT/plain; echo; "
        "curl -sS -x socks5h://127.0.0.1:3128 http://api.test:PORT/socks; echo; "
        "curl -sS -o /dev/null -w '%{http_code}\\n' http://other.test:PORT/; "
        "curl -sS -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:PORT/",
    )
    assert done.exit_code == 0, done.output
    assert "seen: GET /plain HTTP/1.1" in done.output
    assert "seen: GET /socks HTTP/1.1" in done.output
    assert f"network: blocked other.test:{upstream.port} (name not in network)" in done.output
    assert f"network: blocked 127.0.0.1:{upstream.port} (address not in network)" in done.output
    codes = [line.strip() for line in done.output.splitlines() if line.strip().isdigit()]
    assert codes.count("403") == 2, done.output  # (not a count of "403" in the text: the port)
    assert len(upstream.heads) == 2


async def test_nothing_leaves_but_through_the_proxy(
    bwrap_ok: None, ws: Path, upstream: Upstream
) -> None:
    """Without the proxy variables the host is unreachable; other socket families are refused
    (seccomp); the relay's control socket is not the command's."""
    script = (
        "import socket, os\n"
        "for fam in (socket.AF_NETLINK, socket.AF_PACKET, socket.AF_VSOCK):\n"
        "    try: socket.socket(fam, socket.SOCK_RAW if fam != socket.AF_VSOCK else socket.SOCK_STREAM)\n"
        "    except OSError as e: print('refused', e.errno)\n"
        "    else: print('OPEN', fam)\n"
        "s = socket.socket()\n"
        "try: s.connect(('127.0.0.1', PORT))\n"
        "except OSError as e: print('direct', e.errno)\n"
        "else: print('DIRECT OPEN')\n"
    )
    done = await _run(
        ws,
        upstream,
        f"curl -sS --noproxy '*' http://127.0.0.1:PORT/ ; python3 -c \"{script}\"; "
        "echo fds $(ls /proc/self/fd)",
    )
    assert "OPEN" not in done.output
    assert done.output.count("refused 97") == 3, done.output
    assert "direct 111" in done.output
    assert "fds 0 1 2 3\n" in done.output  # 3: ls's own
    assert upstream.heads == []


async def test_python_urllib_uses_the_variables(
    bwrap_ok: None, ws: Path, upstream: Upstream
) -> None:
    done = await _run(
        ws,
        upstream,
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://api.test:PORT/u').read())\"",
    )
    assert "seen: GET /u HTTP/1.1" in done.output, done.output


async def test_the_exit_status_is_the_commands(
    bwrap_ok: None, ws: Path, upstream: Upstream
) -> None:
    assert (await _run(ws, upstream, "exit 7")).exit_code == 7
    killed = await _run(ws, upstream, "kill -TERM $$")
    assert killed.exit_code == 128 + 15  # as bwrap reports it without the relay too


async def test_landlock_refuses_a_name_list(ws: Path, upstream: Upstream) -> None:
    """Landlock cannot put a command behind the proxy: it fails closed, naming the key."""
    if probe_backends()["landlock"] is not None:
        pytest.skip("landlock unusable here")
    with pytest.raises(SandboxUnavailable, match=r"\[plugin.sandbox\] network: a list"):
        await _run(ws, upstream, "true", backend="landlock")


async def test_repeated_denials_are_counted_once_and_connections_are_capped() -> None:
    """A command that opens connection after connection gets one line per distinct denial,
    and no more than MAX_CONNECTIONS open at the host at once."""
    session = Session(allowlist(("api.test",), (443,), {}))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    held = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.serve, trio.socket.from_stdlib_socket(ours))
        for _ in range(3):
            a, b = socket.socketpair()
            a.sendall(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n")
            socket.send_fds(theirs, [b"c"], [b.fileno()])
            b.close()
            answer = trio.socket.from_stdlib_socket(a)
            while await answer.recv(4096):  # the 403, then the end: the denial is recorded
                pass
            held.append(a)
        read_end, write_end = os.pipe()  # a relay replaced by a hostile one sends anything
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        socket.send_fds(theirs, [b"c"], [read_end, udp.fileno()])
        for thing in (udp, read_end, write_end):
            thing.close() if isinstance(thing, socket.socket) else os.close(thing)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(MAX_CONNECTIONS + 1):  # silent clients: each holds a slot
            a, b = socket.socketpair()
            socket.send_fds(theirs, [b"c"], [b.fileno()])
            b.close()
            held.append(a)
        await trio.testing.wait_all_tasks_blocked()
        assert session.active == MAX_CONNECTIONS
        nursery.cancel_scope.cancel()
    for sock in (*held, theirs, ours):
        sock.close()
    assert session.denials == [
        "network: blocked other.test:443 (name not in network) (3 times)",
        "network: blocked a connection (the relay sent something else) (2 times)",
        f"network: blocked a connection (over {MAX_CONNECTIONS} open)",
    ]


async def test_through_the_host_with_the_config_table(
    bwrap_ok: None, make_host: Any, ws: Path, upstream: Upstream
) -> None:
    """``[plugin.sandbox] network = [...]`` as a config table: the bash tool's result carries the
    answer and the denial."""
    host = tools_host(
        make_host,
        ws,
        backend="bwrap",
        network=["api.test"],
        network_ports=[upstream.port],
        network_hosts={"api.test": "127.0.0.1"},
    )
    command = f"curl -sS http://api.test:{upstream.port}/h; curl -sS http://x.test:{upstream.port}/"
    result = await host.call("bash", {"command": command})
    assert "seen: GET /h HTTP/1.1" in result.text
    assert f"network: blocked x.test:{upstream.port} (name not in network)" in result.text


async def test_landlock_fails_closed_through_the_host(make_host: Any, ws: Path) -> None:
    if probe_backends()["landlock"] is not None:
        pytest.skip("landlock unusable here")
    host = tools_host(make_host, ws, backend="landlock", network=["api.test"])
    result = await host.call("bash", {"command": "touch ran"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert "[plugin.sandbox] network: a list of names needs the bubblewrap backend" in result.text
    assert not (ws / "ran").exists()


def test_sandbox_check_shows_the_names(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    write_config(project, 'network = ["api.test", "*.Example.test"]')
    assert sandbox_check_command([]) == 0
    out = capsys.readouterr().out.splitlines()
    line = '[plugin.sandbox] mode = workspace-write, backend = auto, network = ["api.test", "*.example.test"]'
    assert line in out


def test_the_proxy_keeps_a_bounded_record_of_refusals():
    # Every distinct refusal text was kept: a command making up names for as long as it ran
    # grew the host's memory without bound. Past MAX_DENIALS distinct texts, only a count.
    from dsh_plugins_builtin._sandbox._allow import allowlist
    from dsh_plugins_builtin._sandbox._proxy import MAX_DENIALS, Session

    session = Session(allowlist(("api.test",), (443,), {}))
    for n in range(MAX_DENIALS + 1000):
        session.deny(f"network: blocked n{n}.test:443 (name not in network)")
    session.deny("network: blocked n0.test:443 (name not in network)")  # one already kept
    assert len(session.counts) == MAX_DENIALS
    lines = session.denials
    assert lines[0] == "network: blocked n0.test:443 (name not in network) (2 times)"
    assert lines[-1] == "network: blocked 1000 more requests"
    assert len(lines) == MAX_DENIALS + 1
