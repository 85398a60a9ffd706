"""``list_dir``: a directory's entries, sorted, with those a path rule denies withheld."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsh_host import (
    ToolDefinition,
    ToolExecutionResult,
    ToolRunContext,
    define_tool,
    printable,
)
from dsh_plugins_builtin._sandbox._fence import resolve_target
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._open import display_path, open_file, os_failure, shown_name
from dsh_plugins_builtin._tools._search_support import Policy, concurrency_safe
from dsh_plugins_builtin._tools._support import ToolEnv, guarded, os_arg

__all__ = ["list_dir_tool"]

MAX_DIR_ENTRIES = 1000


def _withheld(env: ToolEnv, policy: Policy, real: str, name: str, link: bool) -> bool:
    """Whether policy withholds the entry (or, for a symlink, where it leads)."""
    if not policy.active:
        return False
    path = os.path.join(real, name)
    if not link:
        return policy.denied(path)
    try:
        target = str(resolve_target(path, env.workspace))
    except (OSError, ValueError):
        return policy.denied(path)
    return policy.denied(path, target)


def _list_dir(
    env: ToolEnv, args: Mapping[str, Any], ctx: ToolRunContext | None = None
) -> ToolExecutionResult:
    spelled = os_arg(args, "path", ".")
    fd, real = open_file(env.sandbox(), spelled, directory=True)
    shown = display_path(real, env)
    policy = Policy(env, ctx)
    try:
        with os.scandir(fd) as it:
            entries = []
            for entry in it:
                link = entry.is_symlink()
                if _withheld(env, policy, str(real), entry.name, link):
                    continue
                if link:
                    entries.append(f"{shown_name(entry.name)}@")
                elif entry.is_dir(follow_symlinks=False):
                    entries.append(f"{shown_name(entry.name)}/")
                else:
                    entries.append(shown_name(entry.name))
    except OSError as exc:
        raise os_failure(exc, spelled, "list") from None
    finally:
        os.close(fd)
    entries.sort()
    total = len(entries)
    meta: dict[str, Any] = {"path": shown, "count": min(total, MAX_DIR_ENTRIES), "total": total}
    note = ""
    withheld = policy.withheld
    if withheld:
        meta["withheld"] = withheld
        note = (
            f"\n\n[{withheld} entr{'y' if withheld == 1 else 'ies'} withheld by policy "
            "(a path rule denies reading them)]"
        )
    if not entries:
        return ToolExecutionResult(
            content=f"({printable(shown)} is an empty directory){note}", meta=meta
        )
    body = "\n".join(entries[:MAX_DIR_ENTRIES])
    if total > MAX_DIR_ENTRIES:
        body += f"\n\n[showing {MAX_DIR_ENTRIES} of {total} entries; use glob to narrow down]"
    return ToolExecutionResult(content=body + note, meta=meta)


def list_dir_tool(env: ToolEnv) -> ToolDefinition:
    """The ``list_dir`` tool, bound to *env*."""
    return define_tool(
        name="list_dir",
        description=(
            "List a directory's entries, sorted by name: `name/` for a directory, `name@` for "
            f"a symlink, `name` for a file. At most {MAX_DIR_ENTRIES} entries are shown."
        ),
        parameters={
            "path": {
                "type": "string",
                "description": "Directory relative to the workspace root (default: the root).",
            },
        },
        execute=guarded(lambda args, ctx: _list_dir(env, args, ctx)),
        is_concurrency_safe=concurrency_safe,
        present_call=present.list_call,
        present_result=present.list_result,
        paths={"path": "read"},
        claude_name="LS",
    )
