"""One tool's view of the rules, and the verdict on a call.

`ToolView` holds the rules that apply to one tool (worked out once per tool by
`RuleSet.view`); `applied_to` says whether and where a rule reaches a tool; `argument_free` says
when no argument can change the verdict; `Verdict` is what the rules say about one call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs

from ._grammar import EDIT_RULES, READ_RULES, Effect, Rule

__all__ = [
    "Applied",
    "ToolView",
    "Verdict",
    "applied_to",
    "argument_free",
    "host_matches",
    "path_bound",
    "url_host",
]


@final
@attrs.frozen
class Applied:
    """A rule as it applies to one tool: for a path rule, the arguments it reaches; ``whole``
    for a deny or ask rule whose path specifier names a tool with no path argument (it cannot
    be judged, so it catches every call: fail closed)."""

    rule: Rule
    arguments: tuple[str, ...] = ()
    whole: bool = False


@final
@attrs.frozen
class ToolView:
    name: str
    paths: tuple[tuple[str, str], ...]  # (argument, access)
    shell: bool
    rules: Mapping[str, tuple[Applied, ...]]  # effect -> rules that apply
    withheld: Mapping[str, tuple[tuple[Rule, ...], re.Pattern[str] | None]]  # access -> rules
    fixed: Verdict | None = None  # the verdict on every call, when no argument can change it
    by_paths: bool = False  # the verdict depends on the path arguments alone (`path_bound`)


def applied_to(
    rule: Rule,
    name: str,
    claude: str | None,
    paths: Sequence[tuple[str, str]],
    effect: Effect = "allow",
) -> Applied | None:
    """How *rule* (of *effect*) applies to the tool *name*, or ``None``. A deny or ask rule
    naming the tool with a path specifier the tool has no path argument for (an MCP tool:
    ``mcp__srv__echo(text=secret)``) applies to every call; an allow rule so, to none."""
    named = rule.names(name, claude)
    if rule.path is not None:
        if named and not paths and effect != "allow":
            return Applied(rule, whole=True)
        if named:
            reach = tuple(arg for arg, _ in paths)
        elif rule.tool in READ_RULES:
            reach = tuple(arg for arg, access in paths if access == "read")
        elif rule.tool in EDIT_RULES:
            reach = tuple(arg for arg, access in paths if access == "write")
        else:
            reach = ()
        return Applied(rule, reach) if reach else None
    if not named:
        return None
    return Applied(rule)


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


def argument_free(view: ToolView) -> bool:
    """Whether no argument of a call can change the verdict on *view*'s tool.

    True when every rule that applies names the tool alone (no command, path or domain) and
    no allow rule has to check that the tool's path arguments lie inside the workspace.
    """
    applied = [a.rule for found in view.rules.values() for a in found]
    if any(r.command is not None or r.path is not None or r.domain is not None for r in applied):
        return False
    return not (view.paths and view.rules["allow"])


def path_bound(view: ToolView) -> bool:
    """Whether the verdict on *view*'s tool depends on its path arguments alone: where each
    one leads (its lexical and real paths) and whether it is a string. True for a tool that is
    not a shell, with path arguments, that no command or domain rule reaches."""
    if view.shell or not view.paths:
        return False
    applied = [a.rule for found in view.rules.values() for a in found]
    return all(r.command is None and r.domain is None for r in applied)


_PLAIN_URL = (
    r"(?i:https?)://(?P<host>[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\.?(?::[0-9]{1,5})?(?:[/?#]|\Z)"
)
_ENDS = "".join(map(chr, range(0x21)))  # what a WHATWG URL parser strips from both ends
_NUMERIC = r"[0-9]+|0x[0-9a-f]*"  # a last label that makes a host an IPv4 address
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = rf"(?:{_OCTET}\.){{3}}{_OCTET}"


@functools.cache
def _url_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The plain URL, a numeric last label and a dotted quad, compiled for the first URL
    judged: about half a millisecond of a cold start that judges none (issue 27)."""
    return re.compile(_PLAIN_URL), re.compile(_NUMERIC), re.compile(_DOTTED_QUAD)


def url_host(url: Any) -> str | None:
    """The host *url* names, in lower case, when it is written plainly (``http`` or ``https``,
    ``//``, an ASCII host name or IPv4 address, an optional port, then ``/``, ``?``, ``#`` or
    nothing); ``None`` for anything else.

    Every other spelling is one that parsers read differently, and the one that fetches it
    (Node's WHATWG parser, for Claude Code's ``WebFetch``) is not this one: ``\\`` taken for
    ``/``, user info (``https://evil.com\\@example.com/``), ``https:evil.com``, percent-encoded
    or non-ASCII hosts (``ev%69l.com``, ``evil。com``, full-width letters), tabs and newlines
    removed from inside, an IPv4 address spelled otherwise than as four decimal numbers
    (``127.1``, ``0x7f.1``, ``2130706433``, ``0177.0.0.1``). So a domain rule judges no such URL
    by its host: a deny or ask rule with a domain catches it (fail closed), an allow rule does
    not allow it."""
    if not isinstance(url, str):
        return None
    plain, numeric, dotted_quad = _url_patterns()
    match = plain.match(url.strip(_ENDS))
    if match is None:
        return None
    host = match["host"].lower()
    last = host.rpartition(".")[2]
    if numeric.fullmatch(last) and not dotted_quad.fullmatch(host):
        return None  # an IPv4 address in another spelling (127.1, 0x7f.1, 2130706433, 0177...)
    return host


def host_matches(host: str | None, domain: str) -> bool:
    """Whether *host* (`url_host`) is *domain* or below it (``api.example.com``)."""
    if host is None:
        return False
    domain = domain.lower().rstrip(".")
    return host == domain or host.endswith("." + domain)
