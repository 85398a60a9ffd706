"""The environment of a program the host runs unconfined (a hook, a mounted MCP server with
``sandbox = false``): the host's own, without a way back into the writable roots.

`~dsh_plugins_builtin._hooks._launch.plan_launch` checks the program and the scripts it is
given; what it then loads on its own is found through its environment as much as through its
command line. A ``PYTHONPATH`` entry or an ``LD_PRELOAD`` library in the workspace lets a tool
plant what that program runs, with the host's authority, on the next call, as a ``PATH`` entry
there would (``PATH`` is made safe by `~dsh_plugins_builtin._hooks._launch.path_lookup`). So
every variable below keeps only the entries that are absolute and lie outside the writable
roots (or under a protected path); a variable left with none is dropped:

* search paths, one entry per ``:``: ``PYTHONPATH``, ``NODE_PATH``, ``PERL5LIB``, ``PERLLIB``,
  ``RUBYLIB``, ``GEM_PATH``, ``CLASSPATH`` (modules), ``LD_LIBRARY_PATH`` (shared libraries);
* libraries loaded into every program: ``LD_PRELOAD`` and ``LD_AUDIT`` (``:`` or spaces);
* one directory or file each: ``PYTHONHOME`` and ``PYTHONUSERBASE`` (where Python finds its
  standard library and the user's site-packages, ``.pth`` files included),
  ``PYTHONPYCACHEPREFIX`` (the bytecode Python runs instead of the sources), ``PYTHONSTARTUP``,
  ``GEM_HOME``, and ``BASH_ENV`` and ``ENV`` (files a shell runs before its script).

What a program finds through its *working directory* is not covered: a hook or server that
runs ``npx`` (``node_modules``), ``uv run`` (``.venv``) or ``python -m`` in the workspace runs
what a tool could have written there. Run such programs confined (``sandbox = true`` for a
server), or through a script of their own outside the writable roots.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Final

__all__ = ["CODE_PATHS", "safe_environment"]

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
CODE_PATHS: Final = frozenset((*_SEARCH, *_PRELOAD, *_SINGLE))
"""The variables `safe_environment` keeps out of the writable roots."""


def safe_environment(
    env: Mapping[str, str], exposed: Callable[[str], bool]
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """*env* with every entry of `CODE_PATHS` that is relative or *exposed* left out; and, per
    variable, the entries left out (for messages).

    Args:
        env: The environment to start from (the host's).
        exposed: Whether a canonical absolute path lies where the sandboxed side can write
            (`Exposure.exposed`).
    """
    out = dict(env)
    dropped: dict[str, tuple[str, ...]] = {}
    for name in CODE_PATHS & env.keys():
        value = env[name]
        if name in _SEARCH:
            entries = value.split(os.pathsep)
        elif name in _PRELOAD:
            entries = [e for e in re.split(r"[:\s]+", value) if e]
        else:
            entries = [value]
        kept = [e for e in entries if e and not _reaches_in(e, exposed)]
        left = tuple(e or "(empty)" for e in entries if e not in kept)
        if not left:
            continue
        dropped[name] = left
        sep = " " if name in _PRELOAD else os.pathsep
        if kept:
            out[name] = sep.join(kept)
        else:
            del out[name]
    return out, dropped


def _reaches_in(entry: str, exposed: Callable[[str], bool]) -> bool:
    """Whether *entry* is relative, or it (really, or the directory its last name is in) lies
    where the sandboxed side can write."""
    if not os.path.isabs(entry):
        return True
    absolute = os.path.normpath(entry)
    parent = os.path.realpath(os.path.dirname(absolute))
    return exposed(os.path.realpath(absolute)) or exposed(
        os.path.join(parent, os.path.basename(absolute))
    )
