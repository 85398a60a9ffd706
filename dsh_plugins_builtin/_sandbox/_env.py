"""The environment a confined command gets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["scrub_env"]

_SECRET_MARKERS: Final = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_FORCED_ENV: Final = {"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}


def scrub_env(environ: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """Return the environment a sandboxed process gets.

    Args:
        environ: The source environment (usually ``os.environ``).
        allow: Names to keep even though they look secret (exact, case-sensitive match).

    Returns:
        ``environ`` minus names containing KEY/TOKEN/SECRET/PASSWORD (case-insensitive) and names
        starting with ``DSH_`` (case-insensitive), unless allowed; plus ``NO_COLOR=1``,
        ``TERM=dumb``, ``PAGER=cat`` and ``GIT_PAGER=cat``.
    """
    keep = frozenset(allow)
    env: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        secret = upper.startswith("DSH_") or any(marker in upper for marker in _SECRET_MARKERS)
        if name in keep or not secret:
            env[name] = value
    env.update(_FORCED_ENV)
    return env
