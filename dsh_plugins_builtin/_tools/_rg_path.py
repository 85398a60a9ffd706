"""Which ``rg`` ``grep`` runs (`find_rg`): resolved once, when the tools are built, without
loading ripgrep's driver (`dsh_plugins_builtin._tools._ripgrep`), which ``grep``'s first call
imports (a start that searches nothing does not, issue 27)."""

from __future__ import annotations

import os
import shutil
import sysconfig

__all__ = ["find_rg"]


def find_rg() -> str | None:
    """The ``rg`` to use: the one installed with this Python (the wheel's), else ``$PATH``'s.

    Returns:
        An absolute path, or ``None`` when there is no ripgrep (``grep`` then searches
        in-process with RE2).
    """
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidate = os.path.join(scripts, "rg")
        if _runnable(candidate):
            return os.path.abspath(candidate)
    found = shutil.which("rg")  # $PATH is searched only without the wheel's (issue 27)
    return os.path.abspath(found) if found and _runnable(found) else None


def _runnable(candidate: str) -> bool:
    return os.path.isfile(candidate) and os.access(candidate, os.X_OK)
