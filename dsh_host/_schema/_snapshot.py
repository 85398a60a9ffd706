"""One pass over a call's arguments that both freezes and validates them (`compile_snapshot`).

A tool whose parameters fit the compiled subset (`._validators`) gets, once, a function from
the caller's raw arguments to their frozen copy, made in the same walk that checks them against
the schema: what ``freeze`` then ``accepts`` would do in two walks. It answers ``None`` whenever
it is not sure (invalid arguments, a value that is not plain JSON, a shape it does not compile):
the pipeline then freezes and validates as before, and those name the problem. So it never
accepts what ``accepts(freeze(value))`` would refuse, and what it returns equals ``freeze(value)``
(`tests/dsh_host/test_snapshot.py` holds it to both).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._model._json import INT_BOUND, FrozenDict, frozen_from
from ._snapcode import generate_snapshot, writable
from ._validators import _compile_ok, _fits_subset

__all__ = ["compile_snapshot"]

_NO: Final[Any] = object()
"""What a node's function answers for a value it does not take (``None`` is JSON's null)."""

_Snap = Callable[[Any], Any]


def compile_snapshot(schema: Mapping[str, Any]) -> Callable[[Any], Any] | None:
    """``snap(raw) -> frozen | None`` for an object *schema* in the compiled subset, else ``None``.

    ``snap`` returns the frozen copy of *raw* when *raw* is valid (it is then exactly
    ``freeze(raw)``, and ``accepts`` holds for it), or ``None`` when it cannot say so.
    """
    if not _fits_subset(schema) or schema.get("type") != "object" or schema.get("enum"):
        return None
    if not writable(schema):  # too long to write out: the closure walk
        return _object(schema, None)  # an object is never ``None``: "not sure" at the top
    # written out as source for this schema (`._snapcode`), on the closures below for the rest
    return generate_snapshot(schema, _node, _object, _NO)


def _node(node: Mapping[str, Any]) -> _Snap:
    kind = node["type"]
    if node.get("enum"):
        ok = _compile_ok(node)
        return lambda value: value if _plain_scalar(value) and ok(value) else _NO
    if kind == "object":
        return _object(node, _NO)
    if kind == "array":
        return _array(node)
    return _SCALARS[kind]


def _plain_scalar(value: Any) -> bool:
    t = type(value)
    return t is str or t is bool or value is None or (t is int and -INT_BOUND < value < INT_BOUND)


def _string(value: Any) -> Any:
    return value if type(value) is str else _NO


def _boolean(value: Any) -> Any:
    return value if type(value) is bool else _NO


def _null(value: Any) -> Any:
    return value if value is None else _NO


def _integer(value: Any) -> Any:
    t = type(value)
    if t is int:
        return value if -INT_BOUND < value < INT_BOUND else _NO
    if t is float and math.isfinite(value) and value.is_integer():
        return value
    return _NO


def _number(value: Any) -> Any:
    t = type(value)
    if t is int:
        return value if -INT_BOUND < value < INT_BOUND else _NO
    if t is float and math.isfinite(value):
        return value
    return _NO


_SCALARS: Final[dict[str, _Snap]] = {
    "string": _string,
    "boolean": _boolean,
    "null": _null,
    "integer": _integer,
    "number": _number,
}
_EXACT: Final[dict[str, type]] = {"string": str, "boolean": bool, "integer": int, "number": float}
"""Per type, the marker `_object` checks inline (``float``: a finite float or a bounded int)."""


def _any(value: Any) -> Any:
    """An item no schema constrains: a JSON scalar, as it is. An array or object there is left
    to ``freeze`` (its depth counts from the root of the arguments, not from here)."""
    t = type(value)
    if t is float:
        return value if math.isfinite(value) else _NO
    return value if _plain_scalar(value) else _NO


def _array(node: Mapping[str, Any]) -> _Snap:
    items = node.get("items")
    if items is not None and items["type"] in ("string", "boolean") and not items.get("enum"):
        return _exact_array(str if items["type"] == "string" else bool)
    item = _node(items) if items is not None else _any

    def snap_array(value: Any) -> Any:
        if type(value) is not list:
            return _NO  # a tuple (perhaps holding lists) is left to `freeze`
        out = []
        for element in value:
            frozen = item(element)
            if frozen is _NO:
                return _NO
            out.append(frozen)
        return tuple(out)

    return snap_array


def _exact_array(kind: type) -> _Snap:
    """An array of strings (or booleans) with nothing more to check: its items as they are."""

    def snap_exact_array(value: Any) -> Any:
        if type(value) is not list:
            return _NO  # a tuple (perhaps holding lists) is left to `freeze`
        for element in value:
            if type(element) is not kind:
                return _NO
        return tuple(value)

    return snap_exact_array


def _property_checks(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Per declared key: the marker of the exact type it must have (`_EXACT`), else its
    function."""
    checks: dict[str, Any] = {
        key: _EXACT.get(sub["type"]) if not sub.get("enum") else None
        for key, sub in properties.items()
    }
    for key, sub in properties.items():
        if checks[key] is None:
            checks[key] = _node(sub)
    return checks


def _object(node: Mapping[str, Any], fail: Any) -> _Snap:
    """An object node: *fail* is what it answers when not sure (`_NO`; ``None`` at the top)."""
    properties = node.get("properties", {})
    checks = _property_checks(properties)
    required = tuple(node.get("required", ()))
    closed = node.get("additionalProperties") is False
    find, ok, bound, isfinite = checks.get, _compile_ok(node), INT_BOUND, math.isfinite
    nests = any(sub["type"] in ("array", "object") for sub in properties.values())  # copied

    def snap_object(value: Any) -> Any:
        if type(value) is not dict:
            return value if type(value) is FrozenDict and ok(value) else fail
        for key in required:
            if key not in value:
                return fail
        out: dict[str, Any] | None = {} if nests else None
        frozen: Any
        for key, item in value.items():
            check = find(key)
            if type(key) is not str:
                return fail
            if check is str or check is bool:
                if type(item) is not check:
                    return fail
                frozen = item
            elif check is int and type(item) is int:
                if not -bound < item < bound:
                    return fail
                frozen = item
            elif check is float:  # `_number`, inline
                kind = type(item)
                if kind is float:
                    if not isfinite(item):
                        return fail
                elif kind is not int or not -bound < item < bound:
                    return fail
                frozen = item
            else:
                if check is None and closed:
                    return fail
                frozen = (_any if check is None else _integer if check is int else check)(item)
                if frozen is _NO:
                    return fail
            if out is not None:  # built from the first key when `nests` (values are copied)
                out[key] = frozen
            elif frozen is not item:  # a nested value was copied: from here on, build anew
                out = {}
                for done, kept in value.items():
                    if done == key:
                        break
                    out[done] = kept
                out[key] = frozen
        if not value:
            return frozen_from(value)
        made = _new_dict(FrozenDict)  # `frozen_from`, inline: the hot path
        _fill_dict(made, value if out is None else out)
        return made

    return snap_object


_new_dict: Any = dict.__new__
_fill_dict: Any = dict.__init__
