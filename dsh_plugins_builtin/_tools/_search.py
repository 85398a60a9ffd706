"""The search tools: ``glob`` (find files by name) and ``grep`` (find lines by regex).

Both print paths relative to the workspace, come out sorted, honour ``.gitignore``, skip
``.git``, never follow symlinked directories, and stop at a cap with a note saying so.

* ``glob`` walks a fenced root with `dsh_plugins_builtin._tools._walk` and matches paths with RE2, in
  time linear in the path whatever the pattern.
* ``grep`` runs ripgrep (`dsh_plugins_builtin._tools._ripgrep`) through the sandbox plugin, like a
  ``bash`` command, with a timeout on the process (`dsh_plugins_builtin._tools._grep`). Where ripgrep is not installed,
  or the sandbox cannot run commands (disabled, or no backend here), it searches in-process on
  a worker thread with RE2, which is linear-time too: no pattern can hang the host.

Policy (``dsh_path_denied``, via `Host.path_denied`) is asked about every file a search meets,
before ripgrep runs; withheld files are excluded from the search, and anything ripgrep still
reports is checked again by its real path. A withheld file never appears, by name or content;
one line says how many were withheld. The count covers every file the search met, matching or
not, so it cannot be used to probe a withheld file's contents or name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsh_host import (
    DshError,
    ToolDefinition,
    ToolExecutionResult,
    ToolRunContext,
    define_tool,
    printable,
)
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._grep_tool import make_grep_tool
from dsh_plugins_builtin._tools._open import display_path, quoted, shown_name
from dsh_plugins_builtin._tools._rg_path import find_rg
from dsh_plugins_builtin._tools._search_support import (
    IGNORED,
    SEARCH_PATH,
    Policy,
    abort_poll,
    checked_text,
    concurrency_safe,
    finish_result,
    search_root,
    shown_prefix,
    workspace_top,
)
from dsh_plugins_builtin._tools._support import ToolEnv, bool_arg, guarded, os_arg

__all__ = ["MAX_GLOB_RESULTS", "make_search_tools"]

MAX_GLOB_RESULTS = 1000


def _glob(env: ToolEnv, args: Mapping[str, Any], ctx: ToolRunContext | None) -> ToolExecutionResult:
    from dsh_plugins_builtin._tools._walk import (  # RE2: on first use
        compile_glob,
        matchable,
        walk_files,
    )

    pattern = checked_text(args, "pattern").removeprefix("./")
    spelled = os_arg(args, "path", ".")
    regex, depth = compile_glob(pattern)
    root = search_root(env.sandbox(), spelled)
    if not root.is_dir():
        raise DshError(f"{quoted(spelled)} is a file; glob searches a directory", "NOT_A_DIRECTORY")
    prefix = shown_prefix(root, env)
    base = str(root).rstrip("/") + "/"
    policy = Policy(env, ctx, deny_read=True)
    found: list[str] = []
    total = 0
    for rel, entry in walk_files(
        root,
        top=workspace_top(env),
        respect_ignore=not bool_arg(args, "include_ignored"),
        max_depth=depth,
        stop=abort_poll(ctx),
        prune=policy.prunes,  # a deny_read directory: one withheld entry, whatever the query
    ):
        # Policy sees every file the walk meets, matching or not: a count of withheld
        # *matches* would let a pattern probe withheld names one character at a time.
        if policy.active:
            real = base + rel  # the walk never follows a symlink, so this is real
            try:
                targets = (real, os.path.realpath(real)) if entry.is_symlink() else (real,)
            except OSError:  # a link it may not read (/proc/1/cwd): where it leads is unknown
                continue
            if policy.denied(*targets):
                continue
        try:
            hit = regex.match(rel)
        except UnicodeEncodeError:  # a name that is not UTF-8 (a lone surrogate)
            hit = regex.match(matchable(rel))
        if hit:
            total += 1
            if len(found) < MAX_GLOB_RESULTS:
                found.append(shown_name(prefix + rel))
    where = display_path(root, env)
    meta: dict[str, Any] = {
        "path": where,
        "count": len(found),
        "total": total,
        "truncated": total > len(found),
    }
    notes: list[str] = []
    if total > len(found):
        notes.append(
            f"[showing the first {len(found)} of {total} matching files; "
            "narrow the pattern or the path]"
        )
    body = "\n".join(found) if found else f"No files match {pattern!r} in {printable(where)}"
    return finish_result(body, notes, meta, policy)


def make_search_tools(env: ToolEnv, rg: str | bool | None = True) -> list[ToolDefinition]:
    """``glob`` and ``grep``, bound to ``env`` (the ``tools`` plugin).

    Args:
        env: The tools plugin.
        rg: The ripgrep binary ``grep`` runs; ``True`` (the default) finds it now, once
            (`dsh_plugins_builtin._tools._rg_path.find_rg`); ``None`` or ``False`` searches in-process.
    """
    binary = find_rg() if rg is True else (rg or None)
    return [
        define_tool(
            name="glob",
            description=(
                "Find files by path pattern. `*` and `?` match within one path segment, `**` "
                "matches any number of directories, `[abc]` a character class, `{a,b}` "
                "alternatives: `*.py` finds Python files directly in `path`, `**/*.py` at any "
                "depth, `src/**/test_*.{py,pyi}` under src/. Returns matching file paths relative "
                f"to the workspace, sorted, at most {MAX_GLOB_RESULTS}. Files excluded by "
                ".gitignore are skipped unless include_ignored is true."
            ),
            parameters={
                "pattern": {
                    "type": "string",
                    "required": True,
                    "description": "Glob pattern relative to `path`, e.g. '**/*.py'.",
                },
                "path": {"type": "string", "description": SEARCH_PATH},
                "include_ignored": {"type": "boolean", "description": IGNORED},
            },
            execute=guarded(lambda args, ctx: _glob(env, args, ctx)),
            is_concurrency_safe=concurrency_safe,
            present_call=present.glob_call,
            present_result=present.glob_result,
            paths={"path": "read"},
            claude_name="Glob",
        ),
        make_grep_tool(env, binary),
    ]
