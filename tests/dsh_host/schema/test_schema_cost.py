"""Validation work is bounded by the schema's size when it compiles (third review): a small
schema whose ``$ref`` expand exponentially is refused; a recursive schema still works."""

from __future__ import annotations

import pytest

from dsh_host import JsonSchemaError, define_tool
from dsh_host._schema._cost import MAX_EXPANDED


def _bomb(n: int) -> dict:
    defs = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(n)
    }
    defs[f"d{n}"] = {"type": "object"}
    return {"type": "object", "$defs": defs, "allOf": [{"$ref": "#/$defs/d0"}]}


def _define(schema: dict):
    return define_tool(name="t", description="t", parameters=schema, execute=lambda a: "ok")


def test_a_schema_whose_refs_expand_exponentially_is_refused():
    with pytest.raises(JsonSchemaError, match=f"over {MAX_EXPANDED} schema nodes"):
        _define(_bomb(20))
    assert _define(_bomb(8)).prepare({})[1] == []  # 2^8 expansions: within the bound


TREE = {
    "type": "object",
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "left": {"$ref": "#/$defs/node"},
                "right": {"$ref": "#/$defs/node"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                "value": {"type": "integer"},
            },
        }
    },
    "properties": {"root": {"$ref": "#/$defs/node"}},
}
JSON_VALUE = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"$ref": "#/$defs/v"}},
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/v"}},
    ]
}


def test_recursive_schemas_still_validate():
    tree = _define(TREE)
    good = {"root": {"left": {"value": 1}, "children": [{"right": {"value": 2}}]}}
    assert tree.prepare(good)[1] == []
    (error,) = tree.prepare({"root": {"left": {"children": [{"value": "x"}]}}})[1]
    assert "root.left.children[0].value" in error
    value = _define(
        {"type": "object", "$defs": {"v": JSON_VALUE}, "properties": {"v": {"$ref": "#/$defs/v"}}}
    )
    assert value.prepare({"v": {"a": ["b", {"c": "d"}]}})[1] == []
    assert value.prepare({"v": {"a": [1]}})[1] != []


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
         "without descending"),
        ({"type": "object", "properties": {"a": {"allOf": [{"$ref": "#"}, {"$ref": "#"}]}}},
         "twice to one value"),
        ({"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#/properties/a"}},
          "additionalProperties": {"$ref": "#"}}, "twice to one value"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json"}}}, "local JSON pointers"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}, "points to nothing"),
    ],
)  # fmt: skip
def test_a_recursion_whose_work_grows_faster_than_the_value_is_refused(schema, why):
    with pytest.raises(JsonSchemaError, match=why):
        _define(schema)
