"""`SandboxPlugin`: holds the sandbox policy; the file tools and ``bash`` enforce it through it.

See `dsh_plugins_builtin.sandbox` (the plugin module, which re-exports it) for the overview.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from dsh_host import DshError, Host, hookimpl, printable
from dsh_plugins_builtin._sandbox._config import SandboxConfig
from dsh_plugins_builtin._sandbox._errors import (
    SandboxDeniedError,
    SandboxUnavailable,
    SandboxUnavailableError,
)
from dsh_plugins_builtin._sandbox._fence import (
    FenceDenied,
    FileStamp,
    RootReplaced,
    SandboxPolicy,
    atomic_write_text,
    check_pinned,
    check_read,
    check_write,
    open_read,
)
from dsh_plugins_builtin._sandbox._pins import read_only as read_only_policy
from dsh_plugins_builtin._sandbox._starting import StartCheck, StartPolicy
from dsh_plugins_builtin._sandbox._which import resolve_bwrap

if TYPE_CHECKING:  # the backends load with the first command (`run`), not at start
    from dsh_plugins_builtin._sandbox._confine import ProcessResult

__all__ = ["SandboxPlugin"]


def _by(policy: SandboxPolicy) -> str:
    return f"sandbox: {policy.mode} mode"


SETTLE_WAIT = 5.0


def _pinned(policy: SandboxPolicy, *, settle: bool = True) -> SandboxPolicy:
    """*policy*, after checking that no root was replaced since the host started.

    *settle*: first wait until the empty mount points of the commands that have ended are
    removed (`MOUNT_POINTS`, removed off the command's path), so a file tool never sees them;
    never for more than `SETTLE_WAIT` seconds (they are empty directories under protected
    names, which the file tools refuse anyway: waiting is tidiness, never worth a hang).
    """
    if settle:  # the mount points are made by commands: loaded with the first file tool
        from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS

        MOUNT_POINTS.settle(SETTLE_WAIT)
    try:
        check_pinned(policy)
    except RootReplaced as exc:
        raise SandboxUnavailableError(str(exc), by=_by(policy)) from None
    return policy


class SandboxPlugin:
    """Holds the sandbox policy; the file tools and ``bash`` enforce it through these methods."""

    name = "sandbox"

    def __init__(self) -> None:
        """Create an unconfigured plugin; `dsh_host_started` configures it."""
        self._config: SandboxConfig | None = None
        self._policy: SandboxPolicy | None = None
        self._bwrap: tuple[str | None, str] | None = None
        self._check: StartCheck | None = None
        self.policy_at_start = StartPolicy(self, self.name)
        """``policy_at_start(host)``: the policy this plugin enforces for *host*, built once per
        host start, by `dsh_host_started` or earlier by another plugin's start that needs it
        (the tools', audit's, output_budget's, the hook commands')."""
        self._read_only: tuple[SandboxPolicy, SandboxPolicy] | None = None
        """The policy in force and its ``read-only`` twin (`read_only_policy`), made at the
        first read-only command."""
        self.install: tuple[Path, ...] = ()
        """Where the next run executes code from (`install_paths`), found at start whether or
        not ``protect_install`` keeps it read-only (`dsh sandbox check` reports both ways)."""

    @hookimpl
    def dsh_plugin_config(self) -> type:
        """Declare `SandboxConfig` as the ``[plugin.sandbox]`` table."""
        return SandboxConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Read the configuration and build the policy; what this machine cannot enforce is
        refused now, or before the first command (`StartCheck`)."""
        self._config, self.install, self._policy = self.policy_at_start.built(host)
        self._bwrap = resolve_bwrap(self._policy, self.config.bwrap)
        self._check = StartCheck(host, self.name, self.config, self._policy, self._bwrap)

    @property
    def tmp(self) -> Path | None:
        """The commands' private tmp directory (``private_tmp``), or ``None``."""
        return self._policy.tmp if self._policy is not None else None

    @property
    def bwrap(self) -> tuple[str | None, str]:
        """The bwrap binary resolved at start (``None`` if there is none) and why that one."""
        return self._bwrap if self._bwrap is not None else resolve_bwrap(None, None)

    # -- what the tools read --------------------------------------------------------------

    @property
    def config(self) -> SandboxConfig:
        """The configuration in force (defaults before the host started)."""
        return self._config if self._config is not None else SandboxConfig()

    @property
    def policy(self) -> SandboxPolicy:
        """The policy in force.

        Raises:
            SandboxUnavailableError: The host has not started this plugin.
        """
        if self._policy is None:
            raise SandboxUnavailableError(
                "the sandbox plugin is registered but was not started by a host, so it has no "
                "policy yet; refusing to touch files or run commands",
                by="sandbox: not started",
            )
        return self._policy

    @property
    def mode(self) -> str:
        """``read-only``, ``workspace-write`` or ``danger-full-access``."""
        return self.policy.mode

    @property
    def workspace(self) -> Path:
        """The workspace relative paths resolve against."""
        return self.policy.workspace

    def check_read(self, path: str | os.PathLike[str]) -> Path:
        """Fence a read.

        Args:
            path: As the model spelled it; relative paths resolve against the workspace.

        Returns:
            The real path to read.

        Raises:
            SandboxDeniedError: The path lies outside every readable root.
            SandboxUnavailableError: A root was replaced since the host started.
        """
        try:
            return check_read(path, _pinned(self.policy))
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=_by(self.policy)) from None

    def open_read(
        self, path: str | os.PathLike[str], *, directory: bool = False
    ) -> tuple[int, str]:
        """Fence a read and open it race-free (no symlink followed out of its root).

        Returns:
            A new read-only descriptor (the caller closes it) and the real path (as text).

        Raises:
            SandboxDeniedError: The path lies outside every readable root.
            SandboxUnavailableError: A root was replaced since the host started.
            OSError: As ``open`` would.
        """
        policy = _pinned(self.policy)
        try:
            return open_read(path, policy, directory=directory, pins_checked=True)
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=_by(self.policy)) from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=_by(self.policy)) from None

    def check_write(self, path: str | os.PathLike[str]) -> Path:
        """Fence a write (the write itself re-checks; see `write_text`).

        Raises:
            SandboxDeniedError: ``read-only`` mode, the path lies outside the writable roots,
                or at or under a protected path (``[plugin.sandbox] protected``).
            SandboxUnavailableError: A root was replaced since the host started.
        """
        try:
            return check_write(path, _pinned(self.policy))
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=_by(self.policy)) from None

    def write_text(
        self,
        path: str | os.PathLike[str],
        content: str,
        *,
        expect: FileStamp | None = None,
        commit: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        """Write UTF-8 text atomically, creating parents; fenced again right before the replace.

        Args:
            path: As the model spelled it.
            content: The text.
            expect: Write only if the file is still the one with this stamp (else
                `dsh_plugins_builtin._sandbox._fence.WriteConflict`).
            commit: Entered around the final check and the rename (see
                `dsh_plugins_builtin._sandbox._fence.atomic_write_text`).

        Raises:
            SandboxDeniedError: The fence refused the path, now or at the re-check.
            SandboxUnavailableError: A root was replaced since the host started.
            OSError: The write itself failed (e.g. the target is a directory).
        """
        policy = _pinned(self.policy)
        try:
            atomic_write_text(path, content, policy, expect=expect, commit=commit)
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=_by(self.policy)) from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=_by(self.policy)) from None

    def resolve_cwd(self, cwd: str | os.PathLike[str] | None) -> Path:
        """The real working directory for a command (default: the workspace).

        Raises:
            SandboxDeniedError: The directory lies outside every readable root.
            DshError: ``FILE_NOT_FOUND`` or ``NOT_A_DIRECTORY``.
        """
        spelled = "." if cwd is None else os.fspath(cwd)
        try:  # a command does not wait for mount points: it mounts over the ones still there
            real = check_read(spelled, _pinned(self.policy, settle=False))
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=_by(self.policy)) from None
        if not real.exists():
            raise DshError(
                f'cwd "{printable(spelled)}" does not exist (resolved to "{printable(str(real))}")',
                "FILE_NOT_FOUND",
            )
        if not real.is_dir():
            raise DshError(f'cwd "{printable(spelled)}" is not a directory', "NOT_A_DIRECTORY")
        return real

    async def run(
        self,
        command: str,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        sink: Callable[[bytes], bool] | None = None,
        read_only: bool = False,
    ) -> ProcessResult:
        """Run ``bash -c command`` under the policy.

        Args:
            command: The shell command.
            cwd: The working directory (default: the workspace); fenced like a read.
            timeout: Seconds before the command's process group is killed; ``None``: no limit.
            sink: Given the output as it arrives, at most ``max_output_bytes`` in all; when it
                answers true (enough), or more output comes, the command is stopped like at a
                timeout (killed, reaped; ``truncated`` says the second) and the result returned.
            read_only: Nothing writable, for a command that only reads (``grep``'s ripgrep):
                ``workspace-write`` runs as ``read-only`` (the same roots, pins and
                ``deny_read``; no writable root, not the private tmp either, so no protected
                path needs a mount); the other modes run as configured.

        Returns:
            The output (head and tail within ``max_output_bytes``), exit status and backend.

        Raises:
            SandboxUnavailableError: No backend can confine the mode; nothing ran.
            SandboxDeniedError: ``cwd`` lies outside every readable root.
        """
        policy = self.policy
        if read_only and policy.mode == "workspace-write":
            made = self._read_only
            if made is None or made[0] is not policy:
                made = self._read_only = (policy, read_only_policy(policy))
            policy = made[1]
        config = self.config
        workdir = self.resolve_cwd(cwd)  # a few lstat calls: cheaper than a thread hop
        if self._check is not None:  # the probe, before the first command
            await self._check.before_command(_by(policy))
        from dsh_plugins_builtin._sandbox._confine import run_confined

        try:
            return await run_confined(
                command,
                cwd=workdir,
                policy=policy,
                backend=config.backend,
                timeout=timeout,
                max_output_bytes=config.max_output_bytes,
                env_allow=config.env_allow,
                env=config.env,
                limits=config.limits,
                bwrap=self.bwrap,
                sink=sink,
            )
        except SandboxUnavailable as exc:
            from dsh_plugins_builtin._sandbox._check import FIX_HINT

            raise SandboxUnavailableError(f"{exc}; {FIX_HINT}", by=_by(self.policy)) from None
