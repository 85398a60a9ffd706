"""Permission rules: the grammar of ``allow``/``ask``/``deny`` entries and how one matches a call.

A rule is ``Tool`` (every call of that tool) or ``Tool(specifier)``:

* ``bash(git status:*)`` matches a simple command whose words start with ``git status``;
  ``bash(git status)`` (no ``:*``) only that exact command. A compound command (``&&``, ``||``,
  ``;``, ``|``, ``&``, newlines, subshells, ``$(...)``, backticks, ``<(...)``) is split into
  simple commands: an allow rule must cover every one of them, a deny or ask rule needs one.
* ``read_file(./secrets/**)``, ``edit_file(src/**/*.py)``: a gitignore-style glob over the
  ``path`` argument of a file tool, relative to the workspace. ``//abs/**`` and ``~/dir/**``
  name paths outside it (deny and ask rules only: allow rules never reach outside).

Matching is lexical and conservative: a command the splitter cannot take apart for certain
(an unterminated quote, a here-document, a redirection without a target), or one that
redirects output into a file, is never allowed by an allow rule; deny and ask rules still
look at a rough split of it. A deny rule on ``bash`` is a speed bump, not a sandbox: the shell
has too many ways to spell a command.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, final

import attrs

from ._shell import ASSIGNMENT, ParsedCommand, SimpleCommand, parse_command

__all__ = [
    "FILE_TOOLS",
    "SHELL_TOOL",
    "Effect",
    "ParsedCommand",
    "Rule",
    "RuleError",
    "RuleSet",
    "SimpleCommand",
    "Verdict",
    "parse_command",
    "parse_rule",
]

Effect = Literal["allow", "ask", "deny"]
SHELL_TOOL = "bash"
FILE_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir", "glob", "grep"})


class RuleError(ValueError):
    """A rule that does not parse; the message says why and what to write instead."""


# -- shell commands ------------------------------------------------------------------------


@final
@attrs.frozen
class CommandPattern:
    """The specifier of a ``bash`` rule: a command's words, exactly or as a prefix (``:*``)."""

    words: tuple[str, ...]
    prefix: bool

    def fits(self, words: Sequence[str]) -> bool:
        n = len(self.words)
        return tuple(words[:n]) == self.words and (self.prefix or len(words) == n)

    def allows(self, part: SimpleCommand) -> bool:
        """For allow rules: the words as written, and no output redirected into a file."""
        return not part.writes and self.fits(part.words)

    def catches(self, part: SimpleCommand) -> bool:
        """For deny and ask rules: also through ``VAR=value`` prefixes and ``/path/to/cmd``."""
        return any(self.fits(words) for words in _spellings(part.words))


def _spellings(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    yield words
    i = 0
    while i < len(words) and ASSIGNMENT.match(words[i]):
        i += 1
    if i < len(words):
        yield words[i:]
        base = posixpath.basename(words[i])
        if base and base != words[i]:
            yield (base, *words[i + 1 :])


def _command_pattern(spec: str) -> CommandPattern:
    body, prefix = spec.strip(), False
    if body.endswith(":*") or body.endswith(" *"):
        body, prefix = body[:-2].strip(), True
    if "*" in body:
        raise RuleError(
            "a * is only understood at the end, as in bash(git status:*); "
            "a rule cannot hold other wildcards"
        )
    parsed = parse_command(body)
    if not parsed.parts:
        raise RuleError("names no command; write bash alone to match every command")
    if not parsed.complete or len(parsed.parts) != 1 or parsed.parts[0].writes:
        raise RuleError(
            "must name one simple command, without &&, ;, |, redirections or $(...); "
            "write one rule per command"
        )
    return CommandPattern(parsed.parts[0].words, prefix)


# -- paths ---------------------------------------------------------------------------------


@final
@attrs.frozen
class PathPattern:
    """The specifier of a file-tool rule: a gitignore-style glob, compiled."""

    regex: re.Pattern[str]
    absolute: bool  # matches absolute paths (// or ~/), else workspace-relative ones

    def matches(self, path: str) -> bool:
        """Whether *path* (relative, or absolute without its leading ``/``) or a parent matches."""
        if self.regex.fullmatch(path):
            return True
        i = path.find("/")
        while i >= 0:
            if self.regex.fullmatch(path[:i]):
                return True
            i = path.find("/", i + 1)
        return False


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


def _path_pattern(spec: str, home: str) -> PathPattern:
    absolute = spec.startswith(("//", "~/"))
    if spec.startswith("//"):
        body = spec[2:]
    elif spec.startswith("~/"):
        if not home.startswith("/"):
            raise RuleError("uses ~/, but the home directory is unknown")
        body = f"{home.strip('/')}/{spec[2:]}".lstrip("/")
    elif spec.startswith(("./", "/")):
        body = spec[2:] if spec.startswith("./") else spec[1:]
    else:
        body = spec
    anchored = body != spec or "/" in spec.rstrip("/")
    body = body.rstrip("/")
    if not body:
        raise RuleError("names no path; write ./** for the whole workspace")
    segments = body.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise RuleError("has an empty, . or .. path segment; write a path without them")
    regex: list[str] = [] if anchored else ["(?:.*/)?"]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            regex.append(".*" if last else "(?:.*/)?")
        else:
            regex.append(_glob_segment(segment) + ("" if last else "/"))
    return PathPattern(re.compile("".join(regex), re.DOTALL), absolute)


@final
@attrs.frozen
class Workspace:
    """The workspace root, spelled as given (normalised) and with its symlinks resolved."""

    lexical: str
    real: str

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> Workspace:
        lexical = _normalise(os.path.abspath(os.fspath(path)))
        return cls(lexical, os.path.realpath(lexical))


def _normalise(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _relative(path: str, root: str) -> str | None:
    if path == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


@final
@attrs.frozen
class PathTarget:
    """Every spelling of one ``path`` argument: as given and with symlinks resolved (and with
    ``~`` expanded, in case the tool expands it)."""

    relative: tuple[str, ...]  # the spellings inside the workspace, relative to it
    absolute: tuple[str, ...]  # every spelling, absolute, without the leading "/"
    outside: str | None  # the first spelling outside the workspace


def _resolve(path: str, workspace: Workspace) -> PathTarget:
    spellings = [path, os.path.expanduser(path)] if path.startswith("~") else [path]
    relative: list[str] = []
    absolute: list[str] = []
    outside: str | None = None
    for spelled in spellings:
        lexical = _normalise(posixpath.join(workspace.lexical, spelled))
        try:
            real = os.path.realpath(lexical)
        except (OSError, ValueError):
            return PathTarget((), (), path)
        for full, root in ((lexical, workspace.lexical), (real, workspace.real)):
            absolute.append(full[1:])
            inside = _relative(full, root)
            if inside is None:
                outside = outside or full
            else:
                relative.append(inside)
    return PathTarget(tuple(dict.fromkeys(relative)), tuple(dict.fromkeys(absolute)), outside)


# -- rules ---------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_RULE = re.compile(rf"(?P<tool>{_NAME.pattern})(?:\((?P<spec>.*)\))?", re.DOTALL)


@final
@attrs.frozen
class Rule:
    """One parsed rule: ``text`` as written, the ``tool`` it names, and its specifier if any."""

    text: str
    tool: str
    command: CommandPattern | None = None
    path: PathPattern | None = None


def parse_rule(text: str, effect: Effect = "deny", home: str | None = None) -> Rule:
    """Parse one rule of an *effect* list.

    Raises:
        RuleError: the rule does not parse; the message says what is wrong.
    """
    if not isinstance(text, str) or not text.strip():
        raise RuleError("is empty; write Tool or Tool(specifier), e.g. bash(git status:*)")
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
        raise RuleError(f"does not parse: {why}; e.g. bash(git status:*) or read_file(./src/**)")
    tool, spec = match["tool"], match["spec"]
    if spec is None:
        return Rule(stripped, tool)
    if not spec.strip():
        raise RuleError(f"has an empty specifier; write {tool} alone to match every call")
    if tool == SHELL_TOOL:
        return Rule(stripped, tool, command=_command_pattern(spec))
    if tool in FILE_TOOLS:
        home = os.path.expanduser("~") if home is None else home
        pattern = _path_pattern(spec.strip(), home)
        if pattern.absolute and effect == "allow":
            raise RuleError(
                "names a path outside the workspace, and allow rules never apply outside it; "
                "use it in ask or deny, or answer the ask"
            )
        return Rule(stripped, tool, path=pattern)
    raise RuleError(
        f"gives {tool} a specifier, but specifiers are understood only for {SHELL_TOOL} "
        f"(a command) and the file tools {', '.join(sorted(FILE_TOOLS))} (a path glob); "
        f"write {tool} alone"
    )


@final
@attrs.frozen
class Verdict:
    """What the rules say about one call: the ``effect``; the deny or ask ``rule`` that decided,
    or the allow rules that covered it (``allowed_by``); ``defaulted`` when no rule matched; and
    ``note``: why allow rules for the tool did not apply."""

    effect: Effect
    rule: Rule | None = None
    defaulted: bool = False
    note: str | None = None
    allowed_by: tuple[Rule, ...] = ()


class _Call:
    """One call as the rules see it; its command or path is worked out once, on first use."""

    def __init__(self, name: str, arguments: Any, workspace: Workspace) -> None:
        self.name = name
        self.arguments = arguments if isinstance(arguments, Mapping) else {}
        self.workspace = workspace

    @cached_property
    def command(self) -> ParsedCommand | None:
        command = self.arguments.get("command")
        return parse_command(command) if isinstance(command, str) else None

    @cached_property
    def target(self) -> PathTarget | None:
        path = self.arguments.get("path", ".")
        return _resolve(path, self.workspace) if isinstance(path, str) else None

    def caught_by(self, rule: Rule) -> bool:
        if rule.command is not None:
            parsed = self.command
            return parsed is not None and any(rule.command.catches(p) for p in parsed.parts)
        if rule.path is not None:
            target = self.target
            spellings = () if target is None else target.relative
            if rule.path.absolute and target is not None:
                spellings = target.absolute
            return any(rule.path.matches(p) for p in spellings)
        return True

    def allowed_by(self, rules: Sequence[Rule]) -> tuple[Rule, ...]:
        """The allow rules that together cover this call, or ``()`` when they do not."""
        if not rules:
            return ()
        if self.name in FILE_TOOLS:
            target = self.target
            if target is None or target.outside is not None:
                return ()
            for r in rules:
                if r.path is None or all(r.path.matches(p) for p in target.relative):
                    return (r,)
            return ()
        for r in rules:
            if r.command is None:
                return (r,)
        parsed = self.command
        if parsed is None or not parsed.complete or not parsed.parts:
            return ()
        used: list[Rule] = []
        for part in parsed.parts:
            rule = next((r for r in rules if r.command and r.command.allows(part)), None)
            if rule is None:
                return ()
            if rule not in used:
                used.append(rule)
        return tuple(used)

    def note(self) -> str | None:
        """Why allow rules for this tool did not apply, when the reason is not plain."""
        if self.name in FILE_TOOLS:
            target = self.target
            if target is None:
                return "the path argument is not a string, so allow rules do not apply"
            if target.outside is not None:
                shown = json.dumps(target.outside, ensure_ascii=True)
                return f"allow rules never apply to {shown}: it is outside the workspace {self.workspace.lexical}"
        elif self.name == SHELL_TOOL and (parsed := self.command) is not None:
            if not parsed.complete:
                return f"the command could not be split safely ({parsed.problem}), so allow rules do not apply"
            if any(p.writes for p in parsed.parts):
                return "allow rules never apply to a command that redirects output into a file"
        return None


def _by_tool(rules: Sequence[Rule]) -> dict[str, tuple[Rule, ...]]:
    out: dict[str, list[Rule]] = {}
    for rule in rules:
        out.setdefault(rule.tool, []).append(rule)
    return {tool: tuple(found) for tool, found in out.items()}


@final
class RuleSet:
    """Compiled ``allow``, ``ask`` and ``deny`` lists: deny beats ask beats allow, then the
    *default*."""

    def __init__(
        self,
        *,
        allow: Sequence[Rule] = (),
        ask: Sequence[Rule] = (),
        deny: Sequence[Rule] = (),
        default: Effect = "ask",
        workspace: Workspace,
    ) -> None:
        self._allow = _by_tool(allow)
        self._ask = _by_tool(ask)
        self._deny = _by_tool(deny)
        self.default: Effect = default
        self.workspace = workspace

    def decide(self, name: str, arguments: Any) -> Verdict:
        """The verdict on calling tool *name* with *arguments* (any JSON value)."""
        call = _Call(name, arguments, self.workspace)
        for rule in self._deny.get(name, ()):
            if call.caught_by(rule):
                return Verdict("deny", rule)
        for rule in self._ask.get(name, ()):
            if call.caught_by(rule):
                return Verdict("ask", rule)
        allow = self._allow.get(name, ())
        used = call.allowed_by(allow)
        if used:
            return Verdict("allow", allowed_by=used)
        return Verdict(self.default, defaulted=True, note=call.note() if allow else None)
