"""``grep`` with ripgrep: running it in the sandbox beside the policy walk, reading its answer.

ripgrep runs through the sandbox plugin's ``run``, like a ``bash`` command, with
`SEARCH_TIMEOUT_S` on the process; nothing here blocks the event loop. Its output is parsed as
it arrives (`._ripgrep.RgStream`, the run's sink), and ripgrep is stopped once its output
passes the sandbox's limit, or, searching in path order, once what can be shown was read.

With a path policy (a plugin implements ``dsh_path_denied``) our walk asks it about every file
ripgrep would read, in a worker thread. ripgrep starts at the same time, searching the whole
directory; its answer is used only when the walk withheld nothing. The first withheld file
cancels it (what it printed is dropped) and ripgrep runs again, told to skip every withheld
file (``--glob !/path``). So the walk costs no time when nothing is withheld, and ripgrep's
output never holds a withheld file's lines when something is. Whatever ripgrep reports is
checked again by its real path (`._grep_recheck`); without a path policy, the files of a large
output are checked in a worker thread as it arrives (`._grep_recheck.Early`), not all after
ripgrep has ended.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import trio

from dsh_host import DshError, ToolArgsError, printable
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailableError
from dsh_plugins_builtin._tools._grep_local import (
    MAX_GREP_MATCHES,
    Found,
    Listing,
    Search,
    bad_regex,
)
from dsh_plugins_builtin._tools._grep_recheck import Early, Recheck
from dsh_plugins_builtin._tools._open import display_path
from dsh_plugins_builtin._tools._ripgrep import (
    RgOutput,
    RgStream,
    glob_error,
    regex_error,
    rg_command,
)
from dsh_plugins_builtin._tools._search_support import Policy, shown_prefix
from dsh_plugins_builtin._tools._support import Sandbox, ToolEnv

if TYPE_CHECKING:  # the sandbox's command runner loads with the first command
    from dsh_plugins_builtin._sandbox._confine import ProcessResult

__all__ = ["SEARCH_TIMEOUT_S", "search_with_rg"]

SEARCH_TIMEOUT_S = 120.0  # ripgrep's process is killed after this long
# A longer command line (many withheld files to exclude) is searched in-process instead; Linux
# caps one argument (the ``bash -c`` string) at 128 KiB.
_MAX_COMMAND = 100_000
_INLINE_RECHECKS = 32  # reported files re-checked on the event loop; more go to a thread

Command = Callable[..., str]  # `rg_command` with all but ``exclude`` and ``sort`` bound
Ran: TypeAlias = "tuple[ProcessResult, RgOutput]"  # ripgrep's run, and its output as read


async def search_with_rg(
    env: ToolEnv,
    rg: str,
    sandbox: Sandbox,
    search: Search,
    root: Path,
    policy: Policy,
    walk: Callable[[], Listing],
) -> tuple[Found | None, Listing]:
    """Search with ripgrep in the sandbox; ``None`` when ripgrep cannot run here.

    That is: the sandbox cannot run commands (``SANDBOX_UNAVAILABLE``), the command line would
    be too long, or the shell could not find or execute ``rg`` inside the sandbox.

    Args:
        walk: Lists what policy withholds (a worker thread runs it); not run without a policy
            when ``root`` is a directory (ripgrep walks by itself).
    """
    is_dir = root.is_dir()
    cwd = root if is_dir else root.parent
    command: Command = functools.partial(
        rg_command,
        rg,
        search.pattern,
        ignore_case=search.ignore_case,
        include_ignored=search.include_ignored,
        glob=search.glob if is_dir else None,
        target=None if is_dir else root.name,
    )
    check: Recheck | None = None
    known: Mapping[str, bool] = {}
    if is_dir and not policy.asks_plugins:  # deny_read: the sandbox hides it from ripgrep
        listing, (result, check, known) = Listing(), await _run_early(sandbox, command, cwd, policy)
    elif is_dir:
        listing, result = await _beside_walk(sandbox, command, cwd, policy, walk)
    else:
        listing = await trio.to_thread.run_sync(walk)
        if not listing.files:
            return Found(), listing  # the one file named is withheld
        result = await _run(sandbox, command, listing.denied, cwd)
    if check is None:
        check = Recheck(sandbox, cwd, policy, {real for _, real in listing.files})
    output = None if result is None else _checked(env, search, root, *result)
    if output is None:
        return None, listing
    keep = (env, root, output, listing, check, known)
    if (
        not policy.asks_plugins
        and len({match.path for match in output.matches} - known.keys()) <= _INLINE_RECHECKS
    ):
        # A few files left to check and no path policy to ask (dsh_path_denied is called from
        # worker threads): a couple of lstat calls each cost less than a worker-thread hop.
        return _keep_allowed(*keep), listing
    return await trio.to_thread.run_sync(_keep_allowed, *keep), listing


async def _run_early(
    sandbox: Sandbox, command: Command, cwd: Path, policy: Policy
) -> tuple[Ran | None, Recheck, Mapping[str, bool]]:
    """`_run`, the files of a large output re-checked while ripgrep runs (`Early`): its
    result, the `Recheck` to finish with, and what was found meanwhile."""
    early = Early(Recheck(sandbox, cwd, policy))
    try:
        result = await _run(sandbox, command, (), cwd, early)
    finally:
        early.stop()
    return result, early.check, await early.answers()


async def _beside_walk(
    sandbox: Sandbox, command: Command, cwd: Path, policy: Policy, walk: Callable[[], Listing]
) -> tuple[Listing, Ran | None]:
    """The policy walk, with ripgrep over the whole directory started beside it.

    ripgrep's answer is kept only when the walk withheld nothing. The first withheld file
    cancels it (the sandbox kills its processes) and, once the walk is done, ripgrep runs again
    skipping every withheld file; the first answer is dropped.
    """
    early: list[Ran | None] = []
    failed: list[Exception] = []
    walk_failed: Exception | None = None
    speculation = trio.CancelScope()
    token = trio.lowlevel.current_trio_token()

    async def speculate() -> None:
        with speculation:
            try:
                early.append(await _run(sandbox, command, (), cwd))
            except Exception as exc:  # raised after the walk, as if run then (no group)
                failed.append(exc)

    def stop_early() -> None:  # on the walk's thread, at the first withheld file
        policy.on_withheld = None
        token.run_sync_soon(speculation.cancel)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(speculate)
        policy.on_withheld = stop_early
        try:
            listing = await trio.to_thread.run_sync(walk)
        except Exception as exc:  # raised below, outside the nursery (no exception group)
            walk_failed = exc
        finally:
            policy.on_withheld = None
        if walk_failed is not None or listing.denied:
            speculation.cancel()
    if walk_failed is not None:
        raise walk_failed
    if listing.denied or not (early or failed):
        return listing, await _run(sandbox, command, listing.denied, cwd)
    if failed:
        raise failed[0]
    return listing, early[0]


async def _run(
    sandbox: Sandbox,
    command: Command,
    exclude: Sequence[str],
    cwd: Path,
    early: Early | None = None,
) -> Ran | None:
    """Run ripgrep in the sandbox, reading its output as it comes; ``None`` when the command
    line is too long or the sandbox cannot run commands. *early* takes the files of the first
    run's output as it is read.

    Output over the sandbox's limit stops ripgrep there, and it searches again in path order,
    stopped as soon as what can be shown has been read."""
    first = command(exclude=exclude)
    if len(first.encode("utf-8", "surrogateescape")) > _MAX_COMMAND:
        return None
    # Nothing writable: ripgrep only reads (a workspace-write sandbox runs it read-only), where
    # the sandbox plugin's ``run`` takes ``read_only`` (one written before it does not).
    run = functools.partial(sandbox.run, cwd=str(cwd), timeout=SEARCH_TIMEOUT_S)
    if takes_read_only(sandbox.run):
        run = functools.partial(run, read_only=True)
    try:
        stream = RgStream(seen=None if early is None else early.take)
        result = await run(first, sink=stream.feed)
        if result.truncated and not result.timed_out:
            if early is not None:
                early.forget()
            stream = RgStream(limit=MAX_GREP_MATCHES + 1)
            again = command(exclude=exclude, sort=True)
            result = await run(again, sink=stream.feed)
    except SandboxUnavailableError:
        return None
    return result, stream.finish(complete=not result.truncated)


def takes_read_only(run: Callable[..., object]) -> bool:
    """Whether a sandbox plugin's ``run`` accepts ``read_only`` (by name or ``**kwargs``).

    Read once per function (a method's, for each bound ``run``): `inspect.signature` costs
    tens of microseconds, on every search."""
    func = getattr(run, "__func__", run)
    try:
        return _takes_read_only(func)
    except TypeError:  # not hashable: read it each time
        return _takes_read_only.__wrapped__(func)


@functools.lru_cache(maxsize=16)
def _takes_read_only(run: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(run).parameters.values()
    except (TypeError, ValueError):  # no signature to read: call it as the protocol was
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "read_only" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in params
    )


def _checked(
    env: ToolEnv, search: Search, root: Path, result: ProcessResult, output: RgOutput
) -> RgOutput | None:
    """ripgrep's output, or the error it reports; ``None`` when ``rg`` could not run at all."""
    where = display_path(root, env)
    if result.timed_out:
        raise DshError(
            f"grep {search.pattern!r} in {printable(where)} did not finish within {SEARCH_TIMEOUT_S:g} s "
            "and was stopped; narrow the path, the glob or the pattern",
            "SEARCH_TIMEOUT",
        )
    if result.truncated or len(output.matches) > MAX_GREP_MATCHES:
        return output  # stopped by the sandbox once it had enough: a kill of our own
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
        raise DshError(
            f"grep {search.pattern!r} in {printable(where)} failed: {detail}", "SEARCH_FAILED"
        )
    return output


def _keep_allowed(
    env: ToolEnv,
    root: Path,
    output: RgOutput,
    listing: Listing,
    check: Recheck,
    known: Mapping[str, bool],
) -> Found:
    """ripgrep's matches from files the fence and the policy still allow, sorted (a thread).

    Each reported file is checked again by its real path (`check`), after ripgrep reported it:
    ripgrep's walk may differ from ours, or a file may have been swapped for a symlink (to a
    withheld file, or outside the fence) since we looked. Policy is not asked again about a
    real path our walk already put to it (``dsh_path_denied`` is pure: the same path gets the
    same answer). ``known``: the answers for files checked while ripgrep ran (`Early`).
    """
    is_dir = root.is_dir()
    where = display_path(root, env)
    found = Found(cut_short=not output.complete)
    prefix = shown_prefix(root, env) if is_dir else ""
    withheld = set(listing.denied)
    allowed = dict(known) if not withheld else {}  # (nothing is withheld where any is known)
    exact: dict[str, str | None] = {}
    for match in output.matches:
        rel = match.path if is_dir else root.name  # ripgrep read only the file named
        if is_dir and "\ufffd" in rel:  # a name that is not UTF-8, as decoded: the real one
            name = exact[rel] if rel in exact else check.exact(rel)
            exact[rel] = name
            if name is None:
                continue
            rel = name
        ok = allowed.get(rel)
        if ok is None:
            ok = rel not in withheld and check.readable(rel)
            allowed[rel] = ok
        if ok:
            shown = prefix + rel if is_dir else where
            found.matches.append((shown, match.line, match.text, match.long))
    found.matches.sort(key=lambda item: (item[0], item[1]))
    return found
