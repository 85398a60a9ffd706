"""Per-tool compiled validators: a closure-based one for the subset dsh compiles itself, else
`jsonschema` compiled once; both report every violation, in the same words.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from .._model._errors import JsonSchemaError
from .._model._json import FrozenDict, JsonInputError, parse_json, thaw
from ._bounded import bounded_keywords
from ._cost import check_cost

__all__ = ["Validator", "compile_accepts", "compile_parameters"]

Validator: TypeAlias = Callable[[Any], list[str]]
_Check: TypeAlias = Callable[[Any, str, list[str]], None]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _undeclared(path: str, key: str, declared: frozenset[str]) -> str:
    import difflib  # an error message's hint only: not imported with dsh_host

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
    what = "parameters" if root == "arguments" else f"the {root} schema"
    check_cost(schema, what)
    keywords, search = bounded_keywords(schema, what)  # RE2 patterns, linear uniqueItems
    checker = cls.TYPE_CHECKER.redefine(
        "array", lambda _checker, value: isinstance(value, list | tuple)
    )
    validator = jsonschema.validators.extend(cls, keywords, type_checker=checker)(schema)

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
                    if key not in declared and not any(search(p, key) for p in patterns):
                        messages.append(_undeclared(path, key, declared))
            elif error.validator == "enum":
                messages.append(
                    f'"{(path or root)}" must be one of {_compact(error.validator_value)}'
                )
            else:
                messages.append(f'"{(path or root)}": {error.message}')
        return messages

    return validate
