"""Matching calls against compiled permission rules: `RuleSet`.

The grammar of a rule and its compiled patterns live in `._grammar` (re-exported here, the
path the permissions plugin and its docs name); one tool's view of the rules and the `Verdict`
in `._view`; the resolution of path arguments in `._place`. A `RuleSet` works out each tool's
view once and matches each call against it: deny beats ask beats allow, then the default.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from dsh_host import ToolDefinition

if TYPE_CHECKING:  # the shell parser is imported by the first bash call (issue 27)
    from ._shell import ParsedCommand

from ._bash import Finding, ShellChecks, covering
from ._grammar import (
    EDIT_RULES,
    ORDER,
    READ_RULES,
    SHELL_RULES,
    Anchors,
    Effect,
    Rule,
    RuleError,
    parse_rule,
    spellings_of,
)
from ._place import Place
from ._view import (
    Applied,
    ToolView,
    Verdict,
    applied_to,
    argument_free,
    host_matches,
    path_bound,
    url_host,
)

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

_PLACES_KEPT = 1_024
"""The most verdicts `RuleSet.decide` keeps by where the path arguments lead."""


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
        self.workspace = spellings_of(os.fspath(workspace))
        self._place = place = Place(self.workspace)
        self._view = functools.lru_cache(maxsize=256)(self._make_view)
        self._by_tool: dict[int, tuple[ToolDefinition, ToolView]] = {}
        # (view id, (targets, is a string) per path argument) -> (view, verdict): `decide`
        self._by_places: dict[tuple[Any, ...], tuple[ToolView, Verdict]] = {}
        self._shell = ShellChecks(
            reads={e: [r for r in found if r.tool in READ_RULES and r.path] for e, found in self._rules.items()},
            edits={e: [r for r in found if r.tool in EDIT_RULES and r.path] for e, found in self._rules.items()},
            default=default, workspace=self.workspace, resolve=place.targets, inside=place.inside,
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
        for effect in ORDER:
            yield from self._rules[effect]

    def _make_view(
        self, name: str, claude: str | None, paths: tuple[tuple[str, str], ...]
    ) -> ToolView:
        shell = name in SHELL_RULES or claude in SHELL_RULES
        rules: dict[str, tuple[Applied, ...]] = {
            effect: tuple(
                a for r in found if (a := applied_to(r, name, claude, paths, effect)) is not None
            )
            for effect, found in self._rules.items()
        }
        withheld: dict[str, tuple[tuple[Rule, ...], re.Pattern[str] | None]] = {}
        for access in ("read", "write"):
            reach = {arg for arg, kind in paths if kind == access}
            found: list[Rule] = []
            for effect in ORDER[:2]:
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
        view = ToolView(name, paths, shell, rules, withheld)
        # (a bash call's cwd and a test runner's path options meet deny and ask path rules)
        if argument_free(view) and not (shell and self._shell.path_bound):
            # Worked out once, here, by the same code a call takes: no argument can change it.
            view = attrs.evolve(view, fixed=self._verdict(view, {}))
        elif path_bound(view):
            view = attrs.evolve(view, by_paths=True)
        return view

    def view(self, name: str, tool: ToolDefinition | None) -> ToolView:
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

    def _caught(self, applied: Applied, call: _Call, parsed: ParsedCommand | None) -> bool:
        if applied.whole:
            return True  # a specifier this tool cannot be judged by: every call (fail closed)
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
            # A URL not written plainly, not a string or missing: caught (fail closed), and
            # allowed by no domain rule (`_allowed_by`; a plain ``WebFetch`` rule allows it).
            host = url_host(call.args.get("url"))
            return host is None or host_matches(host, rule.domain)
        return True

    def decide(self, name: str, tool: ToolDefinition | None, arguments: Any) -> Verdict:
        """The verdict on calling *name* (defined by *tool*, if it exists) with *arguments*.

        For a tool whose verdict no argument can change (`fixed`), the verdict worked out when
        the tool was first seen; otherwise the rules are matched against *arguments*.
        """
        view = self.view(name, tool)
        if view.fixed is not None:
            return view.fixed
        if not view.by_paths:
            return self._verdict(view, arguments)
        # Only where the path arguments lead can change the verdict: each is resolved (as
        # every call must be: a symlink may have changed), and the verdict on the same places
        # is looked up rather than matched again.
        args: Mapping[str, Any] = arguments if isinstance(arguments, Mapping) else {}
        call = _Call(self._place, args)
        key = (id(view), *[(call.targets(a), isinstance(args.get(a), str)) for a, _ in view.paths])
        known = self._by_places.get(key)
        if known is not None and known[0] is view:
            return known[1]
        verdict = self._verdict(view, args, call)
        if len(self._by_places) >= _PLACES_KEPT:  # the paths come from the model: bounded
            self._by_places.clear()
        self._by_places[key] = (view, verdict)
        return verdict

    def fixed(self, name: str, tool: ToolDefinition | None) -> Verdict | None:
        """The verdict on every call of *tool* when no argument can change it, else ``None``."""
        return self.view(name, tool).fixed

    def _verdict(self, view: ToolView, arguments: Any, call: _Call | None = None) -> Verdict:
        args: Mapping[str, Any] = arguments if isinstance(arguments, Mapping) else {}
        if call is None:
            call = _Call(self._place, args)
        parsed: ParsedCommand | None = None
        if view.shell and isinstance(args.get("command"), str):
            from ._shell import parse_command

            parsed = parse_command(args["command"])
        for effect in ORDER[:2]:
            for applied in view.rules[effect]:
                if self._caught(applied, call, parsed):
                    note = None
                    if applied.whole:
                        note = (
                            f"{view.name} takes no path argument, so the specifier of "
                            f"{applied.rule.text} cannot be judged and the rule applies to every call"
                        )
                    return Verdict(effect, applied.rule, note=note)
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
        self, view: ToolView, parsed: ParsedCommand | None, cwd: Any
    ) -> Finding | None:
        found = None if cwd is None else self._shell.cwd_rule(cwd)
        if found is None and parsed is not None:
            rules: dict[str, list[Rule]] = {e: [a.rule for a in view.rules[e]] for e in ORDER[:2]}
            found = self._shell.runner_write_rule(parsed, cwd) or self._shell.carried(rules, parsed)
        return found

    def _allowed_by(
        self,
        view: ToolView,
        allow: Sequence[Applied],
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
                inside = all(self._place.inside(t) for t in targets)
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
            if rule.domain is not None and host_matches(
                url_host(call.args.get("url")), rule.domain
            ):
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

    def _note(self, view: ToolView, call: _Call, parsed: ParsedCommand | None) -> str | None:
        if view.paths:
            for arg, _ in view.paths:
                targets = call.targets(arg)
                if targets is None:
                    what = "a string" if not isinstance(call.args.get(arg), str) else "a path"
                    return f"the {arg} argument is not {what}, so allow rules do not apply"
                outside = next((t for t in targets if not self._place.inside(t)), None)
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


class _Call:
    """One call's arguments, with each path argument resolved at most once."""

    def __init__(self, place: Place, args: Mapping[str, Any]) -> None:
        self.place = place
        self.args = args
        self._targets: dict[str, tuple[str, ...] | None] = {}

    def targets(self, arg: str) -> tuple[str, ...] | None:
        if arg not in self._targets:
            self._targets[arg] = self.place.targets(self.args.get(arg))
        return self._targets[arg]
