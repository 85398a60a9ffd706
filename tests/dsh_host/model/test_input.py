"""Strict JSON input (`parse_json`) and terminal-safe text (`printable`)."""

from __future__ import annotations

import time

import pytest

from dsh_host import JsonInputError, parse_json, printable


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"path": "a", "path": "b"}', 'duplicate object key "path"'),
        ('{"a": {"k": 1, "k": 2}}', 'duplicate object key "k"'),
        ('{"x": NaN}', "NaN is not a JSON value"),
        ("[Infinity]", "Infinity is not a JSON value"),
        ("1e400", "too large"),
        ("9" * 4301, "4301 digits"),
        ("-" + "9" * 4301, "4301 digits"),
        ("[" * 513 + "]" * 513, "nested more than 512 levels"),
        ("[" * 100_000 + "]" * 100_000, "nested more than 512 levels"),
        ('{"a": ' * 60_000 + "1" + "}" * 60_000, "nested more than 512 levels"),
        ("{", "not valid JSON"),
        (b"\xff\xfe{", "not valid JSON"),
    ],
)
def test_refused_input_says_why(text, message):
    with pytest.raises(JsonInputError, match=message.replace("(", r"\(")):
        parse_json(text)


def test_every_other_json_value_passes():
    assert parse_json('{"s": "\\udcff", "n": -12, "f": 1.5, "a": [null, true]}') == {
        "s": "\udcff",
        "n": -12,
        "f": 1.5,
        "a": [None, True],
    }
    assert parse_json("[" * 512 + "]" * 512) is not None
    assert parse_json("9" * 4300) == int("9" * 4300)
    assert parse_json(b'{"a": 1}') == {"a": 1}


def test_deep_input_is_refused_in_linear_time():
    started = time.perf_counter()
    with pytest.raises(JsonInputError):
        parse_json("[" * 5_000_000)
    assert time.perf_counter() - started < 5  # milliseconds in practice; quadratic would be hours


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("git status", "git status"),
        ("a\x1b[2Kb", "a\\x1b[2Kb"),
        ("rm -rf /\r# harmless", "rm -rf /\\r# harmless"),
        ("echo\u202eevil", "echo\\u202eevil"),
        ("x\u200by", "x\\u200by"),
        ("line\nnext\ttab", "line\\nnext\\ttab"),
        ("bad \udcff", "bad \\udcff"),
        ("\x7f\x85", "\\x7f\\x85"),
    ],
)
def test_printable_escapes_what_a_terminal_would_act_on(text, shown):
    assert printable(text) == shown


def test_printable_keeps_newlines_and_tabs_on_request_but_never_carriage_returns():
    assert printable("a\n\tb\r\x1b", newlines=True) == "a\n\tb\\r\\x1b"
    assert printable("plain ünïcode ✓") == "plain ünïcode ✓"


def test_a_frozen_dict_a_caller_builds_is_frozen_through_and_through():
    """`freeze` trusts a FrozenDict as it is, so a caller cannot build one holding a list it
    could change between policy and the body, or holding something that is not JSON."""
    from dsh_host import FrozenDict
    from dsh_host._model._json import freeze

    inner = [1, {"b": [2]}]
    built = FrozenDict({"a": inner}, z=None)
    inner.append(3)  # the caller's list changes afterwards
    assert built == {"a": (1, {"b": (2,)}), "z": None}
    assert freeze(built) is built
    with pytest.raises(ValueError, match="not a JSON value"):
        FrozenDict({"a": object()})
    with pytest.raises(ValueError, match="keys must be strings"):
        FrozenDict({1: "x"})


async def test_a_caller_built_frozen_dict_is_the_snapshot_policy_and_body_both_see():
    seen = []

    async def body(args, ctx):
        seen.append(args["items"])
        return "ok"

    from dsh_host import FrozenDict, ToolExecutionInput, ToolRegistry, define_tool

    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="", parameters={"items": {"type": "array"}}, execute=body)
    )
    items = ["x"]
    arguments = FrozenDict({"items": items})
    items.append("injected after the snapshot")
    await registry.execute(ToolExecutionInput(call_id="c", name="t", arguments=arguments))
    assert seen == [("x",)]


def test_a_deep_text_runs_no_finalizer_with_no_stack_left(monkeypatch):
    # `json.loads` recurses to the interpreter's limit before it refuses "[" * 100_000; a
    # collection in there ran other code's finalizers (a sandbox's private tmp removed) with
    # no stack left: RecursionError, reported as unraisable (seen once in CI). The garbage is
    # put where the collection that frees it comes after a chosen number of allocations, for
    # a range of numbers: one of them lands within a few levels of the limit.
    import gc
    import sys
    import weakref

    class Owner:
        cycle: object = None

    ran: list[int] = []

    def cleanup(depth: int = 40) -> None:  # a finalizer that needs some stack, as rmtree does
        if depth:
            cleanup(depth - 1)
        else:
            ran.append(1)

    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    threshold = gc.get_threshold()
    tries = range(200, 520, 4)
    try:
        for after in tries:
            gc.collect()
            holder = [Owner()]
            holder[0].cycle = holder[0]  # garbage only a collection frees, once dropped
            weakref.finalize(holder[0], cleanup)
            gc.collect(0)  # into the middle generation, collected every *after* young ones
            holder.clear()
            gc.set_threshold(1, after, 1_000_000)
            try:
                with pytest.raises(JsonInputError, match="nested more than 512 levels"):
                    parse_json("[" * 5_000)
            finally:
                gc.set_threshold(*threshold)
            gc.collect()
    finally:
        gc.set_threshold(*threshold)
    assert unraisable == []
    assert len(ran) == len(tries)  # each finalizer ran, afterwards, with a stack
