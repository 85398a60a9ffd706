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

import functools
import re

__all__ = ["strict_words"]

_BARE = r"[A-Za-z0-9_@%+=:,./#~{}\-\u0080-\U0010ffff]"
_PART = r"'([^']*)'|\"([^\"$`\\]*)\""
# one token: blanks, a separator, a redirection, or a word (and what may follow a word)
_TOKEN = (
    r"(?P<blank>[ \t]+)"
    r"|(?P<sep>&&|\|\||[;|\n])"
    r"|(?P<redirect>(?:[0-9]?>>?|&>>?|<|[0-9]?>\|)[ \t]*/dev/null(?=[ \t\n;&|]|$)"
    r"|[0-9]?[<>]&(?:[0-9]|-)(?=[ \t\n;&|]|$))"
    # one bare character or one whole quoted part per step: no nested repeat, no backtracking
    rf"|(?P<word>(?:{_BARE}|'[^']*'|\"[^\"$`\\]*\")+)(?=[ \t\n;&|]|$)"
)
# a comment, a tilde bash would expand (braces: `_braces`)
_EXPANDS = r"^[#~]|[=:]~"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The scanner, the expansion check and the quoted part, compiled for the first line read:
    the wide character class costs a cold start a few milliseconds (issue 27)."""
    return re.compile(_TOKEN), re.compile(_EXPANDS), re.compile(_PART)


def strict_words(line: str) -> tuple[tuple[str, ...], ...] | str:
    """The commands of *line* as words, or why the strict grammar refuses the line."""
    commands: list[tuple[str, ...]] = []
    words: list[str] = []
    i, end = 0, len(line)
    token, expands, part = _patterns()
    match = token.match
    while i < end:
        m = match(line, i)
        if m is None:
            return f"the character {line[i]!r} at offset {i} is outside the strict word grammar"
        kind = m.lastgroup
        if kind == "word":
            text = m.group()
            if expands.search(text) or _braces(text):
                return f"the word {text[:40]!r} holds a comment, a tilde or braces bash expands"
            words.append(part.sub(_unquote, text) if ("'" in text or '"' in text) else text)
        elif kind == "sep":
            if words:
                commands.append(tuple(words))
                words = []
            elif m.group() != "\n":
                return f"the operator {m.group()!r} follows no command"
        i = m.end()
    if words:
        commands.append(tuple(words))
    return tuple(commands)


def _braces(text: str) -> bool:
    """A ``{`` and a later ``}`` with a comma or ``..`` between, quoted or not (bash does not
    end braces at a quoted ``}``: ``{'}',a}`` expands)."""
    first, last = text.find("{"), text.rfind("}")
    return 0 <= first < last and any(s in text[first:last] for s in (",", ".."))


def _unquote(m: re.Match[str]) -> str:
    return m.group(1) if m.group(1) is not None else m.group(2)
