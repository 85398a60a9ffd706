"""The user's state, data and cache directories, as ``platformdirs`` names them.

Importing ``platformdirs`` costs a cold ``dsh`` about a millisecond and a half (issue 27), for
three paths that, on Linux, are spelled out by the XDG Base Directory specification. So the
common case is answered here: on Linux (not an Android app), an ``XDG_STATE_HOME``,
``XDG_DATA_HOME`` or ``XDG_CACHE_HOME`` that is an absolute path with no surrounding space, or
unset or empty with an absolute ``HOME``, gives exactly what every ``platformdirs`` 4 release
gives (``tests/dsh_plugins_builtin/test_dirs.py`` compares the two over such environments).
Anything else (another system, a relative or padded value, no ``HOME``) is asked of
``platformdirs`` itself, whose rules for those cases differ between releases. The audit
database and the directories the sandbox hides from commands are found here both, so they
always agree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = [
    "audit_path_in",
    "default_spill_path",
    "user_cache_path",
    "user_data_path",
    "user_state_path",
]


def audit_path_in(workspace: Path, configured: str | os.PathLike[str]) -> Path:
    """``[plugin.audit] path`` as the plugin takes it: ``~`` expanded, relative to the workspace.
    The plugin, ``dsh audit`` and the sandbox (which hides the database) all take it so."""
    return Path(workspace, os.path.expanduser(configured))


def user_state_path(app: str) -> Path:
    """``platformdirs.user_state_path(app)``: ``$XDG_STATE_HOME/app`` or ``~/.local/state/app``."""
    found = _xdg("XDG_STATE_HOME", ".local/state", app)
    if found is not None:
        return found
    import platformdirs

    return platformdirs.user_state_path(app)


def user_data_path(app: str) -> Path:
    """``platformdirs.user_data_path(app)``: ``$XDG_DATA_HOME/app`` or ``~/.local/share/app``."""
    found = _xdg("XDG_DATA_HOME", ".local/share", app)
    if found is not None:
        return found
    import platformdirs

    return platformdirs.user_data_path(app)


def user_cache_path() -> Path:
    """``platformdirs.user_cache_path()``: ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    found = _xdg("XDG_CACHE_HOME", ".cache", None)
    if found is not None:
        return found
    import platformdirs

    return platformdirs.user_cache_path()


def default_spill_path() -> Path:
    """``output_budget``'s default spill directory, ``dsh-spill`` in the user cache directory
    (``~/.cache/dsh-spill``): the full outputs of earlier calls, of every workspace. The sandbox
    hides it from every command and file tool (`dsh_state`), as it hides the audit database."""
    return user_cache_path() / "dsh-spill"


def _xdg(variable: str, default: str, app: str | None) -> Path | None:
    """The directory for the common case (see the module docs), else ``None``."""
    if not sys.platform.startswith("linux") or hasattr(sys, "getandroidapilevel"):
        return None
    environ = os.environ
    if environ.get("ANDROID_DATA") == "/data" or environ.get("ANDROID_ROOT") == "/system":
        return None  # what platformdirs checks for an Android app: let it decide
    base = environ.get(variable, "")
    if not base:
        home = environ.get("HOME", "")
        if not _plain_absolute(home):
            return None
        base = os.path.join(home.rstrip("/") or "/", default)
    elif not _plain_absolute(base):
        return None
    return Path(base if app is None else os.path.join(base, app))


def _plain_absolute(path: str) -> bool:
    return path.startswith("/") and path == path.strip() and "\0" not in path
