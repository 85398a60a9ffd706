"""Model-supplied text made safe to show on a terminal."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ._json import canonical_json

__all__ = ["arguments_lines", "named", "printable"]

_SPACES = re.compile(" {16,}")
_BLANK = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
    "\U000e0100-\U000e01ef]"
)
"""Characters Python calls printable that show as nothing (Hangul fillers, a blank braille
pattern, combining marks that mark nothing, variation selectors): escaped as the invisible
ones are, so nothing can push a command past what a person reads."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """*text* with every character that is not printable shown as an escape.

    Control characters (so no escape sequence reaches the terminal), bidirectional overrides and
    other invisible format characters, line separators, unusual spaces and lone surrogates are
    written ``\\x1b``, ``\\u202e``, ``\\udcff`` and the like; ``\\n``, ``\\r`` and
    ``\\t`` by name. With *newlines*, line feeds and tabs are kept as they are (for multi-line
    content such as a file); carriage returns are still escaped, since they overwrite a line.
    What a person reads is then exactly what the model sent, and nothing can hide in it.
    """
    if text.isprintable() and _BLANK.search(text) is None:
        return text
    keep = "\n\t" if newlines else ""
    return "".join(
        c if (c.isprintable() and _BLANK.match(c) is None) or c in keep else _escape(c)
        for c in text
    )


NAME_SHOWN = 100
"""How many characters of a name the model chose (a tool it called) a message repeats."""


def named(name: str, limit: int = NAME_SHOWN) -> str:
    """A name the model chose, as a message repeats it: `printable`, and at most *limit*
    characters of it, the rest counted (``xxxx… (100,027 characters)``): a call naming a
    100 KB tool once came back as a 100 KB error."""
    if len(name) <= limit:
        return printable(name)
    return f"{printable(name[:limit])}… ({len(name):,} characters)"


def _shown(value: object) -> str:
    """One argument's value as a person should read it: strings as text, the rest as JSON."""
    if isinstance(value, str):
        return printable(value, newlines=True)
    return printable(canonical_json(value))


_ESCAPES = re.compile(r"(\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}))\1{15,}")


def _runs(text: str) -> str:
    """Long runs of spaces, and of one escaped character, counted (``⟨230 spaces⟩``,
    ``⟨3000 x \\u3164⟩``): nothing can hide past the edge, nor push the rest out of view."""
    text = _SPACES.sub(lambda m: f"⟨{len(m.group())} spaces⟩", text)
    return _ESCAPES.sub(lambda m: f"⟨{len(m.group()) // len(m.group(1))} x {m.group(1)}⟩", text)


def arguments_lines(arguments: object, width: int = 80) -> list[str]:
    """Every argument of a call, one ``key: value`` per line, wrapped at *width*, never cut.

    What an approver shows a person (the ``approval`` plugin's terminal prompt, the question
    ``dsh mcp serve`` elicits): strings as text, other values as canonical JSON, both through
    `printable` (control characters and escape sequences escaped); a line break in a string
    starts a new line indented under the value; a run of 16 or more spaces is counted
    (``⟨300 spaces⟩``) so nothing hides past the edge; long lines are wrapped (at least 20
    characters of value a line), nothing dropped or collapsed. *arguments* that are not a
    mapping are shown under the key ``arguments``.
    """
    items = arguments.items() if isinstance(arguments, Mapping) else [("arguments", arguments)]
    lines: list[str] = []
    for key, value in items:
        head, pad = f"    {printable(str(key))}: ", " " * 6
        for n, part in enumerate(_runs(_shown(value)).split("\n")):
            prefix = head if n == 0 else pad
            room = max(width - len(prefix), 20)
            chunks = [part[i : i + room] for i in range(0, len(part), room)] or [""]
            lines.append(prefix + chunks[0])
            lines.extend(pad + chunk for chunk in chunks[1:])
    return lines
