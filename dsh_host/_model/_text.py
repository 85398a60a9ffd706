"""Model-supplied text made safe to show on a terminal."""

from __future__ import annotations

__all__ = ["printable"]

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
    if text.isprintable():
        return text
    keep = "\n\t" if newlines else ""
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)
