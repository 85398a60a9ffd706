"""JSON values as the schema subset sees them: arrays, numbers, records, lossless data, equality.

Python mapping of JSON: objects are mappings whose keys are all ``str``; arrays are ``list`` or
``tuple``; numbers are ``int`` or finite ``float`` (never ``bool``), and an *integer* is an ``int``
or an integral finite ``float``. ``-0.0`` is an ordinary number, since `json` round-trips it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

__all__ = [
    "FITS",
    "compact",
    "is_array",
    "is_integer",
    "is_lossless",
    "is_number",
    "json_equal",
    "record",
]


def is_array(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return type(value) is list or type(value) is tuple


def is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def is_integer(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


FITS: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "number": is_number,
    "integer": is_integer,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def record(value: object) -> dict[str, Any] | None:
    """Snapshot *value* as a dict when it is a mapping with only ``str`` keys, else None.

    A mapping that raises while being read (a hostile ``__iter__`` or ``__getitem__``) is None too.
    """
    if not isinstance(value, Mapping):
        return None
    try:
        items = list(value.items())
    except Exception:
        return None
    if not all(isinstance(key, str) for key, _ in items):
        return None
    return dict(items)


def is_lossless(value: object) -> bool:
    """Whether *value* is plain JSON data that survives a `json` round trip.

    Plain means what `json.dumps` serialises as it is: ``dict`` (and its subclasses, such as
    the package's own ``FrozenDict``), ``list``/``tuple``, ``str``, ``int``, finite ``float``,
    ``bool`` and ``None``; no cycles. A ``MappingProxyType`` or another ``Mapping`` is not.
    """
    try:
        return _lossless_walk(value)
    except Exception:  # a hostile mapping: not data we can trust to serialise
        return False


def _lossless_walk(root: object) -> bool:
    ancestors: set[int] = set()
    stack: list[tuple[object, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            ancestors.discard(id(node))
            continue
        if node is None or isinstance(node, (str, int)):  # bool is an int
            continue
        if isinstance(node, float):
            if not math.isfinite(node):
                return False
            continue
        children: list[object]
        if is_array(node):
            children = list(node)
        elif isinstance(node, dict):  # json.dumps takes dicts, not every Mapping
            children = []
            for key, item in node.items():
                if not isinstance(key, str):
                    return False
                children.append(item)
        else:
            return False
        if id(node) in ancestors:
            return False
        ancestors.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children))
    return True


def json_equal(a: object, b: object) -> bool:
    """JSON equality: ``True != 1`` but ``1 == 1.0``; containers compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if is_array(a) and is_array(b):
        xs, ys = list(a), list(b)
        return len(xs) == len(ys) and all(json_equal(x, y) for x, y in zip(xs, ys, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is b


def compact(value: object) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
