"""Text a mounted server wrote, made safe to show a client, a model or a terminal.

A server's tool descriptions, the titles and descriptions inside its input schemas, its error
messages and its stderr reach dsh's clients and terminals. `printable` writes every control
character (ESC, BEL, ...), format character (bidi overrides such as U+202E, zero-width ones
such as U+200B), surrogate, private-use, unassigned code point and line or paragraph separator
as ``\\uXXXX`` (``\\UXXXXXXXX`` beyond the BMP), keeping newlines and tabs; other text is
unchanged.
"""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["printable", "printable_schema"]

_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_ANNOTATIONS = frozenset({"title", "description", "$comment"})
"""The schema keywords whose string is only shown (never checked against the arguments)."""


def _escaped(char: str) -> str:
    if char in "\n\t" or unicodedata.category(char) not in _UNSAFE:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """*text* with every unsafe character escaped (module docstring); newlines and tabs kept."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(map(_escaped, text))


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
