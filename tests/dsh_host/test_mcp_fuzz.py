"""Fuzz ``dsh mcp serve`` with hostile JSON-RPC (issue 10 item 1): it must answer ``ping`` after.

Each example is one session over in-memory streams: ``initialize``, then a burst of mixed valid
and invalid messages (hostile ids, lone surrogates, deep nesting, huge strings, non-UTF-8,
batches, NaN), then a ``ping`` that must be answered. Every line the server writes must be a
JSON-RPC 2.0 object in strict JSON (UTF-8, no NaN); every error must carry an integer code.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_host import Host, define_tool
from dsh_host._mcp._service import McpService, serve
from tests.conftest import soak_size
from tests.dsh_host.mcp_support import INIT

PER_SESSION = 100
_ABSENT = object()
TOTAL = soak_size(10_000, 100_000)

surrogates = st.sampled_from(["\ud800", "\udfff", "a\udcffb", "\ud83d"])
texts = st.one_of(st.text(max_size=20), surrogates)
ids = st.one_of(
    st.integers(),
    st.integers(min_value=10**30, max_value=10**60),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.none(),
    st.booleans(),
    st.just({"a": 1}),
    st.just([1, 2]),
)
methods = st.one_of(
    st.sampled_from(
        [
            "ping",
            "tools/list",
            "tools/call",
            "initialize",
            "notifications/cancelled",
            "notifications/initialized",
            "resources/list",
            "completion/complete",
        ]
    ),
    texts,
    st.none(),
    st.integers(),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=4,
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), texts)
params = st.one_of(
    st.builds(
        lambda name, text: {"name": name, "arguments": {"text": text}},
        st.one_of(st.just("echo"), texts),
        st.one_of(texts, scalars),
    ),
    st.builds(lambda request_id: {"requestId": request_id}, ids),
    json_values,
)


messages = st.builds(
    lambda jsonrpc, id_, method, params, extra: json.dumps(
        {
            k: v
            for k, v in (("jsonrpc", jsonrpc), ("id", id_), ("method", method), ("params", params))
            if v is not _ABSENT
        }
        | extra
    ).encode(),  # NaN and Infinity included: not JSON, must be refused
    st.one_of(st.just("2.0"), st.just("2.0"), st.just(_ABSENT), scalars),
    st.one_of(ids, st.just(_ABSENT)),
    st.one_of(methods, methods, st.just(_ABSENT)),
    st.one_of(params, st.just(_ABSENT)),
    st.one_of(
        st.just({}),
        st.just({}),
        st.just({}),
        st.builds(lambda v: {"result": v}, scalars),
        st.builds(lambda v: {"error": v}, scalars),
    ),
)


raw_lines = st.one_of(
    st.binary(max_size=40),
    st.integers(1, 1_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 1_000).map(lambda n: b'{"a":' * n + b"0" + b"}" * n),
    st.sampled_from([b"[]", b"[1]", b"{}", b"null", b'"x"', b'{"jsonrpc":"2.0","id":1']),
    st.just(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'),
)
huge_lines = st.sampled_from([99_000, 100_001, 250_000]).map(
    lambda n: b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * n + b'"}}'
)
lines = st.one_of([messages] * 8 + [raw_lines, raw_lines])
# Each drawn burst is sent forwards then backwards (drawing is the slow part; the second pass
# meets the session in another state: ids in flight, cancellations of them, a huge line).
DRAWN = PER_SESSION // 2
bursts = st.tuples(st.lists(lines, min_size=DRAWN, max_size=DRAWN), huge_lines).map(
    lambda drawn: [*drawn[0], drawn[1], *reversed(drawn[0])]
)


def _host() -> Host:
    async def echo(args):
        return args["text"]

    host = Host(load_entrypoints=False)
    host.registry.register(
        define_tool(
            name="echo",
            description="echo",
            parameters={"text": {"type": "string", "required": True}},
            execute=echo,
        )
    )
    return host


HOST = _host()
SERVICE = McpService(HOST)


def _check(line: bytes) -> dict:
    def no_constant(name: str):
        raise AssertionError(f"the server wrote {name}")

    reply = json.loads(line.decode("utf-8"), parse_constant=no_constant)
    assert isinstance(reply, dict)
    assert reply["jsonrpc"] == "2.0"
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int)
        assert isinstance(reply["error"]["message"], str)
    else:
        assert "result" in reply or "method" in reply
    return reply


async def _session(burst: list[bytes]) -> None:
    left, right = trio.testing.memory_stream_pair()
    buffer = b""

    async def reply() -> dict:
        nonlocal buffer
        while b"\n" not in buffer:
            chunk = await left.receive_some(1 << 20)
            assert chunk, "the server stopped writing"
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        return _check(line)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(HOST, right, right, service=SERVICE, max_line=100_000))
        init = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT}
        await left.send_all(json.dumps(init).encode() + b"\n")
        await left.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for line in burst:
            await left.send_all(line.replace(b"\n", b" ") + b"\n")
        await left.send_all(b'{"jsonrpc":"2.0","id":"final-ping","method":"ping"}\n')
        with trio.fail_after(30):
            while (answer := await reply()).get("id") != "final-ping" or "result" not in answer:
                pass
        assert answer["result"] == {}
        await left.send_eof()
        nursery.cancel_scope.cancel()


@pytest.mark.soak
@settings(
    max_examples=TOTAL // PER_SESSION,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(burst=bursts)
def test_fuzzed_sessions_still_answer_ping(burst):
    trio.run(_session, burst)
