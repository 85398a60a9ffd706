"""``[plugin.sandbox]``: the configuration, and the `SandboxPolicy` it stands for."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs

from dsh_plugins_builtin._sandbox._allow import Allowlist, allowlist
from dsh_plugins_builtin._sandbox._deny import config_files, expand_deny
from dsh_plugins_builtin._sandbox._env import EnvConfig
from dsh_plugins_builtin._sandbox._limits import LimitsConfig
from dsh_plugins_builtin._sandbox._pins import pin_roots
from dsh_plugins_builtin._sandbox._policy import SandboxMode, SandboxPolicy
from dsh_plugins_builtin._sandbox._protected import import_paths

__all__ = [
    "MAX_OUTPUT_CAP",
    "Backend",
    "EnvConfig",
    "LimitsConfig",
    "SandboxConfig",
    "build_policy",
]

Backend = Literal["auto", "bwrap", "landlock", "none"]
MAX_OUTPUT_CAP = 64 * 1024 * 1024


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


def _check_network(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, tuple):
        allowlist(value, (), {})  # raises ValueError naming the entry


def _check_ports(instance: Any, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    for port in value:
        if isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"network_ports entries must be ports (1-65535), got {port!r}")


def _check_hosts(instance: Any, attribute: attrs.Attribute[Any], value: dict[str, str]) -> None:
    try:
        allowlist((), (), value)
    except ValueError as exc:
        raise ValueError(f"network_hosts maps names to IP addresses: {exc}") from None


@attrs.frozen
class SandboxConfig:
    """``[plugin.sandbox]``.

    Attributes:
        mode: ``read-only`` (nothing may be written), ``workspace-write`` (writes only under the
            writable roots) or ``danger-full-access`` (no fence, commands run unconfined).
        writable_roots: Where ``workspace-write`` may write. ``None`` (the default) means the
            workspace and the private tmp (``private_tmp``; without it the workspace, ``/tmp``
            and the platform temp dir). A list replaces that set (the private tmp too);
            relative entries resolve against the workspace (include ``"."`` to keep it).
        read_roots: Extra directories the file tools may read besides the workspace and the
            writable roots.
        network: Whether ``bash`` commands may use the network: ``true``, ``false``, or a
            list of host names (``"api.example.com"``, ``"*.githubusercontent.com"``: every
            name below it) and IP literals they may reach, only through a proxy on the host
            (bubblewrap only; `dsh_plugins_builtin._sandbox._proxy`).
        network_ports: The ports a ``network`` list lets commands connect to.
        network_hosts: Names pinned to an address for a ``network`` list (like
            ``/etc/hosts``); a pinned name may resolve to a loopback or private address, which
            the proxy refuses otherwise.
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
        private_tmp: Give commands their own ``/tmp`` (and ``TMPDIR``) for the life of the
            host, instead of the host's; the default writable roots are then the workspace and
            it. The file tools see it as ``/tmp`` too.
        allow_unix_sockets: Host Unix socket paths a command may still connect to (every other
            host socket directory is out of its view, every other listening host socket in
            view is covered).
        deny_read: Paths and globs (``~`` expanded) nothing may read, on top of the default
            credential set (`dsh_plugins_builtin._sandbox._deny.DEFAULT_DENY_READ`).
        deny_read_defaults: Whether that default set applies.
        protect_config: Keep read-only, to every tool and to ``bash``, every file the next
            ``dsh`` run reads configuration from while it lies in a writable root
            (``dsh.toml``, ``pyproject.toml``, permissions ``import`` files, ``hook_commands``
            settings, ``~/.claude``, ``$DSH_CONFIG``).
        env: ``[plugin.sandbox.env]``: the environment allowlist (`EnvConfig`).
        limits: ``[plugin.sandbox.limits]``: per-command resource limits (`LimitsConfig`).
    """

    mode: SandboxMode = "workspace-write"
    writable_roots: tuple[str, ...] | None = attrs.field(
        default=None, validator=_check_names("paths", paths=True)
    )
    read_roots: tuple[str, ...] = attrs.field(
        default=(), validator=_check_names("paths", paths=True)
    )
    network: bool | tuple[str, ...] = attrs.field(default=False, validator=_check_network)
    network_ports: tuple[int, ...] = attrs.field(default=(80, 443), validator=_check_ports)
    network_hosts: dict[str, str] = attrs.field(factory=dict, validator=_check_hosts)
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
    private_tmp: bool = True
    allow_unix_sockets: tuple[str, ...] = attrs.field(
        default=(), validator=_check_names("paths", paths=True)
    )
    deny_read: tuple[str, ...] = attrs.field(
        default=(), validator=_check_names("paths", paths=True)
    )
    deny_read_defaults: bool = True
    protect_config: bool = True
    env: EnvConfig = attrs.field(factory=EnvConfig)
    limits: LimitsConfig = attrs.field(factory=LimitsConfig)


def _root(value: str, workspace: Path) -> Path:
    return workspace / os.path.expanduser(value)


def build_policy(
    config: SandboxConfig,
    workspace: Path,
    config_file: str | os.PathLike[str] | None = None,
    install: Iterable[Path] = (),
    *,
    tmp: Path | None = None,
    files: Iterable[Path] = (),
    hidden: Iterable[Path] = (),
    imports: Iterable[Path] | None = None,
) -> SandboxPolicy:
    """The `SandboxPolicy` a configuration stands for, with its roots pinned.

    Args:
        config: The plugin configuration.
        workspace: ``[host] workspace`` (made absolute here).
        config_file: The host's config file, if any (protected when in a writable root).
        install: `install_paths` (protected in a writable root), unless ``protect_install``
            is off.
        tmp: The private tmp directory the plugin made (``private_tmp``); without one, a
            policy with ``private_tmp`` on writes under the workspace only.
        files: `dsh_plugins_builtin._sandbox._deny.config_files` (protected in a root, unless
            ``protect_config`` is off); default: found from the workspace, roots and environment.
        imports: `import_paths` (default: this process's): protected as *install* is.

    Returns:
        The policy the fence and the confinement enforce.

    Raises:
        ValueError: A ``deny_read`` entry would hide the workspace or a root.
    """
    ws = Path(os.path.abspath(workspace))
    install = tuple(install)
    imports = import_paths() if imports is None else tuple(imports)
    tmp = tmp if config.private_tmp else None
    writable = _writable(config, ws, tmp)
    read_roots = tuple(_root(r, ws) for r in config.read_roots)
    denied, globs = _deny(config, ws, (ws, *writable, *read_roots))
    own = _own_state(hidden, denied, (ws, *writable, *read_roots))
    denied += own
    return pin_roots(
        SandboxPolicy(
            config.mode,
            ws,
            tmp=tmp,
            writable_roots=writable,
            read_roots=read_roots,
            network=config.network is True,
            network_allow=_allow(config),
            protected=config.protected,
            config_file=config_file,
            install=(*install, *imports) if config.protect_install else (),
            runtime=tuple(install),
            deny_read=denied,
            deny_patterns=globs,
            own_state=own,
            unix_sockets=tuple(_root(r, ws) for r in config.allow_unix_sockets),
            config_files=_config_files(config, ws, writable, files),
        )
    )


def _own_state(
    hidden: Iterable[Path], denied: tuple[Path, ...], roots: tuple[Path, ...]
) -> tuple[Path, ...]:
    """dsh's own state (`dsh_state`) that ``deny_read`` does not hold already."""
    own = expand_deny(map(str, hidden), defaults=False, keep=roots)[0]
    return tuple(path for path in own if path not in denied)


def _allow(config: SandboxConfig) -> Allowlist | None:
    if not isinstance(config.network, tuple):
        return None
    return allowlist(config.network, config.network_ports, config.network_hosts)


def _deny(
    config: SandboxConfig, ws: Path, keep: tuple[Path, ...]
) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    denied, globs, conflicts = expand_deny(
        config.deny_read, defaults=config.deny_read_defaults, keep=keep, workspace=ws
    )
    if conflicts:
        raise ValueError(
            f"deny_read entries {', '.join(conflicts)} hold the workspace or a writable or "
            "read root, which would then be unreadable; remove them or narrow them"
        )
    return denied, globs


def _writable(config: SandboxConfig, ws: Path, tmp: Path | None) -> tuple[Path, ...]:
    if config.writable_roots is not None:
        return tuple(_root(r, ws) for r in config.writable_roots)
    if config.private_tmp:
        return (ws,) if tmp is None else (ws, tmp)
    return (ws, Path("/tmp"), Path(tempfile.gettempdir()))


def _config_files(
    config: SandboxConfig, ws: Path, writable: tuple[Path, ...], given: Iterable[Path]
) -> tuple[Path, ...]:
    """The config files to protect: *given*, or those found without the host's tables."""
    if not config.protect_config:
        return ()
    return tuple(given) or config_files(ws, writable, {}, os.environ)
