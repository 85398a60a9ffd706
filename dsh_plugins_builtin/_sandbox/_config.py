"""``[plugin.sandbox]``: the configuration, and the `SandboxPolicy` it stands for."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs

from dsh_plugins_builtin._sandbox._pins import pin_roots
from dsh_plugins_builtin._sandbox._policy import SandboxMode, SandboxPolicy

__all__ = ["MAX_OUTPUT_CAP", "Backend", "SandboxConfig", "build_policy"]

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
