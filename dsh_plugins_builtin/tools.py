"""The ``tools`` plugin: the built-in coding tools, enforced by the ``sandbox`` plugin.

Registers ``read_file``, ``write_file``, ``edit_file``, ``list_dir``, ``glob``, ``grep`` and
``bash``. Paths are relative to ``[host] workspace`` (absolute paths are allowed, and fenced).
Every path and every command goes through the ``sandbox`` plugin (found in `dsh_host_started`
as ``host.pm.get_plugin("sandbox")``). Without it the tools fail closed: reads stay fenced to
the workspace, and ``write_file``, ``edit_file`` and ``bash`` return ``SANDBOX_UNAVAILABLE``.

The read-only tools are concurrency-safe; ``write_file``, ``edit_file`` and ``bash`` are
exclusive. Writes to one resolved path are serialised inside the host (`ToolsPlugin.path_lock`),
whichever entry point (``host.call``, ``execute_batch``, MCP) the calls came through. Each tool
presents itself as a card (see `dsh_plugins_builtin._tools._presenters`).

At start, when the config in use is ``[tool.dsh]`` in a ``pyproject.toml`` inside a writable
root, a warning is logged on ``dsh_plugins_builtin.tools``: a tool could change the next run's
policy (see `dsh_plugins_builtin._sandbox._fence.config_warning`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dsh_host import Host, ToolDefinition, ToolExecution, hookimpl
from dsh_plugins_builtin._sandbox._fence import config_warning
from dsh_plugins_builtin._sandbox._plugin import SandboxPlugin
from dsh_plugins_builtin._sandbox._protected import danger_warning
from dsh_plugins_builtin._tools._bash import make_bash_tool
from dsh_plugins_builtin._tools._files import make_file_tools
from dsh_plugins_builtin._tools._search import make_search_tools
from dsh_plugins_builtin._tools._support import FailClosedSandbox, Sandbox

__all__ = ["TOOL_NAMES", "ToolsPlugin"]

logger = logging.getLogger("dsh_plugins_builtin.tools")

TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "bash")


class ToolsPlugin:
    """Registers the built-in tools and routes their file and process access to the sandbox."""

    name = "tools"

    def __init__(self) -> None:
        """Create the plugin; the workspace is the working directory until a host starts it."""
        self._host: Host | None = None
        self._plugin: object | None = None
        self._workspace = Path.cwd()
        self._fallback: FailClosedSandbox | None = None
        self._fallback_why = ""
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._locks_guard = threading.Lock()
        self._checked: object | None = None

    @property
    def workspace(self) -> Path:
        """``[host] workspace``, absolute."""
        return self._workspace

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., object]) -> None:
        """Register the seven tools."""
        tools: list[ToolDefinition] = [
            *make_file_tools(self),
            *make_search_tools(self),
            make_bash_tool(self),
        ]
        for tool in tools:
            register(tool)

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Remember the workspace, find the ``sandbox`` plugin, warn about a writable config."""
        self._host = host
        self._workspace = Path(os.path.abspath(host.workspace))
        self._plugin = host.pm.get_plugin("sandbox")
        self._warn_about_config(host)

    def _warn_about_config(self, host: Host) -> None:
        plugin = self._plugin
        if not isinstance(plugin, SandboxPlugin):
            return
        # The sandbox plugin may start after this one: its policy is built once, for both.
        policy = plugin.policy_at_start(host)
        for warning in (danger_warning(policy), config_warning(policy)):
            if warning is not None:
                logger.warning("sandbox: %s", warning)

    @contextmanager
    def path_lock(self, key: str) -> Iterator[None]:
        """Hold the write lock of one resolved path (from a worker thread; made on demand).

        Every write tool call of this host takes it around its read, check and commit, so
        writes to one file are serialised whichever entry point they came through.
        """
        with self._locks_guard:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._locks_guard:
                users = self._locks[key][1]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def path_denied(self, execution: ToolExecution, path: str, access: str) -> str | None:
        """Why policy withholds ``path`` from ``execution`` (`Host.path_denied`), or ``None``."""
        host = self._host
        return None if host is None else host.path_denied(execution, path, access)

    def has_path_policy(self) -> bool:
        """Whether any plugin implements ``dsh_path_denied`` and has not set it idle (listed
        it in ``dsh_idle_hooks``: its configuration withholds no path, so searches do not ask)."""
        host = self._host
        if host is None:
            return False
        return bool(host.hooks.impls("dsh_path_denied"))  # idle ones left out

    def sandbox(self) -> Sandbox:
        """The sandbox plugin, or a fail-closed stand-in when it is missing or unusable."""
        plugin = self._plugin
        host = self._host
        # Still registered (a plugin that failed to start is removed): one dict lookup.
        if plugin is not None and host is not None and host.pm.get_plugin("sandbox") is plugin:
            if plugin is self._checked:
                return plugin  # type: ignore[return-value]
            if isinstance(plugin, Sandbox):  # a Protocol check costs ~30 us: once per plugin
                self._checked = plugin
                return plugin
            why = (
                "the plugin registered as 'sandbox' does not provide check_read, check_write, "
                "write_text and run"
            )
        elif plugin is not None:
            why = "the sandbox plugin failed to start and was removed"
        else:
            why = "the sandbox plugin is not enabled"
        if self._fallback is None or self._fallback_why != why:
            self._fallback = FailClosedSandbox(self._workspace, why)
            self._fallback_why = why
        return self._fallback
