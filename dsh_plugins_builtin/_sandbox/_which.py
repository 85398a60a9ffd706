"""Which bwrap binary to trust (`resolve_bwrap`): looked up when the sandbox plugin starts,
without importing the backends themselves (their probes, Landlock, the fork server), which load
with the first command (issue 27: a start that runs no command never imports them)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dsh_plugins_builtin._sandbox._paths import canonical, inside_any
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots

__all__ = ["on_path_outside", "resolve_bwrap"]


def on_path_outside(name: str, roots: Sequence[Path]) -> tuple[tuple[Path, Path] | None, list[str]]:
    """The first executable *name* on ``PATH`` (absolute entries only) whose real path lies in
    none of *roots*, where a command could have planted it, as ``(real path, as found)``; and
    the ones skipped for that."""
    skipped: list[str] = []
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isabs(entry):
            continue  # a relative PATH entry depends on the working directory
        candidate = Path(entry) / name
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue  # (os.path.isfile: an unreadable PATH entry is no error)
        real = canonical(candidate)
        if inside_any(real, roots):
            skipped.append(str(candidate))
            continue
        return (real, candidate), skipped
    return None, skipped


def resolve_bwrap(
    policy: SandboxPolicy | None = None, configured: str | None = None
) -> tuple[str | None, str]:
    """Find the bwrap binary to trust: absolute, executable, outside every writable root.

    Args:
        policy: Its writable roots are excluded (a planted ``bwrap`` there is skipped).
        configured: ``[plugin.sandbox] bwrap``: used as given, or refused, never searched around.

    Returns:
        ``(path, why)``: the real path (``None`` when there is none) and a sentence saying why.
    """
    roots = writable_roots(policy) if policy is not None else ()
    roots = () if roots == (Path("/"),) else roots
    if configured is not None:
        if not os.path.isabs(configured):
            return None, f'[plugin.sandbox] bwrap = "{configured}" is not an absolute path'
        real = canonical(Path(configured))
        if inside_any(real, roots):
            return None, (
                f'[plugin.sandbox] bwrap = "{configured}" lies in a writable root ({real}), so a '
                "command could replace it; install bwrap outside the writable roots"
            )
        if not (os.path.isfile(real) and os.access(real, os.X_OK)):
            return None, f'[plugin.sandbox] bwrap = "{configured}" is not an executable file'
        return str(real), f'configured: [plugin.sandbox] bwrap = "{configured}"'
    found, skipped = on_path_outside("bwrap", roots)
    if found is not None:
        note = f" (skipped {', '.join(skipped)}: inside a writable root)" if skipped else ""
        return str(found[0]), f"found on PATH as {found[1]}{note}"
    if skipped:
        return None, (
            f"the only bwrap on PATH ({', '.join(skipped)}) lies in a writable root, where a "
            "command could have planted it; install bubblewrap system-wide or set "
            "[plugin.sandbox] bwrap"
        )
    return None, "bwrap is not installed (not found on PATH)"
