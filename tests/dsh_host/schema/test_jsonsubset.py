"""The raw JSON Schema subset: assertion (core-spec §3.3) and value validation (§3.4).

Ported from the reference checklist items 195-219, plus a property test that checks
`validate_json_schema_value` against ``jsonschema``'s Draft 2020-12 validator on the subset.
"""

from __future__ import annotations

import datetime
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dsh_host._model._errors import JsonSchemaError
from dsh_host._schema._jsonsubset import (
    assert_supported_json_schema,
    node_violations,
    validate_json_schema_value,
)

SUBSET = "type/oneOf/properties/required/additionalProperties/items/enum/const + annotations"


def violations_of(schema: object) -> list[str]:
    """The subset's verdict on *schema* as a node (any root type: the node-shape tests)."""
    return node_violations(schema)


def test_a_structured_output_schema_must_be_rooted_at_an_object():
    with pytest.raises(JsonSchemaError) as info:
        assert_supported_json_schema({"type": "string"})
    assert info.value.code == "UNSUPPORTED_SCHEMA"
    assert info.value.violations == (
        'schema must be rooted at an object node ({"type": "object", ...}); its type is "string"',
    )
    with pytest.raises(JsonSchemaError, match="rooted at an object"):
        assert_supported_json_schema({"oneOf": [{"type": "object"}]})
    assert_supported_json_schema({"type": "object", "properties": {"v": {"type": "string"}}})


class Trap(Mapping[str, Any]):
    """A mapping that raises as soon as anyone reads it (the reference's trapped proxy)."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("trapped")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("trapped")

    def __len__(self) -> int:
        return 1


def deep_one_of(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "boolean"}]}
    return schema


# --- 195: accepted shapes --------------------------------------------------------------------


@pytest.mark.parametrize("t", ["string", "number", "integer", "boolean", "null"])
def test_every_scalar_type_is_accepted(t):
    assert violations_of({"type": t}) == []


def test_accepted_composite_schemas():
    assert violations_of({"type": "array", "items": {"type": "string"}}) == []
    assert (
        violations_of(
            {
                "type": "object",
                "properties": {
                    "nested": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}},
                        "additionalProperties": False,
                    },
                    "free": {},
                },
                "required": ["nested"],
                "additionalProperties": True,
            }
        )
        == []
    )
    assert violations_of({"oneOf": [{"type": "string"}, {"type": "null"}]}) == []
    assert (
        violations_of({"description": "any", "title": "t", "default": None, "examples": [1, "x"]})
        == []
    )


# --- 197-199: roots, types, oneOf, keywords --------------------------------------------------


@pytest.mark.parametrize("schema", [None, [], "no", 1, True, {1: "x"}, Trap()])
def test_non_record_root(schema):
    assert violations_of(schema) == ["schema must be a schema object"]


def test_type_violations():
    assert "type must be one of" in violations_of({"type": "tuple"})[0]
    assert violations_of({"type": "tuple"}) == [
        "schema.type must be one of object/array/string/number/integer/boolean/null"
    ]
    assert violations_of({"type": ["string", "null"]}) == [
        "schema.type must be a single type string (type arrays are not supported)"
    ]


@pytest.mark.parametrize("one_of", [[], [{}], "x", "xy", {"a": {}, "b": {}}, {1, 2}, None, ({},)])
def test_bad_one_of(one_of):
    assert violations_of({"oneOf": one_of}) == [
        "schema.oneOf must be an array of at least two schemas"
    ]


def test_one_of_rules():
    assert violations_of({"type": "string", "oneOf": [{}, {}]}) == [
        "schema cannot declare both type and oneOf"
    ]
    assert violations_of({"oneOf": [{}, {}], "items": {}}) == [
        "schema.items is not supported beside oneOf"
    ]
    assert "schema.oneOf[1].type" in violations_of({"oneOf": [{}, {"type": "x"}]})[0]
    assert violations_of({"oneOf": ({}, {})}) == []  # tuples are arrays


@pytest.mark.parametrize(
    "keyword", ["anyOf", "allOf", "not", "pattern", "minimum", "maxLength", "$ref"]
)
def test_unsupported_keywords(keyword):
    assert violations_of({"type": "string", keyword: 1}) == [
        f"schema.{keyword} is not a supported keyword (subset: {SUBSET})"
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "items": {}}, 'schema.items is not supported on type "object"'),
        ({"type": "array", "properties": {}}, 'schema.properties is not supported on type "array"'),
        ({"type": "object", "enum": [1]}, 'schema.enum is not supported on type "object"'),
        ({"type": "array", "const": 1}, 'schema.const is not supported on type "array"'),
        ({"type": "string", "required": []}, 'schema.required is not supported on type "string"'),
    ],
)
def test_misplaced_keywords(schema, message):
    assert violations_of(schema) == [message]


def test_constraints_without_type_or_one_of():
    schema = {
        "properties": {},
        "required": [],
        "additionalProperties": True,
        "items": {},
        "enum": [1],
        "const": 1,
    }
    assert violations_of(schema) == [
        f"schema.{key} requires type or oneOf"
        for key in ("properties", "required", "additionalProperties", "items", "enum", "const")
    ]


# --- 200-202: independent violations, objects, scalar literals -------------------------------


def test_all_independent_violations_are_reported():
    schema = {
        "type": "object",
        "pattern": "x",
        "properties": {"a": {"type": "weird"}, "b": {"type": "number", "minimum": 0}},
    }
    assert violations_of(schema) == [
        f"schema.pattern is not a supported keyword (subset: {SUBSET})",
        "schema.properties.a.type must be one of object/array/string/number/integer/boolean/null",
        f"schema.properties.b.minimum is not a supported keyword (subset: {SUBSET})",
    ]


def test_object_checks():
    obj = "object"
    assert violations_of({"type": obj, "properties": []}) == [
        "schema.properties must be an object of schemas"
    ]
    assert violations_of({"type": obj, "properties": {"a": "x"}}) == [
        "schema.properties.a must be a schema object"
    ]
    for required in ("a", [1], ["a", None], {"a": 1}):
        assert violations_of({"type": obj, "properties": {"a": {}}, "required": required}) == [
            "schema.required must be an array of strings"
        ]
    assert violations_of({"type": obj, "properties": {"a": {}}, "required": ["missing"]}) == [
        'schema.required names "missing" which is not in properties'
    ]
    assert violations_of({"type": obj, "additionalProperties": "yes"}) == [
        "schema.additionalProperties must be a boolean"
    ]
    assert violations_of({"type": obj, "properties": None}) == [
        "schema.properties must be an object of schemas"
    ]
    assert violations_of({"type": obj, "properties": None, "required": ["x"]}) == [
        "schema.properties must be an object of schemas",
        'schema.required names "x" which is not in properties',
    ]


@pytest.mark.parametrize(
    ("t", "enum", "const"),
    [
        ("string", ["a", "b"], "a"),
        ("number", [1, 2.5], 2.5),
        ("number", [1], 1.0),
        ("integer", [1, 2], 2),
        ("integer", [1, 2.0], 2),
        ("boolean", [True, False], False),
        ("null", [None], None),
    ],
)
def test_type_correct_enum_and_const(t, enum, const):
    assert violations_of({"type": t, "enum": enum}) == []
    assert violations_of({"type": t, "const": const}) == []
    assert violations_of({"type": t, "enum": enum, "const": const}) == []


@pytest.mark.parametrize(
    ("t", "enum"),
    [
        ("string", []),
        ("number", ["1"]),
        ("number", [math.nan]),
        ("number", [math.inf]),
        ("number", [True]),
        ("integer", [1.5]),
        ("string", None),
        ("string", "ab"),
        ("boolean", [1]),
        ("null", [0]),
    ],
)
def test_bad_enum(t, enum):
    assert violations_of({"type": t, "enum": enum}) == [
        f"schema.enum must be a non-empty array of {t} values"
    ]


def test_const_checks():
    assert violations_of({"type": "number", "const": math.nan}) == [
        "schema.const must be a number value"
    ]
    assert violations_of({"type": "boolean", "const": 1}) == [
        "schema.const must be a boolean value"
    ]
    assert violations_of({"type": "integer", "const": True}) == [
        "schema.const must be a integer value"
    ]
    assert violations_of({"type": "string", "enum": ["a"], "const": "b"}) == [
        "schema.const must be one of schema.enum when both are declared"
    ]
    assert violations_of({"type": "integer", "enum": [1], "const": True}) == [
        "schema.const must be a integer value"
    ]
    # Python deviation: -0.0 is an ordinary JSON number (json round-trips it).
    assert violations_of({"type": "number", "const": -0.0, "enum": [0]}) == []


# --- 203-205: annotations, other mappings, cycles --------------------------------------------


def test_error_carries_every_violation():
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema({"type": "object", "title": 1, "pattern": "x"})
    assert caught.value.code == "UNSUPPORTED_SCHEMA"
    assert caught.value.violations == (
        f"schema.pattern is not a supported keyword (subset: {SUBSET})",
        "schema.title must be a string",
    )
    assert str(caught.value).startswith("unsupported JSON schema: schema.pattern")


def test_annotation_types():
    assert violations_of({"description": 1}) == ["schema.description must be a string"]
    assert violations_of({"title": 1}) == ["schema.title must be a string"]


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        [object()],
        math.inf,
        datetime.datetime(2024, 1, 1),
        cyclic(),
        Trap(),
        {1: "non-string key"},
        {"a"},
        b"bytes",
    ],
)
@pytest.mark.parametrize("key", ["default", "examples"])
def test_annotation_must_be_lossless(key, bad):
    assert violations_of({key: bad}) == [f"schema.{key} annotation must be lossless JSON data"]


def test_other_mappings_and_tuples_are_accepted():
    schema = OrderedDict(
        type="object",
        properties=MappingProxyType({"a": {"type": "array", "items": {"type": "string"}}}),
        required=("a",),
    )
    assert violations_of(schema) == []
    assert validate_json_schema_value(schema, OrderedDict(a=("x",))) == []


def test_a_mapping_json_cannot_serialise_is_not_lossless():
    # json.dumps rejects a MappingProxyType: it is not plain JSON data, as a value or annotation.
    proxy = MappingProxyType({"a": ("x",)})
    schema = {"type": "object", "properties": {"a": {"type": "array"}}}
    assert validate_json_schema_value(schema, proxy) != []
    assert violations_of({"type": "object", "default": proxy}) == [
        "schema.default annotation must be lossless JSON data"
    ]


def test_cycles_and_reuse():
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["self"] = node
    assert violations_of(node) == ["schema.properties.self is circular"]
    leaf = {"type": "string"}
    assert violations_of({"type": "object", "properties": {"a": leaf, "b": leaf}}) == []
    assert violations_of({"oneOf": [leaf, leaf]}) == []


def test_bad_property_containers():
    assert violations_of({"type": "object", "properties": [("a", {})]}) == [
        "schema.properties must be an object of schemas"
    ]
    assert violations_of({"type": "object", "properties": Trap()}) == [
        "schema.properties must be an object of schemas"
    ]
    assert violations_of({"type": "object", "properties": {"at": datetime.date(2024, 1, 1)}}) == [
        "schema.properties.at must be a schema object"
    ]
    assert violations_of({"type": "object", "properties": {"a": {1: "x"}}}) == [
        "schema.properties.a must be a schema object"
    ]


# --- 206-207: stack safety, own-property semantics -------------------------------------------


def test_deep_one_of_asserts():
    assert violations_of(deep_one_of(5000)) == []
    bad = deep_one_of(5000)
    inner = bad
    for _ in range(4999):
        inner = inner["oneOf"][0]
    inner["oneOf"][0] = {"type": "nope"}
    found = violations_of(bad)
    assert len(found) == 1
    assert found[0].startswith("schema" + ".oneOf[0]" * 5000 + ".type must be one of")


def test_required_is_own_property_semantics():
    assert violations_of({"type": "object", "properties": {}, "required": ["toString"]}) == [
        'schema.required names "toString" which is not in properties'
    ]


# --- 208-210: scalars ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string"}, "x"),
        ({"type": "number"}, 1.5),
        ({"type": "number"}, 2),
        ({"type": "number"}, -0.0),
        ({"type": "integer"}, 2),
        ({"type": "integer"}, 2.0),
        ({"type": "boolean"}, True),
        ({"type": "null"}, None),
        ({"type": "array", "items": {"type": "string"}}, ["x"]),
        ({"type": "object"}, {"x": 1}),
    ],
)
def test_valid_roots(schema, value):
    assert validate_json_schema_value(schema, value) == []


@pytest.mark.parametrize(
    ("t", "value", "message"),
    [
        ("string", 1, '"value" must be a string'),
        ("number", "1", '"value" must be a number'),
        ("number", True, '"value" must be a number'),
        ("number", math.nan, '"value" must be a finite JSON number'),
        ("number", -math.inf, '"value" must be a finite JSON number'),
        ("integer", 1.5, '"value" must be an integer'),
        ("integer", True, '"value" must be an integer'),
        ("integer", math.inf, '"value" must be an integer'),
        ("boolean", "true", '"value" must be a boolean'),
        ("boolean", 1, '"value" must be a boolean'),
        ("null", 0, '"value" must be null'),
    ],
)
def test_scalar_type_violations(t, value, message):
    assert validate_json_schema_value({"type": t}, value) == [message]


def test_enum_and_const():
    schema = {"type": "string", "enum": ["a", "b"], "const": "a"}
    assert validate_json_schema_value(schema, "a") == []
    assert validate_json_schema_value(schema, "c") == ['"value" must be one of ["a","b"]']
    assert validate_json_schema_value(schema, "b") == ['"value" must be "a"']
    assert validate_json_schema_value({"type": "integer", "enum": [1, 2]}, 3) == [
        '"value" must be one of [1,2]'
    ]
    assert validate_json_schema_value({"type": "number", "enum": [1]}, 1.0) == []
    assert validate_json_schema_value({"type": "string", "enum": ["é"]}, "e") == [
        '"value" must be one of ["é"]'
    ]


# --- 211-214: objects and arrays -------------------------------------------------------------

FILE_SCHEMA = {
    "type": "object",
    "properties": {
        "file": {"type": "string"},
        "nested": {
            "type": "object",
            "properties": {"line": {"type": "integer"}},
            "required": ["line"],
            "additionalProperties": False,
        },
    },
    "required": ["file"],
}


def test_objects():
    assert validate_json_schema_value(FILE_SCHEMA, {"file": "a", "extra": [1]}) == []
    assert validate_json_schema_value(FILE_SCHEMA, {}) == ['missing required property "value.file"']
    assert validate_json_schema_value(FILE_SCHEMA, {"file": 1, "nested": {}}) == [
        '"value.file" must be a string',
        'missing required property "value.nested.line"',
    ]
    assert validate_json_schema_value(
        FILE_SCHEMA, {"file": "a", "nested": {"line": 1, "extra": 0}}
    ) == ['"value.nested.extra" is not a declared property (additionalProperties: false)']
    assert validate_json_schema_value(FILE_SCHEMA, "x") == ['"value" must be an object']


def test_non_json_objects():
    assert validate_json_schema_value({"type": "object"}, {"x": object()}) == [
        '"value" must be a lossless JSON object'
    ]
    assert validate_json_schema_value({"type": "object"}, {"x": {1, 2}}) == [
        '"value" must be a lossless JSON object'
    ]
    assert validate_json_schema_value({"type": "object"}, datetime.date(2024, 1, 1)) == [
        '"value" must be an object'
    ]
    assert validate_json_schema_value({"type": "object"}, {1: "x"}) == ['"value" must be an object']
    assert validate_json_schema_value({"type": "object"}, cyclic()) == [
        '"value" must be a lossless JSON object'
    ]
    assert validate_json_schema_value({"type": "object"}, [("x", 1)]) == [
        '"value" must be an object'
    ]


def test_hostile_container_is_contained():
    assert validate_json_schema_value({"type": "object"}, Trap()) == [
        '"value" must be a lossless JSON value'
    ]
    schema = {"type": "object", "properties": {"a": {"type": "object"}}}
    assert validate_json_schema_value(schema, {"a": Trap()}) == [
        '"value.a" must be a lossless JSON value'
    ]


def test_arrays():
    schema = {"type": "array", "items": {"type": "integer"}}
    assert validate_json_schema_value(schema, [1, 2]) == []
    assert validate_json_schema_value(schema, (1, 2)) == []
    assert validate_json_schema_value(schema, [1, 1.5]) == ['"value[1]" must be an integer']
    assert validate_json_schema_value(schema, "x") == ['"value" must be an array']
    assert validate_json_schema_value(schema, {1, 2}) == ['"value" must be an array']
    looped: list[Any] = []
    looped.append(looped)
    assert validate_json_schema_value({"type": "array"}, looped) == [
        '"value" must be a dense lossless JSON array'
    ]
    assert validate_json_schema_value({"type": "array"}, [math.nan]) == [
        '"value" must be a dense lossless JSON array'
    ]


def test_root_path_is_arguments():
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "config": {"type": "object", "properties": {"host": {}}, "required": ["host"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert validate_json_schema_value(schema, [], "") == ['"arguments" must be an object']
    assert validate_json_schema_value(schema, {"s": 1, "config": {}, "tags": ["a", 2]}, "") == [
        '"s" must be a string',
        'missing required property "config.host"',
        '"tags[1]" must be a string',
    ]


# --- 215-219: oneOf, {} schema, own properties, forged types ---------------------------------


def test_one_of_exactly_one():
    schema = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    assert validate_json_schema_value(schema, "x") == []
    assert validate_json_schema_value(schema, None) == [
        '"value" must match exactly one oneOf branch (matched 0)'
    ]
    overlap = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    assert validate_json_schema_value(overlap, 1) == [
        '"value" must match exactly one oneOf branch (matched 2)'
    ]
    assert validate_json_schema_value(overlap, 1.5) == []


def test_deep_one_of_validates():
    schema = deep_one_of(5000)
    assert validate_json_schema_value(schema, "leaf") == []
    assert validate_json_schema_value(schema, 42) == [
        '"value" must match exactly one oneOf branch (matched 0)'
    ]


@pytest.mark.parametrize("value", [None, True, 1, -0.0, "x", [1], {"x": None}, (1, {"y": []})])
def test_unconstrained_schema_accepts_json(value):
    assert validate_json_schema_value({}, value) == []


@pytest.mark.parametrize(
    "value",
    [object(), len, math.inf, math.nan, {"a": 1}.keys(), {1}, b"x", cyclic(), Trap(), {1: 2}],
)
def test_unconstrained_schema_rejects_non_json(value):
    assert validate_json_schema_value({"description": "any"}, value) == [
        '"value" must be a lossless JSON value'
    ]


def test_own_property_semantics():
    assert validate_json_schema_value(
        {"type": "object", "properties": {"toString": {}}, "required": ["toString"]}, {}
    ) == ['missing required property "value.toString"']
    assert validate_json_schema_value(
        {"type": "object", "additionalProperties": False}, {"toString": 1}
    ) == ['"value.toString" is not a declared property (additionalProperties: false)']
    assert (
        validate_json_schema_value(
            {"type": "object", "properties": {"constructor": {"type": "string"}}}, {}
        )
        == []
    )

    class WithAttribute(dict[str, Any]):
        oneOf = ({"type": "string"}, {"type": "string"})  # an attribute, never a schema key

    assert validate_json_schema_value(WithAttribute(type="integer"), 1) == []
    tolerated = {"type": "object", "properties": None, "required": None}
    assert validate_json_schema_value(tolerated, {"a": 1}) == []


def test_unknown_type_raises():
    with pytest.raises(JsonSchemaError, match="tuple"):
        validate_json_schema_value({"type": "tuple"}, [1])


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, b"x", math.nan, Trap(), {"file": Trap()}, [Trap()], cyclic()]
)
def test_validation_never_raises(value):
    for schema in (FILE_SCHEMA, {}, {"type": "array", "items": {}}, deep_one_of(3)):
        assert validate_json_schema_value(schema, value)


# --- property: agreement with jsonschema on the subset ---------------------------------------

KEYS = ("a", "b", "c", "d")
STRINGS = st.sampled_from(["", "a", "b", "x"]) | st.text(max_size=3)
INTEGERS = st.sampled_from([0, 1, 2, -1, 2.0]) | st.integers(-(2**70), 2**70)
NUMBERS = st.sampled_from([0, 0.0, -0.0, 1, 1.0, 1.5, -2.5]) | st.floats(
    allow_nan=False, allow_infinity=False
)
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "string": STRINGS,
    "number": INTEGERS | NUMBERS,
    "integer": INTEGERS,
    "boolean": st.booleans(),
    "null": st.none(),
}
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | INTEGERS | NUMBERS | STRINGS,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=2), children, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["description"] = draw(st.text(max_size=5))
    if draw(st.integers(0, 5)) == 0:
        out["title"] = "t"
        out["default"] = draw(JSON_VALUES)
        out["examples"] = draw(st.lists(JSON_VALUES, max_size=2))
    return out


@st.composite
def subset_schemas(draw: st.DrawFn, depth: int = 3) -> dict[str, Any]:
    kinds = ["scalar", "any"] + (["array", "object", "oneOf"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    schema: dict[str, Any]
    if kind == "scalar":
        t = draw(st.sampled_from(sorted(SCALARS)))
        schema = {"type": t}
        enum = draw(st.none() | st.lists(SCALARS[t], min_size=1, max_size=3))
        if enum is not None:
            schema["enum"] = enum
        if draw(st.integers(0, 3)) == 0:
            schema["const"] = draw(st.sampled_from(enum) if enum else SCALARS[t])
    elif kind == "any":
        schema = {}
    elif kind == "array":
        schema = {"type": "array"}
        if draw(st.booleans()):
            schema["items"] = draw(subset_schemas(depth - 1))
    elif kind == "object":
        names = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
        schema = {"type": "object"}
        if names or draw(st.booleans()):
            schema["properties"] = {name: draw(subset_schemas(depth - 1)) for name in names}
        required = [name for name in names if draw(st.booleans())]
        if required:
            schema["required"] = required
        extra = draw(st.sampled_from([None, True, False]))
        if extra is not None:
            schema["additionalProperties"] = extra
    else:
        branches = draw(st.lists(subset_schemas(depth - 1), min_size=2, max_size=3))
        schema = {"oneOf": branches}
    schema.update(draw(annotations()))
    return schema


@st.composite
def fitting_values(draw: st.DrawFn, schema: Mapping[str, Any]) -> Any:
    """A value built to fit *schema* (it may still miss, e.g. by matching two oneOf branches)."""
    if "oneOf" in schema:
        return draw(fitting_values(draw(st.sampled_from(schema["oneOf"]))))
    t = schema.get("type")
    if t is None:
        return draw(JSON_VALUES)
    if t == "array":
        items = schema.get("items")
        return draw(st.lists(fitting_values(items) if items else JSON_VALUES, max_size=3))
    if t == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        out = {
            name: draw(fitting_values(sub))
            for name, sub in props.items()
            if name in required or draw(st.booleans())
        }
        if schema.get("additionalProperties") is not False and draw(st.booleans()):
            out.setdefault(draw(st.sampled_from(KEYS)), draw(JSON_VALUES))
        return out
    literal = draw(st.integers(0, 3))  # mostly honour enum/const, sometimes ignore them
    if "const" in schema and literal:
        return schema["const"]
    if "enum" in schema and literal:
        return draw(st.sampled_from(schema["enum"]))
    return draw(SCALARS[t])


@st.composite
def schema_and_value(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    schema = draw(subset_schemas())
    value = draw(fitting_values(schema) | JSON_VALUES)
    return schema, value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_value())
def test_agrees_with_jsonschema(case):
    schema, value = case
    assert node_violations(schema) == []
    Draft202012Validator.check_schema(schema)
    ours = validate_json_schema_value(schema, value)
    assert all(isinstance(message, str) for message in ours)
    assert (ours == []) == Draft202012Validator(schema).is_valid(value), (ours, schema, value)
