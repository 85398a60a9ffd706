"""A model's arguments cost little to check whatever it sends (the fourth review): every
schema pattern is matched with RE2 (linear time), and ``uniqueItems`` is checked in linear
time with JSON Schema's equality (``1`` equals ``1.0``, ``true`` is not ``1``)."""

from __future__ import annotations

import pytest

from dsh_host import JsonSchemaError, define_tool


def _define(schema: dict):
    return define_tool(name="t", description="t", parameters=schema, execute=lambda a: "ok")


def _string(**extra) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", **extra}}}


def test_a_backtracking_pattern_is_matched_by_re2():
    tool = _define(_string(pattern="^(a+)+$"))
    (error,) = tool.prepare({"s": "a" * 40 + "!"})[1]  # `re` would take hours
    assert "does not match '^(a+)+$'" in error
    assert tool.prepare({"s": "a" * 40})[1] == []


def test_every_kind_of_pattern_is_matched_by_re2():
    tool = _define(
        {
            "type": "object",
            "$defs": {"names": {"type": "object", "propertyNames": {"pattern": "^(b+)+$"}}},
            "properties": {"n": {"$ref": "#/$defs/names"}},
            "patternProperties": {"^(x+)+$": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    evil = "x" * 40 + "!"
    errors = tool.prepare({"n": {"b" * 40 + "!": 1}, "xx": "no", evil: 1})[1]
    assert len(errors) == 3, errors
    assert any(error.startswith('"xx"') for error in errors)
    assert any(f'"{evil}" is not a declared property' in error for error in errors)
    assert tool.prepare({"n": {"bb": 1}, "xxx": 2})[1] == []


@pytest.mark.parametrize(
    "schema",
    [
        _string(pattern="^(?=a)a+$"),
        _string(pattern=r"^(a)\1$"),
        {"type": "object", "patternProperties": {"(?<=x)y": {}}},
        {"type": "object", "propertyNames": {"pattern": "(?!a)"}},
        {"type": "object", "$defs": {"d": {"pattern": "(?=a)"}}, "properties": {"s": {"$ref": "#/$defs/d"}}},
    ],
)  # fmt: skip
def test_a_pattern_re2_cannot_compile_makes_the_schema_unsupported(schema):
    with pytest.raises(JsonSchemaError, match="cannot be checked in bounded time"):
        _define(schema)


def test_a_pattern_in_an_enum_value_is_data_not_a_pattern():
    tool = _define(_string(enum=[{"pattern": "(?=a)"}]))
    assert tool.prepare({"s": "x"})[1] != []


@pytest.mark.parametrize("name", ["enum", "const", "default", "examples"])
def test_a_property_named_like_a_data_keyword_still_has_its_pattern_checked(name):
    # The walk skipped the value of any key named enum/const/default/examples, so a property
    # so named hid its pattern: validation raised KeyError instead of answering.
    tool = _define({"type": "object", "properties": {name: {"type": "string", "pattern": "^x$"}}})
    assert tool.prepare({name: "x"})[1] == []
    assert tool.prepare({name: "y"})[1] != []
    with pytest.raises(JsonSchemaError, match="bounded time"):
        _define({"type": "object", "properties": {name: {"type": "string", "pattern": "(?=a)"}}})


def test_unique_items_is_linear_and_uses_json_schema_equality():
    tool = _define({"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}}})
    many = [{"k": i, "v": [i, str(i)]} for i in range(20_000)]
    assert tool.prepare({"u": many})[1] == []
    (error,) = tool.prepare({"u": [*many, {"v": [7, "7"], "k": 7.0}]})[1]
    assert error == '"u": has non-unique elements (items 7 and 20000)'
    assert tool.prepare({"u": [1, 1.0]})[1] != []
    assert tool.prepare({"u": [True, 1]})[1] == []
    assert tool.prepare({"u": [False, 0, None, "0", [0], {}]})[1] == []
    assert tool.prepare({"u": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]})[1] != []
    assert tool.prepare({"u": [[1.0, {"a": True}], [1, {"a": True}]]})[1] != []


def test_unevaluated_properties_beside_pattern_properties_is_unsupported():
    # jsonschema would match those patterns with `re` to find the evaluated keys
    schema = {"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False}
    with pytest.raises(JsonSchemaError, match="unevaluatedProperties with patternProperties"):
        _define(schema)
    assert _define({**schema, "patternProperties": {}}).prepare({"y": 1})[1] != []
