"""What dsh's sandbox says of the path a Claude Code file tool names (for ``dsh hook claude``).

Claude Code runs its own tools, so dsh's sandbox confines none of them. What the hook can do
is judge the path a file tool names as dsh's own file tools would, through the ``sandbox``
plugin's fence (`Fence`):

* a read the fence refuses (``deny_read``, outside the readable roots, ``/proc``) and a write
  it refuses (``read-only`` mode, outside the writable roots, a protected path such as
  ``dsh.toml``, ``pyproject.toml``, ``.claude`` or ``.git``) are denied, whatever the rules say:
  in ``dsh call`` the same call would end ``SANDBOX_DENIED``;
* a search (``Grep``, ``Glob``, ``LS``) whose directory holds a ``deny_read`` entry is asked,
  never allowed: dsh's own search tools leave such files out, Claude Code's would read them.
  (dsh's own state, the audit database say, is left out of this: it is denied to commands so
  that none can lock it, not for what it holds.)

Bash is not judged so: a shell command's paths are not known before it runs. With no
``sandbox`` plugin enabled, nothing is judged here (the rules alone decide).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs

from dsh_host import DshError, ToolFailure
from dsh_host import ToolExecutionResult as Result

if TYPE_CHECKING:
    from dsh_host import Host, ToolExecution

__all__ = [
    "PATHS", "WALK_LIMIT", "Fence", "Verdict", "claude_path", "fence_verdict", "withheld_below",
]  # fmt: skip

PATHS: Final = {
    "Read": ("file_path", "read"),
    "NotebookRead": ("notebook_path", "read"),
    "Write": ("file_path", "write"),
    "Edit": ("file_path", "write"),
    "MultiEdit": ("file_path", "write"),
    "NotebookEdit": ("notebook_path", "write"),
    "Grep": ("path", "search"),
    "Glob": ("path", "search"),
    "LS": ("path", "search"),
}
"""Claude Code's file tools: the key of the path each names, and what it does there (a search
without the key searches the working directory)."""

_GLOB: Final = frozenset("*?[")

WALK_LIMIT: Final = 50_000
"""The most entries `withheld_below` looks at under one search root; past it, the search is
asked (it may meet a withheld path not looked at)."""


_JS_SPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's ``String.prototype.trim`` removes (Claude Code trims a path first)."""


def claude_path(value: str, here: str) -> tuple[str, bool]:
    """*value* as Claude Code resolves a tool's path: trimmed (as JavaScript trims), in NFC,
    ``~`` and ``~/`` taken from the home directory, relative to *here* (an empty one is *here*);
    and whether that differs from how it was spelled, but for being made absolute."""
    text = unicodedata.normalize("NFC", value.strip(_JS_SPACE))
    # A character this Python's Unicode tables do not know may compose in Node's newer ones.
    unusual = text != value or any(unicodedata.category(c) == "Cn" for c in text)
    if text == "~" or text.startswith("~/"):
        text = os.path.expanduser("~") + text[1:]
    return os.path.join(here, text), unusual


@runtime_checkable
class Fence(Protocol):
    """What the hook asks of the ``sandbox`` plugin (`dsh_plugins_builtin.sandbox`)."""

    def check_read(self, path: str) -> Any: ...  # pragma: no cover - protocol

    def check_write(self, path: str) -> Any: ...  # pragma: no cover - protocol

    @property
    def policy(self) -> Any: ...  # pragma: no cover - protocol


@attrs.frozen
class Verdict:
    """The fence's answer: ``deny`` (with the error result audit records) or ``ask``."""

    decision: str
    reason: str
    result: Result | None = None


def fence_verdict(host: Host, tool: str, tool_input: Any) -> Verdict | None:
    """What the fence says of Claude Code's *tool* call (``None``: nothing against it)."""
    named = PATHS.get(tool)
    fence = host.pm.get_plugin("sandbox")
    if named is None or not isinstance(fence, Fence) or not isinstance(tool_input, dict):
        return None
    key, access = named
    given = [tool_input.get(k) for k in (key, "path") if k in tool_input] or [None]
    if access == "search":  # no path (or null): the working directory
        given = [p if p is not None else "." for p in given]
        given += _pattern_base(tool, tool_input, str(host.workspace))
    paths = [p for p in given if isinstance(p, str)]
    if not paths:
        return None  # the dry run judged the arguments already
    spellings = dict.fromkeys(s for p in paths for s in _spellings(host.workspace, p))
    for spelled in spellings:
        refused = _refusal(fence, access, spelled)
        if refused is not None:
            return refused
    if access == "write":
        return _config_write(fence.policy, spellings, Path(host.workspace))
    policy = fence.policy
    own = set(getattr(policy, "own_state", ()))  # denied to commands for their locks only
    entries = [entry for entry in policy.deny_read if entry not in own]
    for spelled in spellings if access == "search" else ():
        held = _held(Path(spelled), entries, policy.deny_patterns, host.workspace)
        if held is not None:
            return Verdict(
                "ask",
                f"dsh (sandbox): {tool} in {spelled} would read {held}, which is in "
                "[plugin.sandbox] deny_read: dsh's own search leaves it out, Claude Code's "
                "cannot",
            )
    return None


def _spellings(workspace: Path, path: str) -> tuple[str, ...]:
    """*path* as the fence would resolve it, as Claude Code may (``..`` taken lexically, as
    Node's ``path.resolve`` does: ``link/../.env`` is ``.env``), and where it really leads (a
    link in the host's ``/tmp``, which the fence would take for its private tmp)."""
    if "\0" in path:
        return (path,)
    absolute = os.path.join(workspace, os.path.expanduser(path))
    return (path, os.path.normpath(absolute), os.path.realpath(absolute))


def _refusal(fence: Fence, access: str, path: str) -> Verdict | None:
    try:
        (fence.check_write if access == "write" else fence.check_read)(path)
    except DshError as exc:
        by = getattr(exc, "by", None) or "sandbox"
        failure = ToolFailure(exc.message, exc.code, type(exc).__name__)
        result = Result(
            content=f"Error: {exc.message}", is_error=True, error=failure, decided_by=by
        )
        return Verdict("deny", f"dsh ({by}): {exc.message}", result)
    return None


def _config_write(policy: Any, spellings: Iterable[str], workspace: Path) -> Verdict | None:
    """A write to a file a later hook could read its configuration from, deeper in the project
    than the fence protects (``sub/dsh.toml``: Claude Code runs the hook where its shell
    ``cd``-ed to): asked, never allowed. The names are the sandbox's relative ``protected``
    entries (``.git``, ``.claude``, ``.dsh``, ``dsh.toml`` by default) and ``pyproject.toml``."""
    names = {Path(e).name for e in policy.protected if not os.path.isabs(e)} | {"pyproject.toml"}
    for spelled in spellings:
        path = Path(spelled)  # (the workspace's own place does not count: ~/.dsh/proj)
        below = path.relative_to(workspace) if path.is_relative_to(workspace) else path
        if names & set(below.parts):
            return Verdict(
                "ask",
                f"dsh (sandbox): {spelled} is a file a later run may read its configuration "
                "from (when Claude Code's working directory moves there)",
            )
    return None


def _held(
    root: Path, entries: Iterable[Path], patterns: Iterable[str], workspace: Path
) -> str | None:
    """The first ``deny_read`` entry or glob that may lie inside *root*."""
    for entry in entries:
        if entry.is_relative_to(root):
            return str(entry)
    for pattern in patterns:
        base = Path(os.path.abspath(os.path.join(workspace, pattern)))
        literal = Path(*[part for part in _until_glob(base.parts)])
        if literal.is_relative_to(root) or root.is_relative_to(literal):
            return pattern
    return None


def _until_glob(parts: tuple[str, ...]) -> Iterable[str]:
    for part in parts:
        if _GLOB & set(part):
            return
        yield part


def withheld_below(host: Host, execution: ToolExecution, tool: str, tool_input: Any) -> str | None:
    """Why a Claude Code search (``Grep``, ``Glob``, ``LS``) must be asked: under its root lies a
    path that a plugin withholds from dsh's own searches (`Host.path_denied`, for example
    under a ``Read(./secrets/**)`` deny or ask rule). dsh's search leaves such a path out as it
    meets it; Claude Code's would read it. ``None`` when nothing under the root is withheld,
    or no plugin withholds any path (nothing is walked then).

    The walk follows no link, but asks of each link where it leads; past `WALK_LIMIT` entries
    the search is asked too."""
    named = PATHS.get(tool)
    if named is None or named[1] != "search" or not host.hooks.impls("dsh_path_denied"):
        return None
    given = tool_input.get(named[0]) if isinstance(tool_input, dict) else None
    places = [given if isinstance(given, str) else "."]
    places += _pattern_base(tool, tool_input, str(host.workspace))
    fence = host.pm.get_plugin("sandbox")
    seen = 0
    for place in places:
        root = os.path.realpath(os.path.join(host.workspace, place))
        for path, linked in _entries(root):
            seen += 1
            if seen > WALK_LIMIT:
                return f"dsh: {tool} in {root} meets more than {WALK_LIMIT} paths to check"
            reason = host.path_denied(execution, path, "read")
            if reason is None and linked and isinstance(fence, Fence):
                refused = _refusal(fence, "read", path)  # a link out to what deny_read hides
                reason = refused.reason if refused is not None else None
            if reason is not None:
                return f"dsh: {tool} in {root} would read {path}, which is {reason}"
    return None


def _pattern_base(tool: str, tool_input: Any, workspace: str) -> list[str]:
    """The directory Claude Code's ``Glob`` searches for its *pattern* when that lies beyond
    its ``path`` (``[]`` when it does not): the pattern joined to the ``path`` (the working
    directory without one; an absolute pattern as it is), up to the segment holding its first
    ``*``, ``?``, ``[`` or ``{``, ``..`` taken lexically, then one directory up for each
    segment after that holding ``..`` (``**/..`` climbs above where ``**`` starts); a pattern
    with none of them, its directory."""
    if tool != "Glob" or not isinstance(tool_input, dict):
        return []
    pattern, place = tool_input.get("pattern"), tool_input.get("path")
    if not isinstance(pattern, str):
        return []
    search = claude_path(place, workspace)[0] if isinstance(place, str) else workspace
    pattern = re.sub(r"\\(.)", r"\1", pattern)  # a glob escape: `..\/x` climbs as `../x` does
    expanded = _braces(pattern, [_BRACE_WORK]) if "{" in pattern else [pattern]
    if expanded is None:
        return ["/"]  # more than the hook will expand: judged from the top (it asks)
    roots: list[str] = []
    for one in expanded:  # braces first, over the whole pattern: `.{./.,}./x` is `../../x`
        parts = claude_path(one, search)[0].split("/")
        cut = next((i for i, part in enumerate(parts) if set(part) & set("*?[{(")), None)
        if cut is None:
            root = os.path.dirname(os.path.normpath("/".join(parts))) or "/"
        else:
            root = os.path.normpath("/".join(parts[:cut]) or "/")
            for _ in range(sum(_may_climb(part) for part in parts[cut:])):
                root = os.path.dirname(root)
        if not Path(root).is_relative_to(os.path.normpath(search)):
            roots.append(root)
    return list(dict.fromkeys(roots))


_CLASS = re.compile(r"\[!?\]?[^]]*\]")  # a bracket expression: `[.]`, `[!a]`, `[].]`
_EXTGLOB = re.compile(r"[@+?*!]\(|\[\[:")  # `@(..)`, `+(.)`..., and `[[:punct:]]`
_BRACE_WORK = 4096
"""Characters the hook writes out expanding one pattern's braces, at most (past it, the
pattern is judged from the top: a brace bomb costs the hook nothing more)."""


def _may_climb(segment: str) -> bool:
    """Whether a segment of a glob (its braces expanded) may match ``..`` or hold one: as
    written, with each bracket expression that can match a dot taken as one (`.[.]`), or
    with an extended glob or a character class, which the hook does not read."""
    if ".." in segment or _EXTGLOB.search(segment):
        return True
    return ".." in _CLASS.sub(lambda m: "." if _class_has_dot(m.group()) else "x", segment)


def _class_has_dot(expression: str) -> bool:
    """Whether a bracket expression may match ``.`` (a range, ``[+-/]``, is taken to)."""
    inside = expression[1:-1]
    if inside[:1] in ("!", "^"):
        return "." not in inside[1:] or "-" in inside[1:]
    return "." in inside or "-" in inside


def _braces(text: str, work: list[int]) -> list[str] | None:
    """*text* with its braces expanded, or ``None`` once *work* (shared by every level: the
    characters written out) runs out. An unclosed brace stays as written."""
    start = text.find("{")
    if start == -1:
        return [text]
    depth, parts, mark = 0, [], start + 1
    for at in range(start, len(text)):
        char = text[at]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                parts.append(text[mark:at])
                head, tail = text[:start], text[at + 1 :]
                out: list[str] = []
                for part in parts:
                    work[0] -= len(head) + len(part) + len(tail)
                    if work[0] < 0:
                        return None
                    found = _braces(head + part + tail, work)
                    if found is None:
                        return None
                    out += found
                return out
        elif char == "," and depth == 1:
            parts.append(text[mark:at])
            mark = at + 1
    return [text]


def _entries(root: str) -> Iterator[tuple[str, bool]]:
    """*root* and every path below it, real, and whether it is where a link leads (a link is
    given so, not entered)."""
    yield root, False
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    if entry.is_symlink():
                        yield os.path.realpath(entry.path), True
                    else:
                        yield entry.path, False
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
        except OSError:  # unreadable: no search reads it either
            continue
