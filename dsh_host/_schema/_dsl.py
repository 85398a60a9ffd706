"""The parameter DSL, its compilation to JSON Schema, and per-tool compiled validators.

Three ways to give a tool's parameters:

* the dict DSL: ``{"path": {"type": "string", "required": True, "description": "..."}}`` (or
  `Prop` values), compiled to an object schema whose ``required`` lists the required keys in
  declaration order;
* an attrs class: fields give the schema, and validated arguments are structured into an instance;
* a raw JSON Schema object (a dict whose ``"type"`` is the string ``"object"``), used as is.

Validation is compiled once per tool. Schemas inside the subset dsh compiles itself (what the DSL
produces) get a closure-based validator; anything else falls back to `jsonschema`, compiled once
too. Both report every violation, in the same words.
"""

from __future__ import annotations

import difflib
import enum
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, final

import attrs

from .._model._errors import JsonSchemaError
from .._model._json import FrozenDict, JsonInputError, freeze, parse_json, thaw

__all__ = ["Prop", "compile_parameters", "to_json_schema"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""`Prop.default` when the property has no default (``None`` is the JSON default ``null``)."""

_DSL_TYPES = ("string", "number", "integer", "boolean", "object", "array")
_PROP_KEYS = ("type", "required", "description", "enum", "default", "properties", "items")


@final
@attrs.frozen(kw_only=True)
class Prop:
    """One property of the dict DSL; a plain dict with the same keys works too.

    Example::

        parameters = {"path": Prop(type="string", required=True, description="File to read")}
    """

    type: Literal["string", "number", "integer", "boolean", "object", "array"]
    required: bool = False
    description: str | None = None
    enum: Sequence[str] | None = None
    default: Any = UNSET
    """A model-visible annotation; ``None`` is a real default (``null``). Unset by default."""
    properties: Mapping[str, Prop | Mapping[str, Any]] | None = None
    items: Prop | Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The equivalent DSL dict (keys left at their defaults are omitted)."""
        out: dict[str, Any] = {"type": self.type}
        if self.required:
            out["required"] = True
        for key in ("description", "enum", "properties", "items"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.default is not UNSET:
            out["default"] = self.default
        return out


# -- DSL and attrs compilation -----------------------------------------------------------------


def to_json_schema(parameters: Any) -> dict[str, Any]:
    """Compile DSL parameters, an attrs class, or a raw object schema to a JSON Schema dict.

    Raises `JsonSchemaError` naming the path of every mistake (``parameters.path.required must
    be True``).
    """
    if isinstance(parameters, type) and attrs.has(parameters):
        return _attrs_schema(parameters, "parameters")
    if isinstance(parameters, Mapping) and isinstance(parameters.get("type"), str):
        if parameters["type"] != "object":
            raise JsonSchemaError(
                ['parameters.type must be "object": tool parameters are an object']
            )
        try:
            return typing.cast(dict[str, Any], thaw(freeze(parameters, "parameters")))
        except ValueError as exc:
            raise JsonSchemaError([str(exc)]) from None
    if isinstance(parameters, Mapping):
        errors: list[str] = []
        schema = _compile_props(parameters, "parameters", errors)
        if errors:
            raise JsonSchemaError(errors)
        return schema
    raise JsonSchemaError(
        [
            "parameters must be a dict of properties (the DSL), an attrs class, "
            f"or a JSON Schema object, not {type(parameters).__name__}"
        ]
    )


def _compile_props(props: Mapping[Any, Any], path: str, errors: list[str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in props.items():
        if not isinstance(name, str):
            errors.append(f"{path} has a non-string property name {name!r}")
            continue
        node_path = f"{path}.{name}"
        if isinstance(spec, Prop):
            spec = spec.to_dict()
        if not isinstance(spec, Mapping):
            errors.append(f"{node_path} must be a dict like {{'type': 'string'}}, not {spec!r}")
            continue
        if "required" in spec:
            if spec["required"] is True:
                required.append(name)
            elif spec["required"] is not False:
                errors.append(f"{node_path}.required must be True")
        properties[name] = _compile_node(spec, node_path, errors)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _compile_node(spec: Mapping[str, Any], path: str, errors: list[str]) -> dict[str, Any]:
    for key in spec:
        if key not in _PROP_KEYS:
            errors.append(
                f"{path}.{key} is not supported by the schema DSL (use {', '.join(_PROP_KEYS)})"
            )
    kind = spec.get("type")
    if kind not in _DSL_TYPES:
        errors.append(f"{path}.type must be one of {', '.join(_DSL_TYPES)}, not {kind!r}")
        return {}
    node: dict[str, Any] = {"type": kind}
    description = spec.get("description")
    if description is not None:
        if isinstance(description, str):
            node["description"] = description
        else:
            errors.append(f"{path}.description must be a string")
    enum_values = spec.get("enum")
    if enum_values is not None:
        if (
            kind != "string"
            or isinstance(enum_values, str)
            or not isinstance(enum_values, Sequence)
            or not enum_values
            or not all(isinstance(v, str) for v in enum_values)
        ):
            errors.append(f"{path}.enum must be a non-empty list of strings on a string property")
        else:
            node["enum"] = list(enum_values)
    if "default" in spec:
        try:
            node["default"] = thaw(freeze(spec["default"], f"{path}.default"))
        except ValueError as exc:
            errors.append(str(exc))
    if spec.get("properties") is not None:
        if kind != "object":
            errors.append(f"{path}.properties is only allowed on an object property")
        elif not isinstance(spec["properties"], Mapping):
            errors.append(f"{path}.properties must be a dict of properties")
        else:
            nested = _compile_props(spec["properties"], f"{path}.properties", errors)
            node["properties"] = nested["properties"]
            if "required" in nested:
                node["required"] = nested["required"]
    if spec.get("items") is not None:
        items = spec["items"]
        if isinstance(items, Prop):
            items = items.to_dict()
        if kind != "array":
            errors.append(f"{path}.items is only allowed on an array property")
        elif not isinstance(items, Mapping):
            errors.append(f"{path}.items must be a property dict like {{'type': 'string'}}")
        else:
            if "required" in items:
                errors.append(f"{path}.items.required is not allowed (items are not properties)")
            node["items"] = _compile_node(
                {k: v for k, v in items.items() if k != "required"}, f"{path}.items", errors
            )
    return node


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _attrs_schema(cls: type, path: str) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    errors: list[str] = []
    for field in attrs.fields(cls):
        name = field.alias or field.name
        node = _type_schema(hints.get(field.name, field.type), f"{path}.{name}", errors)
        description = field.metadata.get("description")
        if description is not None:
            node["description"] = str(description)
        if "enum" in field.metadata:
            node["enum"] = list(field.metadata["enum"])
        if field.default is attrs.NOTHING:
            required.append(name)
        elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            try:
                default = thaw(freeze(field.default))
            except ValueError:
                pass
            else:
                node["default"] = default
        properties[name] = node
    if errors:
        raise JsonSchemaError(errors)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _type_schema(tp: Any, path: str, errors: list[str]) -> dict[str, Any]:
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is Any:
        return {}
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_schema(tp, path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        if all(isinstance(v, str) for v in values):
            return {"type": "string", "enum": values}
        return {"enum": values}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        if all(isinstance(v, str) for v in args):
            return {"type": "string", "enum": list(args)}
        return {"enum": list(args)}
    if origin in (list, tuple, Sequence, set, frozenset) or tp in (list, tuple):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], f"{path}[]", errors)}
        if origin is not tuple and args:
            return {"type": "array", "items": _type_schema(args[0], f"{path}[]", errors)}
        return {"type": "array"}
    if origin in (dict, Mapping) or tp is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and len(args) == 2:
            inner = _type_schema(members[0], path, errors)
            if set(inner) == {"type"}:
                return {"type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": [_type_schema(a, path, errors) for a in args]}
    errors.append(f"{path} has type {tp!r}, which dsh cannot express as JSON Schema")
    return {}


# -- validators ----------------------------------------------------------------------------------

Validator: TypeAlias = Callable[[Any], list[str]]
_Check: TypeAlias = Callable[[Any, str, list[str]], None]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _undeclared(path: str, key: str, declared: frozenset[str]) -> str:
    message = f'"{_join(path, key)}" is not a declared property'
    close = difflib.get_close_matches(key, sorted(declared), n=1, cutoff=0.6)
    if close:
        return f'{message}; did you mean "{_join(path, close[0])}"?'
    if declared:
        return f"{message} (declared: {', '.join(sorted(declared))})"
    return f"{message} (this tool takes no arguments)"


def _compact(value: Any) -> str:
    return json.dumps(thaw(value), separators=(",", ":"), ensure_ascii=False)


def _is_int(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v) and v.is_integer())


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


_TYPE_TESTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: type(v) is str, "a string"),
    "integer": (_is_int, "an integer"),
    "number": (_is_number, "a number"),
    "boolean": (lambda v: type(v) is bool, "a boolean"),
    "null": (lambda v: v is None, "null"),
    "object": (lambda v: isinstance(v, Mapping), "an object"),
    "array": (lambda v: type(v) is tuple or type(v) is list, "an array"),
}
_SUBSET_KEYS = frozenset(
    {"type", "properties", "required", "items", "enum", "description", "default", "title"}
    | {"additionalProperties", "examples"}
)


def _fits_subset(node: Any) -> bool:
    if not isinstance(node, Mapping) or not set(node) <= _SUBSET_KEYS:
        return False
    kind = node.get("type")
    if kind not in _TYPE_TESTS:
        return False
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], bool):
        return False
    props = node.get("properties", {})
    items = node.get("items")
    return (
        isinstance(props, Mapping)
        and all(_fits_subset(p) for p in props.values())
        and (items is None or _fits_subset(items))
    )


def _compile_check(node: Mapping[str, Any], root: str) -> _Check:
    test, noun = _TYPE_TESTS[node["type"]]
    enum_values = node.get("enum")
    if node["type"] == "object":
        props = [(k, _compile_check(v, root)) for k, v in node.get("properties", {}).items()]
        required = tuple(node.get("required", ()))
        closed = node.get("additionalProperties") is False
        declared = frozenset(node.get("properties", {}))

        def check_object(value: Any, path: str, errors: list[str]) -> None:
            if not isinstance(value, Mapping):
                errors.append(
                    not_an_object(value, root) if not path else f'"{path}" must be an object'
                )
                return
            for key in required:
                if key not in value:
                    errors.append(f'missing required property "{_join(path, key)}"')
            for key, check in props:
                if key in value:
                    check(value[key], _join(path, key), errors)
            if closed:
                for key in value:
                    if key not in declared:
                        errors.append(_undeclared(path, key, declared))

        return check_object
    if node["type"] == "array":
        item_check = _compile_check(node["items"], root) if "items" in node else None

        def check_array(value: Any, path: str, errors: list[str]) -> None:
            if type(value) is not tuple and type(value) is not list:
                errors.append(f'"{(path or root)}" must be an array')
                return
            if item_check is not None:
                for i, item in enumerate(value):
                    item_check(item, f"{path}[{i}]", errors)

        return check_array
    allowed = frozenset(enum_values) if enum_values else None
    shown_enum = _compact(enum_values) if enum_values else ""

    def check_scalar(value: Any, path: str, errors: list[str]) -> None:
        if not test(value):
            if node["type"] == "number" and type(value) is float:
                errors.append(f'"{(path or root)}" must be a finite JSON number')
            else:
                errors.append(f'"{(path or root)}" must be {noun}')
        elif allowed is not None and value not in allowed:
            errors.append(f'"{(path or root)}" must be one of {shown_enum}')

    return check_scalar


_EXACT: dict[str, type] = {"string": str, "boolean": bool, "null": type(None)}


def compile_accepts(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """A predicate saying whether a frozen value is valid for *schema*, with no message built.

    ``None`` when *schema* is outside the subset compiled here (jsonschema validates it then).
    """
    return _compile_ok(schema) if _fits_subset(schema) else None


def _compile_ok(node: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Whether a value passes `_compile_check` for *node*, with no message built (the hot path).

    It accepts exactly what the check finds no violation in; `test_schema` holds the two to that.
    """
    test = _TYPE_TESTS[node["type"]][0]
    if node["type"] == "object":
        # Per declared key: the exact type it must have (string, boolean, null), else a test.
        checks: dict[str, Any] = {
            k: _EXACT.get(v["type"]) if not v.get("enum") else None
            for k, v in node.get("properties", {}).items()
        }
        for k, v in node.get("properties", {}).items():
            if checks[k] is None:
                checks[k] = _compile_ok(v)
        required = tuple(node.get("required", ()))
        closed = node.get("additionalProperties") is False
        find = checks.get

        def ok_object(value: Any) -> bool:
            if type(value) is not FrozenDict and not isinstance(value, Mapping):
                return False
            for key in required:
                if key not in value:
                    return False
            for key, item in value.items():
                check = find(key)
                if check is None:
                    if closed:
                        return False
                elif type(check) is type:
                    if type(item) is not check:
                        return False
                elif not check(item):
                    return False
            return True

        return ok_object
    if node["type"] == "array":
        item_ok = _compile_ok(node["items"]) if "items" in node else None

        def ok_array(value: Any) -> bool:
            if type(value) is not tuple and type(value) is not list:
                return False
            return item_ok is None or all(item_ok(item) for item in value)

        return ok_array
    enum_values = node.get("enum")
    if not enum_values:
        return test
    allowed = frozenset(enum_values)
    return lambda value: test(value) and value in allowed


def not_an_object(value: Any, where: str) -> str:
    """What is wrong with *value* where an object was expected, exactly (a JSON text that is
    not JSON says why it is not)."""
    if isinstance(value, str) and where == "arguments":  # a model's arguments, as JSON text
        try:
            parsed = parse_json(value)
        except JsonInputError as exc:
            return f'"{where}" must be a JSON object; got a string that is not one ({exc})'
        return f'"{where}" must be an object; got a string whose JSON is {_json_kind(parsed)}'
    return f'"{where}" must be an object; got {_json_kind(value)}'


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list | tuple) else f"a {type(value).__name__}"


def compile_parameters(schema: Mapping[str, Any], root: str = "arguments") -> Validator:
    """Compile *schema* once into a function from a value to the list of violations.

    *root* names the whole value in messages (``"arguments" must be an object``; a tool's
    output schema uses ``"output"``).
    """
    if _fits_subset(schema):
        check = _compile_check(schema, root)
        ok = _compile_ok(schema)  # the same predicate as `compile_accepts`

        def validate(arguments: Any) -> list[str]:
            errors: list[str] = []
            if not ok(arguments):  # messages are built only for values that fail
                check(arguments, "", errors)
            return errors

        return validate
    return _jsonschema_validator(schema, root)


def _jsonschema_validator(schema: Mapping[str, Any], root: str) -> Validator:
    import jsonschema

    schema = thaw(schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        what = "parameters" if root == "arguments" else f"the {root} schema"
        raise JsonSchemaError([f"{what} is not a valid JSON Schema: {exc.message}"]) from None
    checker = cls.TYPE_CHECKER.redefine(
        "array", lambda _checker, value: isinstance(value, list | tuple)
    )
    validator = jsonschema.validators.extend(cls, type_checker=checker)(schema)

    def validate(arguments: Any) -> list[str]:
        messages = []
        for error in validator.iter_errors(arguments):
            path = ""
            for part in error.path:
                path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
            if error.validator == "required":
                missing = error.message.split("'")[1] if "'" in error.message else error.message
                messages.append(f'missing required property "{_join(path, missing)}"')
            elif error.validator == "type":
                kinds = error.validator_value
                kinds = [kinds] if isinstance(kinds, str) else list(kinds)
                nouns = " or ".join(_TYPE_TESTS[k][1] if k in _TYPE_TESTS else k for k in kinds)
                if not path and kinds == ["object"]:
                    messages.append(not_an_object(error.instance, root))
                else:
                    messages.append(f'"{(path or root)}" must be {nouns}')
            elif error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
                declared = frozenset(error.schema.get("properties", {}))
                patterns = error.schema.get("patternProperties", {})
                for key in error.instance:
                    if key not in declared and not any(re.search(p, key) for p in patterns):
                        messages.append(_undeclared(path, key, declared))
            elif error.validator == "enum":
                messages.append(
                    f'"{(path or root)}" must be one of {_compact(error.validator_value)}'
                )
            else:
                messages.append(f'"{(path or root)}": {error.message}')
        return messages

    return validate
