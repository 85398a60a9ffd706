"""``output_budget``: keep long tool output out of the model's context, saving it to a file instead.

The outermost `dsh_tool_post_execute` link (``tryfirst``). It lets the rest of the chain decide
first, then, for a successful result whose text is larger than ``max_inline_bytes`` (UTF-8),
saves the full text to a private file and replaces the text with its head and tail around a
notice saying how many bytes were cut and where the full text is::

    <head>

    [... 61,204 of 111,204 bytes cut here. The full output was saved for the user in
    /home/me/.cache/dsh-spill/bash-call-7-9f2c....txt, which the tools cannot read. To see what
    was cut, narrow the call: read_file with offset/limit, a narrower grep pattern or path, or
    a command whose output is shorter (head, tail, grep) ...]

    <tail>

The notice is true: the default spill directory is dsh's own state, which the ``sandbox``
plugin hides from every command and file tool (``bash`` cannot ``cat`` another call's output,
of any workspace); where the sandbox's fence would let the tools read the spill file (a
``spill_dir`` in the workspace, such as ``.dsh/spill``), the notice says instead "The full
output is saved in PATH: read it in parts with read_file (offset/limit) or search it with
grep". That is decided once, at start (`_tools_can_read`).

The text that reaches the model, notice included, is never larger than ``max_inline_bytes``.
Images and other non-text blocks are kept as they are; the contexts other plugins added are
kept. Errors and ``Block`` decisions pass through untouched.

The link is a plain function: an error, and a result whose text surely fits (at most 4 UTF-8
bytes a character) when no link after it can replace the content (none, or only ``guards``'
reminder, which adds a context), is handed on as it is (``return call_next()``), with no
coroutine; only the rest waits for the downstream decision to bound it. Saving is best effort: if the file
cannot be written (or the notice alone would not fit), the output passes on in full and a
warning is logged on ``dsh_plugins_builtin.output_budget``.

Spill files are created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``) with mode ``0o600``
and an unpredictable name in a directory created ``0o700``. They are never deleted by dsh.

The host never follows a symlink an agent planted (issue 8, item 7): the spill directory is
resolved once, at start, to its canonical path; each spill then opens that path from ``/`` one
component at a time following no symlink (``openat2`` / ``O_NOFOLLOW``, see
`dsh_plugins_builtin._sandbox._beneath`), creating missing levels ``0o700``, and creates the file in the
held directory. A directory swapped for a symlink after start makes the spill fail (the output
passes in full, with a warning) instead of writing elsewhere. The default location is the
user's cache directory, outside the workspace; a ``spill_dir`` inside the workspace is allowed
but warned about at start, since a tool can read and delete what is spilled there, unless it
lies under a ``[plugin.sandbox] protected`` path (``.dsh/spill`` does, by default), which is
read-only to the tools.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import final

import attrs
import trio

from dsh_host import (
    Accept,
    Block,
    Host,
    ImageBlock,
    TextBlock,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
)
from dsh_plugins_builtin._common._dirs import default_spill_path
from dsh_plugins_builtin._sandbox._beneath import makedirs_nofollow
from dsh_plugins_builtin._sandbox._fence import check_read, protected_paths
from dsh_plugins_builtin._sandbox._plugin import SandboxPlugin
from dsh_plugins_builtin.guards import GuardsPlugin

__all__ = [
    "NoticeDoesNotFit",
    "OutputBudgetConfig",
    "OutputBudgetPlugin",
    "bound_text",
    "default_spill_dir",
]

logger = logging.getLogger("dsh_plugins_builtin.output_budget")

_FILE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def default_spill_dir() -> Path:
    """``dsh-spill`` under the user cache directory (``~/.cache/dsh-spill`` on Linux), which
    the sandbox hides from every command and file tool, as dsh's own state."""
    return default_spill_path()


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(
            f"{attribute.name} must be a positive number of bytes, got {value}; "
            "set it in [plugin.output_budget] to e.g. 50000"
        )


@final
@attrs.frozen
class OutputBudgetConfig:
    """``[plugin.output_budget]``.

    Attributes:
        max_inline_bytes: the largest text (UTF-8 bytes) a successful result may show the model.
        spill_dir: where full outputs are saved; relative to the workspace
            (``[host] workspace``). Default: `default_spill_dir`.
    """

    max_inline_bytes: int = attrs.field(default=50_000, validator=_positive)
    spill_dir: Path | None = None


class NoticeDoesNotFit(ValueError):
    """``max_inline_bytes`` cannot hold even the notice."""


def bound_text(data: bytes, cap: int, path: str, *, readable: bool = True) -> str:
    """Head and tail of the UTF-8 *data* around a notice naming *path*, at most *cap* bytes.

    The notice is priced at its longest (every byte cut) before the rest of the budget is split,
    half to the head and half to the tail; partial characters at the cut are dropped. With
    *readable* false (the tools cannot read *path*), the notice says the output was saved for
    the user and how to narrow the call, instead of telling the model to read the file.

    Raises:
        NoticeDoesNotFit: *cap* cannot hold even the notice.
    """
    total = len(data)
    budget = cap - len(_notice(total, total, path, readable).encode("utf-8"))
    if budget < 0:
        raise NoticeDoesNotFit(f"max_inline_bytes={cap} cannot hold the notice itself")
    head_size, tail_size = budget - budget // 2, budget // 2
    head = data[:head_size].decode("utf-8", "ignore")
    tail = data[total - tail_size :].decode("utf-8", "ignore") if tail_size else ""
    cut = total - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}{_notice(cut, total, path, readable)}{tail}"


def _notice(cut: int, total: int, path: str, readable: bool = True) -> str:
    if readable:
        return (
            f"\n\n[... {cut:,} of {total:,} bytes cut here. The full output is saved in {path}: "
            "read it in parts with read_file (offset/limit) or search it with grep ...]\n\n"
        )
    return (
        f"\n\n[... {cut:,} of {total:,} bytes cut here. The full output was saved for the user "
        f"in {path}, which the tools cannot read. To see what was cut, narrow the call: "
        "read_file with offset/limit, a narrower grep pattern or path, or a command whose "
        "output is shorter (head, tail, grep) ...]\n\n"
    )


class OutputBudgetPlugin:
    """Bound the text of successful results; see the module docstring."""

    name = "output_budget"

    def __init__(self) -> None:
        self.config = OutputBudgetConfig()
        self.spill_dir = default_spill_dir()
        self._host: Host | None = None
        self._keeps: tuple[object, bool] | None = None  # (generation, downstream keeps content)
        self.readable = True
        """Whether the file tools may read what is spilled (`_tools_can_read`), set at start."""

    @hookimpl
    def dsh_plugin_config(self) -> type[OutputBudgetConfig]:
        return OutputBudgetConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)
        self._host = host
        self._keeps = None
        configured = self.config.spill_dir
        if configured is None:
            spill_dir = default_spill_dir()
        else:
            spill_dir = host.workspace / configured.expanduser()
        # Canonical once, here; every spill then follows no symlink at all.
        self.spill_dir = Path(os.path.realpath(spill_dir))
        self.readable = _tools_can_read(host, self.spill_dir)
        if configured is not None and _unprotected_in_workspace(host, self.spill_dir):
            logger.warning(
                "output_budget: [plugin.output_budget] spill_dir = %s lies in the workspace: the "
                "tools can read and delete the outputs saved there. Leave spill_dir unset (the "
                "user cache directory) or add it to [plugin.sandbox] protected.",
                self.spill_dir,
            )

    @hookimpl(tryfirst=True)
    def dsh_tool_post_execute(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Awaitable[Accept | Block]:
        # A plain function: an error passes through untouched whatever is decided downstream,
        # and a result whose text fits is handed on (a tail call, no coroutine) when no link
        # after ours can replace the content (`_downstream_keeps_content`): the decision is
        # then the result's own content, which fits. Anything else is bounded by `_bounded`,
        # once the rest of the chain has decided.
        if result.is_error:
            return call_next()
        if _fits(result.content, self.config.max_inline_bytes) and self._downstream_keeps_content():
            return call_next()
        return self._bounded(execution, result, call_next)

    def _downstream_keeps_content(self) -> bool:
        """Whether every post-execute link called after ours leaves the content as it is
        (none, or only `GuardsPlugin`'s reminder, which adds a context): worked out once per
        plugin set (the plugin manager counts registrations in ``generation``)."""
        host = self._host
        if host is None:
            return False
        pm = host.pm
        generation = getattr(pm, "generation", None)
        known = self._keeps
        if known is not None and generation is not None and known[0] == generation:
            return known[1]
        # pluggy lists implementations in reverse call order: those before ours run after it
        impls = pm.hook.dsh_tool_post_execute.get_hookimpls()
        mine = next((i for i, impl in enumerate(impls) if impl.plugin is self), None)
        keeps = (
            mine is not None
            and all(  # guards' own class: a subclass may override its hook
                type(impl.plugin) is GuardsPlugin or _idle(impl.plugin) for impl in impls[:mine]
            )
        )
        self._keeps = (generation, keeps)
        return keeps

    async def _bounded(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Accept | Block:
        decision = await call_next()
        if result.is_error or not isinstance(decision, Accept):
            return decision
        content = decision.content if decision.content is not None else result.content
        cap = self.config.max_inline_bytes
        if _fits(content, cap):
            return decision
        texts = [block.text for block in content if isinstance(block, TextBlock)]
        data = "\n".join(texts).encode("utf-8", "replace")
        if len(data) <= cap:
            return decision
        try:
            text = await trio.to_thread.run_sync(self._spill, execution, data)
        except Exception as exc:
            logger.warning(
                'output_budget: could not save the full output of tool "%s" (call %s, %d bytes) '
                "in %s: %s: %s; the output was passed on in full. Set [plugin.output_budget] "
                "spill_dir to a writable directory (or raise max_inline_bytes).",
                execution.name, execution.call_id, len(data), self.spill_dir,
                type(exc).__name__, exc,
            )  # fmt: skip
            return decision
        bounded: list[TextBlock | ImageBlock] = []
        placed = False
        for block in content:  # the bounded text takes the place of the first text block
            if not isinstance(block, TextBlock):
                bounded.append(block)
            elif not placed:
                bounded.append(TextBlock(text))
                placed = True
        return Accept(content=bounded, additional_contexts=decision.additional_contexts)

    def _spill(self, execution: ToolExecution, data: bytes) -> str:
        """Save *data* to a new private file and return the bounded text (in a worker thread)."""
        directory = self.spill_dir
        name = f"{_safe(execution.name)}-{_safe(execution.call_id)}-{secrets.token_hex(8)}.txt"
        path = directory / name
        text = bound_text(data, self.config.max_inline_bytes, str(path), readable=self.readable)
        dir_fd = makedirs_nofollow(str(directory), 0o700)
        try:
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
            except BaseException:
                os.unlink(name, dir_fd=dir_fd)
                raise
        finally:
            os.close(dir_fd)
        return text


def _fits(content: Sequence[object], cap: int) -> bool:
    """Whether the text blocks of *content*, joined by newlines, surely fit in *cap* UTF-8
    bytes: at most 4 bytes a character (``False`` may still fit: then it is measured)."""
    size = 0
    for block in content:
        if isinstance(block, TextBlock):
            size += len(block.text) + 1
    return size * 4 <= cap


def _idle(plugin: object) -> bool:
    """Whether *plugin* set its post-execute hook idle, exactly as the host reads it."""
    idle = getattr(plugin, "dsh_idle_hooks", None)
    return isinstance(idle, frozenset | set | tuple | list) and "dsh_tool_post_execute" in idle


def _unprotected_in_workspace(host: Host, spill_dir: Path) -> bool:
    """Whether ``spill_dir`` lies in the workspace and no sandbox protected path covers it."""
    text, workspace = str(spill_dir), os.path.realpath(host.workspace)
    if text != workspace and not text.startswith(workspace + "/"):
        return False
    sandbox = host.pm.get_plugin("sandbox")
    if not isinstance(sandbox, SandboxPlugin):
        return True
    protected = protected_paths(sandbox.policy_at_start(host))  # built once per start
    return not any(text == str(p) or text.startswith(f"{p}/") for p in protected)


def _tools_can_read(host: Host, spill_dir: Path) -> bool:
    """Whether ``read_file`` and ``grep`` may read a file spilled in ``spill_dir``: the sandbox
    plugin's fence allows the read (its policy for this start); with no sandbox plugin the
    tools read only the workspace. Any doubt (the policy cannot be built) counts as no: the
    notice must not send the model to a file it will be refused."""
    probe = str(spill_dir / "probe.txt")
    sandbox = host.pm.get_plugin("sandbox")
    if not isinstance(sandbox, SandboxPlugin):
        workspace = os.path.realpath(host.workspace)
        return probe.startswith(workspace.rstrip("/") + "/")
    try:
        check_read(probe, sandbox.policy_at_start(host))
    except Exception:  # FenceDenied, or a policy that cannot be built (reported by the sandbox)
        return False
    return True


def _safe(part: str) -> str:
    """A file-name-safe, bounded rendering of a tool name or call id."""
    return _UNSAFE.sub("_", part)[:40] or "_"
