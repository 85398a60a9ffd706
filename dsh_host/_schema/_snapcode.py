"""A tool's argument snapshot written out as Python source for its schema (`generate_snapshot`).

`._snapshot` walks any object schema of the compiled subset with closures: per key of the
arguments, a lookup of its check and a chain of tests. This module writes, once per tool, one
function per object node that goes once over the arguments' items, matches each key against the
declared ones (``if k == "path": ... elif k == "tags": ...``) and checks its value inline, so a
call pays no lookup and no call per key. Whatever it does not write out (an ``enum``, an array of other items) it calls the
closure `._snapshot` compiled for that node; arguments with an undeclared key of an open object
go to the whole closure walk. Its answers are those of the closure walk: the frozen copy, equal
to ``freeze(raw)`` in keys, key order, values and types, or "not sure" (`tests/dsh_host/schema/
test_snapcode.py` holds it to that, and to `jsonschema`'s verdict, on hostile inputs).

The source holds no name or value of the schema but the property names, written as ``repr``
literals; everything else it uses is passed in its namespace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._attrs_code import compiled
from .._model._json import INT_BOUND, FrozenDict, frozen_from
from ._validators import _compile_ok as compile_ok

__all__ = ["MAX_WRITTEN", "generate_snapshot", "writable"]

_MISSING: Final[Any] = object()
_EXACT_TYPES: Final = {"string": "str", "boolean": "bool"}


class _Writer:
    """Collects the generated functions and the namespace they run in."""

    def __init__(self, node: Callable[[Any], Any], whole: Callable[[Any, Any], Any]) -> None:
        self.node = node  # a node's closure snapshot (`._snapshot._node`)
        self.whole = whole  # an object node's closure walk, given what it answers when unsure
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "MISSING": _MISSING,
            "FrozenDict": FrozenDict,
            "new": dict.__new__,
            "update": dict.update,
            "isfinite": math.isfinite,
            "B": INT_BOUND,
            "EMPTY": frozen_from({}),
        }
        self.count = 0

    def name(self, prefix: str, value: Any = None) -> str:
        self.count += 1
        name = f"{prefix}{self.count}"
        if value is not None:
            self.names[name] = value
        return name


def _value_check(w: _Writer, sub: Mapping[str, Any], v: str, c: str) -> tuple[list[str], bool]:
    """Lines checking local *v* against *sub*, failing with ``return FAIL``, and whether they
    set local *c* to its frozen copy (else *v* is kept as it is). Locals ``t`` and ``e`` are
    theirs to use."""
    kind = sub["type"]
    items = sub.get("items")
    if sub.get("enum") or (
        kind == "array"
        and (items is None or items["type"] not in _EXACT_TYPES or items.get("enum"))
    ):  # its closure: a copy, or the value itself
        check = w.name("snap", w.node(sub))
        return [f"{c} = {check}({v})", f"if {c} is NO: return FAIL"], True
    if kind in _EXACT_TYPES:
        return [f"if type({v}) is not {_EXACT_TYPES[kind]}: return FAIL"], False
    if kind == "null":
        return [f"if {v} is not None: return FAIL"], False
    if kind in ("integer", "number"):
        float_ok = f"isfinite({v})" + (f" and {v}.is_integer()" if kind == "integer" else "")
        return [
            f"t = type({v})",
            "if t is int:",
            f"    if not -B < {v} < B: return FAIL",
            "elif t is float:",
            f"    if not ({float_ok}): return FAIL",
            "else: return FAIL",
        ], False
    if kind == "array" and items is not None:
        return [
            f"if type({v}) is not list: return FAIL",
            f"for e in {v}:",
            f"    if type(e) is not {_EXACT_TYPES[items['type']]}: return FAIL",
            f"{c} = tuple({v})",
        ], True
    nested = _write_object(w, sub, fail="NO")
    return [f"{c} = {nested}({v})", f"if {c} is NO: return FAIL"], True


def _literal(key: object) -> str:
    """*key* as a Python string literal: `str`'s own ``repr``, whatever a subclass says it is
    (a schema's property names are the only text of the schema written into the source)."""
    if not isinstance(key, str):
        raise TypeError(f"a property name must be a string, not {type(key).__name__}")
    return str.__repr__(key)


def _write_object(w: _Writer, node: Mapping[str, Any], fail: str) -> str:
    """Write the function of one object node (answering *fail* when unsure); its name.

    One pass over the arguments' items, each key matched against the declared ones in turn (an
    ``if``/``elif`` chain of string comparisons), its value checked inline."""
    name = w.name("object")
    properties: Mapping[str, Any] = node.get("properties", {})
    ok = w.name("ok", compile_ok(node))
    whole = w.name("whole", w.whole(node, None if fail == "None" else w.names["NO"]))
    body: list[str] = [
        "if type(value) is not dict:",
        f"    return value if type(value) is FrozenDict and {ok}(value) else FAIL",
        *(f"if {_literal(key)} not in value: return FAIL" for key in node.get("required", ())),
        *([] if node.get("required") else ["if not value: return EMPTY"]),  # else not empty
    ]
    loop: list[str] = ["for k, v in value.items():", "    if type(k) is not str: return FAIL"]
    copies: list[tuple[str, str]] = []
    for i, (key, sub) in enumerate(properties.items()):
        c = w.name("c")
        lines, copied = _value_check(w, sub, "v", c)
        loop.append(f"    {'if' if i == 0 else 'elif'} k == {_literal(key)}:")
        loop += ["        " + line for line in lines or ["pass"]]
        if copied:
            copies.append((key, c))
    closed = node.get("additionalProperties") is False
    undeclared = "return FAIL" if closed else f"return {whole}(value)"  # the closure walk
    loop += ["    else:" if properties else "    if True:", f"        {undeclared}"]
    body += [f"{c} = MISSING" for _, c in copies]
    body += loop
    if copies:  # the copies go into a plain dict first (a store each, no slot wrapper call)
        body += [
            f"if {' or '.join(f'{c} is not MISSING' for _, c in copies)}:",
            "    value = value.copy()",
            *(f"    if {c} is not MISSING: value[{_literal(key)}] = {c}" for key, c in copies),
        ]
    body += ["made = new(FrozenDict)", "update(made, value)", "return made"]
    w.lines += [f"def {name}(value, FAIL={fail}):", *("    " + line for line in body)]
    return name


MAX_WRITTEN: Final = 200
"""The most declared properties (all object nodes written out together) a schema may have for
its snapshot to be written out: a longer ``if``/``elif`` chain exceeds what Python's compiler
nests (about 3,000 raise `RecursionError` while compiling); such schemas keep the closure walk."""


def writable(schema: Mapping[str, Any]) -> bool:
    """Whether *schema*'s snapshot is small enough to write out (`MAX_WRITTEN`)."""
    count, nodes = 0, [schema]
    while nodes:
        properties: Mapping[str, Any] = nodes.pop().get("properties", {})
        count += len(properties)
        if count > MAX_WRITTEN:
            return False
        nodes += [sub for sub in properties.values() if sub.get("type") == "object"]
    return True


def generate_snapshot(
    schema: Mapping[str, Any],
    node: Callable[[Mapping[str, Any]], Any],
    whole: Callable[[Mapping[str, Any], Any], Any],
    no: Any,
) -> Callable[[Any], Any]:
    """The generated snapshot of an object *schema* of the compiled subset (the caller checked):
    ``None`` when not sure. *node* gives a node's closure snapshot (answering *no* when not
    sure), *whole* an object node's closure walk given what it answers when not sure."""
    w = _Writer(node, whole)
    w.names["NO"] = no
    top = _write_object(w, schema, fail="None")
    namespace = dict(w.names)
    # the source made above (property names as literals), compiled once per text (`compiled`)
    exec(compiled("\n".join(w.lines), "<string>"), namespace)
    made: Callable[[Any], Any] = namespace[top]
    return made
