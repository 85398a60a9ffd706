"""The ``grep`` tool: ripgrep in the sandbox, or RE2 in-process; sorted, capped, policed.

ripgrep (`dsh_plugins_builtin._tools._ripgrep`) runs through the sandbox plugin's ``run``, like a
``bash`` command, with `SEARCH_TIMEOUT_S` on the process. Where there is no ``rg``, or the
sandbox cannot run commands, the search runs in-process on a worker thread with RE2 (linear
time, like ripgrep's engine). Either way nothing here can hang the host, and the event loop is
never blocked: blocking work runs in worker threads or in the sandboxed process.

Policy: when a plugin implements ``dsh_path_denied``, our walk asks it about every file ripgrep
would read *before* ripgrep runs, and ripgrep is told to skip the withheld ones (``--glob
!/path``); whatever ripgrep still reports is checked again by its real path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from dsh_host import (
    DshError,
    ToolArgsError,
    ToolDefinition,
    ToolExecutionResult,
    ToolRunContext,
    define_tool,
)
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailableError
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._grep_local import (
    MAX_GREP_FILE_BYTES,
    MAX_GREP_MATCHES,
    Found,
    Listing,
    Search,
    bad_regex,
    local_regex,
    local_search,
)
from dsh_plugins_builtin._tools._grep_recheck import Recheck
from dsh_plugins_builtin._tools._open import display_path, os_failure
from dsh_plugins_builtin._tools._ripgrep import (
    RgOutput,
    glob_error,
    parse_output,
    regex_error,
    rg_command,
)
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
from dsh_plugins_builtin._tools._support import Sandbox, ToolEnv, bool_arg, guarded_async
from dsh_plugins_builtin._tools._walk import (
    expand_braces,
    gitignore_spec,
    walk_files,
)

__all__ = ["MAX_GREP_FILE_BYTES", "MAX_GREP_MATCHES", "SEARCH_TIMEOUT_S", "make_grep_tool"]
MAX_MATCH_LINE = 400
SEARCH_TIMEOUT_S = 120.0  # ripgrep's process is killed after this long
# A longer command line (many withheld files to exclude) is searched in-process instead; Linux
# caps one argument (the ``bash -c`` string) at 128 KiB.
_MAX_COMMAND = 100_000
_INLINE_RECHECKS = 32  # reported files re-checked on the event loop; more go to a thread


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
            listing.files.append((display_path(root, env.workspace), str(root)))
        return listing
    only = None
    if search.glob:
        try:
            only = gitignore_spec(expand_braces(search.glob))
        except Exception as exc:  # pathspec's own pattern errors; RE2's
            raise ToolArgsError([f'"glob" {search.glob!r} is not a valid glob: {exc}']) from None
    prefix = shown_prefix(root, env)
    base = str(root).rstrip("/") + "/"
    for rel, entry in walk_files(
        root,
        top=workspace_top(env),
        respect_ignore=not search.include_ignored,
        stop=abort_poll(ctx),
    ):
        if entry.is_symlink() or (only is not None and not only.match_file(rel)):
            continue
        real = base + rel
        if policy.denied(real):
            listing.denied.append(rel)
            continue
        if sizes:
            try:
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if size > MAX_GREP_FILE_BYTES:
                listing.too_large += 1
                continue
        listing.files.append((prefix + rel, real))
    return listing


async def _ripgrep(
    env: ToolEnv,
    rg: str,
    sandbox: Sandbox,
    search: Search,
    root: Path,
    listing: Listing,
    policy: Policy,
) -> Found | None:
    """Search with ripgrep in the sandbox; ``None`` when ripgrep cannot run here.

    That is: the sandbox cannot run commands (``SANDBOX_UNAVAILABLE``), the command line would
    be too long, or the shell could not find or execute ``rg`` inside the sandbox.
    """
    is_dir = root.is_dir()
    cwd = root if is_dir else root.parent
    if not is_dir and not listing.files:
        return Found()  # the one file named is withheld
    command = functools.partial(
        rg_command,
        rg,
        search.pattern,
        ignore_case=search.ignore_case,
        include_ignored=search.include_ignored,
        glob=search.glob if is_dir else None,
        exclude=listing.denied,
        target=None if is_dir else root.name,
    )
    first = command()
    if len(first.encode("utf-8", "surrogateescape")) > _MAX_COMMAND:
        return None
    try:
        result = await sandbox.run(first, cwd=str(cwd), timeout=SEARCH_TIMEOUT_S)
        if result.truncated and not result.timed_out:
            # Too much output for the sandbox's buffer: search again in path order and keep
            # only what can be shown (ripgrep stops once `head` has enough).
            result = await sandbox.run(
                command(sorted_head=MAX_GREP_MATCHES + 1), cwd=str(cwd), timeout=SEARCH_TIMEOUT_S
            )
    except SandboxUnavailableError:
        return None
    where = display_path(root, env.workspace)
    if result.timed_out:
        raise DshError(
            f"grep {search.pattern!r} in {where} did not finish within {SEARCH_TIMEOUT_S:g} s "
            "and was stopped; narrow the path, the glob or the pattern",
            "SEARCH_TIMEOUT",
        )
    output = parse_output(result.output, result.truncated)
    if result.exit_code in (126, 127) and not output.matches:
        return None  # the sandbox cannot see or execute rg (say, under a masked /tmp)
    if result.exit_code == 2 and not output.matches:
        bad_glob = glob_error(output.messages)
        if bad_glob is not None:
            raise ToolArgsError([f'"glob" {search.glob!r} is not a valid glob: {bad_glob}'])
        why = regex_error(output.messages)
        if why is not None:
            raise bad_regex(search.pattern, why, "Rust regex")
    if result.signal is not None or (result.exit_code not in (0, 1, 2) and not output.matches):
        detail = "; ".join(output.messages[:3]) or f"exit status {result.exit_code}"
        raise DshError(f"grep {search.pattern!r} in {where} failed: {detail}", "SEARCH_FAILED")
    if not policy.active and len({match.path for match in output.matches}) <= _INLINE_RECHECKS:
        # A few files and no path policy to ask (dsh_path_denied is called from worker
        # threads): a couple of lstat calls each cost less than a worker-thread hop.
        return _keep_allowed(env, sandbox, root, cwd, output, listing, policy)
    return await trio.to_thread.run_sync(
        _keep_allowed, env, sandbox, root, cwd, output, listing, policy
    )


def _keep_allowed(
    env: ToolEnv,
    sandbox: Sandbox,
    root: Path,
    cwd: Path,
    output: RgOutput,
    listing: Listing,
    policy: Policy,
) -> Found:
    """ripgrep's matches from files the fence and the policy still allow, sorted (a thread).

    Each reported file is checked again by its real path: ripgrep's walk may differ from ours,
    or a file may have been swapped for a symlink (to a withheld file, or outside the fence)
    since we looked.
    """
    is_dir = root.is_dir()
    where = display_path(root, env.workspace)
    found = Found(cut_short=not output.complete)
    prefix = shown_prefix(root, env) if is_dir else ""
    withheld = set(listing.denied)
    check = Recheck(sandbox, cwd, policy)
    allowed: dict[str, bool] = {}
    for match in output.matches:
        rel = match.path
        ok = allowed.get(rel)
        if ok is None:
            ok = rel not in withheld and check.readable(rel)
            allowed[rel] = ok
        if ok:
            shown = prefix + rel if is_dir else where
            found.matches.append((shown, match.line, match.text, match.long))
    found.matches.sort(key=lambda item: (item[0], item[1]))
    return found


async def _grep(
    env: ToolEnv, rg: str | None, args: Mapping[str, Any], ctx: ToolRunContext | None
) -> ToolExecutionResult:
    glob = args.get("glob")
    search = Search(
        pattern=checked_text(args, "pattern"),
        spelled=checked_text(args, "path", "."),
        glob=checked_text(args, "glob") if isinstance(glob, str) and glob else None,
        ignore_case=bool_arg(args, "ignore_case"),
        include_ignored=bool_arg(args, "include_ignored"),
    )
    if rg is None:
        local_regex(search)  # a bad pattern is reported before any walk
    sandbox = env.sandbox()
    root = search_root(sandbox, search.spelled)  # a few lstat calls: no thread hop for them
    if not root.is_file() and not root.is_dir():
        raise os_failure(IsADirectoryError(), search.spelled, "search")
    policy = Policy(env, ctx)
    found = None
    if rg is not None:
        # ripgrep walks by itself; ours only finds what policy withholds, to exclude it.
        if policy.active or not root.is_dir():
            listing = await trio.to_thread.run_sync(
                _list_files, env, search, root, policy, ctx, False
            )
        else:
            listing = Listing()
        found = await _ripgrep(env, rg, sandbox, search, root, listing, policy)
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
    where = display_path(root, env.workspace)
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
    lines = [f"{shown}:{number}:{_cut(text, long)}" for shown, number, text, long in kept]
    body = "\n".join(lines) if lines else f"No matches for {search.pattern!r} in {where}"
    return finish_result(body, notes, meta, policy)


def make_grep_tool(env: ToolEnv, binary: str | None) -> ToolDefinition:
    """``grep``, bound to ``env`` (the ``tools`` plugin), running ``binary`` (``None``: RE2)."""
    return define_tool(
        name="grep",
        description=(
            "Search file contents for a regular expression, line by line (ripgrep's Rust "
            "regex syntax: like Python `re` but without lookaround or backreferences; "
            "`\\z` for end of text). Prints `path:line:text` for each matching line, paths "
            f"relative to the workspace, sorted; at most {MAX_GREP_MATCHES} matches, long "
            "lines cut. Binary files and files excluded by .gitignore are skipped."
        ),
        parameters={
            "pattern": {
                "type": "string",
                "required": True,
                "description": "Regular expression to look for in each line, e.g. 'def \\w+\\('.",
            },
            "path": {"type": "string", "description": SEARCH_PATH},
            "glob": {
                "type": "string",
                "description": (
                    "Only search files matching this .gitignore-style glob, e.g. '*.py' (any "
                    "depth), 'src/**/*.ts' or '*.{js,ts}'."
                ),
            },
            "ignore_case": {
                "type": "boolean",
                "description": "Match case-insensitively (default false).",
            },
            "include_ignored": {"type": "boolean", "description": IGNORED},
        },
        execute=guarded_async(lambda args, ctx: _grep(env, binary, args, ctx)),
        is_concurrency_safe=concurrency_safe,
        present_call=present.grep_call,
        present_result=present.grep_result,
        paths={"path": "read"},
        claude_name="Grep",
        claude_keys={"ignore_case": "-i"},
    )
