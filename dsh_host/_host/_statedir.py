"""dsh's state directory, by the rule the built-in plugins find it with.

The entry-points cache (`dsh_host._host._entrypoints.cache_path`) lives in the directory the
audit plugin writes and the sandbox hides from commands,
``dsh_plugins_builtin._common._dirs.user_state_path("dsh")``. The plugins may not import the
host's private modules, nor the host the plugins, so the rule is spelled out here as there: on
Linux (not an Android app), an ``XDG_STATE_HOME`` that is an absolute path with no surrounding
space, or unset or empty with such a ``HOME``, gives ``$XDG_STATE_HOME/dsh`` or
``~/.local/state/dsh``; anything else is asked of ``platformdirs``.
``tests/dsh_plugins_builtin/test_dirs.py`` checks that both give the same directory.
"""

from __future__ import annotations

import os
import sys

__all__ = ["state_dir"]


def state_dir() -> str | None:
    """dsh's state directory, or ``None`` when platformdirs is missing or finds none."""
    environ = os.environ
    if (
        sys.platform.startswith("linux")
        and not hasattr(sys, "getandroidapilevel")
        and environ.get("ANDROID_DATA") != "/data"
        and environ.get("ANDROID_ROOT") != "/system"
    ):
        base = environ.get("XDG_STATE_HOME", "")
        if not base:
            home = environ.get("HOME", "")
            if _plain_absolute(home):
                return os.path.join(home.rstrip("/") or "/", ".local/state", "dsh")
        elif _plain_absolute(base):
            return os.path.join(base, "dsh")
    try:
        import platformdirs

        return str(platformdirs.user_state_path("dsh"))
    except Exception:  # missing, or no usable home: no state directory
        return None


def _plain_absolute(path: str) -> bool:
    return path.startswith("/") and path == path.strip() and "\0" not in path
