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

import functools
import json
import os
import posixpath
import re
import stat
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, final

import attrs

from dsh_host import ToolDefinition

from ._bash import Finding, ShellChecks, covering
from ._shell import ParsedCommand, parse_command
from ._words import strict_words
from ._wrappers import strip_git_globals

__all__ = [
    "EDIT_RULES",
    "READ_RULES",
    "SHELL_RULES",
    "Anchors",
    "Effect",
    "Rule",
    "RuleError",
    "RuleSet",
    "Verdict",
    "parse_rule",
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
_ORDER: tuple[Effect, ...] = ("deny", "ask", "allow")
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


def _spellings_of(root: str) -> tuple[str, ...]:
    lexical = _normalise(os.path.abspath(root))
    return tuple(dict.fromkeys((lexical, os.path.realpath(lexical))))


def _normalise(path: str) -> str:
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

    def fits(self, words: Sequence[str]) -> bool:
        return self.regex.fullmatch(_SEP.join(words)) is not None

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
    return CommandPattern(re.compile(regex, re.DOTALL), exact=exact, head=first)


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
        roots, body, anchored = _spellings_of(anchors.home), spec[2:], True
    elif spec.startswith("/"):
        roots, body, anchored = _spellings_of(anchors.project), spec[1:], True
    elif spec.startswith("./"):
        roots, body, anchored = _spellings_of(anchors.workspace), spec[2:], True
    else:
        roots, body = _spellings_of(anchors.workspace), spec
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


# -- one tool's view of the rules --------------------------------------------------------------


@final
@attrs.frozen
class _Applied:
    """A rule as it applies to one tool: for a path rule, the arguments it reaches."""

    rule: Rule
    arguments: tuple[str, ...] = ()


@final
@attrs.frozen
class _ToolView:
    name: str
    paths: tuple[tuple[str, str], ...]  # (argument, access)
    shell: bool
    rules: Mapping[str, tuple[_Applied, ...]]  # effect -> rules that apply
    withheld: Mapping[str, tuple[tuple[Rule, ...], re.Pattern[str] | None]]  # access -> rules
    fixed: Verdict | None = None  # the verdict on every call, when no argument can change it


def _applied(
    rule: Rule, name: str, claude: str | None, paths: Sequence[tuple[str, str]]
) -> _Applied | None:
    named = rule.names(name, claude)
    if rule.path is not None:
        if named:
            reach = tuple(arg for arg, _ in paths)
        elif rule.tool in READ_RULES:
            reach = tuple(arg for arg, access in paths if access == "read")
        elif rule.tool in EDIT_RULES:
            reach = tuple(arg for arg, access in paths if access == "write")
        else:
            reach = ()
        return _Applied(rule, reach) if reach else None
    if not named:
        return None
    return _Applied(rule)


@final
@attrs.frozen
class Verdict:
    """What the rules say about one call.

    ``effect``; the deny or ask ``rule`` that decided, or the allow rules that covered it
    (``allowed_by``); ``defaulted`` when no rule matched; ``note``: why allow rules for the
    tool did not apply, or why a deny/ask rule was applied as an ask.
    """

    effect: Effect
    rule: Rule | None = None
    defaulted: bool = False
    note: str | None = None
    allowed_by: tuple[Rule, ...] = ()


@final
class RuleSet:
    """Compiled ``allow``, ``ask`` and ``deny`` lists: deny beats ask beats allow, then the
    *default*. Per tool, the rules that apply are worked out once and kept (a small LRU)."""

    def __init__(
        self,
        *,
        allow: Sequence[Rule] = (),
        ask: Sequence[Rule] = (),
        deny: Sequence[Rule] = (),
        default: Effect = "ask",
        workspace: str | os.PathLike[str],
    ) -> None:
        self._rules: dict[Effect, tuple[Rule, ...]] = {
            "allow": tuple(allow), "ask": tuple(ask), "deny": tuple(deny),
        }  # fmt: skip
        self.default: Effect = default
        self.workspace = _spellings_of(os.fspath(workspace))
        self._view = functools.lru_cache(maxsize=256)(self._make_view)
        self._by_tool: dict[int, tuple[ToolDefinition, _ToolView]] = {}
        self._shell = ShellChecks(
            reads={e: [r for r in found if r.tool in READ_RULES and r.path] for e, found in self._rules.items()},
            edits={e: [r for r in found if r.tool in EDIT_RULES and r.path] for e, found in self._rules.items()},
            default=default, workspace=self.workspace, resolve=self._targets, inside=self._inside,
        )  # fmt: skip

    @property
    def fence(self) -> Callable[[str], str | None] | None:
        """Why the sandbox would refuse a write to a path (``None``: it would not), if known:
        test runners' path options are checked against it."""
        return self._shell.fence

    @fence.setter
    def fence(self, fence: Callable[[str], str | None] | None) -> None:
        self._shell.fence = fence

    def denying(self) -> tuple[Rule, ...]:
        """The deny rules."""
        return self._rules["deny"]

    def rules(self) -> Iterable[Rule]:
        """Every rule, deny first."""
        for effect in _ORDER:
            yield from self._rules[effect]

    def _make_view(
        self, name: str, claude: str | None, paths: tuple[tuple[str, str], ...]
    ) -> _ToolView:
        shell = name in SHELL_RULES or claude in SHELL_RULES
        rules: dict[str, tuple[_Applied, ...]] = {
            effect: tuple(a for r in found if (a := _applied(r, name, claude, paths)) is not None)
            for effect, found in self._rules.items()
        }
        withheld: dict[str, tuple[tuple[Rule, ...], re.Pattern[str] | None]] = {}
        for access in ("read", "write"):
            reach = {arg for arg, kind in paths if kind == access}
            found: list[Rule] = []
            for effect in _ORDER[:2]:
                for rule in self._rules[effect]:
                    if rule.path is None:
                        continue
                    kind = rule.tool in (READ_RULES if access == "read" else EDIT_RULES)
                    if kind or (rule.names(name, claude) and (reach or not paths)):
                        found.append(rule)
            combined = None
            if found:
                combined = re.compile(
                    "|".join(f"(?:{r.path.regex.pattern})" for r in found if r.path), re.DOTALL
                )
            withheld[access] = (tuple(found), combined)
        view = _ToolView(name, paths, shell, rules, withheld)
        # (a bash call's cwd and a test runner's path options meet deny and ask path rules)
        if _argument_free(view) and not (shell and self._shell.path_bound):
            # Worked out once, here, by the same code a call takes: no argument can change it.
            view = attrs.evolve(view, fixed=self._verdict(view, {}))
        return view

    def view(self, name: str, tool: ToolDefinition | None) -> _ToolView:
        """The rules that apply to *tool* (or to a tool of *name* that does not exist)."""
        if tool is None:
            return self._view(name, None, ())
        known = self._by_tool.get(id(tool))
        if known is not None and known[0] is tool:
            return known[1]
        paths = tuple(sorted((str(k), str(v)) for k, v in tool.paths.items()))
        view = self._view(tool.name, tool.claude_name, paths)
        if len(self._by_tool) >= 256:
            self._by_tool.clear()
        self._by_tool[id(tool)] = (tool, view)
        return view

    # -- one call ----------------------------------------------------------------------------

    def _targets(self, value: Any) -> tuple[str, ...] | None:
        """Every absolute spelling of one path argument (absent: the workspace root)."""
        if value is None:
            value = "."
        if not isinstance(value, str) or "\x00" in value:
            return None
        spelled = [value, os.path.expanduser(value)] if value.startswith("~") else [value]
        out: list[str] = []
        for text in spelled:
            for root in self.workspace[:1]:
                lexical = _normalise(posixpath.join(root, text))
                out.append(lexical)
                try:
                    out.append(self._realpath(lexical))
                except (OSError, ValueError):
                    return None
        return tuple(dict.fromkeys(out))

    def _realpath(self, lexical: str) -> str:
        """``os.path.realpath(lexical)``, resolving only what lies below the workspace.

        The workspace's own real path was resolved once, at start (`workspace`, as every rule
        here assumes); below it, a component that exists and is no symbolic link is taken as
        it is (one ``lstat``). Anything else (a link, a missing component, a path outside the
        workspace) is resolved in full by ``os.path.realpath``, so the answer is always
        ``os.path.realpath``'s as of the workspace the host started with.
        """
        root = self.workspace[0]
        if lexical == root:
            return self.workspace[-1]
        if root == "/" or not lexical.startswith(root) or lexical[len(root)] != "/":
            return os.path.realpath(lexical)
        path = self.workspace[-1].rstrip("/")
        for part in lexical[len(root) + 1 :].split("/"):
            path = f"{path}/{part}"
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                return os.path.realpath(lexical)
            if stat.S_ISLNK(mode):
                return os.path.realpath(lexical)
        return path

    def _inside(self, path: str) -> bool:
        return any(
            path == root or path.startswith(root.rstrip("/") + "/") for root in self.workspace
        )

    def _caught(self, applied: _Applied, call: _Call, parsed: ParsedCommand | None) -> bool:
        rule = applied.rule
        if rule.command is not None:
            return parsed is not None and any(rule.command.catches(w) for w in parsed.commands)
        if rule.path is not None:
            for arg in applied.arguments:
                targets = call.targets(arg)
                if targets is None and isinstance(call.args.get(arg), str):
                    return True  # a path string that cannot be resolved: fail closed
                if targets is not None and any(rule.path.matches(t) for t in targets):
                    return True
            return False
        if rule.domain is not None:
            return _host_matches(call.args.get("url"), rule.domain)
        return True

    def decide(self, name: str, tool: ToolDefinition | None, arguments: Any) -> Verdict:
        """The verdict on calling *name* (defined by *tool*, if it exists) with *arguments*.

        For a tool whose verdict no argument can change (`fixed`), the verdict worked out when
        the tool was first seen; otherwise the rules are matched against *arguments*.
        """
        view = self.view(name, tool)
        if view.fixed is not None:
            return view.fixed
        return self._verdict(view, arguments)

    def fixed(self, name: str, tool: ToolDefinition | None) -> Verdict | None:
        """The verdict on every call of *tool* when no argument can change it, else ``None``."""
        return self.view(name, tool).fixed

    def _verdict(self, view: _ToolView, arguments: Any) -> Verdict:
        args: Mapping[str, Any] = arguments if isinstance(arguments, Mapping) else {}
        call = _Call(self, args)
        parsed: ParsedCommand | None = None
        if view.shell and isinstance(args.get("command"), str):
            parsed = parse_command(args["command"])
        for effect in _ORDER[:2]:
            for applied in view.rules[effect]:
                if self._caught(applied, call, parsed):
                    return Verdict(effect, applied.rule)
        if view.shell:
            found = self._shell_finding(view, parsed, args.get("cwd"))
            if found is not None:
                return Verdict(found[0], found[1], note=found[2])
        if parsed is not None and parsed.dynamic is not None:
            shell_rules = [a.rule for e in ("deny", "ask") for a in view.rules[e] if a.rule.command]
            if shell_rules:
                strict: Effect = "deny" if self.default == "deny" else "ask"
                note = f"{parsed.dynamic}, so {shell_rules[0].text} applies as an ask"
                return Verdict(strict, shell_rules[0], note=note)
        allow = view.rules["allow"]
        used = self._allowed_by(view, allow, call, parsed)
        if used:
            return Verdict("allow", allowed_by=used)
        return Verdict(
            self.default, defaulted=True, note=self._note(view, call, parsed) if allow else None
        )

    def _shell_finding(
        self, view: _ToolView, parsed: ParsedCommand | None, cwd: Any
    ) -> Finding | None:
        found = None if cwd is None else self._shell.cwd_rule(cwd)
        if found is None and parsed is not None:
            rules: dict[str, list[Rule]] = {e: [a.rule for a in view.rules[e]] for e in _ORDER[:2]}
            found = self._shell.runner_write_rule(parsed, cwd) or self._shell.carried(rules, parsed)
        return found

    def _allowed_by(
        self,
        view: _ToolView,
        allow: Sequence[_Applied],
        call: _Call,
        parsed: ParsedCommand | None,
    ) -> tuple[Rule, ...]:
        if not allow:
            return ()
        if view.paths:
            used: list[Rule] = []
            for arg, _ in view.paths:
                targets = call.targets(arg)
                if targets is None:
                    return ()
                inside = all(self._inside(t) for t in targets)
                rule = next(
                    (
                        a.rule for a in allow
                        if (inside and a.rule.path is None and a.rule.command is None
                            and a.rule.domain is None)
                        or (a.rule.path is not None and arg in a.arguments
                            and (inside or a.rule.path.absolute)
                            and all(a.rule.path.matches(t) for t in targets))
                    ),
                    None,
                )  # fmt: skip
                if rule is None:
                    return ()
                used.append(rule)
            return tuple(dict.fromkeys(used))
        plain = [
            a.rule
            for a in allow
            if a.rule.command is None and a.rule.path is None and a.rule.domain is None
        ]
        if plain:
            return (plain[0],)
        domains = [a.rule for a in allow if a.rule.domain is not None]
        for rule in domains:
            if rule.domain is not None and _host_matches(call.args.get("url"), rule.domain):
                return (rule,)
        if parsed is None or parsed.simple is None:
            return ()
        if self._shell.elsewhere(parsed, call.args.get("cwd")) is not None:
            return ()
        rules = [a.rule for a in allow]
        used = []
        for words in parsed.simple:
            found = covering(words, rules)
            if found is None:
                return ()
            used.append(found)
        return tuple(dict.fromkeys(used))

    def _note(self, view: _ToolView, call: _Call, parsed: ParsedCommand | None) -> str | None:
        if view.paths:
            for arg, _ in view.paths:
                targets = call.targets(arg)
                if targets is None:
                    what = "a string" if not isinstance(call.args.get(arg), str) else "a path"
                    return f"the {arg} argument is not {what}, so allow rules do not apply"
                outside = next((t for t in targets if not self._inside(t)), None)
                if outside is not None:
                    return (
                        f"allow rules never apply to {json.dumps(outside)}: it is outside the workspace "
                        f"{self.workspace[0]}"
                    )
        if parsed is not None and parsed.simple is None:
            return f"{parsed.problem}, so allow rules do not apply"
        if parsed is not None and (why := self._shell.elsewhere(parsed, call.args.get("cwd"))):
            return f"{why}, so allow rules do not apply"
        return None

    def withheld(
        self, name: str, tool: ToolDefinition | None, path: str, access: str
    ) -> Rule | None:
        """The deny or ask rule that keeps a running search away from *path*, if any."""
        found, combined = self.view(name, tool).withheld.get(access, ((), None))
        if combined is None or combined.fullmatch(path) is None:
            return None
        return next((r for r in found if r.path is not None and r.path.matches(path)), None)


def _argument_free(view: _ToolView) -> bool:
    """Whether no argument of a call can change the verdict on *view*'s tool.

    True when every rule that applies names the tool alone (no command, path or domain) and
    no allow rule has to check that the tool's path arguments lie inside the workspace.
    """
    applied = [a.rule for found in view.rules.values() for a in found]
    if any(r.command is not None or r.path is not None or r.domain is not None for r in applied):
        return False
    return not (view.paths and view.rules["allow"])


class _Call:
    """One call's arguments, with each path argument resolved at most once."""

    def __init__(self, rules: RuleSet, args: Mapping[str, Any]) -> None:
        self.rules = rules
        self.args = args
        self._targets: dict[str, tuple[str, ...] | None] = {}

    def targets(self, arg: str) -> tuple[str, ...] | None:
        if arg not in self._targets:
            self._targets[arg] = self.rules._targets(self.args.get(arg))
        return self._targets[arg]


def _host_matches(url: Any, domain: str) -> bool:
    if not isinstance(url, str):
        return False
    try:
        host = (urllib.parse.urlsplit(url.strip()).hostname or "").rstrip(".")
    except ValueError:
        return False
    return host == domain or host.endswith("." + domain)
