"""Lossless JSON snapshots, deep-frozen.

A *JSON value* here is ``None``, ``bool``, ``int``, a finite ``float``, ``str``, a list or tuple of JSON
values, or a mapping with ``str`` keys and JSON values. `freeze` copies such a value once into an
immutable form (`FrozenDict` for objects, ``tuple`` for arrays) that `json.dumps` still serialises
as is; anything else (NaN, a set, bytes, a cycle, an object) raises `NotJsonError` naming the path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "FrozenDict",
    "JsonInputError",
    "NotJsonError",
    "canonical_json",
    "freeze",
    "parse_json",
    "thaw",
]

MAX_DEPTH = 512
"""How deeply arrays and objects from a model or a client may nest."""
MAX_INT_DIGITS = 4300
"""How many digits an integer from a model or a client may have (Python's own default bound)."""


class NotJsonError(ValueError):
    """A value is not losslessly JSON-serialisable; ``path`` says where."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path} {problem}")


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        "a frozen JSON object cannot be changed; copy it with dsh_host thaw() or dict()"
    )


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every mutation; `json.dumps` serialises it like any dict."""

    __slots__ = ()

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable
    __ior__ = _immutable

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self


_EMPTY = FrozenDict()


def freeze(value: object, path: str = "value") -> Any:
    """Return a deep-frozen, lossless JSON copy of *value*, or raise `NotJsonError`.

    Already-frozen objects produced by this function are returned as they are.
    """
    try:
        return _freeze(value, path, set())
    except RecursionError:
        raise NotJsonError(path, "is nested too deeply to be JSON") from None


def _freeze(value: object, path: str, ancestors: set[int]) -> Any:
    t = type(value)
    if t is str or t is bool or t is int or value is None:
        return value
    if t is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return value
        raise NotJsonError(path, f"is {value!r}, which is not a finite JSON number")
    if t is FrozenDict:
        return value
    if isinstance(value, Mapping):
        ident = id(value)
        if ident in ancestors:
            raise NotJsonError(path, "contains itself (a cycle is not JSON)")
        ancestors.add(ident)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                if not isinstance(key, str):
                    raise NotJsonError(
                        path, f"has key {key!r}, but JSON object keys must be strings"
                    )
                key = str.__str__(key)
            out[key] = _freeze(item, f"{path}.{key}", ancestors)
        ancestors.discard(ident)
        return FrozenDict(out) if out else _EMPTY
    if t is list or t is tuple:
        ident = id(value)
        if ident in ancestors:
            raise NotJsonError(path, "contains itself (a cycle is not JSON)")
        ancestors.add(ident)
        sequence: list[Any] | tuple[Any, ...] = value  # type: ignore[assignment]
        items = tuple(_freeze(item, f"{path}[{i}]", ancestors) for i, item in enumerate(sequence))
        ancestors.discard(ident)
        return items
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        return _freeze(float(value), path, ancestors)
    raise NotJsonError(path, f"is a {t.__name__}, which is not a JSON value")


def thaw(value: Any) -> Any:
    """Return a plain, mutable copy of a frozen JSON value (dicts and lists)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the same text for equal values (used for fingerprints)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class JsonInputError(ValueError):
    """JSON text from a model or a client was refused; the message says why, in plain words."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonInputError(f"duplicate object key {json.dumps(key)}: give each key once")
            seen.add(key)
    return out


def _constant(name: str) -> NoReturn:
    raise JsonInputError(f"{name} is not a JSON value")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError(f"the number {text[:40]} is too large for a JSON number here")
    return value


def _integer(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise JsonInputError(
            f"an integer has {digits} digits; at most {MAX_INT_DIGITS} are accepted"
        )
    return int(text)


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_json(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON from a model or a client, strictly.

    Refuses what `json.loads` lets through silently or chokes on: a duplicate object key (which
    value would policy see?), ``NaN``/``Infinity``, a number too large to be finite, an integer
    of more than `MAX_INT_DIGITS` digits, and nesting deeper than *max_depth*. Every other valid
    JSON value passes, lone surrogates (``"\\ud800"``) included. Time is linear in the size.

    Raises:
        JsonInputError: the text is not JSON, or is refused; the message says which and where.
    """
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_constant,
            parse_float=_number,
            parse_int=_integer,
        )
    except JsonInputError:
        raise
    except RecursionError:
        raise JsonInputError(f"JSON nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"not valid JSON: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:  # bytes that are not UTF-8
        raise JsonInputError(f"not valid JSON: {exc}") from None
    if _depth_exceeds(value, max_depth):
        raise JsonInputError(f"JSON nested more than {max_depth} levels deep")
    return value
