"""The parameter DSL, attrs parameters, and `validate_args`."""

from __future__ import annotations

import enum
from typing import Literal

import attrs
import jsonschema
import pytest

from dsh_host import (
    JsonSchemaError,
    Prop,
    ToolExecutionResult,
    ToolRunContext,
    define_tool,
    to_json_schema,
    tool,
    validate_args,
)
from dsh_host._schema import _tool as _schema  # the names the tool definitions call


def check(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_dsl_compiles_required_in_declaration_order():
    spec = {
        "path": {"type": "string", "required": True, "description": "Absolute path"},
        "offset": {"type": "number"},
        "limit": {"type": "number", "description": "Max lines", "required": True},
    }
    assert check(to_json_schema(spec)) == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path"},
            "offset": {"type": "number"},
            "limit": {"type": "number", "description": "Max lines"},
        },
        "required": ["path", "limit"],
    }


def test_empty_dsl_has_no_required_key():
    assert check(to_json_schema({})) == {"type": "object", "properties": {}}


def test_nested_objects_arrays_enum_and_default():
    spec = {
        "config": Prop(
            type="object",
            required=True,
            properties={"host": {"type": "string", "required": True}, "port": {"type": "integer"}},
        ),
        "tags": {"type": "array", "items": {"type": "string"}},
        "servers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"host": {"type": "string", "required": True}},
            },
        },
        "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
        "bare": {"type": "array"},
    }
    assert check(to_json_schema(spec)) == {
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
                "required": ["host"],
            },
            "tags": {"type": "array", "items": {"type": "string"}},
            "servers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"host": {"type": "string"}},
                    "required": ["host"],
                },
            },
            "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
            "bare": {"type": "array"},
        },
        "required": ["config"],
    }


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        ({"path": {"type": "string", "required": "yes"}}, "parameters.path.required must be True"),
        ({"path": {"type": "str"}}, "parameters.path.type must be one of string, number"),
        (
            {"path": {"type": "string", "minLength": 1}},
            "parameters.path.minLength is not supported",
        ),
        (
            {"path": {"type": "number", "enum": ["a"]}},
            "parameters.path.enum must be a non-empty list",
        ),
        ({"path": {"type": "string", "enum": []}}, "parameters.path.enum must be a non-empty list"),
        (
            {"path": {"type": "string", "items": {"type": "string"}}},
            "parameters.path.items is only allowed",
        ),
        ({"path": "string"}, "parameters.path must be a dict"),
        (
            {"a": {"type": "object", "properties": {"b": {"type": "nope"}}}},
            "parameters.a.properties.b.type must be one of",
        ),
        (
            {"a": {"type": "array", "items": {"type": "string", "required": True}}},
            "parameters.a.items.required",
        ),
        ({"a": {"type": "string", "default": float("nan")}}, "parameters.a.default is nan"),
    ],
)
def test_author_errors_name_the_path(spec, violation):
    with pytest.raises(JsonSchemaError) as info:
        to_json_schema(spec)
    assert any(v.startswith(violation) for v in info.value.violations), info.value.violations


def test_author_errors_are_all_reported_at_once():
    with pytest.raises(JsonSchemaError) as info:
        to_json_schema({"a": {"type": "x"}, "b": {"type": "string", "required": 1}})
    assert len(info.value.violations) == 2
    assert info.value.code == "UNSUPPORTED_SCHEMA"


def test_raw_json_schema_is_used_as_is():
    raw = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "required": ["n"],
    }
    assert to_json_schema(raw) == raw
    t = define_tool(name="t", description="", parameters=raw, execute=lambda a: "x")
    assert validate_args(t, {"n": 0}) == ['"n": 0 is less than the minimum of 1']
    assert validate_args(t, {}) == ['missing required property "n"']


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@attrs.frozen
class Inner:
    host: str
    port: int = 80


@attrs.frozen
class Args:
    path: str = attrs.field(metadata={"description": "File to read"})
    limit: int = 100
    color: Color = Color.RED
    mode: Literal["a", "b"] = "a"
    tags: tuple[str, ...] = ()
    inner: Inner | None = None
    ratio: float | None = None


def test_attrs_class_gives_a_schema_that_passes_the_metaschema():
    schema = check(to_json_schema(Args))
    assert schema["required"] == ["path"]
    assert schema["properties"]["path"] == {"type": "string", "description": "File to read"}
    assert schema["properties"]["limit"] == {"type": "integer", "default": 100}
    assert schema["properties"]["color"] == {"type": "string", "enum": ["red", "green"]}
    assert schema["properties"]["mode"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    assert schema["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
    }
    # A null default is a model-visible annotation like any other (seed: keep null defaults).
    assert schema["properties"]["ratio"] == {"type": ["number", "null"], "default": None}


def test_a_null_default_is_kept_and_an_unset_one_is_not():
    compiled = to_json_schema(
        {
            "a": Prop(type="string", default=None),
            "b": Prop(type="string"),
            "c": {"type": "string", "default": None},
        }
    )
    assert compiled["properties"] == {
        "a": {"type": "string", "default": None},
        "b": {"type": "string"},
        "c": {"type": "string", "default": None},
    }


async def test_an_output_schema_violation_names_the_output(make_host):
    tool = define_tool(
        name="t", description="", parameters={}, execute=lambda args: "a string",
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )  # fmt: skip
    result = await make_host(tools=[tool]).call("t", {})
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert '"output" must be an object' in result.text
    assert "arguments" not in result.text


async def test_attrs_arguments_are_structured_into_the_class(make_host):
    seen = []

    @tool
    async def read(args: Args, ctx: ToolRunContext) -> str:
        "Read a file."
        seen.append(args)
        return args.path

    assert read.name == "read"
    assert read.description == "Read a file."
    host = make_host(tools=[read])
    result = await host.call(
        "read", {"path": "a.txt", "color": "green", "tags": ["x"], "inner": {"host": "h"}}
    )
    assert result.text == "a.txt"
    assert seen == [Args(path="a.txt", color=Color.GREEN, tags=("x",), inner=Inner("h"))]
    bad = await host.call("read", {"path": 1, "limit": "x"})
    assert bad.error.message == (
        'invalid arguments: "path" must be a string; "limit" must be an integer'
    )


def test_tool_decorator_requires_parameters_or_an_attrs_annotation():
    with pytest.raises(JsonSchemaError, match="annotate the first argument"):

        @tool
        def bare(args, ctx):
            return ""


@pytest.mark.parametrize(
    ("arguments", "violations"),
    [
        ({"path": "/tmp"}, []),
        (
            {"path": "/tmp", "extra": 1},
            [
                '"extra" is not a declared property (declared: b, bag, color, config, i, n, path, '
                "servers, tags)"
            ],
        ),
        ({}, ['missing required property "path"']),
        (None, ['"arguments" must be an object; got null']),
        (
            "nope",
            [
                '"arguments" must be a JSON object; got a string that is not one (not valid '
                "JSON: Expecting value: line 1 column 1 (char 0))"
            ],
        ),
        ([], ['"arguments" must be an object; got an array']),
        ({"path": 1}, ['"path" must be a string']),
        ({"path": "p", "n": "x"}, ['"n" must be a number']),
        (
            {"path": "p", "n": float("inf")},
            ["arguments.n is inf, which is not a finite JSON number"],
        ),
        ({"path": "p", "i": 1.5, "b": "x"}, ['"i" must be an integer', '"b" must be a boolean']),
        ({"path": "p", "i": 2.0}, []),
        ({"path": "p", "b": 1}, ['"b" must be a boolean']),
        ({"path": "p", "i": True}, ['"i" must be an integer']),
        ({"path": "p", "color": "blue"}, ['"color" must be one of ["red","green"]']),
        ({"path": "p", "tags": ["a", 2]}, ['"tags[1]" must be a string']),
        ({"path": "p", "tags": "nope"}, ['"tags" must be an array']),
        (
            {"path": "p", "config": {"port": 9}, "bag": 5},
            ['missing required property "config.host"', '"bag" must be an object'],
        ),
        (
            {"path": "p", "servers": [{"host": "a"}, {}]},
            ['missing required property "servers[1].host"'],
        ),
    ],
)
def test_validate_args_reports_every_violation_in_words_a_model_can_act_on(arguments, violations):
    t = define_tool(
        name="t",
        description="",
        parameters={
            "path": {"type": "string", "required": True},
            "n": {"type": "number"},
            "i": {"type": "integer"},
            "b": {"type": "boolean"},
            "color": {"type": "string", "enum": ["red", "green"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "config": {
                "type": "object",
                "properties": {"host": {"type": "string", "required": True}},
            },
            "bag": {"type": "object"},
            "servers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"host": {"type": "string", "required": True}},
                },
            },
        },
        execute=lambda args: "",
    )
    assert validate_args(t, arguments) == violations


async def test_validators_are_compiled_once_per_tool_not_per_call(make_host, monkeypatch):
    t = define_tool(
        name="t", description="", parameters={"x": {"type": "string"}}, execute=lambda a: "ok"
    )
    host = make_host(tools=[t])
    compiled = []
    monkeypatch.setattr(_schema, "compile_parameters", lambda s: compiled.append(s))
    monkeypatch.setattr(_schema, "to_json_schema", lambda s: compiled.append(s))
    for _ in range(3):
        assert (await host.call("t", {"x": "y"})).text == "ok"
    assert compiled == []


def test_fast_validator_agrees_with_jsonschema_on_the_dsl_subset():
    schema = to_json_schema(
        {
            "a": {"type": "integer", "required": True},
            "b": {"type": "array", "items": {"type": "number"}},
        }
    )
    fast = _schema.compile_parameters(schema)
    slow = jsonschema.Draft202012Validator(schema)
    for value in [
        {"a": 1},
        {"a": 1.0},
        {"a": True},
        {"a": 1, "b": [1, 2.5]},
        {"a": 1, "b": [True]},
        {},
        [],
    ]:
        assert (fast(value) == []) == slow.is_valid(value), value


def test_define_tool_rejects_bad_timeouts():
    for bad in (0, -5, float("inf"), float("nan"), True, "10"):
        with pytest.raises(ValueError, match="timeout_ms must be a positive finite number"):
            define_tool(
                name="t", description="", parameters={}, execute=lambda a: "", timeout_ms=bad
            )
    assert (
        define_tool(
            name="t", description="", parameters={}, execute=lambda a: "", timeout_ms=30000
        ).timeout_ms
        == 30000
    )


def test_paths_and_claude_names_are_frozen_and_checked():
    t = define_tool(
        name="x",
        description="",
        parameters={"p": {"type": "string"}},
        execute=lambda a: "",
        paths={"p": "read"},
        claude_name="X",
        claude_keys={"p": "file_path"},
    )
    assert t.paths == {"p": "read"}
    assert t.claude_keys == {"p": "file_path"}
    assert t.claude_name == "X"
    with pytest.raises(TypeError):
        t.paths["q"] = "write"
    with pytest.raises(ValueError, match="must be 'read' or 'write'"):
        define_tool(
            name="x", description="", parameters={}, execute=lambda a: "", paths={"p": "rw"}
        )
    with pytest.raises(ValueError, match="non-empty string"):
        define_tool(
            name="x", description="", parameters={}, execute=lambda a: "", claude_keys={"p": ""}
        )


def test_decision_detail_is_in_json():
    r = ToolExecutionResult(content="x", decided_by="p", decision_detail="rule a")
    assert r.to_json()["decision_detail"] == "rule a"


# -- the hot path's predicate agrees with the messages --------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dsh_host._model._json import freeze  # noqa: E402
from dsh_host._schema._validators import compile_accepts, compile_parameters  # noqa: E402

_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "flag": {"type": "boolean"},
            "none": {"type": "null"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "inner": {
                "type": "object",
                "properties": {"k": {"type": "integer", "enum": [1, 2]}},
                "required": ["k"],
                "additionalProperties": False,
            },
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"a": {"type": "string"}}},  # open: extra keys allowed
    {"type": "array", "items": {"type": "number"}},
]

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1.0, 2.0, "a", "b", "text"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["text", "n", "x", "flag", "none", "mode", "tags", "inner", "k", "a", "z"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@pytest.mark.parametrize("schema", _SCHEMAS, ids=["closed", "open", "array"])
@settings(max_examples=400, deadline=None)
@given(value=_json)
def test_the_fast_predicate_accepts_exactly_what_has_no_violation(schema, value):
    accepts = compile_accepts(schema)
    validate = compile_parameters(schema)
    assert accepts is not None
    frozen = freeze(value)
    assert accepts(frozen) == (validate(frozen) == [])


def test_a_schema_outside_the_subset_has_no_fast_predicate():
    assert compile_accepts({"type": "string", "minLength": 2}) is None


def test_a_definition_made_from_another_shares_its_compiled_parameters() -> None:
    """``attrs.evolve`` (a tool under another name: ``dsh hook``'s stand-ins) keeps the very
    parameters object, so the validators are not compiled again (a cold start, issue 27);
    equal parameters in another object are compiled for themselves (``1 == True``)."""
    import attrs

    from dsh_host import FrozenDict, define_tool

    first = define_tool(
        name="first", description="d", execute=lambda a: a,
        parameters={"n": {"type": "integer", "required": True}},
    )  # fmt: skip
    second = attrs.evolve(first, name="second")
    assert second.parameters is first.parameters
    assert (second.validate, second.accepts, second.snapshot) == (
        first.validate, first.accepts, first.snapshot,
    )  # fmt: skip
    assert second.validate is first.validate
    flag = define_tool(
        name="flag", description="d", execute=lambda a: a,
        parameters={"type": "object", "properties": {"n": {"const": True}}},
    )  # fmt: skip
    number = define_tool(
        name="number", description="d", execute=lambda a: a,
        parameters={"type": "object", "properties": {"n": {"const": 1}}},
    )  # fmt: skip
    assert flag.parameters == number.parameters  # equal, yet not the same schema
    assert flag.validate(FrozenDict({"n": True})) == []
    assert number.validate(FrozenDict({"n": True})) != []
    assert number.validate(FrozenDict({"n": 1})) == []
