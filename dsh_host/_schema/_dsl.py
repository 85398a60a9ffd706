"""The parameter DSL, its compilation to JSON Schema, and per-tool compiled validators.

Three ways to give a tool's parameters:

* the dict DSL: ``{"path": {"type": "string", "required": True, "description": "..."}}`` (or
  `Prop` values), compiled to an object schema whose ``required`` lists the required keys in
  declaration order;
* an attrs class: fields give the schema, and validated arguments are structured into an instance;
* a raw JSON Schema object (a dict whose ``"type"`` is the string ``"object"``), used as is.

Validation is compiled once per tool (`._validators`).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, final

import attrs

from .._model._errors import JsonSchemaError
from .._model._json import freeze, thaw

__all__ = ["Prop", "to_json_schema"]


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
