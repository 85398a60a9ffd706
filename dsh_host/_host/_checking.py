"""Strict checking of configuration values against their declared types, with the messages.

cattrs structures leniently (``"3"`` becomes 3); a config table is first checked here, key by
key, so a wrong type is named with its path and what was expected (`check_value`).
"""

from __future__ import annotations

import enum
import pathlib
import types
import typing
from collections.abc import Mapping, MutableSequence, Sequence, Set
from typing import Any, Literal

import attrs

__all__ = ["check_value", "describe_type", "did_you_mean", "got", "table_at", "typed_fields"]


def typed_fields(cls: type[Any]) -> list[tuple[str, Any, bool]]:
    """``(key, type, required)`` for every init field of an attrs class."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    return [
        (f.metadata.get("key", f.name), hints.get(f.name, f.type), f.default is attrs.NOTHING)
        for f in attrs.fields(cls)
        if f.init
    ]


def table_at(cls: type[Any], key: str) -> tuple[str, type[Any]]:
    """The innermost table (attrs class) that holds the dotted *key* of *cls*, and its path:
    ``("limits", Limits)`` for ``"limits.procs"``, so a message lists the keys valid where the
    mistake is, not those of the outer table. ``("", cls)`` for a key of *cls* itself."""
    path, inner = "", cls
    for part in key.split(".")[:-1]:
        field = next((tp for name, tp, _ in typed_fields(inner) if name == part), None)
        options = typing.get_args(field) if typing.get_origin(field) in _UNIONS else (field,)
        nested = [tp for tp in options if isinstance(tp, type) and attrs.has(tp)]
        if len(nested) != 1:
            break
        path, inner = _join(path, part), nested[0]
    return path, inner


_UNIONS = (typing.Union, types.UnionType)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def did_you_mean(name: str, choices: Sequence[str] | Set[str]) -> str:
    import difflib  # did-you-mean hints only: not at every start

    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_value(value: Any, tp: Any, path: str = "") -> list[tuple[str, str]]:
    """Every way *value* (plain TOML data) fails to be a *tp*: ``(key path, problem)`` pairs."""
    problems: list[tuple[str, str]] = []
    _check(value, tp, path, problems)
    return problems


_SEQUENCES = (list, tuple, set, frozenset, Sequence, MutableSequence, Set)


def _check(value: Any, tp: Any, path: str, out: list[tuple[str, str]]) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    wrong = (path, f"expected {describe_type(tp)}, got {got(value)}")
    if isinstance(tp, type) and attrs.has(tp):
        if not isinstance(value, Mapping):
            out.append(wrong)
            return
        fields = typed_fields(tp)
        names = [name for name, _, _ in fields]
        for key in value:
            if key not in names:
                out.append((_join(path, key), f"unknown key{did_you_mean(key, names)}"))
        for name, field_type, required in fields:
            if name in value:
                _check(value[name], field_type, _join(path, name), out)
            elif required:
                missing = f"required key is missing; expected {describe_type(field_type)}"
                out.append((_join(path, name), missing))
    elif origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:  # TOML has no null: an optional key is simply left out
            _check(value, members[0], path, out)
        elif all(check_value(value, arg) for arg in members):
            out.append(wrong)
    elif origin in _SEQUENCES or tp in (list, tuple, set, frozenset):
        fixed = origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis)
        if not isinstance(value, list | tuple) or (fixed and len(value) != len(args)):
            out.append(wrong)
            return
        for i, item in enumerate(value):
            if args:
                _check(item, args[i] if fixed else args[0], f"{path}[{i}]", out)
    elif origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            out.append(wrong)
            return
        for key, item in value.items():
            if len(args) == 2:
                _check(item, args[1], _join(path, str(key)), out)
    elif not _fits_scalar(value, tp):
        out.append(wrong)


def _fits_scalar(value: Any, tp: Any) -> bool:
    if tp is Any or tp is object:
        return True
    if typing.get_origin(tp) is Literal:
        return any(value == arg and type(value) is type(arg) for arg in typing.get_args(tp))
    if tp is bool:
        return type(value) is bool
    if tp is int:
        return type(value) is int
    if tp is float:
        return type(value) in (int, float)
    if tp is str:
        return type(value) is str
    if isinstance(tp, type) and issubclass(tp, pathlib.PurePath):
        return type(value) is str or isinstance(value, pathlib.PurePath)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or any(
            value == m.value and type(value) is type(m.value) for m in tp
        )
    return True  # anything else is left to cattrs and the class's own validators


_ARTICLE_TYPES: dict[Any, tuple[str, str]] = {
    str: ("a string", "strings"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "booleans"),
}


def describe_type(tp: Any, plural: bool = False) -> str:
    """What a value of *tp* looks like in TOML, in words (``a list of strings``)."""
    if tp in _ARTICLE_TYPES:
        return _ARTICLE_TYPES[tp][1 if plural else 0]
    if tp is Any or tp is object:
        return "values" if plural else "any value"
    if isinstance(tp, type) and issubclass(tp, pathlib.PurePath):
        return "path strings" if plural else "a path string"
    if isinstance(tp, type) and attrs.has(tp):
        return "tables" if plural else "a table"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    choices: list[Any] = []
    if origin is Literal:
        choices = list(args)
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        choices = [m.value for m in tp]
    if choices:
        shown = ", ".join(f'"{c}"' if isinstance(c, str) else repr(c) for c in choices)
        return f"one of {shown}"
    if origin in (typing.Union, types.UnionType):
        members = [describe_type(a, plural) for a in args if a is not type(None)]
        return " or ".join(members)
    if origin in _SEQUENCES or tp in (list, tuple, set, frozenset):
        if args and not (origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)):
            return f"lists of {describe_type(args[0], True)}" if plural else (
                f"a list of {describe_type(args[0], True)}"
            )  # fmt: skip
        return "lists" if plural else "a list"
    if origin in (dict, Mapping) or tp is dict:
        return "tables" if plural else "a table"
    return getattr(tp, "__name__", str(tp))


def got(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f'the string "{shown}"'
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return f"a {type(value).__name__}"
