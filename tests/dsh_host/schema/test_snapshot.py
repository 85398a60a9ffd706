"""`compile_snapshot`: arguments frozen and validated in one walk, exactly as ``freeze`` then
``accepts`` would have them, or ``None`` (the pipeline then freezes and validates as before)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_host import FrozenDict, ToolExecutionInput, ToolRegistry, define_tool
from dsh_host._model._json import MAX_DEPTH, freeze
from dsh_host._schema._snapshot import compile_snapshot
from dsh_host._schema._validators import compile_accepts

_CLOSED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "none": {"type": "null"},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "any": {"type": "array"},
        "inner": {
            "type": "object",
            "properties": {"k": {"type": "integer", "enum": [1, 2]}},
            "required": ["k"],
            "additionalProperties": False,
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}
_OPEN: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_infinity=True)
    | st.sampled_from([1.0, 2.0, "a", "b", "text"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["text", "n", "x", "flag", "none", "mode", "tags", "any", "inner", "k", "a", "z"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the very same types all the way down (a tuple is not a list)."""
    if type(a) is not type(b):
        return False
    if type(a) is FrozenDict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or a != a  # NaN is never accepted, but may be compared


@pytest.mark.parametrize("schema", [_CLOSED, _OPEN], ids=["closed", "open"])
@settings(max_examples=500, deadline=None)
@given(value=st.dictionaries(st.sampled_from(["text", "n", "x", "tags", "inner", "a"]), _json))
def test_a_snapshot_is_the_frozen_copy_that_accepts_holds_for(schema, value):
    snapshot = compile_snapshot(schema)
    accepts = compile_accepts(schema)
    assert snapshot is not None
    assert accepts is not None
    made = snapshot(value)
    if made is not None:
        assert _same(made, freeze(value))
        assert accepts(made)


def test_valid_nested_arguments_are_snapshotted_in_one_walk():
    snapshot = compile_snapshot(_CLOSED)
    assert snapshot is not None
    raw = {"text": "t", "tags": ["a", "b"], "inner": {"k": 1}, "x": 2.5, "any": [1, "z"]}
    made = snapshot(raw)
    assert _same(made, freeze(raw))
    raw["tags"].append("c")  # the caller's value changes; the snapshot does not
    assert made["tags"] == ("a", "b")


@pytest.mark.parametrize(
    "raw",
    [
        {"n": 1},  # "text" missing
        {"text": 1},
        {"text": "t", "z": 1},  # undeclared, closed
        {"text": "t", "x": float("nan")},
        {"text": "t", "x": float("inf")},
        {"text": "t", "x": True},  # a boolean is not a number
        {"text": "t", "x": 10**5000},
        {"text": "t", "x": "1.5"},
        {"text": "t", "tags": ["a", 1]},
        {"text": "t", "tags": ["a", None]},
        {"text": "t", "n": 10**5000},
        {"text": "t", "inner": {"k": 3}},
        {"text": "t", "mode": "c"},
        {"text": "t", "tags": ("a",)},  # a tuple: left to freeze
        {"text": "t", "any": [[1]]},  # an untyped array inside: left to freeze (its depth)
        ["text"],
        '{"text": "t"}',
    ],
)
def test_what_a_snapshot_is_not_sure_of_is_left_to_freeze_and_validate(raw):
    snapshot = compile_snapshot(_CLOSED)
    assert snapshot is not None
    assert snapshot(raw) is None


def test_a_non_string_key_is_left_to_freeze():
    snapshot = compile_snapshot(_OPEN)
    assert snapshot is not None
    assert snapshot({"a": "x", 1: "y"}) is None
    assert snapshot({"a": "x", "b": [1]}) is None


def test_only_object_schemas_of_the_subset_have_a_snapshot():
    assert compile_snapshot({"type": "array", "items": {"type": "string"}}) is None
    assert compile_snapshot({"type": "object", "properties": {"a": {"minLength": 1}}}) is None


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_the_pipeline_validates_snapshotted_arguments_once():
    seen: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        seen.append((args, ctx.execution.arguments))
        return "ok"

    tool = define_tool(
        name="nested",
        description="",
        parameters={
            "path": {"type": "string", "required": True},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        execute=body,
    )
    accepts = tool.accepts
    assert accepts is not None
    checked: list[Any] = []

    def counting(arguments: Any) -> bool:
        checked.append(arguments)
        return accepts(arguments)

    object.__setattr__(tool, "accepts", counting)
    registry = ToolRegistry()
    registry.register(tool)
    call = ToolExecutionInput(call_id="c", name="nested", arguments={"path": "a", "tags": ["x"]})
    result = await registry.execute(call)
    assert (result.is_error, checked) == (False, [])
    ((args, frozen),) = seen
    assert args is frozen
    assert _same(frozen, freeze({"path": "a", "tags": ["x"]}))
    bad = ToolExecutionInput(call_id="d", name="nested", arguments={"path": "a", "tags": [1]})
    result = await registry.execute(bad)
    assert result.code == "INVALID_ARGS"
    assert '"tags[0]" must be a string' in result.text
    too_deep = {"path": "a", "tags": _deep(MAX_DEPTH)}
    result = await registry.execute(
        ToolExecutionInput(call_id="e", name="nested", arguments=too_deep)
    )
    assert result.code == "INVALID_ARGS"
    assert "nested more than" in result.text


async def test_a_parked_body_holds_no_snapshot_memo():
    import gc
    import inspect

    import trio

    release = trio.Event()
    parked = trio.Event()

    async def park(args: Any, ctx: Any) -> str:
        parked.set()
        await release.wait()
        return "ok"

    registry = ToolRegistry()
    registry.register(define_tool(name="park", description="", parameters={}, execute=park))
    call = ToolExecutionInput(call_id="p", name="park", arguments={})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(registry.execute, call)
        await parked.wait()
        memo = registry._pipeline._accepted
        assert memo is not None
        # Only the pipeline keeps it: a parked call's frames do not (memory per parked call).
        assert not any(inspect.iscoroutine(r) for r in gc.get_referrers(memo))
        release.set()
