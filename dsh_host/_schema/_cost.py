"""The most work validating one value against a JSON Schema can take, bounded when it compiles.

`jsonschema` follows each ``$ref`` anew every time it meets it: a 1 KB schema whose
definitions each apply the next twice (``allOf`` of two ``$ref``) takes 2^N steps per call.
`check_cost` walks the schema the way a validation does, expanding every ``$ref`` where it
applies, and refuses a schema whose expanded size is over `MAX_EXPANDED` nodes. A ``$ref`` back
to a schema under way (recursion, as a tree's schema) is not expanded again: it costs work per
level of the value. It is refused when it does not descend into the value (a loop on one value)
or when it can apply the same schema twice to one value (two such ``$ref`` whose value paths
overlap: work exponential in the value's depth). A ``$ref`` dsh cannot follow (not a local
JSON pointer, ``$dynamicRef``, a nested ``$id``) is refused with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from .._model._errors import JsonSchemaError

__all__ = ["MAX_EXPANDED", "check_cost"]

MAX_EXPANDED = 10_000
"""The most schema nodes one validation may visit, each ``$ref`` expanded where it applies."""

_NAMED = {"properties": "p", "patternProperties": "p*", "dependentSchemas": "", "dependencies": ""}
"""Keywords holding a schema per name, and the step into the value it takes (``""``: none)."""
_ONE = {"additionalProperties": "p*", "unevaluatedProperties": "p*", "propertyNames": "k"}
_ONE |= {"items": "i", "additionalItems": "i", "unevaluatedItems": "i", "contains": "i"}
_ONE |= {"not": "", "if": "", "then": "", "else": ""}
_MANY = {"allOf": "", "anyOf": "", "oneOf": "", "prefixItems": "i", "items": "i"}

Step = tuple[str, str]


def check_cost(schema: Any, what: str = "parameters") -> None:
    """Raise `JsonSchemaError` if validating a value against *schema* (plain, thawed) can take
    more than `MAX_EXPANDED` steps, or more per level of the value than the schema's size."""
    _Walk(schema, what).run()


def _overlap(a: tuple[Step, ...], b: tuple[Step, ...]) -> bool:
    """Whether one value path may be a prefix of the other (``*``: any name or index)."""
    return all(
        x[0].rstrip("*") == y[0].rstrip("*") and (x[1] == y[1] or "*" in (x[1], y[1]))
        for x, y in zip(a, b, strict=False)
    )


class _Walk:
    def __init__(self, root: Any, what: str) -> None:
        self.root, self.what, self.count = root, what, 0
        self.entered: dict[int, tuple[int, list[tuple[Step, ...]]]] = {}
        self.nested_id = _has_nested_id(root)

    def refuse(self, why: str) -> JsonSchemaError:
        return JsonSchemaError([f"{self.what}: {why}"])

    def run(self) -> None:
        self.entered[id(self.root)] = (0, [])
        self.walk(self.root, ())

    def walk(self, node: Any, path: tuple[Step, ...]) -> None:
        self.count += 1
        if self.count > MAX_EXPANDED:
            raise self.refuse(
                f"validating one value could visit over {MAX_EXPANDED} schema nodes "
                "(each $ref expanded where it applies); make the schema smaller"
            )
        if not isinstance(node, Mapping):
            return
        if "$dynamicRef" in node or "$recursiveRef" in node:
            raise self.refuse("$dynamicRef and $recursiveRef are not supported")
        ref = node.get("$ref")
        if isinstance(ref, str):
            self.follow(ref, path)
        for key, value in node.items():
            if key in _NAMED and isinstance(value, Mapping):
                for name, sub in value.items():
                    step = _NAMED[key]
                    self.walk(
                        sub, (*path, (step, "*" if "*" in step else str(name))) if step else path
                    )
            elif key in _MANY and isinstance(value, list):
                for sub in value:
                    self.walk(sub, (*path, (_MANY[key], "*")) if _MANY[key] else path)
            elif key in _ONE:
                self.walk(value, (*path, (_ONE[key], "*")) if _ONE[key] else path)

    def follow(self, ref: str, path: tuple[Step, ...]) -> None:
        target = self.resolve(ref)
        key = id(target)
        if key in self.entered:  # recursion: applied lazily, per level of the value
            depth, seen = self.entered[key]
            rel = path[depth:]
            if not rel:
                raise self.refuse(f"$ref {ref!r} loops on one value without descending into it")
            if any(_overlap(rel, other) for other in seen):
                raise self.refuse(
                    f"$ref {ref!r} can apply the same schema twice to one value "
                    "(work exponential in the value's depth)"
                )
            seen.append(rel)
            return
        self.entered[key] = (len(path), [])
        try:
            self.walk(target, path)
        finally:
            del self.entered[key]

    def resolve(self, ref: str) -> Any:
        if self.nested_id or not (ref == "#" or ref.startswith("#/")):
            raise self.refuse(f"$ref {ref!r}: only local JSON pointers (#/...) are supported")
        node = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise self.refuse(f"$ref {ref!r} points to nothing")
        return node


def _has_nested_id(root: Any) -> bool:
    """Whether a schema below *root* has an ``$id`` (a base its ``$ref`` would resolve from)."""
    todo = [v for v in root.values()] if isinstance(root, Mapping) else []
    while todo:
        node = todo.pop()
        if isinstance(node, Mapping):
            if "$id" in node:
                return True
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return False
