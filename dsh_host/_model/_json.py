"""Lossless JSON snapshots, deep-frozen.

A *JSON value* here is ``None``, ``bool``, ``int``, a finite ``float``, ``str``, a list or tuple of JSON
values, or a mapping with ``str`` keys and JSON values. `freeze` copies such a value once into an
immutable form (`FrozenDict` for objects, ``tuple`` for arrays) that `json.dumps` still serialises
as is; anything else (NaN, a set, bytes, a cycle, an object) raises `NotJsonError` naming the path.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = [
    "INT_BOUND",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "FrozenDict",
    "JsonInputError",
    "NotJsonError",
    "canonical_json",
    "freeze",
    "frozen_from",
    "parse_json",
    "thaw",
]

MAX_DEPTH = 512
"""How deeply arrays and objects from a model or a client may nest."""
MAX_INT_DIGITS = 4300
"""How many digits an integer from a model or a client may have (Python's own default bound)."""


_INT_BOUND = 10**MAX_INT_DIGITS
INT_BOUND = _INT_BOUND
"""An integer of at most `MAX_INT_DIGITS` digits lies strictly between ``-INT_BOUND`` and it."""


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # What a caller builds is frozen through and through, as `freeze` makes them, so that
        # `freeze` may trust any FrozenDict it meets (`FrozenDict({"a": [1]})["a"]` is a tuple).
        if args or kwargs:
            dict.__init__(self, freeze(dict(*args, **kwargs)))

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


_new_dict: Any = dict.__new__
_fill_dict: Any = dict.__init__


def _made(frozen: dict[str, Any]) -> Any:
    """A FrozenDict of values this module already froze (no second walk through `__init__`)."""
    made = _new_dict(FrozenDict)
    _fill_dict(made, frozen)
    return made


def frozen_from(plain: dict[str, Any]) -> FrozenDict:
    """A `FrozenDict` of *plain*, whose keys are ``str`` and whose values are frozen already
    (the caller checked: a compiled snapshot); `FrozenDict`'s own ``__init__`` would walk them
    again."""
    return _made(plain) if plain else _EMPTY


def freeze(value: object, path: str = "value") -> Any:
    """Return a deep-frozen, lossless JSON copy of *value*, or raise `NotJsonError`.

    Already-frozen objects produced by this function are returned as they are. Arrays and
    objects may nest at most `MAX_DEPTH` deep, as in `parse_json`; the walk is iterative (no
    `RecursionError` whatever the depth) and linear in the size of *value*.
    """
    t = type(value)
    if t is FrozenDict:
        return value  # made by this function: already frozen, through and through
    if t is dict or t is list or t is tuple:
        try:
            return _fast(value, 1)
        except _Irregular:
            pass  # the careful walk below finds and names the problem
    leaf, frozen = _leaf(value, path, [])
    if leaf:
        return frozen
    keys: list[str | int] = []  # where the walk is, for messages
    stack: list[_Frame] = []
    ancestors: set[int] = set()
    _push(value, stack, ancestors, path, keys)
    while True:
        frame = stack[-1]
        for key, item in frame.items:
            if frame.out_map is not None and type(key) is not str:
                if not isinstance(key, str):
                    raise NotJsonError(
                        _where(path, keys),
                        f"has key {key!r}, but JSON object keys must be strings",
                    )
                key = str.__str__(key)
            keys.append(key)
            leaf, frozen = _leaf(item, path, keys)
            if not leaf:
                _push(item, stack, ancestors, path, keys)
                break
            keys.pop()
            if frame.out_map is not None:
                frame.out_map[key] = frozen
            else:
                frame.out_list.append(frozen)
        else:
            stack.pop()
            ancestors.discard(frame.ident)
            if frame.out_map is not None:
                done: Any = _made(frame.out_map) if frame.out_map else _EMPTY
            else:
                done = tuple(frame.out_list)
            if not stack:
                return done
            key = keys.pop()
            parent = stack[-1]
            if parent.out_map is not None:
                parent.out_map[key] = done  # type: ignore[index]
            else:
                parent.out_list.append(done)


class _Irregular(Exception):
    """`_fast` met something it does not handle; the careful walk takes over."""


_FAST_DEPTH = 48


def _fast_item(item: Any, depth: int) -> Any:
    t = type(item)
    if t is str or t is bool or item is None:
        return item
    if t is int:
        if -_INT_BOUND < item < _INT_BOUND:
            return item
        raise _Irregular
    if t is float:
        if math.isfinite(item):
            return item
        raise _Irregular
    if (t is dict or t is list or t is tuple) and depth < _FAST_DEPTH:
        return _fast(item, depth + 1)
    if t is FrozenDict:
        return item
    raise _Irregular


def _fast(value: Any, depth: int) -> Any:
    """The common case, quickly: plain dicts, lists and scalars, shallow, no cycles."""
    if type(value) is dict:
        for key, item in value.items():  # flat strings, booleans, nulls and integers: one copy
            t = type(item)
            if type(key) is not str or not (
                t is str
                or t is bool
                or item is None
                or (t is int and -_INT_BOUND < item < _INT_BOUND)
            ):
                break
        else:
            if not value:
                return _EMPTY
            made = _new_dict(FrozenDict)  # `_made`, inline: the hot path
            _fill_dict(made, value)
            return made
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Irregular
            out[key] = _fast_item(item, depth)
        return _made(out) if out else _EMPTY
    return tuple([_fast_item(item, depth) for item in value])


class _Frame:
    """One array or object being frozen: what is left of it, and what was made so far."""

    __slots__ = ("ident", "items", "out_list", "out_map")

    def __init__(self, items: Any, out_map: dict[str, Any] | None, ident: int) -> None:
        self.items = items
        self.out_map = out_map
        self.out_list: list[Any] = []
        self.ident = ident


def _where(path: str, keys: list[str | int]) -> str:
    return path + "".join(f"[{k}]" if type(k) is int else f".{k}" for k in keys)


def _push(
    value: Any, stack: list[_Frame], ancestors: set[int], path: str, keys: list[str | int]
) -> None:
    ident = id(value)
    if ident in ancestors:
        raise NotJsonError(_where(path, keys), "contains itself (a cycle is not JSON)")
    if len(stack) >= MAX_DEPTH:
        raise NotJsonError(
            _where(path, keys[:8]) + ("..." if len(keys) > 8 else ""),
            f"is nested more than {MAX_DEPTH} levels deep",
        )
    ancestors.add(ident)
    if isinstance(value, Mapping):
        stack.append(_Frame(iter(value.items()), {}, ident))
    else:
        stack.append(_Frame(enumerate(value), None, ident))


def _leaf(value: object, path: str, keys: list[str | int]) -> tuple[bool, Any]:
    """``(True, frozen)`` for a JSON scalar (or a frozen object); ``(False, None)`` for an array
    or object still to walk; `NotJsonError` for anything else."""
    t = type(value)
    if t is str or t is bool or value is None or t is FrozenDict:
        return True, value
    if t is int:
        if -_INT_BOUND < value < _INT_BOUND:
            return True, value
        raise NotJsonError(
            _where(path, keys), f"is an integer of more than {MAX_INT_DIGITS} digits"
        )
    if t is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return True, value
        raise NotJsonError(_where(path, keys), f"is {value!r}, which is not a finite JSON number")
    if t is list or t is tuple or isinstance(value, Mapping):
        return False, None
    if isinstance(value, bool):
        return True, bool(value)
    if isinstance(value, int):
        return _leaf(int.__int__(value), path, keys)
    if isinstance(value, str):
        return True, str.__str__(value)
    if isinstance(value, float):
        return _leaf(float(value), path, keys)
    raise NotJsonError(_where(path, keys), f"is a {t.__name__}, which is not a JSON value")


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


def _brackets(text: str | bytes) -> int:
    """How many arrays and objects *text* could open (an upper bound: strings count too)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def parse_json(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON from a model or a client, strictly.

    Refuses what `json.loads` lets through silently or chokes on: a duplicate object key (which
    value would policy see?), ``NaN``/``Infinity``, a number too large to be finite, an integer
    of more than `MAX_INT_DIGITS` digits, and nesting deeper than *max_depth*. Every other valid
    JSON value passes, lone surrogates (``"\\ud800"``) included. Time is linear in the size.

    Raises:
        JsonInputError: the text is not JSON, or is refused; the message says which and where.
    """
    # Text that may nest deeper than allowed is parsed with the collector paused: `json.loads`
    # recurses to the interpreter's limit before it gives up, and a collection there would
    # run other code's finalizers (a sandbox's private tmp removed) with no stack left to run
    # them on. Short text cannot nest that deep, and its bracket count says so at C speed.
    paused = len(text) > max_depth and _brackets(text) > max_depth and gc.isenabled()
    if paused:
        gc.disable()
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
    finally:
        if paused:
            gc.enable()
    if _depth_exceeds(value, max_depth):
        raise JsonInputError(f"JSON nested more than {max_depth} levels deep")
    return value
