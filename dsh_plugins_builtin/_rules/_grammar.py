"""Permission rules: the grammar of ``allow``/``ask``/``deny`` entries and how one matches a call.

A rule is ``Tool`` (every call of that tool) or ``Tool(specifier)``, in dsh's spelling
(``bash``, ``read_file``) or Claude Code's (``Bash``, ``Read``); a rule names a tool by its dsh
name or its ``claude_name``.

* ``bash(git status:*)``, ``Bash(git status *)``: the words of a command (see `_shell` for
  how a command line is read). ``*`` matches any characters; a trailing ``:*`` or `` *`` makes
  the rest optional, so ``Bash(ls *)`` matches ``ls`` and ``ls -l`` but not ``lsof``.
* ``Read(./secrets/**)``, ``edit_file(src/**/*.py)``: a gitignore-style glob over the path
  arguments of **every** tool that declares them (`ToolDefinition.paths`): read rules
  (``read_file``/``Read``) reach every ``"read"`` argument, edit rules (``edit_file``,
  ``write_file``, ``Edit``, ``Write``) every ``"write"`` one; ``Tool(glob)`` for any other tool
  reaches that tool's own path arguments. Anchors as in Claude Code: ``//abs``, ``~/x``,
  ``/x`` (the settings file's project), ``./x`` and ``x`` (the workspace; ``x`` without a
  ``/`` at any depth).
* ``WebFetch(domain:example.com)``: the host of the call's ``url`` (subdomains included).
* ``mcp__server`` and ``mcp__server__*``: every tool of that MCP server; ``mcp__*``: every MCP
  tool; ``mcp__server__delete_*``: the server's tools whose names start so. A ``*`` may end an
  MCP name only, and means the same in allow, ask and deny lists.

Matching is by absolute path: each pattern is compiled once into one regular expression over
absolute paths (the workspace spelled as given and with symlinks resolved), which also matches
everything under a matching directory.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
from collections.abc import Sequence
from typing import Literal, final

import attrs

from ._words import strict_words
from ._wrappers import strip_git_globals

__all__ = [
    "EDIT_RULES",
    "ORDER",
    "READ_RULES",
    "SHELL_RULES",
    "Anchors",
    "CommandPattern",
    "Effect",
    "PathPattern",
    "Rule",
    "RuleError",
    "normalise",
    "parse_rule",
    "spellings_of",
]

Effect = Literal["allow", "ask", "deny"]
SHELL_RULES = frozenset({"bash", "Bash"})
READ_RULES = frozenset({"read_file", "Read"})
EDIT_RULES = frozenset({"edit_file", "write_file", "Edit", "Write", "MultiEdit", "NotebookEdit"})
_SEARCH_RULES = frozenset({"list_dir", "LS", "glob", "Glob", "grep", "Grep"})
_WEB_RULES = frozenset({"web_fetch", "WebFetch"})
_BUILT_IN = {
    "Bash": "bash", "Read": "read_file", "Write": "write_file", "Edit": "edit_file",
    "LS": "list_dir", "Glob": "glob", "Grep": "grep", "WebFetch": "web_fetch",
}  # fmt: skip
"""Claude Code's names for dsh's built-in tools: a rule in either spelling names a tool of
that name even when it does not declare its ``claude_name``."""
ORDER: tuple[Effect, ...] = ("deny", "ask", "allow")
_SEP = "\x00"  # joins a command's words for matching: no word can hold it


class RuleError(ValueError):
    """A rule that does not parse; the message says why and what to write instead."""


@final
@attrs.frozen
class Anchors:
    """What the relative spellings of a path rule are relative to.

    ``workspace``: ``./x`` and ``x``; ``project``: ``/x`` (the directory holding the settings
    file, or its parent when that is ``.claude``); ``home``: ``~/x``. Each is an absolute path.
    """

    workspace: str
    project: str
    home: str


def spellings_of(root: str) -> tuple[str, ...]:
    lexical = normalise(os.path.abspath(root))
    return tuple(dict.fromkeys((lexical, os.path.realpath(lexical))))


def normalise(path: str) -> str:
    """``posixpath.normpath`` of *path*, with a leading ``//`` made ``/``.

    An absolute path that is already normal (no empty, ``.`` or ``..`` component: most path
    arguments, joined to the workspace) is returned as it is, without ``normpath``'s split.
    """
    if path.startswith("/") and not (
        "//" in path or "/./" in path or "/../" in path or path.endswith(("/", "/.", "/.."))
    ):
        return path
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


# -- specifiers ------------------------------------------------------------------------------


@final
@attrs.frozen
class CommandPattern:
    """The specifier of a shell rule, compiled to a regex over the words joined by NUL."""

    regex: re.Pattern[str]
    exact: bool = False  # no wildcard: the rule names one command line word for word
    head: str | None = None  # the first word, when it holds no wildcard
    literal: tuple[str, ...] = ()  # the words before the first wildcard

    def fits(self, words: Sequence[str]) -> bool:
        return self.regex.fullmatch(_SEP.join(words)) is not None

    def may_catch(self, words: Sequence[str], unknown: str) -> bool:
        """For deny and ask rules: whether a word only known at run time (*unknown*) could
        make *words* match: the words before it agree with the rule's leading literal words
        and it stands where one of them is due (``git $x`` for ``git push:*``)."""
        for spelled in (words, strip_git_globals(words)):
            if spelled is None or unknown not in spelled:
                continue
            at = list(spelled).index(unknown)
            if 0 < at < len(self.literal) and tuple(spelled[:at]) == self.literal[:at]:
                return True
        return False

    def catches(self, words: Sequence[str]) -> bool:
        """For deny and ask rules: also with git's global options left out."""
        if self.fits(words):
            return True
        bare = strip_git_globals(words)
        return bare is not None and self.fits(bare)


def _command_pattern(spec: str) -> CommandPattern:
    body = spec.strip()
    rest = False
    if body.endswith(":*"):
        body, rest = body[:-2].rstrip(), True
    elif body.endswith(" *") or body == "*":
        body, rest = body[:-1].rstrip(), True
    if spec.strip() == "*":
        return CommandPattern(re.compile(".*", re.DOTALL))
    if not body:
        raise RuleError("names no command; write bash alone to match every command")
    # a * is a wildcard: read the words with each * as a placeholder, then turn them into .*
    # (by the strict reader alone: a rule may name a command no allow rule can cover, e.g.
    # ``Bash(eval:*)`` as a deny rule)
    read = strict_words(body.replace("*", "\ue101"))
    if isinstance(read, str) or len(read) != 1:
        problem = read if isinstance(read, str) else "it holds more than one command"
        raise RuleError(
            "must name one simple command of literal words, without &&, ;, |, redirections "
            f"or $(...) ({problem}); write one rule per command"
        )
    joined = _SEP.join(read[0])
    regex = re.escape(joined).replace("\ue101", ".*")
    if rest:
        regex += f"(?:{_SEP}.*)?"
    first = read[0][0] if read[0] and "\ue101" not in read[0][0] else None
    exact = not rest and "\ue101" not in joined
    literal = tuple(itertools.takewhile(lambda w: "\ue101" not in w, read[0]))
    return CommandPattern(re.compile(regex, re.DOTALL), exact=exact, head=first, literal=literal)


@final
@attrs.frozen
class PathPattern:
    """The specifier of a path rule, compiled to a regex over absolute paths."""

    regex: re.Pattern[str]
    absolute: bool  # names a place outside the workspace on purpose (//, ~/)

    def matches(self, path: str) -> bool:
        """Whether the absolute *path*, or a directory above it, matches."""
        return self.regex.fullmatch(path) is not None


def _glob_segment(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        i += 1
        if c == "*":
            while i < len(segment) and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i < len(segment):
            out.append(re.escape(segment[i]))
            i += 1
        elif c == "[" and (end := segment.find("]", i + 1)) > i:
            inner = segment[i:end]
            negate = inner[:1] in ("!", "^")
            inner = inner[1:] if negate else inner
            escaped = inner.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(f"[^/{escaped}]" if negate else f"[{escaped}]")
            i = end + 1
        else:
            out.append(re.escape(c))
    return "".join(out)


def _path_pattern(spec: str, anchors: Anchors) -> PathPattern:
    absolute = spec.startswith(("//", "~/"))
    roots: tuple[str, ...]
    if spec.startswith("//"):
        roots, body, anchored = ("",), spec[2:], True
    elif spec.startswith("~/"):
        roots, body, anchored = spellings_of(anchors.home), spec[2:], True
    elif spec.startswith("/"):
        roots, body, anchored = spellings_of(anchors.project), spec[1:], True
    elif spec.startswith("./"):
        roots, body, anchored = spellings_of(anchors.workspace), spec[2:], True
    else:
        roots, body = spellings_of(anchors.workspace), spec
        anchored = "/" in spec.rstrip("/")
    body = body.rstrip("/")
    if not body:
        raise RuleError("names no path; write ./** for the whole workspace")
    segments = body.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise RuleError("has an empty, . or .. path segment; write a path without them")
    while len(segments) > 1 and segments[-1] == "**":
        segments.pop()  # dir/** is dir and everything under it
    parts: list[str] = [] if anchored else ["(?:[^\x00]*/)?"]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            parts.append("[^\x00]*" if last else "(?:[^\x00]*/)?")
        else:
            parts.append(_glob_segment(segment) + ("" if last else "/"))
    root = "(?:" + "|".join(re.escape(r.rstrip("/")) for r in roots) + ")"
    if segments == ["**"]:  # the root itself and everything under it
        return PathPattern(re.compile(f"{root}(?:/[^\x00]*)?", re.DOTALL), absolute)
    regex = f"{root}/{''.join(parts)}(?:/[^\x00]*)?"
    return PathPattern(re.compile(regex, re.DOTALL), absolute)


def _domain(spec: str) -> str:
    if not spec.startswith("domain:") or not spec[7:].strip():
        raise RuleError("takes domain:HOST, e.g. WebFetch(domain:example.com)")
    return spec[7:].strip().lower().rstrip(".")


# -- rules -----------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\*?")
_RULE = re.compile(rf"(?P<tool>{_NAME.pattern})(?:\((?P<spec>.*)\))?", re.DOTALL)


@final
@attrs.frozen
class Rule:
    """One parsed rule: ``text`` as written, where it came from, the tool it names, its specifier.

    ``source`` is the file (or ``the built-in defaults``) the rule was read from.
    """

    text: str
    tool: str
    source: str
    command: CommandPattern | None = None
    path: PathPattern | None = None
    domain: str | None = None

    @property
    def detail(self) -> str:
        """``rule Bash(rm:*) in /repo/dsh.toml``: what `decision_detail` says about this rule."""
        return f"rule {self.text} in {self.source}"

    def names(self, tool: str, claude_name: str | None) -> bool:
        """Whether the rule's tool name is this tool (its name, Claude Code name, MCP server)."""
        if self.tool in (tool, claude_name) or _BUILT_IN.get(self.tool) == tool:
            return True
        if self.tool.endswith("*"):  # mcp__*, mcp__srv__*, mcp__srv__delete_*
            return tool.startswith(self.tool[:-1])
        if self.tool.startswith("mcp__") and self.tool.count("__") == 1:  # mcp__srv
            return tool.startswith(self.tool + "__")
        return False


def parse_rule(text: str, effect: Effect, anchors: Anchors, source: str) -> Rule:
    """Parse one rule of an *effect* list read from *source*.

    Raises:
        RuleError: the rule does not parse; the message says what is wrong.
    """
    if not isinstance(text, str) or not text.strip():
        raise RuleError("is empty; write Tool or Tool(specifier), e.g. Bash(git status:*)")
    stripped = text.strip()
    match = _RULE.fullmatch(stripped)
    if match is None:
        head = stripped.split("(", 1)[0]
        if not _NAME.fullmatch(head):
            why = f"{head!r} is not a tool name (letters, digits, _, . and -; no spaces)"
        elif ")" not in stripped.partition("(")[2]:
            why = "the ( is not closed by a )"
        else:
            why = "there is text after the closing )"
        raise RuleError(f"does not parse: {why}; e.g. Bash(git status:*) or Read(./src/**)")
    tool, spec = match["tool"], match["spec"]
    if tool.endswith("*") and not tool.startswith("mcp__"):
        raise RuleError(
            "has a * in the tool name; only MCP tool names may end in * (mcp__*, "
            "mcp__server__*, mcp__server__prefix*)"
        )
    if tool.startswith("mcp__") and (
        tool in ("mcp__", "mcp___*") or tool.endswith("___") or "____" in tool
    ):
        raise RuleError("names no MCP server or tool; write mcp__server or mcp__server__tool")
    if spec is None:
        return Rule(stripped, tool, source)
    if not spec.strip():
        raise RuleError(f"has an empty specifier; write {tool} alone to match every call")
    if tool in SHELL_RULES:
        return Rule(stripped, tool, source, command=_command_pattern(spec))
    if tool in _WEB_RULES:
        return Rule(stripped, tool, source, domain=_domain(spec.strip()))
    return Rule(stripped, tool, source, path=_path_pattern(spec.strip(), anchors))
