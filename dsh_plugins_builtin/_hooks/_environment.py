"""The environment of a program the host runs unconfined (a hook, a mounted MCP server with
``sandbox = false``): the host's own, without a way back into the writable roots.

`~dsh_plugins_builtin._hooks._launch.plan_launch` checks the program and the scripts it is
given; what it then loads on its own is found through its environment as much as through its
command line. A ``PYTHONPATH`` entry, an ``LD_PRELOAD`` library or a ``GIT_CONFIG_GLOBAL`` file
in the workspace lets a tool plant what that program runs, with the host's authority, on the
next call, as a ``PATH`` entry there would. So `unconfined_environment` builds it as follows
(an entry "reaches in" when it is relative, or it -- really, or the directory its last name is
in -- lies in a writable root and not under a protected path):

* ``PATH`` keeps only the entries that do not reach in
  (`~dsh_plugins_builtin._hooks._launch.path_lookup`).
* Code search paths keep only the entries that do not reach in, one entry per ``:``:
  ``PYTHONPATH``, ``NODE_PATH``, ``PERL5LIB``, ``PERLLIB``, ``RUBYLIB``, ``GEM_PATH``,
  ``CLASSPATH``, ``LD_LIBRARY_PATH``; and ``LD_PRELOAD``, ``LD_AUDIT`` (``:`` or spaces).
* One directory or file each, dropped if it reaches in: ``PYTHONHOME`` (``prefix`` or
  ``prefix:exec_prefix``, each checked), ``PYTHONUSERBASE``, ``PYTHONPYCACHEPREFIX``,
  ``PYTHONSTARTUP``, ``GEM_HOME``, ``BASH_ENV``, ``ENV``.
* Options that load code, dropped whenever set (they can name modules resolved against the
  working directory, the workspace): ``NODE_OPTIONS``, ``PERL5OPT``, ``RUBYOPT``,
  ``JAVA_TOOL_OPTIONS``, ``JDK_JAVA_OPTIONS``, ``_JAVA_OPTIONS``.
* That list is a floor. Every *other* variable is swept: one with a token (split on ``:``,
  whitespace and ``=``) that is an absolute path that reaches in, or starts with ``./`` or
  ``../``, is dropped (``GIT_CONFIG_GLOBAL``, ``GIT_EXEC_PATH``, ``GIT_SSH_COMMAND``,
  ``XDG_CONFIG_HOME``, ``ZDOTDIR``, ``GCONV_PATH``, ``EDITOR``...) -- except
  ``DSH_PROJECT_DIR``, ``CLAUDE_PROJECT_DIR``, ``PWD`` and ``OLDPWD`` (the workspace, by
  design) and ``HOME``, which cannot be dropped: a ``HOME`` in a writable root is warned of.

What was dropped is logged once, at start, as a warning naming it. What a program finds through
its *working directory* is not covered: a hook or server that runs ``npx`` (``node_modules``),
``uv run`` (``.venv``) or ``python -m`` in the workspace runs what a tool could have written
there. Run such programs confined (``sandbox = true`` for a server), or through a script of
their own outside the writable roots.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Final

import attrs

from ._launch import Exposure, _locations, path_lookup

__all__ = ["CODE_PATHS", "Unconfined", "unconfined_environment"]

_SEARCH: Final = (
    "PYTHONPATH",
    "NODE_PATH",
    "PERL5LIB",
    "PERLLIB",
    "RUBYLIB",
    "GEM_PATH",
    "CLASSPATH",
    "LD_LIBRARY_PATH",
)
_PRELOAD: Final = ("LD_PRELOAD", "LD_AUDIT")
_SINGLE: Final = (
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONSTARTUP",
    "GEM_HOME",
    "BASH_ENV",
    "ENV",
)
_OPTIONS: Final = (
    "NODE_OPTIONS",
    "PERL5OPT",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
)
CODE_PATHS: Final = frozenset((*_SEARCH, *_PRELOAD, *_SINGLE, *_OPTIONS))
"""The variables filtered by name (the floor; every other one is swept)."""
_BY_DESIGN: Final = frozenset(("DSH_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "PWD", "OLDPWD", "HOME"))
_TOKENS: Final = re.compile(r"[:\s=]+")


@attrs.frozen
class Unconfined:
    """The environment of an unconfined program, and what was left out of it.

    Attributes:
        env: The environment.
        dropped: Per variable, the entries left out (``PATH``: each with its reason).
        home_exposed: ``HOME`` lies in a writable root (kept: warned of).
    """

    env: dict[str, str]
    dropped: dict[str, tuple[str, ...]]
    home_exposed: bool = False

    @property
    def skipped_path(self) -> tuple[str, ...]:
        """The ``PATH`` entries left out, each with its reason (for "not found" messages)."""
        return self.dropped.get("PATH", ())

    def warn(self, log: logging.Logger, who: str) -> None:
        """Log, once, what *who* (such as "hooks") will not inherit, and an exposed ``HOME``."""
        if self.dropped:
            named = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(self.dropped.items()))
            log.warning(
                "%s run unconfined without these environment entries, since they lead into a "
                "writable root of the sandbox (a tool could plant what they load): %s",
                who, named,
            )  # fmt: skip
        if self.home_exposed:
            log.warning(
                "HOME (%s) lies in a writable root of the sandbox: %s run unconfined read "
                "their configuration from it (~/.gitconfig, shell startup files...), which a "
                "tool could rewrite; set HOME outside the writable roots",
                self.env.get("HOME"), who,
            )  # fmt: skip


def unconfined_environment(env: Mapping[str, str], exposure: Exposure) -> Unconfined:
    """*env* without a way back into what *exposure* says the sandboxed side can write (see
    the module docstring).

    Args:
        env: The environment to start from (the host's, with the project variables).
        exposure: What the sandboxed side can write.
    """
    out = dict(env)
    path, skipped = path_lookup(env.get("PATH", os.defpath), exposure)
    out["PATH"] = path
    dropped: dict[str, tuple[str, ...]] = {"PATH": skipped} if skipped else {}
    for name, value in env.items():
        if name == "PATH" or name in _BY_DESIGN:
            continue
        if name in _OPTIONS:
            left: tuple[str, ...] = (value,)
        elif name in _SEARCH or name in _PRELOAD:
            left = _filter(out, name, value, exposure)
        elif name in _SINGLE:
            entries = value.split(os.pathsep) if name == "PYTHONHOME" else [value]
            left = (value,) if any(_reaches_in(e, exposure) for e in entries) else ()
        else:
            left = tuple(t for t in _TOKENS.split(value) if _token_reaches_in(t, exposure))
        if left:
            dropped[name] = left
            if name in _OPTIONS or name not in _SEARCH + _PRELOAD:
                del out[name]
    home = env.get("HOME", "")
    home_exposed = os.path.isabs(home) and _reaches_in(home, exposure)
    return Unconfined(out, dropped, home_exposed)


def _filter(out: dict[str, str], name: str, value: str, exposure: Exposure) -> tuple[str, ...]:
    """Keep in *out* the entries of the search path *name* that do not reach in; return the
    others (the variable is removed when none is left)."""
    if name in _SEARCH:
        entries = value.split(os.pathsep)
    else:
        entries = [e for e in re.split(r"[:\s]+", value) if e]
    kept = [e for e in entries if e and not _reaches_in(e, exposure)]
    left = tuple(e or "(empty)" for e in entries if e not in kept)
    if not left:
        pass
    elif kept:
        out[name] = (" " if name in _PRELOAD else os.pathsep).join(kept)
    else:
        del out[name]
    return left


def _reaches_in(entry: str, exposure: Exposure) -> bool:
    """Whether *entry* is relative, or it (really, or the directory its last name is in) lies
    where the sandboxed side can write."""
    if not os.path.isabs(entry):
        return True
    return any(exposure.exposed(where) for where in _locations(entry))


def _token_reaches_in(token: str, exposure: Exposure) -> bool:
    """Whether a token of a swept variable leads into a writable root (relative: ``./``,
    ``../``; other relative words are not paths as far as anyone can tell)."""
    if token.startswith(("./", "../")):
        return True
    return os.path.isabs(token) and _reaches_in(token, exposure)
