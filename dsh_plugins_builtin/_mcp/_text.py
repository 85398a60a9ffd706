"""Text a mounted server wrote, made safe to show a client, a model or a terminal.

A server's tool descriptions, the titles and descriptions inside its input schemas, its error
messages and its stderr reach dsh's clients and terminals. `printable` is `dsh_host.printable`
keeping newlines and tabs: every control character (ESC, BEL, ...), format character (bidi
overrides such as U+202E, zero-width ones such as U+200B), surrogate, private-use, unassigned
or blank-looking code point and line or paragraph separator is written as an escape; other
text is unchanged.

What a schema checks arguments against cannot be escaped (a property name escaped is another
name): `unsafe_in_schema` finds such a character in a key or a checked string (an enum,
const, default or pattern, a ``required`` entry, ...), and the tool is not mounted.
"""

from __future__ import annotations

from typing import Any

import dsh_host

__all__ = ["printable", "printable_schema", "unsafe_in_schema"]

_ANNOTATIONS = frozenset({"title", "description", "$comment"})
"""The schema keywords whose string is only shown (never checked against the arguments)."""


def printable(text: str) -> str:
    """*text* with every unsafe character escaped (module docstring); newlines and tabs kept."""
    return dsh_host.printable(text, newlines=True)


def printable_schema(value: Any) -> Any:
    """A copy of the JSON schema *value* whose titles, descriptions and comments, at any
    depth, are `printable`; everything else (names, enums, patterns, ...) unchanged."""
    if isinstance(value, dict):
        return {
            key: printable(item)
            if key in _ANNOTATIONS and isinstance(item, str)
            else printable_schema(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [printable_schema(item) for item in value]
    return value


def unsafe_in_schema(schema: Any) -> str | None:
    """Where the JSON schema *schema* holds a character `printable` escapes, other than in the
    titles, descriptions and comments it escapes: a key (a newline or tab too) or any other
    string, at any depth, described (escaped) for the server's problems; ``None``: nowhere."""
    stack = [schema]
    while stack:  # not recursive: a deeply nested schema costs no stack
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (printable(key) != key or "\n" in key or "\t" in key):
                    return f"the key {_excerpt(key)}"
                if not (key in _ANNOTATIONS and isinstance(item, str)):
                    stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and printable(value) != value:
            return f"the string {_excerpt(value)}"
    return None


def _excerpt(text: str) -> str:
    shown = printable(text).replace("\n", "\\n").replace("\t", "\\t")
    return f'"{shown[:80]}..."' if len(shown) > 80 else f'"{shown}"'
