"""The raw JSON Schema subset dsh supports, and validation of values against it.

The subset is what structured outputs and tool parameters may use: the keywords ``type``,
``oneOf``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``enum`` and
``const``, plus the annotations ``description``, ``title``, ``default`` and ``examples``.
`assert_supported_json_schema` rejects anything outside it, reporting every violation at once;
`validate_json_schema_value` checks a value against an asserted schema and agrees with a
Draft 2020-12 validator on that subset.

How JSON values map to Python, and the predicates on them, are in `._jsonvalues`.

Both walks are iterative (a stack of generators), so 5000-deep ``oneOf`` nesting is fine.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from .._model._errors import JsonSchemaError
from ._jsonvalues import FITS, compact, is_array, is_lossless, json_equal, record

__all__ = ["assert_supported_json_schema", "validate_json_schema_value"]

_CONSTRAINTS = ("properties", "required", "additionalProperties", "items", "enum", "const")
_ANNOTATIONS = frozenset({"description", "title", "default", "examples"})
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_ALLOWED_ON: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items"}),
    **dict.fromkeys(
        ("string", "number", "integer", "boolean", "null"), frozenset({"enum", "const"})
    ),
}
_SUBSET = "type/oneOf/properties/required/additionalProperties/items/enum/const + annotations"


# --------------------------------------------------------------------------------------------------
# assert_supported_json_schema

_Visit = Generator[tuple[object, str], None, None]


def assert_supported_json_schema(schema: object) -> None:
    """Check that *schema* is a structured-output schema: an object-rooted node of the subset.

    Args:
        schema: A raw JSON Schema (dicts, lists, scalars) to check; paths are rooted at ``schema``.

    Raises:
        JsonSchemaError: When anything is outside the subset; ``violations`` lists every problem
            in walk order (e.g. ``schema.anyOf is not a supported keyword (...)``), starting with
            a root that is not ``{"type": "object", ...}``.
    """
    violations: list[str] = []
    rec = record(schema)
    if rec is not None and rec.get("type") != "object":
        violations.append(
            'schema must be rooted at an object node ({"type": "object", ...}); '
            f"its type is {compact(rec.get('type'))}"
        )
    violations.extend(node_violations(schema))
    if violations:
        raise JsonSchemaError(violations)


def node_violations(schema: object, path: str = "schema") -> list[str]:
    """Every way *schema* steps outside the subset, as a node (any root type), in walk order."""
    violations: list[str] = []
    ancestors: set[int] = set()
    stack: list[_Visit] = [_check_node(schema, path, violations, ancestors)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        else:
            stack.append(_check_node(child[0], child[1], violations, ancestors))
    return violations


def _check_node(node: object, p: str, out: list[str], ancestors: set[int]) -> _Visit:
    """Check one schema node, yielding each child ``(schema, path)`` to be checked in walk order."""
    rec = record(node)
    if rec is None:
        out.append(f"{p} must be a schema object")
        return
    if id(node) in ancestors:
        out.append(f"{p} is circular")
        return
    ancestors.add(id(node))
    try:
        yield from _check_record(rec, p, out)
    finally:
        ancestors.discard(id(node))


def _check_record(rec: dict[str, Any], p: str, out: list[str]) -> _Visit:
    for key, val in rec.items():
        if key in _ANNOTATIONS:
            if not is_lossless(val):
                out.append(f"{p}.{key} annotation must be lossless JSON data")
        elif key != "type" and key != "oneOf" and key not in _CONSTRAINTS:
            out.append(f"{p}.{key} is not a supported keyword (subset: {_SUBSET})")
    for key in ("description", "title"):
        if key in rec and not isinstance(rec[key], str):
            out.append(f"{p}.{key} must be a string")
    present = [key for key in _CONSTRAINTS if key in rec]
    if "type" in rec and "oneOf" in rec:
        out.append(f"{p} cannot declare both type and oneOf")
        return
    if "oneOf" in rec:
        branches = rec["oneOf"]
        if not is_array(branches) or len(branches) < 2:
            out.append(f"{p}.oneOf must be an array of at least two schemas")
        else:
            for i, branch in enumerate(branches):
                yield branch, f"{p}.oneOf[{i}]"
        out.extend(f"{p}.{key} is not supported beside oneOf" for key in present)
        return
    if "type" not in rec:
        out.extend(f"{p}.{key} requires type or oneOf" for key in present)
        return
    t = rec["type"]
    if not isinstance(t, str) or t not in _TYPES:
        if is_array(t):
            out.append(f"{p}.type must be a single type string (type arrays are not supported)")
        else:
            out.append(f"{p}.type must be one of {'/'.join(_TYPES)}")
        return
    out.extend(
        f'{p}.{key} is not supported on type "{t}"' for key in present if key not in _ALLOWED_ON[t]
    )
    if t == "object":
        yield from _check_object(rec, p, out)
    elif t == "array":
        if "items" in rec:
            yield rec["items"], f"{p}.items"
    else:
        _check_scalar(rec, t, p, out)


def _check_object(rec: dict[str, Any], p: str, out: list[str]) -> _Visit:
    """`_check_record` for an ``object`` node: its properties, required names, and
    ``additionalProperties``."""
    props: dict[str, Any] = {}
    if "properties" in rec:
        snapshot = record(rec["properties"])
        if snapshot is None:
            out.append(f"{p}.properties must be an object of schemas")
        else:
            props = snapshot
        for key, sub in props.items():
            yield sub, f"{p}.properties.{key}"
    if "required" in rec:
        names = rec["required"]
        if not is_array(names) or not all(isinstance(n, str) for n in names):
            out.append(f"{p}.required must be an array of strings")
        else:
            out.extend(
                f'{p}.required names "{n}" which is not in properties'
                for n in names
                if n not in props
            )
    if "additionalProperties" in rec and not isinstance(rec["additionalProperties"], bool):
        out.append(f"{p}.additionalProperties must be a boolean")


def _check_scalar(rec: dict[str, Any], t: str, p: str, out: list[str]) -> None:
    """`_check_record` for a scalar node: its ``enum`` and ``const``."""
    fits = FITS[t]
    raw_enum = rec.get("enum")
    enum = raw_enum if is_array(raw_enum) and all(fits(x) for x in raw_enum) else ()
    if "enum" in rec and not enum:
        out.append(f"{p}.enum must be a non-empty array of {t} values")
    if "const" in rec:
        const = rec["const"]
        if not fits(const):
            out.append(f"{p}.const must be a {t} value")
        elif enum and not any(json_equal(const, x) for x in enum):
            out.append(f"{p}.const must be one of {p}.enum when both are declared")


# --------------------------------------------------------------------------------------------------
# validate_json_schema_value

_EXPECTED = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "null": "null",
}
_Eval = Generator[tuple[Mapping[str, Any], object, str], list[str] | None, list[str]]


def validate_json_schema_value(
    schema: Mapping[str, Any], value: object, path: str = "value"
) -> list[str]:
    """Validate *value* against an asserted subset *schema*.

    Args:
        schema: A schema that passed `assert_supported_json_schema`.
        value: Any Python object; whatever is not lossless JSON is reported, never raised.
        path: Display path of the root; ``""`` shows as ``arguments`` and gives bare child keys.

    Returns:
        The violations in walk order, e.g. ``'"value.file" must be a string'``; empty when valid.

    Raises:
        JsonSchemaError: Only for an unasserted schema whose ``type`` is unknown, or whose nodes
            are not mappings.
    """
    stack: list[tuple[_Eval, str]] = [(_eval(schema, value, path), path)]
    sent: list[str] | None = None
    while True:
        frame, frame_path = stack[-1]
        try:
            child = frame.send(sent)
        except StopIteration as stop:
            result: list[str] = stop.value
        except JsonSchemaError:
            raise
        except Exception:  # a hostile container: contained at the frame that read it
            result = [f'"{frame_path or "arguments"}" must be a lossless JSON value']
        else:
            stack.append((_eval(*child), child[2]))
            sent = None
            continue
        stack.pop()
        if not stack:
            return result
        sent = result


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _eval(schema: Mapping[str, Any], value: object, path: str) -> _Eval:
    """Validate one node, yielding ``(schema, value, path)`` sub-checks and taking their results."""
    if not isinstance(schema, Mapping):
        raise JsonSchemaError([f"the schema for {path or 'arguments'} is not a schema object"])
    q = f'"{path or "arguments"}"'
    branches = schema.get("oneOf")
    if branches is not None:
        matched = 0
        for branch in branches:
            if not (yield branch, value, path):
                matched += 1
        if matched == 1:
            return []
        return [f"{q} must match exactly one oneOf branch (matched {matched})"]
    t = schema.get("type")
    if t is None:
        return [] if is_lossless(value) else [f"{q} must be a lossless JSON value"]
    if t == "object":
        return (yield from _eval_object(schema, value, path, q))
    if t == "array":
        if not is_array(value):
            return [f"{q} must be an array"]
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return [] if is_lossless(value) else [f"{q} must be a dense lossless JSON array"]
        out: list[str] = []
        for i, item in enumerate(list(value)):
            out.extend((yield items, item, f"{path}[{i}]") or ())
        return out
    fits = FITS.get(t) if isinstance(t, str) else None
    if fits is None:
        raise JsonSchemaError([f"unreachable variant in JsonSchemaType: {compact(t)}"])
    if not fits(value):
        if t == "number" and isinstance(value, float):
            return [f"{q} must be a finite JSON number"]
        return [f"{q} must be {_EXPECTED[t]}"]
    enum = schema.get("enum")
    if is_array(enum) and not any(json_equal(value, x) for x in enum):
        return [f"{q} must be one of {compact(enum)}"]
    if "const" in schema and not json_equal(value, schema["const"]):
        return [f"{q} must be {compact(schema['const'])}"]
    return []


def _eval_object(schema: Mapping[str, Any], value: object, path: str, q: str) -> _Eval:
    """`_eval` for an ``object`` node: required, declared and undeclared properties."""
    if not isinstance(value, dict):  # plain JSON data: json.dumps takes no other Mapping
        if isinstance(value, Mapping):
            return [f"{q} must be a lossless JSON value"]
        return [f"{q} must be an object"]
    obj = dict(value.items())  # a hostile mapping raises here and is contained
    if not all(isinstance(key, str) for key in obj):
        return [f"{q} must be an object"]
    props = schema.get("properties")
    declared: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    out = [
        f'missing required property "{_child(path, name)}"'
        for name in (required if is_array(required) else ())
        if name not in obj
    ]
    for key, sub in declared.items():
        if key in obj:
            out.extend((yield sub, obj[key], _child(path, key)) or ())
    if schema.get("additionalProperties") is False:
        out.extend(
            f'"{_child(path, key)}" is not a declared property (additionalProperties: false)'
            for key in obj
            if key not in declared
        )
    if not out and not all(is_lossless(v) for k, v in obj.items() if k not in declared):
        out.append(f"{q} must be a lossless JSON object")
    return out
