"""A second, independent reading of a command line for allow rules: a strict word grammar.

An allow rule holds only when tree-sitter's reading of a line (`_shell`) and this one agree word
for word. This reader knows a deliberately small language, in which every word is exactly what
bash will pass to the command:

* a word is one or more parts joined with nothing between them: a bare part of the safe
  characters (letters, digits, ``_ @ % + = : , . / -`` and any non-ASCII character; ``#``,
  ``~``, ``{`` and ``}`` too, but not where bash reads a comment or expands a tilde or
  braces), a
  single-quoted string ``'...'``, or a double-quoted string ``"..."`` holding no ``$``, `````
  or ``\\``;
* words are separated by spaces and tabs; commands by ``;``, ``&&``, ``||``, ``|`` and newlines;
* the only redirections are the plain forms ``>/dev/null``, ``>>/dev/null``, ``2>/dev/null``,
  ``&>/dev/null``, ``</dev/null`` (a space after the operator is allowed) and descriptor copies
  ``2>&1``, ``>&2``, each standing as its own word.

Anything else (a backslash, ``$``, a glob character, ``~``, braces, parentheses, a comment, a
heredoc, ``&``) makes the reader refuse the line, and the allow rules do not apply to it.
"""

from __future__ import annotations

import re

__all__ = ["strict_words"]

_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./#~{}\-\u0080-\U0010ffff]+")
# a comment, a tilde bash would expand, a brace expansion
_EXPANDS = re.compile(r"^[#~]|[=:]~|\{[^}]*(?:,|\.\.)[^}]*\}")
_SINGLE = re.compile(r"'([^']*)'")
_DOUBLE = re.compile(r'"([^"$`\\]*)"')
_REDIRECT = re.compile(
    r"(?:[0-9]?>>?|&>>?|<|[0-9]?>\|)[ \t]*/dev/null(?=[ \t\n;&|]|$)"
    r"|[0-9]?[<>]&(?:[0-9]|-)(?=[ \t\n;&|]|$)"
)
_SEPARATOR = re.compile(r"&&|\|\||[;|\n]")
_BLANK = re.compile(r"[ \t]+")


def strict_words(line: str) -> tuple[tuple[str, ...], ...] | str:
    """The commands of *line* as words, or why the strict grammar refuses the line."""
    commands: list[tuple[str, ...]] = []
    words: list[str] = []
    i, end = 0, len(line)
    while i < end:
        blank = _BLANK.match(line, i)
        if blank:
            i = blank.end()
            continue
        sep = _SEPARATOR.match(line, i)
        if sep:
            if words:
                commands.append(tuple(words))
                words = []
            elif sep.group() != "\n":
                return f"the operator {sep.group()!r} follows no command"
            i = sep.end()
            continue
        redirect = _REDIRECT.match(line, i)
        if redirect:
            i = redirect.end()
            continue
        word, i = _word(line, i)
        if word is None:
            return f"the character {line[i]!r} at offset {i} is outside the strict word grammar"
        words.append(word)
    if words:
        commands.append(tuple(words))
    return tuple(commands)


def _word(line: str, i: int) -> tuple[str | None, int]:
    start = i
    parts: list[str] = []
    while i < len(line):
        for pattern, group in ((_BARE, 0), (_SINGLE, 1), (_DOUBLE, 1)):
            m = pattern.match(line, i)
            if m:
                parts.append(m.group(group))
                i = m.end()
                break
        else:
            break
    if not parts or _EXPANDS.search(line[start:i]):
        return None, start
    if i < len(line) and line[i] not in " \t\n;&|":
        return None, i  # a part the grammar does not know is glued to the word
    return "".join(parts), i
