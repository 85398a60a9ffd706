"""How a command the host runs itself (a hook, a mounted MCP server) is started, worked out once when the host starts, and what is checked.

Nothing the host runs may be writable by the sandboxed side: a tool that could rewrite a hook
script (or plant an executable a hook's ``PATH`` finds) would run code unconfined on the next
call. So, for every hook command, at start:

* A **plain command** (words and quotes only: no ``$``, `````, ``|``, ``;``, ``&``, ``<``,
  ``>``, ``(``, ``)``, globs, ``~``, backslashes, comments or assignments, and not starting
  with a shell builtin such as ``exit`` or ``echo``) is split with `shlex` as the shell would,
  its executable resolved to an absolute path through ``PATH``, and it is run directly as that
  argv, with no shell in between.
* Anything else is a **shell snippet**, run with ``/bin/sh -c``. It is split with `shlex`
  (punctuation as separate tokens; ``$VAR``, ``${VAR}`` and ``~`` expanded with the hook's own
  environment, ``CLAUDE_PROJECT_DIR`` included); every word in command position is resolved
  through ``PATH``, and every word that names an existing file is checked. A snippet whose words
  the host cannot know in advance (command substitution ``$(...)`` or backquotes) is refused.
* Each executable and each file argument is checked by where it really is (its real path) and
  where its last name lives (a symlink swapped later): lying in a writable root of the sandbox
  policy, and not under a protected path (``.claude/`` by default), refuses the hook at start.
* The hook's ``PATH`` is the host's with every entry that lies in a writable root (unprotected)
  or is relative removed, so a word resolved now cannot be shadowed by a planted executable.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy, protected_paths, writable_roots

__all__ = [
    "Exposure",
    "HookRefused",
    "Launch",
    "exposure_of",
    "path_lookup",
    "plan_launch",
    "safe_path_env",
    "sandbox_policy",
]

_PLAIN_FORBIDDEN = set("|&;<>()$`*?[]{}#~\\\n")
_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;", "((", "))", "!", "{", "}"}
_REDIRECTS = {">", ">>", ">|", "&>", "&>>", "<>", ">&"}
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in",
             "case", "esac", "time", "!", "{", "}", "function", "select", "coproc"}  # fmt: skip


# Words the shell runs itself (and, for echo and printf, differently from the binaries of the
# same name): a command starting with one runs through the shell.
_BUILTINS = {"exit", "cd", ":", ".", "source", "export", "read", "set", "shift", "eval", "exec",
             "return", "trap", "unset", "wait", "ulimit", "umask", "alias", "type", "command",
             "echo", "printf", "test", "[", "true", "false", "kill", "pwd", "getopts", "hash",
             "readonly", "times"}  # fmt: skip


class HookRefused(Exception):
    """A hook command cannot be run safely; the message says which path and why."""


@attrs.frozen
class Exposure:
    """Where the sandboxed side can write: writable roots, minus the protected paths in them."""

    writable: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()

    def exposed(self, path: str) -> bool:
        """Whether *path* (absolute, canonical) lies in a writable root and is not protected."""
        return _under(path, self.writable) and not _under(path, self.protected)

    def root_of(self, path: str) -> str:
        """The writable root *path* lies in (the innermost), for messages."""
        roots = [str(r) for r in self.writable if _under(path, (r,))]
        return max(roots, key=len) if roots else path


def _under(path: str, roots: Sequence[Path]) -> bool:
    for root in roots:
        text = str(root)
        if text == "/" or path == text or path.startswith(text.rstrip("/") + "/"):
            return True
    return False


def _locations(path: str) -> tuple[str, ...]:
    """The real path of *path*, and the real path of the directory holding its last name."""
    absolute = os.path.abspath(path)
    link = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
    return (os.path.realpath(absolute), link)


def safe_path_env(path: str, exposure: Exposure) -> str:
    """``PATH`` without relative entries and entries the sandboxed side can write into."""
    return path_lookup(path, exposure)[0]


def path_lookup(path: str, exposure: Exposure) -> tuple[str, tuple[str, ...]]:
    """`safe_path_env`, and each entry it skipped with the reason (for a "not found" message)."""
    kept, skipped = [], []
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            skipped.append(f"{entry or '(empty)'!r}: relative")
            continue
        exposed = [where for where in _locations(entry) if exposure.exposed(where)]
        if exposed:
            root = exposure.root_of(exposed[0])
            skipped.append(f"{entry!r}: inside the writable root {root!r}")
            continue
        kept.append(entry)
    return os.pathsep.join(kept), tuple(skipped)


@attrs.frozen
class Launch:
    """How one hook command runs: ``argv`` (absolute ``argv[0]``) and the files checked."""

    argv: tuple[str, ...]
    shell: bool
    checked: tuple[str, ...] = ()


def _check(path: str, what: str, exposure: Exposure) -> str:
    for where in _locations(path):
        if exposure.exposed(where):
            shown = f"{path!r}" if where == os.path.abspath(path) else f"{path!r} ({where!r})"
            raise HookRefused(
                f"its {what} {shown} lies inside a writable root of the sandbox policy, "
                f"{exposure.root_of(where)!r}, so a tool could rewrite it and have the host run it; "
                "move it out of the writable roots, or under a protected path (such as "
                ".claude/hooks/, or one listed in [plugin.sandbox] protected), or narrow "
                "[plugin.sandbox] writable_roots"
            )
    return os.path.realpath(path)


def _which(word: str, path_env: str, cwd: str) -> str | None:
    if "/" in word:
        full = os.path.join(cwd, word)
        return full if os.path.isfile(full) else None
    return shutil.which(word, path=path_env)


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def _expand(word: str, env: Mapping[str, str]) -> str:
    """``~``, ``$NAME`` and ``${NAME}`` as the shell would expand them in *env*."""
    if word == "~" or word.startswith("~/"):
        word = env.get("HOME", "~") + word[1:]
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)


def plan_launch(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
    exposure: Exposure,
    shell: str,
    skipped_path: Sequence[str] = (),
) -> Launch:
    """Work out how *command* runs and check everything it runs (see the module docstring).

    Args:
        command: The hook's ``command`` string.
        cwd: The directory it runs in (the workspace).
        env: Its environment (with the safe ``PATH``).
        exposure: What the sandboxed side can write.
        shell: The absolute path of ``/bin/sh`` (already checked).
        skipped_path: The ``PATH`` entries left out and why (`path_lookup`), for the message
            when the executable is not found.

    Raises:
        HookRefused: something it runs lies where a tool could rewrite it, or cannot be known.
    """
    path_env = env.get("PATH", "")
    plain = not (set(command) & _PLAIN_FORBIDDEN)
    try:
        words = shlex.split(command) if plain else []
    except ValueError as exc:
        raise HookRefused(f"it cannot be parsed as a command line: {exc}") from None
    if plain and words and "=" not in words[0] and words[0] not in _BUILTINS:
        found = _which(words[0], path_env, cwd)
        if found is None:
            skipped = "; ".join(skipped_path) if skipped_path else "none"
            raise HookRefused(
                f"its executable {words[0]!r} was not found on PATH ({path_env}); PATH entries "
                f"skipped, since a tool could plant programs there: {skipped}"
            )
        checked = [_check(found, "executable", exposure)]
        executable = os.path.abspath(found)  # as found: multi-call binaries read argv[0]
        args = []
        for word in words[1:]:
            full = os.path.join(cwd, word)
            if os.path.isfile(full):
                checked.append(_check(full, "file argument", exposure))
                word = os.path.abspath(full)  # never re-resolved against a moved cwd
            args.append(word)
        return Launch((executable, *args), shell=False, checked=tuple(checked))
    return Launch(
        (shell, "-c", command), shell=True, checked=_check_snippet(command, cwd, env, exposure)
    )


def _check_snippet(
    command: str, cwd: str, env: Mapping[str, str], exposure: Exposure
) -> tuple[str, ...]:
    if "$(" in command or "`" in command or "<(" in command or ">(" in command:
        raise HookRefused(
            "it uses command or process substitution, so what it runs cannot be checked before "
            "it runs; put the logic in a script outside the writable roots and run that"
        )
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise HookRefused(f"it cannot be parsed as a shell command: {exc}") from None
    path_env = env.get("PATH", "")
    checked: list[str] = []
    command_position = True
    after_redirect = False
    for token in tokens:
        if token in _OPERATORS or (set(token) <= set("();<>|&") and token not in _REDIRECTS):
            command_position, after_redirect = True, False
            continue
        if token in _REDIRECTS or token.startswith(">"):
            after_redirect = True
            continue
        word = _expand(token, env)
        if after_redirect:  # an output target: written, never run
            after_redirect = False
            continue
        if command_position and "=" in word.split("/")[0]:
            continue  # NAME=value before the command word
        if command_position and word in _KEYWORDS:
            continue
        candidates = glob.glob(os.path.join(cwd, word)) if set(word) & set("*?[") else [word]
        for candidate in candidates:
            if command_position and "/" not in candidate:
                found = shutil.which(candidate, path=path_env)
                if found is not None:
                    checked.append(_check(found, "executable", exposure))
                continue
            full = os.path.join(cwd, candidate)
            if os.path.isfile(full):
                what = "executable" if command_position else "file argument"
                checked.append(_check(full, what, exposure))
        command_position = False
    return tuple(checked)


def sandbox_policy(host: Host) -> SandboxPolicy | None:
    """The sandbox plugin's policy (``None``: there is no sandbox plugin)."""
    sandbox = host.pm.get_plugin("sandbox")
    if sandbox is None:
        return None
    at_start = getattr(sandbox, "policy_at_start", None)
    try:  # the built-in sandbox: its policy, built once per start, started or not yet
        policy = at_start(host) if at_start is not None else sandbox.policy
    except ConfigError:
        raise
    except Exception:  # the sandbox plugin has not started yet: build the policy it will build
        from dsh_plugins_builtin._sandbox._config import build_policy

        from .._sandbox._fence import import_paths, install_paths

        # With the protected installation, as the plugin will (`protect_install`): a program
        # in dsh's own environment is read-only to every tool, so it is safe to run.
        policy = build_policy(
            host.config_for(sandbox),
            host.workspace,
            host.config.source,
            install_paths(),
            imports=import_paths(),
        )
    return policy if isinstance(policy, SandboxPolicy) else None


def exposure_of(policy: SandboxPolicy | None) -> Exposure:
    """What the sandboxed side can write (nothing to check against without a sandbox plugin or
    under ``danger-full-access``, where nothing is confined)."""
    if policy is None or policy.mode == "danger-full-access":
        return Exposure()
    return Exposure(writable_roots(policy), protected_paths(policy))
