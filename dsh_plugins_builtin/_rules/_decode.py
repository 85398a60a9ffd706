"""Decoding the words of a bash syntax tree as bash reads them.

`literal_value` gives a word node's value when it holds no expansion (quotes and ``$'...'``
decoded as bash decodes them); `globbed` says whether an unquoted part is a pathname pattern;
`misread` and `blank_inside` find the places where tree-sitter-bash splits words or commands
otherwise than bash does, so the reader can refuse to trust the tree there (see `._shell`).
"""

from __future__ import annotations

import bisect
import re

import tree_sitter

__all__ = [
    "DUP_OPS",
    "blank_inside",
    "braced",
    "globbed",
    "literal_value",
    "misread",
    "node_text",
    "unread_substitution",
]

_GLOB = re.compile(r"[*?\[]")
DUP_OPS = frozenset({">&", "<&"})

_ANSI_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_ANSI = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})"
    r"|U([0-9A-Fa-f]{1,8})|c(.)|(.))",
    re.DOTALL,
)


def _ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` as bash does (a NUL ends the string)."""

    def one(m: re.Match[str]) -> str:
        simple, octal, hx, u4, u8, ctl, other = m.groups()
        if simple is not None:
            return _ANSI_SIMPLE[simple]
        if other is not None:
            return "\\" + other
        if ctl is not None:
            return chr(ord(ctl.upper()) ^ 0x40) if ctl != "?" else "\x7f"
        number = octal or hx or u4 or u8
        code = int(number, 8 if octal else 16)
        if octal:
            code &= 0xFF
        try:
            return chr(code)
        except (ValueError, OverflowError):
            return "\ufffd"

    return _ANSI.sub(one, body).split("\0", 1)[0]


def braced(text: str) -> bool:
    """Whether bash may expand braces in a word's source: a ``{`` before a later ``}`` with a
    comma or ``..`` between them. Quotes are not looked at: a quoted ``}`` does not end
    bash's braces (``{'}',a,b}`` is three words), so the widest span is judged (linear)."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        return False
    inner = text[start + 1 : end]
    return "," in inner or ".." in inner


def blank_inside(text: str) -> bool:
    """Whether an unquoted word's source holds a blank no backslash escapes."""
    if " " not in text and "\t" not in text and "\n" not in text:
        return False
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in " \t\n":
            return True
        i += 1
    return False


_NO_NEWLINE = frozenset(
    {"command", "redirected_statement", "file_redirect", "variable_assignment", "concatenation",
     "negated_command"}
)  # fmt: skip


_NO_GAP = frozenset({"simple_expansion", "concatenation", "variable_assignment"})
_OPERATOR_BYTES = frozenset(b";&|()<> \t\n")


_TEXT_BETWEEN = frozenset({"heredoc_body", "heredoc_content", "string", "translated_string"})


def misread(node: tree_sitter.Node, data: bytes) -> bool:
    """Whether *node*'s children are separated otherwise than bash separates them: by a newline
    no backslash continues (inside a simple command), or by nothing but a continuation between
    two words (bash joins ``a\\<newline>b`` into ``ab``), or an fd number glued to a word."""
    if node.type in _TEXT_BETWEEN:  # literal text lies between their expansions
        return False
    end = node.start_byte
    previous: tree_sitter.Node | None = None
    for i, child in enumerate(node.children):
        raw = data[end : child.start_byte]
        gap = raw.replace(b"\\\n", b"")
        if gap.strip(b" \t\n") or (b"\n" in gap and node.type in _NO_NEWLINE):
            return (
                True  # the grammar skipped a character (``echo \\ ``, ``-\\<nl>2>``) or a newline
            )
        if i and raw and node.type in _NO_GAP:
            return True  # ``$  rm``: bash reads no blank inside an expansion or a word
        if (
            previous is not None
            and (gap != raw or node.type == "command")  # (no blank at all: `'tim'\\eout`)
            and not gap
            and child.start_byte < len(data)
            and (previous.is_named or data[end - 1] not in _OPERATOR_BYTES)
            and (child.is_named or data[child.start_byte] not in _OPERATOR_BYTES)
        ):
            return True  # bash joins them into one word
        previous = child
        end = child.end_byte
    if node.child_count and data[end : node.end_byte].replace(b"\\\n", b"").strip(b" \t\n"):
        return True
    if node.type == "file_redirect" and {c.type for c in node.children} & DUP_OPS:
        target = node.child_by_field_name("destination")
        text = node_text(target) if target is not None else ""
        if re.fullmatch(r"[0-9]*-.+", text, re.DOTALL):
            return True  # bash reads `>&-rm` as `>&-` and a word `rm`
    if node.type == "file_descriptor":
        i = node.start_byte
        while i >= 2 and data[i - 2 : i] == b"\\\n":
            i -= 2
        before = data[i - 1] if i else ord(" ")
        return not node_text(node).isdigit() or before not in _OPERATOR_BYTES
    return False


def _unquoted(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _double_quoted(body: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m[1] == "\n" else m[1], body)


def node_text(node: tree_sitter.Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "surrogateescape") if raw is not None else ""


def literal_value(node: tree_sitter.Node) -> str | None:
    """The value of a word node when it holds no expansion of any kind, else ``None``."""
    kind = node.type
    if kind in ("word", "number"):
        text = node_text(node)
        if text.startswith("~") or braced(text):
            return None
        return _unquoted(text)
    if kind == "raw_string":
        return node_text(node)[1:-1]
    if kind == "ansi_c_string":
        return _ansi_c(node_text(node)[2:-1])
    if kind == "string":
        text = node_text(node)
        if not text.startswith('"') or any(c.type != "string_content" for c in node.named_children):
            return None
        return _double_quoted(text[1:-1])
    if kind == "concatenation":
        if braced(node_text(node)):
            return None
        parts = [literal_value(child) for child in node.named_children]
        if any(p is None for p in parts) or len(node.children) != len(node.named_children):
            return None
        return "".join(p for p in parts if p is not None)
    if kind == "command_name":
        return literal_value(node.named_children[0]) if node.named_child_count == 1 else None
    return None


def globbed(node: tree_sitter.Node) -> bool:
    """Whether an unquoted part of the word is a pathname pattern (``*``, ``?``, ``[``)."""
    if node.type == "word":
        return bool(_GLOB.search(node_text(node).replace("\\\\", "").replace("\\*", "")))
    return any(globbed(child) for child in node.named_children if child.type == "word")


_SUBSTITUTING = frozenset({"command_substitution", "process_substitution", "arithmetic_expansion"})
_INERT_TEXT = frozenset({"raw_string", "ansi_c_string", "comment"})
_OPENERS = re.compile(rb"\$\(|[<>]\(|`")


def unread_substitution(root: tree_sitter.Node, data: bytes) -> str | None:
    """Why the line holds a ``$(`` or a backtick the grammar read as no substitution (bash runs
    it: ``${x#$(cmd)}`` is a pattern to the grammar, a here-document body after a blank line is
    text to it), or an escaped backtick inside backticks (bash runs it one level down).

    Each one outside single quotes, ``$'...'``, comments and quoted here-documents must start
    (or end) a substitution node; linear in the line."""
    starts: set[int] = set()
    inert: list[tuple[int, int]] = []
    ticks: list[tuple[int, int]] = []
    if b"$\\\n" in data:  # bash joins "$\<newline>(" into "$(" (in double quotes too)
        return "a line continuation right after $, which bash joins to what follows"
    stack: list[tuple[tree_sitter.Node, bool]] = [(root, False)]
    while stack:
        node, quoted = stack.pop()
        kind = node.type
        if kind in _SUBSTITUTING:
            starts.update((node.start_byte, node.end_byte - 1))
            if data[node.start_byte : node.start_byte + 1] == b"`":
                ticks.append((node.start_byte, node.end_byte))
        elif kind in _INERT_TEXT and not quoted:
            # ('...' inside "${x:+...}" is no quoting to bash: what it holds is expanded)
            inert.append((node.start_byte, node.end_byte))
            continue
        elif kind == "heredoc_redirect":
            opener = next((c for c in node.children if c.type == "heredoc_start"), None)
            if opener is not None and any(q in node_text(opener) for q in "'\"\\"):
                inert += [
                    (c.start_byte, c.end_byte) for c in node.children if c.type == "heredoc_body"
                ]
        inside = quoted or kind in ("string", "expansion")
        stack.extend((child, inside) for child in node.children)
    inert.sort()
    for found in _OPENERS.finditer(data):
        at = found.start()
        tick = found.group() == b"`"
        if (not tick and _escaped(data, at)) or _inside(at, inert):
            continue
        if tick and _escaped(data, at):
            if any(start < at < end for start, end in ticks):
                return "an escaped backtick inside backticks, which bash runs one level down"
            continue
        if at not in starts:
            return "a command substitution the grammar does not read as one"
    return None


def _escaped(data: bytes, at: int) -> bool:
    count = 0
    while at - count - 1 >= 0 and data[at - count - 1] == 0x5C:
        count += 1
    return count % 2 == 1


def _inside(at: int, ranges: list[tuple[int, int]]) -> bool:
    i = bisect.bisect_right(ranges, (at, 1 << 62)) - 1
    return i >= 0 and ranges[i][0] <= at < ranges[i][1]
