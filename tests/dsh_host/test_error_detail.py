"""A `DshError`'s ``detail`` is for the operator: the body's trace line and ``meta``, not the model."""

from __future__ import annotations

import trio

from dsh_host import DshError, Host, define_tool


def _host(execute):
    host = Host(load_entrypoints=False)
    host.registry.register(define_tool(name="t", description="t", parameters={}, execute=execute))
    return host


def test_a_bodys_error_detail_is_in_its_trace_line_and_meta_not_its_text():
    async def fails(args):
        raise DshError("the server misbehaved", "SERVER_BAD", detail="it sent [1, 2, 3]")

    events = []
    result = trio.run(lambda: _host(fails).call("t", {}, trace=events.append))
    assert result.code == "SERVER_BAD"
    assert result.text == "Error: the server misbehaved"
    assert result.meta == {"detail": "it sent [1, 2, 3]"}
    (body,) = [event for event in events if event.stage == "body"]
    assert body.outcome == "SERVER_BAD: it sent [1, 2, 3]"


def test_an_error_without_detail_traces_its_code_only():
    def fails(args):  # a synchronous body takes the other path (a worker thread)
        raise DshError("no", "PLAIN")

    events = []
    result = trio.run(lambda: _host(fails).call("t", {}, trace=events.append))
    assert result.meta is None
    assert [event.outcome for event in events if event.stage == "body"] == ["PLAIN"]
