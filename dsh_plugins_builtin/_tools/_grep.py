"""The ``grep`` tool's body: ripgrep in the sandbox, or RE2 in-process; sorted, capped, policed.
Its definition (`._grep_tool`) imports this module at the first call.

ripgrep (`dsh_plugins_builtin._tools._ripgrep`) runs through the sandbox plugin's ``run``, like a
``bash`` command, with `SEARCH_TIMEOUT_S` on the process. Where there is no ``rg``, or the
sandbox cannot run commands, the search runs in-process on a worker thread with RE2 (linear
time, like ripgrep's engine). Either way nothing here can hang the host, and the event loop is
never blocked: blocking work runs in worker threads or in the sandboxed process.

Policy: when a plugin implements ``dsh_path_denied``, our walk (`_list_files`) asks it about
every file ripgrep would read, on every call (what each directory holds is kept between calls
while it is unchanged, `._grep_tree`). ripgrep runs beside the walk and its answer is kept only
when nothing was withheld; otherwise it runs again told to skip the withheld files (``--glob
!/path``), and what it printed first is dropped (`._grep_rg`). Whatever ripgrep reports is
checked again by its real path.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from dsh_host import (
    DshError,
    ToolArgsError,
    ToolExecutionResult,
    ToolRunContext,
    printable,
)
from dsh_plugins_builtin._tools._grep_local import (
    MAX_GREP_FILE_BYTES,
    MAX_GREP_MATCHES,
    Found,
    Listing,
    Search,
    local_regex,
    local_search,
)
from dsh_plugins_builtin._tools._grep_rg import SEARCH_TIMEOUT_S, search_with_rg
from dsh_plugins_builtin._tools._grep_tree import listed_files
from dsh_plugins_builtin._tools._open import display_path, quoted, shown_name
from dsh_plugins_builtin._tools._search_support import (
    Policy,
    abort_poll,
    checked_text,
    finish_result,
    search_root,
    shown_prefix,
    workspace_top,
)
from dsh_plugins_builtin._tools._support import ToolEnv, bool_arg, os_arg
from dsh_plugins_builtin._tools._walk import (
    expand_braces,
    gitignore_spec,
    spec_matches,
    walk_files,
)

__all__ = ["MAX_GREP_FILE_BYTES", "MAX_GREP_MATCHES", "SEARCH_TIMEOUT_S", "grep"]
MAX_MATCH_LINE = 400


def _cut(line: str, long: bool = False) -> str:
    if long:  # ripgrep printed only the line's first LONG_LINE_BYTES bytes
        return (
            f"{line[:MAX_MATCH_LINE]} [... {max(len(line) - MAX_MATCH_LINE, 1)}+ more characters]"
        )
    if len(line) <= MAX_MATCH_LINE:
        return line
    return f"{line[:MAX_MATCH_LINE]} [... {len(line) - MAX_MATCH_LINE} more characters]"


def _list_files(
    env: ToolEnv,
    search: Search,
    root: Path,
    policy: Policy,
    ctx: ToolRunContext | None,
    sizes: bool,
) -> Listing:
    """Walk the files the search will read, asking policy about each (worker thread).

    With ``sizes`` (the in-process engine), files over `MAX_GREP_FILE_BYTES` are counted
    and left out; ripgrep streams files of any size.
    """
    listing = Listing()
    if not root.is_dir():  # one file, named explicitly: no ignore rules, no glob filter
        if not policy.denied(str(root)):
            listing.files.append((display_path(root, env), str(root)))
        return listing
    only = None
    if search.glob:
        try:
            only = gitignore_spec(expand_braces(search.glob))
        except Exception as exc:  # pathspec's own pattern errors; RE2's
            raise ToolArgsError([f'"glob" {search.glob!r} is not a valid glob: {exc}']) from None
    prefix = shown_prefix(root, env)
    base = str(root).rstrip("/") + "/"
    prune = None
    if policy.prunes is not None:

        def prune(real: str) -> bool:  # a deny_read directory: one entry, whatever the glob
            if policy.denied_dir(real):
                listing.denied.append(real[len(base) :])
                return True
            return False

    for rel, entry in _walked(env, search, root, ctx, sizes, prune):
        if only is not None and not spec_matches(only, rel):
            continue
        real = base + rel
        if policy.denied(real):
            listing.denied.append(rel)
            continue
        if entry is not None:
            try:
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if size > MAX_GREP_FILE_BYTES:
                listing.too_large += 1
                continue
        listing.files.append((prefix + rel, real))
    return listing


def _walked(
    env: ToolEnv,
    search: Search,
    root: Path,
    ctx: ToolRunContext | None,
    sizes: bool,
    prune: Callable[[str], bool] | None,
) -> Iterable[tuple[str, os.DirEntry[str] | None]]:
    """The files below ``root`` the search reads (no symlinks), with their entries for
    ``sizes``; without, the last call's listing while the tree is unchanged (`._grep_tree`).
    ``prune`` leaves out a directory the sandbox denies, unread (`Policy.denied_dir`)."""
    top, respect, stop = workspace_top(env), not search.include_ignored, abort_poll(ctx)
    if not sizes:
        return ((rel, None) for rel in listed_files(root, top, respect, stop, prune))
    walked = walk_files(root, top=top, respect_ignore=respect, stop=stop, prune=prune)
    return ((rel, entry) for rel, entry in walked if not entry.is_symlink())


async def grep(
    env: ToolEnv, rg: str | None, args: Mapping[str, Any], ctx: ToolRunContext | None
) -> ToolExecutionResult:
    glob = args.get("glob")
    search = Search(
        pattern=checked_text(args, "pattern"),
        spelled=os_arg(args, "path", "."),
        glob=checked_text(args, "glob") if isinstance(glob, str) and glob else None,
        ignore_case=bool_arg(args, "ignore_case"),
        include_ignored=bool_arg(args, "include_ignored"),
    )
    if rg is None:
        local_regex(search)  # a bad pattern is reported before any walk
    sandbox = env.sandbox()
    root = search_root(sandbox, search.spelled)  # a few lstat calls: no thread hop for them
    if not root.is_file() and not root.is_dir():
        raise DshError(
            f"{quoted(search.spelled)} is neither a regular file nor a directory (a FIFO, a "
            "socket or a device); grep searches files and directories",
            "NOT_A_FILE",
        )
    policy = Policy(env, ctx, deny_read=True)
    found = None
    if rg is not None:
        # ripgrep walks by itself; ours only finds what policy withholds, to exclude it.
        walk = functools.partial(_list_files, env, search, root, policy, ctx, False)
        found, listing = await search_with_rg(env, rg, sandbox, search, root, policy, walk)
    if found is None:
        listing = await trio.to_thread.run_sync(_list_files, env, search, root, policy, ctx, True)
        found = await trio.to_thread.run_sync(local_search, search, listing, ctx)
    return _grep_result(env, search, root, listing, found, policy)


def _grep_result(
    env: ToolEnv,
    search: Search,
    root: Path,
    listing: Listing,
    found: Found,
    policy: Policy,
) -> ToolExecutionResult:
    where = display_path(root, env)
    truncated = len(found.matches) > MAX_GREP_MATCHES or found.cut_short
    kept = found.matches[:MAX_GREP_MATCHES]
    meta: dict[str, Any] = {
        "path": where,
        "count": len(kept),
        "files": len({shown for shown, _, _, _ in kept}),
        "truncated": truncated,
    }
    notes: list[str] = []
    if len(found.matches) > MAX_GREP_MATCHES:
        notes.append(
            f"[stopped after {MAX_GREP_MATCHES} matches; narrow the pattern, the path or the glob]"
        )
    elif found.cut_short:
        notes.append(
            f"[stopped after {len(kept)} matches: the output limit was reached; narrow the "
            "pattern, the path or the glob]"
        )
    if listing.too_large:
        notes.append(
            f"[{listing.too_large} file(s) larger than {MAX_GREP_FILE_BYTES} bytes were not searched]"
        )
    lines = [
        f"{shown_name(shown)}:{number}:{_cut(text, long)}" for shown, number, text, long in kept
    ]
    body = "\n".join(lines) if lines else f"No matches for {search.pattern!r} in {printable(where)}"
    return finish_result(body, notes, meta, policy)
