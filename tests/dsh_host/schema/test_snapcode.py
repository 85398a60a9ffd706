"""The generated snapshot (`._snapcode`): one function per object node, written out as source
for its schema, answering exactly as the closure walk does and never accepting what
``jsonschema`` or ``freeze`` refuse, on hostile inputs too."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dsh_host import FrozenDict
from dsh_host._model._json import INT_BOUND, NotJsonError, freeze, thaw
from dsh_host._schema._snapcode import MAX_WRITTEN, writable
from dsh_host._schema._snapshot import _NO, _object, compile_snapshot
from dsh_host._schema._validators import compile_accepts

_FLAGS = {"a": {"type": "boolean"}, "b": {"type": "boolean"}}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "closed": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "none": {"type": "null"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "bits": {"type": "array", "items": {"type": "boolean"}},
            "nums": {"type": "array", "items": {"type": "number"}},
            "any": {"type": "array"},
            "mode": {"type": "string", "enum": ["r", "w"]},
            "flags": {"type": "object", "properties": _FLAGS, "required": ["a"]},
            "shut": {"type": "object", "properties": _FLAGS, "additionalProperties": False},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    "open": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "n": {"type": "integer"},
            "flags": {"type": "object", "properties": _FLAGS},
        },
    },
    "empty": {"type": "object", "properties": {}},
}
_KEYS = ["path", "n", "x", "none", "tags", "bits", "nums", "any", "mode", "flags", "shut", "a", "b"]


class _Str(str):
    pass


class _Int(int):
    pass


def _frozen_or_plain(value: dict[str, Any]) -> Any:
    """A caller's already frozen object where it is JSON, else the plain dict."""
    try:
        return freeze(value)
    except NotJsonError:
        return value


_hostile_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.integers(0, 3).map(lambda i: (INT_BOUND - 1, INT_BOUND, -INT_BOUND, 2**63)[i])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1.0, -0.0, 2.5, "r", "w", "\ud800", "", _Str("r"), _Int(1), _Str("path")])
)
_hostile = st.recursive(
    _hostile_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.sampled_from(_KEYS) | st.just(_Str("a")), inner, max_size=4)
        | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=3).map(_frozen_or_plain)
    ),
    max_leaves=16,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, of the very same types all the way down, keys too, in the same order."""
    if type(a) is not type(b):
        return False
    if type(a) is FrozenDict:
        return [(k, type(k)) for k in a] == [(k, type(k)) for k in b] and all(
            _same(a[k], b[k]) for k in a
        )
    if type(a) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _check(schema: dict[str, Any], value: Any) -> None:
    snapshot = compile_snapshot(schema)
    assert snapshot is not None
    made = snapshot(value)
    walked = _object(schema, None)(value)  # the closure walk it writes out
    assert (made is None) == (walked is None)
    if made is None:
        return
    assert _same(made, walked)
    assert _same(made, freeze(value))
    accepts = compile_accepts(schema)
    assert accepts is not None
    assert accepts(made)
    assert Draft202012Validator(schema).is_valid(thaw(made))


@pytest.mark.parametrize("name", sorted(_SCHEMAS))
@settings(max_examples=400, deadline=None)
@given(value=st.dictionaries(st.sampled_from(_KEYS) | st.just(_Str("path")), _hostile, max_size=6))
def test_the_generated_snapshot_answers_as_the_closure_walk_and_jsonschema(name, value):
    _check(_SCHEMAS[name], value)


@pytest.mark.parametrize(
    "value",
    [
        {"path": "p", "x": math.nan},
        {"path": "p", "x": math.inf},
        {"path": "p", "x": -math.inf},
        {"path": "p", "n": True},
        {"path": "p", "x": False},
        {"path": "p", "n": 1.5},
        {"path": "p", "n": _Int(3)},
        {"path": _Str("p")},
        {_Str("path"): "p"},
        {"path": "p", 1: "x"},
        {"path": "p", "tags": ("a", "b")},
        {"path": "p", "tags": ["a", _Str("b")]},
        {"path": "p", "nums": [1, math.nan]},
        {"path": "p", "any": [[[[1]]]]},
        {"path": "p", "flags": {"b": True}},
        {"path": "p", "flags": {"a": True, "zz": [1]}},
        {"path": "p", "shut": {"a": True, "zz": 1}},
        {"path": "p", "mode": "x"},
        {"path": "p", "n": INT_BOUND},
        {"path": "p", "zz": 1},
    ],
)
def test_hostile_arguments_are_never_accepted_wrongly(value):
    snapshot = compile_snapshot(_SCHEMAS["closed"])
    assert snapshot is not None
    assert snapshot(value) is None
    _check(_SCHEMAS["closed"], value)


@pytest.mark.parametrize(
    "value",
    [
        {"path": "\ud800", "n": 2.0, "x": -0.0, "none": None, "tags": ["a"] * 100_000},
        {"path": "p", "flags": {"a": True, "b": False}, "shut": {}, "bits": [True], "mode": "r"},
        {"path": "p", "nums": [1, 2.5], "any": [1, "z", None]},
        {"mode": "w", "path": "p", "flags": FrozenDict({"a": True})},
    ],
)
def test_valid_arguments_are_copied_as_freeze_copies_them(value):
    _check(_SCHEMAS["closed"], value)
    snapshot = compile_snapshot(_SCHEMAS["closed"])
    assert snapshot is not None
    made = snapshot(value)
    assert made is not None
    assert list(made) == list(value)  # the caller's key order


def test_open_objects_leave_undeclared_keys_to_the_closure_walk():
    snapshot = compile_snapshot(_SCHEMAS["open"])
    assert snapshot is not None
    made = snapshot({"zz": 1, "path": "p", "flags": {"a": True, "c": "d"}})
    assert _same(made, freeze({"zz": 1, "path": "p", "flags": {"a": True, "c": "d"}}))
    assert snapshot({"zz": [1]}) is None
    assert snapshot({}) is freeze({})


def test_deeply_nested_arguments_are_left_to_freeze():
    deep: Any = 1
    for _ in range(2000):
        deep = [deep]
    snapshot = compile_snapshot(_SCHEMAS["closed"])
    assert snapshot is not None
    assert snapshot({"path": "p", "any": deep}) is None
    with pytest.raises(NotJsonError):
        freeze({"path": "p", "any": deep})


def test_the_snapshot_is_written_out_as_source_for_its_schema():
    snapshot = compile_snapshot(_SCHEMAS["closed"])
    assert snapshot is not None
    assert snapshot.__code__.co_filename == "<string>"  # generated, not the closure walk
    names = snapshot.__code__.co_consts
    assert "path" in names
    assert "flags" in names  # each declared key asked for by name
    assert "EMPTY" not in snapshot.__code__.co_names  # a required key: never empty, not asked
    empty = compile_snapshot(_SCHEMAS["empty"])
    assert empty is not None
    assert "EMPTY" in empty.__code__.co_names
    assert _NO is not None


class _Sly(str):
    """A property name whose ``repr`` is Python code."""

    def __repr__(self) -> str:
        return "__import__('os').environ.setdefault('DSH_SNAPCODE_RAN', '1')"


def test_a_property_name_is_written_as_its_string_whatever_its_repr_says(monkeypatch):
    monkeypatch.delenv("DSH_SNAPCODE_RAN", raising=False)
    import os

    schema = {"type": "object", "properties": {_Sly("p"): {"type": "string"}}, "required": ["p"]}
    snapshot = compile_snapshot(schema)
    assert snapshot is not None
    assert snapshot({"p": "x"}) == {"p": "x"}
    assert "DSH_SNAPCODE_RAN" not in os.environ  # its repr was never run as code


@pytest.mark.parametrize("count", [MAX_WRITTEN + 1, 3_000, 30_000])
def test_a_schema_too_long_to_write_out_keeps_the_closure_walk(count):
    """Thousands of declared properties (a mounted server may list such a tool) would exceed
    what Python's compiler nests: the snapshot is the closure walk, with the same answers."""
    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": "string"} for i in range(count)},
        "required": ["k0"],
    }
    snapshot = compile_snapshot(schema)
    assert snapshot is not None
    assert snapshot.__code__.co_filename != "<string>"  # not generated
    assert snapshot({"k0": "a", f"k{count - 1}": "b"}) == {"k0": "a", f"k{count - 1}": "b"}
    assert snapshot({"k0": 1}) is None
    assert snapshot({"k1": "a"}) is None  # k0 is required


def test_nested_objects_count_towards_the_bound():
    inner = {"type": "object", "properties": {f"i{i}": {"type": "string"} for i in range(150)}}
    outer = {f"o{i}": {"type": "string"} for i in range(60)}
    schema = {"type": "object", "properties": {**outer, "inner": inner}}
    assert not writable(schema)  # 211 declared properties
    assert writable({"type": "object", "properties": {"inner": inner}})


def test_a_snapshot_puts_its_copies_into_a_plain_dict_and_leaves_the_arguments_as_they_were():
    """The nested copies (a tuple, a frozen object) are stored into a plain copy of the
    arguments, then moved into the frozen one in one ``dict.update``: no slot-wrapper call
    (``dict.__init__``, ``dict.__setitem__``) per copy (issue 27, nested arguments)."""
    snapshot = compile_snapshot(_SCHEMAS["closed"])
    assert snapshot is not None
    names = snapshot.__globals__  # the generated source's namespace
    assert "setitem" not in names
    assert "fill" not in names
    raw = {"path": "a", "tags": ["x", "y"], "flags": {"a": True}, "n": 2}
    before = repr(raw)
    made = snapshot(raw)
    assert repr(raw) == before  # the caller's dict and lists are untouched
    assert type(made) is FrozenDict
    assert list(made) == ["path", "tags", "flags", "n"]  # the arguments' key order
    assert made["tags"] == ("x", "y")
    assert type(made["flags"]) is FrozenDict
    assert made == freeze(raw)
