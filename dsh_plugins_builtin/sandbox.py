"""The ``sandbox`` plugin: the one sandbox policy the file tools and ``bash`` enforce.

It hooks no pipeline stage. It holds a `SandboxPolicy` (mode, workspace, writable roots, read
roots, network) built from ``[plugin.sandbox]`` and ``[host] workspace``, and offers the methods
the ``tools`` plugin calls from inside its tool bodies:

* `SandboxPlugin.check_read` / `SandboxPlugin.check_write`: the file fence
  (`dsh_plugins_builtin._sandbox._fence`); a denial raises `SandboxDeniedError` (``SANDBOX_DENIED``);
* `SandboxPlugin.write_text`: an atomic write, fenced again right before the replace;
* `SandboxPlugin.run`: ``bash -c`` confined by bubblewrap or Landlock
  (`dsh_plugins_builtin._sandbox._confine`); when nothing can confine the mode it raises
  `SandboxUnavailableError` (``SANDBOX_UNAVAILABLE``) and nothing runs.

`sandbox_check_command` is ``dsh sandbox check``: which backend works on this machine, why the
others do not, and which one the current configuration would use.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import types
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

import attrs

from dsh_host import ConfigError, DshError, Host, hookimpl
from dsh_plugins_builtin._sandbox._check import (
    FIX_HINT,
    check_report,
    render_report,
)
from dsh_plugins_builtin._sandbox._confine import (
    ProcessResult,
    SandboxUnavailable,
    prepare_landlock,
    probe_backends,
    probe_fork_server,
    resolve_bwrap,
    run_confined,
    select_backend,
    startup_problem,
)
from dsh_plugins_builtin._sandbox._fence import (
    FenceDenied,
    FileStamp,
    RootReplaced,
    SandboxMode,
    SandboxPolicy,
    atomic_write_text,
    check_pinned,
    check_read,
    check_write,
    install_paths,
    open_read,
    pin_roots,
)

__all__ = [
    "SandboxConfig",
    "SandboxDeniedError",
    "SandboxError",
    "SandboxPlugin",
    "SandboxUnavailableError",
    "sandbox_check_command",
]

Backend = Literal["auto", "bwrap", "landlock", "none"]
MAX_OUTPUT_CAP = 64 * 1024 * 1024


class SandboxError(DshError):
    """A sandbox decision that ends a call; ``by`` is who decided, for ``result.decided_by``."""

    def __init__(self, message: str, *, by: str | None = None) -> None:
        """Build the error.

        Args:
            message: What happened and what to do, naming the path or command and the mode.
            by: ``"sandbox: <mode> mode"`` and the like (see CONTRACT §13 on ``decided_by``).
        """
        super().__init__(message)
        self.by = by


class SandboxDeniedError(SandboxError):
    """The file fence refused a path (``SANDBOX_DENIED``); the message names the path and mode."""

    code = "SANDBOX_DENIED"


class SandboxUnavailableError(SandboxError):
    """Nothing can enforce the sandbox for this call, so nothing ran (``SANDBOX_UNAVAILABLE``)."""

    code = "SANDBOX_UNAVAILABLE"


def _check_cap(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not 1 <= value <= MAX_OUTPUT_CAP:
        raise ValueError(
            f"max_output_bytes must be between 1 and {MAX_OUTPUT_CAP} (bytes of command output "
            f"kept per call), got {value!r}"
        )


def _check_names(what: str, *, paths: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        for item in value or ():
            if not item or (paths and "\0" in item):
                raise ValueError(f"{attribute.name} entries must be non-empty {what}, got {item!r}")

    return check


@attrs.frozen
class SandboxConfig:
    """``[plugin.sandbox]``.

    Attributes:
        mode: ``read-only`` (nothing may be written), ``workspace-write`` (writes only under the
            writable roots) or ``danger-full-access`` (no fence, commands run unconfined).
        writable_roots: Where ``workspace-write`` may write. ``None`` (the default) means the
            workspace, ``/tmp`` and the platform temp dir. A list replaces that set entirely;
            relative entries resolve against the workspace (include ``"."`` to keep it).
        read_roots: Extra directories the file tools may read besides the workspace and the
            writable roots.
        network: Whether ``bash`` commands may use the network.
        backend: ``auto`` (bubblewrap, then Landlock), ``bwrap``, ``landlock``, or ``none``
            (confines nothing: only ``danger-full-access`` can run commands then).
        env_allow: Environment names kept for commands although they look secret.
        max_output_bytes: Bytes of a command's output kept (its head and its tail).
        protected: Paths that stay read-only inside the writable roots, to every tool and to
            ``bash``: relative entries under each writable root, absolute ones as they are.
            The config file the host was started with is always added when it lies in a
            writable root (a ``dsh.toml`` the model could rewrite would change the next run's
            policy). ``dsh.toml`` is in the default list for the same reason: one a tool
            created would be the config the next run finds, ahead of ``pyproject.toml`` or of
            no config at all.
        protect_install: Keep read-only, to every tool and to ``bash``, the places in the
            writable roots that the next ``dsh`` run executes code from: the virtual
            environment it runs in, its site-packages, and the source of dsh and of the
            plugins it loaded (`dsh_plugins_builtin._sandbox._fence.install_paths`). Otherwise a tool
            could change the policy host itself (add a ``.pth`` file, an entry point, edit
            ``permissions``). Set it to false only to let the agent work on those files.
        bwrap: The absolute path of the bubblewrap binary to use. ``None`` (the default) finds
            it on ``PATH`` once, at start, skipping any candidate inside a writable root (where
            a command could plant one). A configured path inside a writable root is refused.
    """

    mode: SandboxMode = "workspace-write"
    writable_roots: tuple[str, ...] | None = attrs.field(
        default=None, validator=_check_names("paths", paths=True)
    )
    read_roots: tuple[str, ...] = attrs.field(
        default=(), validator=_check_names("paths", paths=True)
    )
    network: bool = False
    backend: Backend = "auto"
    env_allow: tuple[str, ...] = attrs.field(
        default=(), validator=_check_names("names", paths=False)
    )
    max_output_bytes: int = attrs.field(default=64_000, validator=_check_cap)
    protected: tuple[str, ...] = attrs.field(
        default=(".git", ".claude", ".dsh", "dsh.toml"),
        validator=_check_names("paths", paths=True),
    )
    protect_install: bool = True
    bwrap: str | None = None


def _plugin_modules(host: Host) -> list[str]:
    """The modules the host's plugins come from (their code runs at the next start too)."""
    names = []
    for plugin in host.pm.get_plugins():
        name = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
        if isinstance(name, str):
            names.append(name)
    return names


def _root(value: str, workspace: Path) -> Path:
    return workspace / os.path.expanduser(value)


def build_policy(
    config: SandboxConfig,
    workspace: Path,
    config_file: str | os.PathLike[str] | None = None,
    install: Iterable[Path] = (),
) -> SandboxPolicy:
    """The `SandboxPolicy` a configuration stands for, with its roots pinned.

    Args:
        config: The plugin configuration.
        workspace: ``[host] workspace`` (made absolute here).
        config_file: The config file the host was started with, if any (it is protected when
            it lies in a writable root).
        install: `install_paths` (protected in a writable root), unless ``protect_install``
            is off.

    Returns:
        The policy the fence and the confinement enforce.
    """
    ws = Path(os.path.abspath(workspace))
    extra: dict[str, Any] = {}
    if config.writable_roots is not None:
        extra["writable_roots"] = tuple(_root(r, ws) for r in config.writable_roots)
    policy = SandboxPolicy(
        config.mode,
        ws,
        read_roots=tuple(_root(r, ws) for r in config.read_roots),
        network=config.network,
        protected=config.protected,
        config_file=config_file,
        install=tuple(install) if config.protect_install else (),
        **extra,
    )
    return pin_roots(policy)


class SandboxPlugin:
    """Holds the sandbox policy; the file tools and ``bash`` enforce it through these methods."""

    name = "sandbox"

    def __init__(self) -> None:
        """Create an unconfigured plugin; `dsh_host_started` configures it."""
        self._config: SandboxConfig | None = None
        self._policy: SandboxPolicy | None = None
        self._bwrap: tuple[str | None, str] | None = None
        self.install: tuple[Path, ...] = ()
        """Where the next run executes code from (`install_paths`), found at start whether or
        not ``protect_install`` keeps it read-only (`dsh sandbox check` reports both ways)."""

    @hookimpl
    def dsh_plugin_config(self) -> type:
        """Declare `SandboxConfig` as the ``[plugin.sandbox]`` table."""
        return SandboxConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Read the configuration and build the policy."""
        config = host.config_for(self)
        self._config = config if isinstance(config, SandboxConfig) else SandboxConfig()
        self.install = install_paths(_plugin_modules(host))
        self._policy = build_policy(self._config, host.workspace, host.config.source, self.install)
        self._bwrap = resolve_bwrap(self._policy, self._config.bwrap)
        self._check_enforceable(host)

    def _check_enforceable(self, host: Host) -> None:
        """Refuse at start a configuration this machine cannot enforce (never run weaker)."""
        config, policy = self.config, self.policy
        if config.bwrap is not None and self.bwrap[0] is None:
            raise ConfigError(
                f"{self.bwrap[1]}", path=host.config.source, plugin=self.name, key="bwrap"
            )
        if policy.mode == "danger-full-access" or config.backend == "none":
            return
        probes = probe_backends(self.bwrap)
        problem = startup_problem(policy, config.backend, probes)
        if problem is not None:
            key, message = problem
            raise ConfigError(message, path=host.config.source, plugin=self.name, key=key)
        with contextlib.suppress(SandboxUnavailable):  # else every command fails closed
            if select_backend(policy, config.backend, probes) == "landlock":
                prepare_landlock(policy)  # the ruleset is built once, here

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
    def _by(self) -> str:
        return f"sandbox: {self.policy.mode} mode"

    @property
    def mode(self) -> str:
        """``read-only``, ``workspace-write`` or ``danger-full-access``."""
        return self.policy.mode

    @property
    def workspace(self) -> Path:
        """The workspace relative paths resolve against."""
        return self.policy.workspace

    def _pinned(self) -> SandboxPolicy:
        """The policy, after checking that no root was replaced since the host started."""
        policy = self.policy
        try:
            check_pinned(policy)
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=self._by) from None
        return policy

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
            return check_read(path, self._pinned())
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=self._by) from None

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
        policy = self._pinned()
        try:
            return open_read(path, policy, directory=directory, pins_checked=True)
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=self._by) from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=self._by) from None

    def check_write(self, path: str | os.PathLike[str]) -> Path:
        """Fence a write (the write itself re-checks; see `write_text`).

        Raises:
            SandboxDeniedError: ``read-only`` mode, the path lies outside the writable roots,
                or at or under a protected path (``[plugin.sandbox] protected``).
            SandboxUnavailableError: A root was replaced since the host started.
        """
        try:
            return check_write(path, self._pinned())
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=self._by) from None

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
        policy = self._pinned()
        try:
            atomic_write_text(path, content, policy, expect=expect, commit=commit)
        except FenceDenied as exc:
            raise SandboxDeniedError(exc.reason, by=self._by) from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=self._by) from None

    def resolve_cwd(self, cwd: str | os.PathLike[str] | None) -> Path:
        """The real working directory for a command (default: the workspace).

        Raises:
            SandboxDeniedError: The directory lies outside every readable root.
            DshError: ``FILE_NOT_FOUND`` or ``NOT_A_DIRECTORY``.
        """
        spelled = "." if cwd is None else os.fspath(cwd)
        real = self.check_read(spelled)
        if not real.exists():
            raise DshError(
                f'cwd "{spelled}" does not exist (resolved to "{real}")', "FILE_NOT_FOUND"
            )
        if not real.is_dir():
            raise DshError(f'cwd "{spelled}" is not a directory', "NOT_A_DIRECTORY")
        return real

    async def run(
        self, command: str, cwd: str | os.PathLike[str] | None = None, timeout: float | None = None
    ) -> ProcessResult:
        """Run ``bash -c command`` under the policy.

        Args:
            command: The shell command.
            cwd: The working directory (default: the workspace); fenced like a read.
            timeout: Seconds before the command's process group is killed; ``None``: no limit.

        Returns:
            The output (head and tail within ``max_output_bytes``), exit status and backend.

        Raises:
            SandboxUnavailableError: No backend can confine the mode; nothing ran.
            SandboxDeniedError: ``cwd`` lies outside every readable root.
        """
        policy = self.policy
        config = self.config
        workdir = self.resolve_cwd(cwd)  # a few lstat calls: cheaper than a thread hop
        try:
            return await run_confined(
                command,
                cwd=workdir,
                policy=policy,
                backend=config.backend,
                timeout=timeout,
                max_output_bytes=config.max_output_bytes,
                env_allow=config.env_allow,
                bwrap=self.bwrap,
            )
        except SandboxUnavailable as exc:
            raise SandboxUnavailableError(f"{exc}; {FIX_HINT}", by=self._by) from None


# -- dsh sandbox check ---------------------------------------------------------------------------


def sandbox_check_command(argv: list[str] | None = None) -> int:
    """``dsh sandbox check [--json] [--config PATH]``: which sandbox backend works here.

    Probes bubblewrap and Landlock (each really runs ``true``), says why an unusable one is
    unusable, and which one the current configuration would choose.

    Args:
        argv: The arguments after ``check`` (default: ``sys.argv[1:]``).

    Returns:
        0 when commands can run as configured, 1 when ``bash`` would fail closed
        (``SANDBOX_UNAVAILABLE``), 2 for a configuration error.
    """
    parser = argparse.ArgumentParser(
        prog="dsh sandbox check",
        description="Report which sandbox backend works on this machine and which one "
        "the configuration would use.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--config", metavar="PATH", help="config file (default: $DSH_CONFIG, ./dsh.toml, ...)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        report, status = check_report(args.config, SandboxPlugin, probe_backends, probe_fork_server)
    except ConfigError as exc:
        print(f"dsh sandbox check: config error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(render_report(report)))
    return status


if __name__ == "__main__":  # pragma: no cover - ``python -m dsh_plugins_builtin.sandbox``
    raise SystemExit(sandbox_check_command())
