"""What ``glob`` and ``grep`` share: fenced roots, checked arguments, and the path policy.

`Policy` asks ``dsh_path_denied`` (through `Host.path_denied`) about each file a search meets
and counts what it withholds; `finish_result` adds the one line that tells the model how many files
were left out. The ``tools`` plugin's host is read as ``env._host``: the plugin module belongs
to the tools engineer, and this keeps the seam in the search modules.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dsh_host import DshError, ToolArgsError, ToolExecutionResult, ToolRunContext
from dsh_plugins_builtin._sandbox._errors import SandboxError
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy, denied_by, host_only
from dsh_plugins_builtin._tools._open import display_path, quoted
from dsh_plugins_builtin._tools._support import Sandbox, ToolEnv, str_arg

__all__ = [
    "IGNORED",
    "SEARCH_PATH",
    "Policy",
    "abort_poll",
    "checked_text",
    "concurrency_safe",
    "finish_result",
    "search_root",
    "shown_prefix",
    "workspace_top",
]

SEARCH_PATH = "Directory (or, for grep, a file) to search, relative to the workspace root (default: the root)."
IGNORED = "Also search files that .gitignore excludes (default false; .git/ is always skipped)."


def concurrency_safe(args: Any) -> bool:
    """Searches (and the file tools that only read) are always concurrency-safe."""
    return True


def search_root(sandbox: Sandbox, spelled: str) -> Path:
    """The real, fenced path to search; ``FILE_NOT_FOUND`` if there is nothing there."""
    real = sandbox.check_read(spelled)
    if not real.exists():
        raise DshError(
            f"no such file or directory: {quoted(spelled)} (relative to the workspace)",
            "FILE_NOT_FOUND",
        )
    return real


def workspace_top(env: ToolEnv) -> Path:
    """The real workspace (where ``.gitignore`` files start to apply)."""
    return Path(os.path.realpath(env.workspace))


def shown_prefix(real: Path, env: ToolEnv) -> str:
    """What to put before a path relative to ``real`` to show it relative to the workspace."""
    shown = display_path(real, env)
    return "" if shown == "." else shown.rstrip("/") + "/"


def abort_poll(ctx: ToolRunContext | None) -> Callable[[], bool]:
    """A poll that turns true once the call is aborted."""
    if ctx is None:
        return lambda: False
    signal = ctx.signal
    return lambda: signal.aborted


def checked_text(args: Mapping[str, Any], name: str, default: str | None = None) -> str:
    """A string argument that can reach a command line: no NUL, no lone surrogate."""
    value = str_arg(args, name, default)
    if "\0" in value:
        raise ToolArgsError([f'"{name}" must not contain a NUL character'])
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolArgsError(
            [
                f'"{name}" contains a lone surrogate (not valid UTF-8), which no file name or text can match'
            ]
        ) from None
    return value


class Policy:
    """``dsh_path_denied`` for one call: which files the search must leave out, and how many.

    With *deny_read* (the search tools, which come upon files nobody named), also the sandbox's
    ``deny_read``: a file under ``~/.ssh`` is left out by name and content, as a command's view
    hides it (`read_denied`).
    """

    def __init__(
        self, env: ToolEnv, ctx: ToolRunContext | None, *, deny_read: bool = False
    ) -> None:
        self._ask: Callable[[str, str], str | None] | None = None
        if ctx is not None and env.has_path_policy():
            self._ask = functools.partial(env.path_denied, ctx.execution)
        self._unreadable = read_denied(env.sandbox()) if deny_read else None
        self._withheld: set[str] = set()
        self.on_withheld: Callable[[], object] | None = None
        """Called (on the asking thread) each time a file is withheld, while it is set."""

    @property
    def withheld(self) -> int:
        """How many distinct files were withheld so far."""
        return len(self._withheld)

    @property
    def active(self) -> bool:
        """Whether anything may withhold a file: a ``dsh_path_denied`` plugin, or ``deny_read``."""
        return self._ask is not None or self._unreadable is not None

    @property
    def asks_plugins(self) -> bool:
        """Whether a plugin implements ``dsh_path_denied`` (and has not set it idle)."""
        return self._ask is not None

    def denied(self, *real: str, count: bool = True) -> bool:
        """Whether policy withholds any of these real paths (one file); counts it if so.

        With ``count`` false (ripgrep's re-check), a withheld file is left out silently: a
        count of what ripgrep *matched* would tell whether a withheld file holds the pattern.
        """
        ask, unreadable = self._ask, self._unreadable
        if ask is None and unreadable is None:
            return False
        hit = (unreadable is not None and any(map(unreadable, real))) or (
            ask is not None and any(ask(path, "read") is not None for path in real)
        )
        if hit and count:
            self._withheld.add(real[0])
            if self.on_withheld is not None:
                self.on_withheld()
        return hit

    @property
    def prunes(self) -> Callable[[str], bool] | None:
        """`denied_dir` when the sandbox's ``deny_read`` applies, else ``None``."""
        return None if self._unreadable is None else self.denied_dir

    def denied_dir(self, real: str) -> bool:
        """Whether ``deny_read`` covers the real directory ``real``; counts it (once) if so.

        The walks ask this before any ``.gitignore`` or glob applies and do not descend into
        such a directory (nor read its ``.gitignore``): it counts as one withheld entry
        whatever the query, so the count names nothing inside it.
        """
        unreadable = self._unreadable
        if unreadable is None or not unreadable(real):
            return False
        self._withheld.add(real)
        if self.on_withheld is not None:
            self.on_withheld()
        return True

    def note(self) -> str | None:
        """The line telling the model files were left out, or ``None``."""
        if not self.withheld:
            return None
        return (
            f"[{self.withheld} file(s) withheld by policy: left out of this search, "
            "names and contents]"
        )


def read_denied(sandbox: Sandbox) -> Callable[[str], bool]:
    """Whether the sandbox's ``deny_read`` covers a real path: for the sandbox plugin, its
    policy's entries (`denied_by`: a few dict lookups per file); for another sandbox plugin,
    whether its `check_read` refuses the path."""
    policy = getattr(sandbox, "policy", None)
    if isinstance(policy, SandboxPolicy):  # and neither a process's /proc nor a device
        return lambda real: (
            denied_by(real, policy) is not None
            or (real.startswith(("/proc/", "/dev")) and host_only(real, policy) is not None)
        )

    def refused(real: str) -> bool:
        try:
            sandbox.check_read(real)
        except SandboxError:
            return True
        return False

    return refused


def finish_result(
    body: str, notes: list[str], meta: dict[str, Any], policy: Policy
) -> ToolExecutionResult:
    note = policy.note()
    if note is not None:
        notes.append(note)
        meta["withheld"] = policy.withheld
    if notes:
        body += "\n\n" + "\n".join(notes)
    return ToolExecutionResult(content=body, meta=meta)


# -- glob ----------------------------------------------------------------------------------------
