"""What the rules check of a bash call beyond its words: wrappers, the tool's ``cwd``, git in a
repository the agent could have written, test runners' path options, and commands a program
may run from its arguments.

`covering` finds the allow rule for one simple command (wrappers only with what they wrap);
`ShellChecks` holds one rule set's path rules and answers the rest. Findings come back as
``(effect, rule, note)``; `_rules` turns them into verdicts.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, final

from ._wrappers import DYNAMIC, WRAPPERS, git_globals, glued, unwrap, xargs_replaces

# The readings of what programs run and write (`._hidden`, `._programs`) are imported where a
# command is first matched against rules: a rule set with no command or path rule for bash, or
# a start that judges no bash call, loads neither (issue 27).

if TYPE_CHECKING:  # the shell parser is imported by the first bash call (issue 27)
    from ._grammar import CommandPattern
    from ._rules import Rule
    from ._shell import ParsedCommand

__all__ = ["Finding", "ShellChecks", "covering"]

Finding = tuple[Literal["deny", "ask"], "Rule", str]
"""A deny or ask rule that applies to a bash call: (effect, rule, why)."""

_GIT_ELSEWHERE = frozenset({"-C", "--git-dir", "--work-tree", "--bare"})
_FIND_ELSEWHERE = frozenset({"-execdir", "-okdir"})
# programs that never run an argument (`printf -v` and `test -v` are hidden code on their own)
_INERT = frozenset({"echo", "printf", ":", "true", "false", "test", "["})
_MAX_WRAPPED = 4
_STRICT: tuple[Literal["deny", "ask"], ...] = ("deny", "ask")
_MAX_TRIES = 64  # readings of one script word a rule is matched against (more: caught)


def covering(words: tuple[str, ...], allow: Sequence[Rule], depth: int = 0) -> Rule | None:
    """The allow rule covering *words*, and (for a wrapper: ``timeout``, ``nice``, ``xargs``,
    ``env``, ``find -exec`` ...) only when every command it runs is itself covered; a wrapper
    option that writes, deletes, runs a string or moves elsewhere (``find -delete``,
    ``env -S``, ``env -C``) only by a rule naming the line word for word."""
    found = next((r for r in allow if r.command is not None and r.command.fits(words)), None)
    if found is None or found.command is None:
        return None
    from ._hidden import wrapped_write

    inners = list(unwrap(words))
    head = posixpath.basename(words[0])
    # the wrapper's own words: up to where the latest reading of its command starts
    own = words if head == "find" or not inners else words[: len(words) - min(map(len, inners))]
    if wrapped_write(own) is not None and not found.command.exact:
        return None
    xargs = head == "xargs"
    if xargs and xargs_replaces(words) is not None:
        return None  # a placeholder anywhere in the command (any spelling): words unknown
    for inner in inners:
        if xargs:
            base = inner[:-1] if inner[-1:] == (DYNAMIC,) else inner
            if not _takes_arguments_safely(base):
                return None
            inner = (*base, DYNAMIC)  # the words xargs appends are read from stdin
        if depth >= _MAX_WRAPPED or covering(inner, allow, depth + 1) is None:
            return None
    return found


# programs that read file names and text and write nothing
_READERS = frozenset(
    {"cat", "ls", "head", "tail", "wc", "grep", "egrep", "fgrep", "uniq", "cut", "tr", "diff",
     "cmp", "file", "stat", "pwd", "basename", "dirname", "readlink", "realpath", "nl"}
)  # fmt: skip
# programs that take file names and text, never a command: a word of theirs known only at run
# time is no command (any other program's may be: ``taskset 1 $(echo rm) v``)
_ARGUMENTS_ONLY = (
    _INERT
    | _READERS
    | {"du", "df", "touch", "mkdir", "rmdir", "cp", "mv", "ln", "chmod", "chown", "cd", "tee",
       "od", "sha256sum", "md5sum", "rm"}
)  # fmt: skip
# write no file, or only run commands read apart: on a line of these, git reads a repository
# as it was before the line
_READ_ONLY = (
    _INERT
    | _READERS
    | {"git", "less", "more", "column", "jq", "xargs", "env", "timeout", "nice", "nohup", "time",
       "stdbuf", "setsid", "ionice", "command", "builtin"}
)  # fmt: skip


def _runs_unknown(words: tuple[str, ...]) -> bool:
    """Whether a program that may run its arguments has one known only at run time."""
    return DYNAMIC in words[1:] and posixpath.basename(words[0]) not in _ARGUMENTS_ONLY


def _takes_arguments_safely(words: tuple[str, ...]) -> bool:
    """Whether words read from stdin, appended to *words*, stay arguments of the same command:
    not options of ``git`` before its subcommand, nor a command run by a wrapper, nor options
    that run a program or write a file the rules check only on the line (`options_matter`)."""
    from ._hidden import options_matter

    head = posixpath.basename(words[0])
    if head == "git" and (len(words) < 2 or words[1].startswith("-")):
        return False
    return head not in WRAPPERS and head != "find" and not options_matter(words)


def _carries(pattern: CommandPattern, words: tuple[str, ...], i: int) -> bool:
    """Whether the argument ``words[i]`` may carry a command *pattern* catches: as a command
    itself, glued to an option (``--pre=rm``), or from any word of a script in it on
    (``system("rm v")``, ``os.system('rm v')``, ``1e rm v``)."""
    from ._programs import script_tokens

    rest = words[i + 1 :]
    readings = [(words[i],), *glued(words[i])]
    if any(pattern.catches((posixpath.basename(r[0]), *r[1:], *rest)) for r in readings):
        return True
    tokens, where = script_tokens(words[i])
    literal, tries = pattern.literal, _MAX_TRIES
    names = where.items() if pattern.head is None else [(pattern.head, where.get(pattern.head, ()))]
    second = literal[1] if len(literal) > 1 and literal[0] != "git" else None
    for name, k in ((name, k) for name, at in names for k in at):
        if second is not None:  # (not for git: its global options may stand between its words)
            following = tokens[k + 1] if k + 1 < len(tokens) else rest[0] if rest else None
            if following != second:
                continue
        tries -= 1
        if tries < 0 or pattern.catches((name, *tokens[k + 1 :], *rest)):
            return True  # (past the bound: taken as caught, an ask)
    return False


def _unknown(path: str) -> bool:
    """Whether a written path is only known at run time: a word known then, or ``find
    -exec``'s ``{}`` (each file found)."""
    return DYNAMIC in path or "{}" in path


def _under(cwd: Any, path: str) -> str:
    """*path* as the command sees it: relative to the bash tool's ``cwd`` when one is given."""
    return posixpath.join(cwd, path) if isinstance(cwd, str) and cwd else path


@final
class ShellChecks:
    """One rule set's checks of a bash call beyond its words.

    Args:
        reads: the read path rules (``Read``, ``read_file``) by effect.
        edits: the edit path rules (``Edit``, ``Write`` ...) by effect.
        default: the rule set's ``default``.
        workspace: the workspace root's spellings.
        resolve: every absolute spelling of a path (``None``: not a resolvable path).
        inside: whether an absolute path lies in the workspace.
    """

    def __init__(
        self,
        reads: Mapping[str, Sequence[Rule]],
        edits: Mapping[str, Sequence[Rule]],
        default: str,
        workspace: Sequence[str],
        resolve: Callable[[Any], tuple[str, ...] | None],
        inside: Callable[[str], bool],
    ) -> None:
        self.reads, self.edits, self.default = reads, edits, default
        self.roots = frozenset(r.rstrip("/") for r in workspace)
        self.resolve, self.inside = resolve, inside
        # why the sandbox would refuse a write to a path (None: it would not), if known
        self.fence: Callable[[str], str | None] | None = None

    @property
    def path_bound(self) -> bool:
        """Whether a deny or ask path rule can reach a bash call (its cwd or runner writes)."""
        return any(self.reads.get(e) or self.edits.get(e) for e in _STRICT)

    def carried(self, rules: Mapping[str, Sequence[Rule]], parsed: ParsedCommand) -> Finding | None:
        """A deny or ask rule matching the words of a command from one of its arguments on
        (``flock /tmp/l rm v``, ``busybox rm v``, ``strace rm v``): a program may run its
        arguments as a command, and no table of such programs is complete. It asks."""
        strict: Literal["deny", "ask"] = "deny" if self.default == "deny" else "ask"
        for effect in _STRICT:
            for rule in rules.get(effect, ()):
                pattern = rule.command
                if pattern is None:
                    continue
                for words in parsed.commands:
                    if pattern.may_catch(words, DYNAMIC) or _runs_unknown(words):
                        note = (
                            f"a word of {words[0][:40]!r} is only known at run time, so "
                            f"{rule.text} applies as an ask"
                        )
                        return strict, rule, note
                if pattern.head is not None and pattern.head not in parsed.arguments:
                    continue  # no argument word is the rule's program
                for words in parsed.commands:
                    if posixpath.basename(words[0]) in _INERT:
                        continue  # prints or compares its arguments, never runs one
                    for i in range(1, len(words)):
                        if _carries(pattern, words, i):
                            note = (
                                f"{words[i][:40]!r} is an argument of {words[0][:40]!r}, which may"
                                f" run it as a command, so {rule.text} applies as an ask"
                            )
                            return strict, rule, note
        return None

    def cwd_rule(self, cwd: Any) -> Finding | None:
        """The read deny (or ask) rule the bash tool's ``cwd`` lies under: the command reads
        there, as a ``Read`` of that directory would."""
        targets = self.resolve(cwd)
        for effect in _STRICT:
            for rule in self.reads.get(effect, ()):
                if rule.path and (targets is None or any(rule.path.matches(t) for t in targets)):
                    return effect, rule, "the command runs in that directory (cwd)"
        return None

    def runner_write_rule(self, parsed: ParsedCommand, cwd: Any) -> Finding | None:
        """The edit deny (or ask) rule a test runner's path option (``--basetemp=DIR``,
        ``--junitxml=FILE`` ...) writes against, as if the runner were a ``Write`` call."""
        strict: Literal["deny", "ask"] = "deny" if self.default == "deny" else "ask"
        for effect in _STRICT if parsed.writes else ():
            for rule in self.edits.get(effect, ()):
                for option, path in parsed.writes:
                    if _unknown(path):  # a file only known at run time: it may be any
                        return strict, rule, f"{option} writes a file only known at run time"
                    targets = self.resolve(_under(cwd, path))
                    if rule.path and (
                        targets is None or any(rule.path.matches(t) for t in targets)
                    ):
                        return effect, rule, f"{option} {path} writes there"
        return None

    def elsewhere(self, parsed: ParsedCommand, cwd: Any) -> str | None:
        """Why the line runs somewhere allow rules do not reach, or writes where a ``Write``
        would not be allowed (``None``: neither)."""
        heads = parsed.heads
        if cwd is not None:
            targets = self.resolve(cwd)
            if targets is None or not isinstance(cwd, str):
                return "the cwd argument is not a path"
            if not all(self.inside(t) for t in targets):
                return "the cwd lies outside the workspace"
            if "git" in heads and any(self._foreign_git(t) for t in targets):
                return "git would run in a repository other than the workspace's own"
        elif "git" in heads and any(self._foreign_git(root) for root in self.roots):
            return "git would run in a repository other than the workspace's own"
        if "git" in heads and heads & {"cd", "pushd", "popd"}:
            return "git would run after a change of directory"
        if "git" in heads and (
            heads - _READ_ONLY or any(not o.startswith("git ") for o, _ in parsed.writes)
        ):  # (tee HEAD; cp -r x objects; uniq x HEAD; less -o HEAD x; git status)
            return "git runs on a line whose other commands may write the repository it reads"
        for words in parsed.commands:
            if words[:1] == ("find",) and any(w in _FIND_ELSEWHERE for w in words):
                return "find runs its command in the directory of each file it finds"
        for words in parsed.commands:
            if words[:1] == ("git",) and _git_elsewhere(words):
                return "git is pointed at another repository"
        return self._runner_writes_refused(parsed, cwd)

    def _runner_writes_refused(self, parsed: ParsedCommand, cwd: Any) -> str | None:
        """Each runner write must lie inside the workspace, pass the sandbox's write fence
        (when one is known) and be covered by an edit allow rule, as a ``Write`` would."""
        allow = [r for r in self.edits.get("allow", ()) if r.path is not None]
        for option, spelled in parsed.writes:
            if _unknown(spelled):
                return f"{option} writes a file only known at run time"
            path = _under(cwd, spelled)
            targets = self.resolve(path)
            if targets is None or not all(self.inside(t) for t in targets):
                return f"{option} {path} writes outside the workspace"
            fenced = self.fence(path) if self.fence is not None else None
            if fenced is not None:
                return f"{option} {path}: {fenced}"
            if not any(all(r.path and r.path.matches(t) for t in targets) for r in allow):
                return f"{option} {path} writes where no edit allow rule reaches"
        return None

    def _foreign_git(self, path: str) -> bool:
        """Whether git started at *path* may find a repository the agent could have written:
        a ``.git`` at *path* or above it below the workspace root, or a directory git takes
        for a bare repository itself (``HEAD`` beside ``objects`` or ``refs``) there or at a
        root with no ``.git`` of its own (the workspace's own ``.git`` is protected; the rest
        of the workspace is not)."""
        while True:
            at_root = path.rstrip("/") in self.roots or path in ("/", "")
            if os.path.lexists(os.path.join(path, ".git")):
                return not at_root
            if _bare_repository(path):
                return True
            if at_root:
                return False
            path = posixpath.dirname(path)


def _git_elsewhere(words: Sequence[str]) -> bool:
    """Whether git's global options (``-C``, ``--git-dir[=]``, ``--work-tree[=]``, ``--bare``)
    point it at another repository than the one it would find."""
    return any(word.split("=", 1)[0] in _GIT_ELSEWHERE for word in git_globals(words))


def _bare_repository(path: str) -> bool:
    """Whether git's discovery would take the directory *path* itself for a git directory."""
    if not os.path.lexists(os.path.join(path, "HEAD")):
        return False
    return any(os.path.lexists(os.path.join(path, n)) for n in ("objects", "refs", "commondir"))
