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
import shlex
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, final

import attrs

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

_OPERATOR_CHARS = "();<>|&\n"
_PLACEHOLDER = "\ue100"  # stands for a substitution's output: no rule word can equal it
_PRIVATE = re.compile("[\ue000-\ue1ff]")
_UNPROTECT = {0xE000 + ord(c): c for c in _OPERATOR_CHARS}
_SEPARATORS = frozenset({"&&", "||", ";", ";;", ";&", ";;&", "|", "|&", "&", "\n", "(", ")"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<&", "<>", "<<<", "<<"})
_OPERATORS = sorted(_SEPARATORS | _REDIRECTS, key=len, reverse=True)
_FILE_WRITES = frozenset({">", ">>", ">|", "&>", "&>>"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_ROUGH = re.compile(r"&&|\|\||\$\(|[<>]\(|[;&|()\n`]")
_MAX_DEPTH = 8


@final
@attrs.frozen
class SimpleCommand:
    """One simple command: its words, and whether it redirects output into a file."""

    words: tuple[str, ...]
    writes: bool = False


@final
@attrs.frozen
class ParsedCommand:
    """A command line split into simple commands; ``complete`` is ``False`` when unsure."""

    parts: tuple[SimpleCommand, ...]
    complete: bool = True
    problem: str | None = None


class _Unparsable(Exception):
    pass


def _protect(c: str) -> str:
    return chr(0xE000 + ord(c))


def _skip_single(s: str, i: int) -> int:
    end = s.find("'", i)
    if end < 0:
        raise _Unparsable("an unterminated quote")
    return end + 1


def _skip_double(s: str, i: int) -> int:
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _skip_backticks(s, i + 1)
        elif s.startswith("$(", i):
            i = _skip_parens(s, i + 2)
        else:
            i += 1
    raise _Unparsable("an unterminated quote")


def _skip_backticks(s: str, i: int) -> int:
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == "`":
            return i + 1
        else:
            i += 1
    raise _Unparsable("an unclosed backtick")


def _skip_parens(s: str, i: int) -> int:
    depth = 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            i = _skip_single(s, i + 1)
            continue
        if c == '"':
            i = _skip_double(s, i + 1)
            continue
        if c == "`":
            i = _skip_backticks(s, i + 1)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise _Unparsable("an unclosed $(")


def _prepass(s: str) -> tuple[str, list[str]]:
    """Cut out substitutions, join continued lines, and hide quoted operator characters."""
    if _PRIVATE.search(s):
        raise _Unparsable("characters from the private-use range")
    out: list[str] = []
    subs: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(s):
        c = s[i]
        if quote == "'":
            quote = None if c == "'" else quote
            out.append(_protect(c) if c in _OPERATOR_CHARS else c)
            i += 1
            continue
        if c == "\\" and i + 1 < len(s):
            following = s[i + 1]
            if following == "\n":
                pass  # a line continuation disappears, as in bash
            elif following in _OPERATOR_CHARS:
                out.append(("\\" if quote else "") + _protect(following))
            else:
                out.append(s[i : i + 2])
            i += 2
            continue
        if c == "`":
            end = _skip_backticks(s, i + 1)
            subs.append(re.sub(r"\\([`$\\])", r"\1", s[i + 1 : end - 1]))
        elif s.startswith("$(", i) or (quote is None and c in "<>" and s.startswith("(", i + 1)):
            end = _skip_parens(s, i + 2)
            subs.append(s[i + 2 : end - 1])
        else:
            if c == "'" and quote is None:
                quote = "'"
            elif c == '"':
                quote = None if quote else '"'
            elif quote and c in _OPERATOR_CHARS:
                c = _protect(c)
            out.append(c)
            i += 1
            continue
        out.append(_PLACEHOLDER)
        i = end
    if quote:
        raise _Unparsable("an unterminated quote")
    return "".join(out), subs


def _tokens(text: str) -> list[tuple[bool, str]]:
    """``(is_operator, token)`` pairs, with runs of operator characters split into operators."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_OPERATOR_CHARS)
    lexer.whitespace = " \t"  # as bash: a carriage return is part of a word
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[tuple[bool, str]] = []
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise _Unparsable(str(exc).lower()) from None
    for token in tokens:
        if token and all(c in _OPERATOR_CHARS for c in token):
            while token:
                op = next(op for op in _OPERATORS if token.startswith(op))
                out.append((True, op))
                token = token[len(op) :]
        elif any(c in _OPERATOR_CHARS for c in token):
            raise _Unparsable("an operator inside a word")
        else:
            out.append((False, token.translate(_UNPROTECT)))
    return out


def _writes(op: str, target: str) -> bool:
    if op in _FILE_WRITES:
        return target != "/dev/null"
    if op == ">&":
        return not (target.isdigit() or target == "-")
    return op == "<>"


def _rough(command: str) -> tuple[SimpleCommand, ...]:
    """A best-effort split of a command the parser gave up on (for deny and ask rules)."""
    parts = []
    for chunk in _ROUGH.split(command):
        words = tuple(w for w in (w.strip("'\"\\") for w in chunk.split()) if w)
        if words:
            parts.append(SimpleCommand(words))
    return tuple(parts)


def parse_command(command: str, _depth: int = 0) -> ParsedCommand:
    """Split a shell command line into its simple commands, substitutions included."""
    try:
        text, subs = _prepass(command)
        tokens = _tokens(text)
    except _Unparsable as exc:
        return ParsedCommand(_rough(command), complete=False, problem=str(exc))
    parts: list[SimpleCommand] = []
    words: list[str] = []
    writes = False
    problem: str | None = None
    i = 0
    while i < len(tokens):
        is_op, token = tokens[i]
        i += 1
        if not is_op:
            words.append(token)
        elif token in _SEPARATORS:
            if words or writes:  # a bare "> file" truncates the file: a command of its own
                parts.append(SimpleCommand(tuple(words), writes))
            words, writes = [], False
        elif i == len(tokens) or tokens[i][0]:
            problem = f"a {token} redirection without a target"
        else:
            target = tokens[i][1]
            i += 1
            if token == "<<":
                problem = "a here-document"
            writes = writes or _writes(token, target)
    if words or writes:
        parts.append(SimpleCommand(tuple(words), writes))
    if subs and _depth >= _MAX_DEPTH:
        problem = "substitutions nested too deeply"
        subs = []
    for sub in subs:
        inner = parse_command(sub, _depth + 1)
        parts.extend(inner.parts)
        problem = problem or inner.problem
    return ParsedCommand(tuple(parts), complete=problem is None, problem=problem)


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
    while i < len(words) and _ASSIGNMENT.match(words[i]):
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
    """What the rules say about one call: the ``effect``; the deny or ask ``rule`` that decided;
    ``defaulted`` when no rule matched; and ``note``: why allow rules for the tool did not apply."""

    effect: Effect
    rule: Rule | None = None
    defaulted: bool = False
    note: str | None = None


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

    def allowed_by(self, rules: Sequence[Rule]) -> bool:
        if not rules:
            return False
        if self.name in FILE_TOOLS:
            target = self.target
            if target is None or target.outside is not None:
                return False
            return any(
                r.path is None or all(r.path.matches(p) for p in target.relative) for r in rules
            )
        if any(r.command is None for r in rules):
            return True
        parsed = self.command
        if parsed is None or not parsed.complete or not parsed.parts:
            return False
        return all(any(r.command.allows(p) for r in rules if r.command) for p in parsed.parts)

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
        if call.allowed_by(allow):
            return Verdict("allow")
        return Verdict(self.default, defaulted=True, note=call.note() if allow else None)
