"""``deny_read``: the credentials nothing in the sandbox may read, and the configuration files
the next ``dsh`` run reads (protected while they lie in a writable root)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from dsh_plugins_builtin._common._dirs import (
    audit_path_in,
    default_spill_path,
    user_data_path,
    user_state_path,
)
from dsh_plugins_builtin._sandbox._paths import resolve_abs, within

__all__ = [
    "DEFAULT_DENY_READ", "GLOB_CHARACTERS", "config_files", "dsh_state", "expand_deny",
]  # fmt: skip

DEFAULT_DENY_READ: Final = (
    "~/.ssh",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.npmrc",
    "~/.pypirc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.gnupg",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.vault-token",
    "~/.cargo/credentials.toml",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.claude/.credentials.json",
    "~/.claude.json",
    "~/.codex",
    "~/.gemini",
    "~/.config/github-copilot",
    "~/.cache/huggingface/token",
    "~/.cache/huggingface/stored_tokens",
    "~/.huggingface",
    "~/.config/op",
    "~/.config/rclone",
    "~/.oci",
    "~/.s3cfg",
    "~/.boto",
    "~/.gem/credentials",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.mylogin.cnf",
    "~/.bash_history",
    "~/.zsh_history",
    "~/.local/share/fish/fish_history",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.rediscli_history",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.config/microsoft-edge",
    "~/snap/firefox",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
)
GLOB_CHARACTERS: Final = ("*", "?", "[")
"""What makes a ``deny_read`` entry a glob (matched with ``fnmatch``)."""


def _defaults() -> tuple[str, ...]:
    return DEFAULT_DENY_READ + (("/root",) if os.geteuid() != 0 else ())


def expand_deny(
    entries: Iterable[str], *, defaults: bool, keep: Iterable[Path], workspace: Path = Path("/")
) -> tuple[tuple[Path, ...], tuple[str, ...], tuple[str, ...]]:
    """``deny_read`` as canonical paths and globs.

    Args:
        entries: ``[plugin.sandbox] deny_read`` (``~`` expanded; globs expanded now and kept
            for the file tools to match later).
        defaults: Add `DEFAULT_DENY_READ` (and ``/root`` for a user other than root).
        keep: The workspace and the roots: a default entry that holds one of them is dropped.
        workspace: What a relative entry is relative to.

    Returns:
        ``(paths, globs, conflicts)``: the configured entries that would hide a root are
        ``conflicts`` (the caller refuses them).
    """
    roots = [resolve_abs(os.path.abspath(str(root))) for root in keep]
    paths: dict[Path, None] = {}
    globs: list[str] = []
    conflicts: list[str] = []
    for entry, given in [
        *((e, False) for e in _defaults() if defaults),
        *((e, True) for e in entries),
    ]:
        spelled = os.path.normpath(os.path.join(workspace, os.path.expanduser(entry)))
        if any(c in spelled for c in GLOB_CHARACTERS):
            globs.append(resolve_abs(spelled))
            found = glob.glob(spelled, recursive=True)
        else:
            found = [spelled]
        for path in found:
            real = resolve_abs(path)
            if any(within(root, real) for root in roots):
                if given:
                    conflicts.append(entry)
                continue
            paths.setdefault(Path(real), None)
    return tuple(paths), tuple(globs), tuple(conflicts)


def config_files(
    workspace: Path,
    roots: Iterable[Path],
    tables: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str],
) -> tuple[Path, ...]:
    """The files the next ``dsh`` run may read configuration from.

    ``dsh.toml`` and ``pyproject.toml`` in the workspace and in every writable root (the next
    run may start there), ``$DSH_CONFIG``, every permissions ``import`` file and every
    ``hook_commands`` settings file (relative to the workspace), and the user's Claude Code
    settings (``~/.claude``).
    """
    found: dict[Path, None] = {}
    for root in (workspace, *roots):
        for name in ("dsh.toml", "pyproject.toml"):
            found.setdefault(Path(root, name), None)
    if environ.get("DSH_CONFIG"):
        found.setdefault(Path(os.path.abspath(environ["DSH_CONFIG"])), None)
    listed = [
        *_strings(tables.get("permissions", {}).get("import")),
        *_strings(tables.get("hook_commands", {}).get("settings")),
    ]
    for spelled in listed:
        found.setdefault(Path(workspace, os.path.expanduser(spelled)), None)
    found.setdefault(Path(os.path.expanduser("~/.claude")), None)
    return tuple(found)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str) and item]
    return []


def dsh_state(workspace: Path, tables: Mapping[str, Mapping[str, Any]]) -> tuple[Path, ...]:
    """What dsh itself keeps that no command may read: its state and data directories (the
    audit database, ``entry-points.json``), ``output_budget``'s default spill directory (the
    full outputs of earlier calls, of every workspace: `default_spill_path`) and a configured
    ``[plugin.audit] path`` with its ``-wal``, ``-shm`` and ``-journal`` files. A command that
    can open the database can hold a POSIX read lock on it, and every write of the audit log
    then fails (``database is locked``): records lost, or with ``required = true`` every call
    refused."""
    out = [user_state_path("dsh"), user_data_path("dsh"), default_spill_path()]
    configured = tables.get("audit", {}).get("path")
    if isinstance(configured, str) and configured:
        db = audit_path_in(workspace, configured)
        out += [db, *(Path(f"{db}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]
    return tuple(out)
