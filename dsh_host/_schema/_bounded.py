"""JSON Schema keywords whose checks cost little whatever value a model sends.

`jsonschema` matches ``pattern`` and ``patternProperties`` with Python's `re`, which
backtracks: ``^(a+)+$`` against 28 characters blocks the event loop for seconds, and no
cancel scope can interrupt it. Every pattern a schema holds is compiled here with RE2
(`google-re2`, imported only when a schema has a pattern), whose matching is linear in the
text; a pattern RE2 cannot compile (a backreference, a lookaround) makes the schema
unsupported. ``uniqueItems`` compares items pairwise in `jsonschema`; here each item's
canonical JSON goes into a set (linear).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._model._errors import JsonSchemaError

__all__ = ["bounded_keywords", "first_duplicate"]

_VALUES = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose value is data, not a schema: a ``pattern`` key inside is no pattern."""
_NAMES = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose value maps names to schemas: a name there (``enum``) is no keyword."""


def _schemas(node: Any) -> Iterator[Mapping[Any, Any]]:
    """Every schema object in *node*, read by keyword position: the values of a name map
    (`_NAMES`) are schemas whatever their names, a data keyword's value (`_VALUES`) is none."""
    todo: list[tuple[Any, bool]] = [(node, False)]
    while todo:
        node, names = todo.pop()
        if isinstance(node, list):
            todo.extend((item, False) for item in node)
        elif isinstance(node, Mapping):
            if names:
                todo.extend((value, False) for value in node.values())
                continue
            yield node
            todo.extend((value, key in _NAMES) for key, value in node.items() if key not in _VALUES)


def _patterns(node: Any) -> Iterator[str]:
    """Every regular expression *node* (a plain schema) uses: ``pattern`` values and
    ``patternProperties`` keys at any depth (``$ref`` is local: the whole document holds them)."""
    for schema in _schemas(node):
        value = schema.get("pattern")
        if isinstance(value, str):
            yield value
        names = schema.get("patternProperties")
        if isinstance(names, Mapping):
            yield from (k for k in names if isinstance(k, str))


def _compile(patterns: set[str], what: str) -> dict[str, Any]:
    import re2  # type: ignore[import-untyped]  # google-re2 ships no stubs

    options = re2.Options()
    options.log_errors = False
    compiled = {}
    for pattern in sorted(patterns):
        try:
            compiled[pattern] = re2.compile(pattern, options=options)
        except re2.error as exc:
            arg = exc.args[0] if exc.args else exc
            why = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
            raise JsonSchemaError(
                [
                    f"{what}: the pattern {pattern!r} cannot be checked in bounded time "
                    f"(RE2, a linear-time engine, refuses it: {why}); backreferences and "
                    "lookaround are not supported"
                ]
            ) from None
    return compiled


def _canonical(value: Any) -> Any:
    """*value* with every integral float as an int (``1.0`` equals ``1`` in JSON Schema; a
    boolean stays a boolean: ``true`` is not ``1``)."""
    if type(value) is float and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def first_duplicate(items: Any) -> tuple[int, int] | None:
    """The indexes of the first two equal items (JSON Schema equality), or ``None``."""
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        key = json.dumps(_canonical(item), sort_keys=True, separators=(",", ":"))
        if key in seen:
            return seen[key], index
        seen[key] = index
    return None


def bounded_keywords(schema: Any, what: str) -> tuple[dict[str, Callable[..., Any]], Any]:
    """The ``pattern``, ``patternProperties``, ``additionalProperties`` and ``uniqueItems``
    implementations for `jsonschema.validators.extend`, and a ``search(pattern, text)``;
    raises `JsonSchemaError` for a pattern RE2 cannot compile."""
    from jsonschema import ValidationError

    patterns = set(_patterns(schema))
    if (
        patterns
        and _has_key(schema, "unevaluatedProperties")
        and _has_key(schema, "patternProperties")
    ):
        message = "unevaluatedProperties with patternProperties is not supported"
        raise JsonSchemaError([f"{what}: {message} (it would match the patterns with re)"])
    compiled = _compile(patterns, what) if patterns else {}

    def search(pattern: str, text: str) -> bool:
        return compiled[pattern].search(text) is not None

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in value.items():
            for k, v in instance.items():
                if search(patrn, k):
                    yield from validator.descend(v, subschema, path=k, schema_path=patrn)

    def additional(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        declared, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        extras = [
            k for k in instance if k not in declared and not any(search(p, k) for p in patterns)
        ]
        if validator.is_type(value, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], value, path=extra)
        elif not value and extras:
            shown = ", ".join(repr(k) for k in sorted(extras))
            yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")

    def unique(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if value and validator.is_type(instance, "array"):
            pair = first_duplicate(instance)
            if pair is not None:
                yield ValidationError(f"has non-unique elements (items {pair[0]} and {pair[1]})")

    keywords = {"pattern": pattern, "patternProperties": pattern_properties}
    keywords |= {"additionalProperties": additional, "uniqueItems": unique}
    return keywords, search


def _has_key(node: Any, name: str) -> bool:
    """Whether a schema object in *node* uses the keyword *name* (`_schemas`)."""
    return any(name in schema for schema in _schemas(node))
