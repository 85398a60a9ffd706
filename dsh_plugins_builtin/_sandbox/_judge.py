"""The fence's judgement: may this call read or write that path, under this policy.

See `dsh_plugins_builtin._sandbox._fence` for the whole fence; this module resolves a spelled
path to its real location (below a pinned root where it can) and judges it against the roots
and the protected paths.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dsh_host import printable
from dsh_plugins_builtin._sandbox._paths import (
    PathArg,
    check_spelling,
    resolve_abs,
    resolve_target,
    within,
)
from dsh_plugins_builtin._sandbox._pins import pin_holds
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, readable_roots, writable_roots
from dsh_plugins_builtin._sandbox._protected import install_in_roots, protected_paths

__all__ = ["FenceDenied", "check_read", "check_write"]


class FenceDenied(Exception):
    """A file operation was refused by the fence.

    Attributes:
        path: The path as the caller spelled it.
        mode: The sandbox mode that denied it.
    """

    def __init__(self, reason: str, *, path: str = "", mode: str = "") -> None:
        """Build the denial.

        Args:
            reason: The full human-readable message (names the path and the mode).
            path: The path as the caller spelled it.
            mode: The sandbox mode in force.
        """
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.mode = mode


def resolve_in(
    spelled: str, policy: SandboxPolicy, pins_checked: bool = False
) -> tuple[str, str | None]:
    """`resolve_target` against the policy's workspace, starting below a pinned root.

    When the path lies lexically under a canonical pinned root that still holds
    (`pin_holds`, or ``pins_checked``: the caller ran `check_pinned` just now), only the
    components below the root are resolved: the root's own were resolved once, by `pin_roots`.

    Returns:
        The canonical path, and the pinned root whose pin was just checked (else ``None``).
    """
    spelled = in_tmp(check_spelling(spelled), policy)  # refused before any reading of it
    resolved = policy.resolved
    if resolved is not None and resolved.prefixes:
        joined = spelled if spelled.startswith("/") else f"{policy.workspace}/{spelled}"
        for prefix, pin in resolved.prefixes:
            if joined.startswith(prefix):
                if not (pins_checked or pin_holds(pin)):
                    break
                root = prefix[:-1]
                return resolve_abs(joined[len(prefix) :], root), root
    return str(resolve_target(spelled, policy.workspace)), None


def in_tmp(spelled: str, policy: SandboxPolicy) -> str:
    """*spelled*, with a leading ``/tmp`` standing for the private tmp (``policy.tmp``).

    A path under another root that lies in the host's ``/tmp`` (a workspace there) stays as it
    is: bwrap shows such a root at its own path inside the private ``/tmp`` too. So does a path
    already in the private tmp as the host spells it (``/tmp/dsh-ptmp-x/a``, as the search tools
    resolve a ``/tmp`` they were given, and report its files): read as ``/tmp`` + it, it would
    name a directory of that name inside the private tmp, which is not there.
    """
    if policy.tmp is None or not (spelled == "/tmp" or spelled.startswith("/tmp/")):
        return spelled
    lexical = os.path.normpath(spelled)
    if _climbs(spelled[5:]):  # above /tmp, a command's view is the host's: ``..`` is lexical
        spelled = lexical  # (``/tmp/../etc`` is ``/etc``, ``/tmp/../tmp/a`` the private ``a``)
        if not within(spelled, "/tmp"):
            return spelled
    if within(lexical, str(policy.tmp)):
        return spelled
    resolved = policy.resolved
    texts = resolved.readable_text if resolved is not None else ()
    roots = (policy.workspace, *policy.read_roots, *policy.writable_roots)
    for root in (*texts, *(str(r) for r in roots)):
        if root != str(policy.tmp) and root != "/" and within(lexical, root):
            return spelled
    return f"{policy.tmp}{spelled[4:]}"


def _climbs(rel: str) -> bool:
    """Whether the relative path *rel* climbs above where it starts (``a/../..``)."""
    depth = 0
    for part in rel.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


_UNSEEN: Any = object()
_DenyTable = tuple[tuple[Path, ...], tuple[str, ...], dict[str, int], dict[str, int | None]]
_DENY_TABLES: dict[int, _DenyTable] = {}
"""By the identity of a policy's ``deny_read`` tuple (held here, so its id is not reused): its
entries as text, text -> first position, and directory -> the first position of an entry it lies
within (or ``None``), for the directories looked up so far. Keyed by identity, not value: a tuple
of 30 paths would be hashed entry by entry (``Path.__hash__``, in Python) on every file a tool
opens."""
_DIRS_KEPT = 4096  # directories remembered per table (then forgotten at once, and learnt again)


def _deny_table(paths: tuple[Path, ...]) -> _DenyTable:
    table = _DENY_TABLES.get(id(paths))
    if table is not None and table[0] is paths:
        return table
    texts = tuple(str(path) for path in paths)
    index: dict[str, int] = {}
    for number, text in enumerate(texts):
        index.setdefault(text, number)
    if len(_DENY_TABLES) >= 64:  # policies are few; a test suite makes many
        _DENY_TABLES.clear()
    table = _DENY_TABLES[id(paths)] = (paths, texts, index, {})
    return table


def _within_entry(directory: str, index: dict[str, int]) -> int | None:
    """The first position of an entry that the absolute *directory* is or lies within."""
    first = index.get(directory)
    cut = directory.rfind("/")
    while cut > 0:
        number = index.get(directory[:cut])
        if number is not None and (first is None or number < first):
            first = number
        cut = directory.rfind("/", 0, cut)
    number = index.get("/")
    if number is not None and (first is None or number < first):
        first = number
    return first


def denied_by(key: str, policy: SandboxPolicy) -> str | None:
    """The ``deny_read`` entry the canonical *key* falls under (``~`` for the home), or ``None``.

    The first entry in ``deny_read`` order that *key* is within, found by looking its ancestors
    up (a few dict lookups) rather than testing every entry (the defaults list about 30); what
    its directory lies within is remembered (the same answer, one lookup, for the next file in
    it)."""
    if policy.deny_read:
        _, texts, index, dirs = _deny_table(policy.deny_read)
        if key.startswith("/"):
            first = index.get(key)
            cut = key.rfind("/")
            if cut > 0:
                directory = key[:cut]
                if (above := dirs.get(directory, _UNSEEN)) is _UNSEEN:
                    if len(dirs) >= _DIRS_KEPT:
                        dirs.clear()
                    above = dirs[directory] = _within_entry(directory, index)
            else:
                above = index.get("/")
            if above is not None and (first is None or above < first):
                first = above
            if first is not None:
                return _home_text(texts[first])
        else:
            for text in texts:
                if within(key, text):
                    return _home_text(text)
    for pattern in policy.deny_patterns:
        if fnmatch.fnmatchcase(key, pattern):
            return _home_text(pattern)
    return None


def _home_text(text: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("/", "") and within(text, home):
        return "~" + text[len(home) :]
    return text


def refuse_denied(spelled: str, key: str, policy: SandboxPolicy, verb: str) -> None:
    """Raise `FenceDenied` if *key* falls under a ``deny_read`` entry, naming the entry."""
    entry = denied_by(key, policy)
    if entry is not None:
        raise FenceDenied(
            f"{verb} {describe(spelled, key)} denied by the sandbox: {printable(entry)} is in "
            "deny_read ([plugin.sandbox] deny_read, which holds credentials by default and "
            "always dsh's own state; deny_read_defaults = false drops the default set)",
            path=spelled,
            mode=policy.mode,
        )


def describe(spelled: str, key: Path | str | None) -> str:
    if key is None or spelled == str(key):
        return f'"{printable(spelled)}"'
    return f'"{printable(spelled)}" (resolves to "{printable(str(key))}")'


def _resolve_or_deny(path: PathArg, policy: SandboxPolicy, verb: str) -> Path:
    return Path(_resolve_text_or_deny(os.fspath(path), policy, verb)[0])


def _resolve_text_or_deny(
    spelled: str, policy: SandboxPolicy, verb: str, pins_checked: bool = False
) -> tuple[str, str | None]:
    try:
        return resolve_in(spelled, policy, pins_checked)
    except ValueError as exc:
        shown = printable(spelled.replace("\0", "\\0"))
        raise FenceDenied(
            f'{verb} "{shown}" denied: {exc} under {policy.mode} mode',
            path=spelled,
            mode=policy.mode,
        ) from None
    except OSError as exc:
        raise FenceDenied(
            f"{verb} {describe(spelled, None)} denied: cannot resolve the path "
            f"({exc.strerror or exc}) under {policy.mode} mode",
            path=spelled,
            mode=policy.mode,
        ) from None


def host_only(key: str, policy: SandboxPolicy) -> str | None:
    """What the canonical *key* is when no file tool may read it: in ``/proc``, or a device;
    ``None`` for anything else.

    A command sees only its own processes (its PID namespace), a ``/proc`` and a ``/dev`` of
    its own; a file tool runs in the host, where ``/proc/self`` is the host and ``/proc/PID``
    every process of its user (environment, memory map, open files), the rest of ``/proc`` its
    kernel (``kallsyms``, ``keys``, ``kmsg``: a read consumes it), and opening a device may act
    (a terminal's input, a watchdog). Even with ``/`` among the read roots they stay out of
    reach; a root that itself lies in ``/dev`` or ``/proc`` (a workspace on ``/dev/shm``) is
    the user's choice: what lies in it is read.
    """
    if not (key.startswith(("/proc/", "/dev/")) or key in ("/dev", "/proc")):
        return None
    if policy.mode == "danger-full-access" or any(
        within(key, text) and (within(text, "/dev") or within(text, "/proc"))
        for text in map(str, readable_roots(policy))
    ):
        return None
    if key.startswith("/dev"):
        return "a device of this machine (the file tools read files, not devices)"
    return (
        "in /proc, the processes and kernel of this machine (a process's environment, memory "
        "and open files, kernel addresses and keys), which no file tool reads; a command has "
        "a /proc of its own"
    )


def _roots_text(roots: Iterable[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "none"


def check_read(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a read.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The canonical path to read.

    Raises:
        FenceDenied: The real path lies outside the workspace, the writable roots and the read
            roots (never under ``danger-full-access``).
    """
    return Path(read_key(os.fspath(path), policy)[0])


def read_key(
    spelled: str, policy: SandboxPolicy, pins_checked: bool = False
) -> tuple[str, str | None]:
    """`check_read` as text, with the pinned root checked on the way (`resolve_in`)."""
    key, checked = _resolve_text_or_deny(spelled, policy, "read of", pins_checked)
    if (what := host_only(key, policy)) is not None:
        raise FenceDenied(
            f"read of {describe(spelled, key)} denied: it is {what} under {policy.mode} mode",
            path=spelled,
            mode=policy.mode,
        )
    if policy.deny_read or policy.deny_patterns:
        refuse_denied(spelled, key, policy, "read of")
    resolved = policy.resolved
    if resolved is not None and any(within(key, root) for root in resolved.readable_text):
        return key, checked
    roots = readable_roots(policy)
    if any(within(key, str(root)) for root in roots):
        return key, checked
    raise FenceDenied(
        f"read of {describe(spelled, key)} denied: outside the workspace and read roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def check_write(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a write.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The fresh canonical target to write.

    Raises:
        FenceDenied: ``read-only`` mode, or the real path lies outside every writable root.
    """
    spelled = os.fspath(path)
    key = _resolve_or_deny(spelled, policy, "write to")
    if policy.mode == "danger-full-access":
        return key
    if policy.mode == "read-only":
        raise FenceDenied(
            f"write to {describe(spelled, key)} denied: file access denied under read-only mode",
            path=spelled,
            mode=policy.mode,
        )
    roots = writable_roots(policy)
    if any(within(str(key), str(root)) for root in roots):
        if policy.deny_read or policy.deny_patterns:
            refuse_denied(spelled, str(key), policy, "write to")
        _check_protected(spelled, key, policy)
        return key
    raise FenceDenied(
        f"write to {describe(spelled, key)} denied: outside the writable roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def _check_protected(spelled: str, key: Path, policy: SandboxPolicy) -> None:
    """Refuse a write at or under a protected path (judged by real and by spelled location)."""
    protected = protected_paths(policy)
    if not protected:
        return
    lexical = os.path.normpath(os.path.join(str(policy.workspace), spelled))
    for path in protected:
        text = str(path)
        if not (within(str(key), text) or within(lexical, text)):
            continue
        if path in install_in_roots(policy, writable_roots(policy)):
            raise FenceDenied(
                f'write to {describe(spelled, key)} denied: "{path}" holds code the next dsh '
                "run executes (its own installation, a plugin's, or a directory on Python's "
                "import path), and is read-only to every tool inside the writable roots. "
                "Install dsh and its plugins outside the workspace (pipx, or a virtual "
                "environment elsewhere) and start it with no workspace directory on its import "
                "path (not as python -m from the workspace, not with PYTHONPATH there), or set "
                "[plugin.sandbox] protect_install = false if the agent must write there",
                path=spelled,
                mode=policy.mode,
            )
        what = (
            "the config file in use"
            if policy.config_file is not None and path == Path(resolve_abs(str(policy.config_file)))
            else "protected"
        )
        raise FenceDenied(
            f'write to {describe(spelled, key)} denied: "{path}" is {what} and read-only to '
            f"every tool inside the writable roots (key [plugin.sandbox] protected, which "
            f"adds the config file in use). Edit it yourself outside the agent, or change "
            f"[plugin.sandbox] protected if the agent must write there",
            path=spelled,
            mode=policy.mode,
        )


def changed(spelled: str, policy: SandboxPolicy, what: str) -> FenceDenied:
    return FenceDenied(
        f"write to {describe(spelled, None)} denied: {what} changed during the write "
        f"under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )
