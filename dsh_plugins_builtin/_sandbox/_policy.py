"""The sandbox policy: its modes and roots.

`SandboxPolicy` is what the file fence (`dsh_plugins_builtin._sandbox._fence`) and the process
confinement (`dsh_plugins_builtin._sandbox._confine`) both enforce; `pin_roots`
(`dsh_plugins_builtin._sandbox._pins`) records every root's device and inode at start, and
`protected_paths` (`dsh_plugins_builtin._sandbox._protected`) are the paths that stay read-only
inside the writable roots.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import attrs

from dsh_plugins_builtin._sandbox._allow import Allowlist
from dsh_plugins_builtin._sandbox._paths import abs_path, abs_paths, resolve_abs

__all__ = [
    "SANDBOX_MODES",
    "RootPin",
    "RootReplaced",
    "SandboxMode",
    "SandboxPolicy",
    "readable_roots",
    "writable_roots",
]

SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("read-only", "workspace-write", "danger-full-access")


def _default_writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    if policy.tmp is not None:
        return (policy.workspace, policy.tmp)
    return (policy.workspace, Path("/tmp"), Path(tempfile.gettempdir()))


@attrs.frozen
class SandboxPolicy:
    """The per-call sandbox policy shared by the file fence and process confinement.

    Attributes:
        mode: ``read-only``, ``workspace-write`` or ``danger-full-access``.
        workspace: The workspace root; relative paths resolve against it.
        writable_roots: Where ``workspace-write`` may write. Defaults to the workspace, ``/tmp``
            and ``tempfile.gettempdir()`` (deduplicated). Ignored by the other modes.
        read_roots: Extra roots the file tools may read besides the workspace and the writable
            roots (process confinement never restricts reads).
        network: Whether a confined process may use the network.
        network_allow: With ``network`` false, the destinations a command may still reach
            through the host's proxy (``network = [names]``), or ``None`` for none.
        protected: Read-only inside the writable roots (see `protected_paths`).
        config_file: The config file the host was started with (protected in a writable root).
        install: Where the next ``dsh`` run executes code from (`install_paths`): protected in
            a writable root, so that no tool can change the policy host itself.
        runtime: Where dsh and the programs its tools run (``rg``) are installed, whether or not
            they are protected: kept in view, read-only, when they lie in a directory the
            command does not see (a virtual environment under the host's ``/tmp``).
        tmp: The commands' private temporary directory (seen as ``/tmp`` by the file tools and,
            under bwrap, by commands; ``TMPDIR`` under Landlock), or ``None`` for none. When
            set, the default writable roots are the workspace and it.
        deny_read: Paths (canonical, globs expanded) nothing may read: not the file tools, not a
            command (``[plugin.sandbox] deny_read``).
        deny_patterns: The ``deny_read`` globs, matched again by the file tools at each call
            (a file created after the start matches too).
        own_state: The entries ``deny_read`` holds for dsh's own state (the audit database,
            the state directory: `dsh_state`), not for their contents: a command that can open
            one can lock it. ``dsh hook claude`` lets Claude Code's searches pass over them.
        unix_sockets: The host Unix sockets a command may connect to (``allow_unix_sockets``).
        config_files: The files the next ``dsh`` run reads configuration from: protected in a
            writable root like ``config_file`` (``protect_config``).
    """

    mode: SandboxMode = attrs.field(validator=attrs.validators.in_(SANDBOX_MODES))
    workspace: Path = attrs.field(converter=abs_path)
    tmp: Path | None = attrs.field(
        default=None, kw_only=True, converter=attrs.converters.optional(abs_path)
    )
    writable_roots: tuple[Path, ...] = attrs.field(
        converter=abs_paths,
        default=attrs.Factory(_default_writable_roots, takes_self=True),
    )
    read_roots: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    network: bool = False
    network_allow: Allowlist | None = attrs.field(default=None, kw_only=True)
    protected: tuple[str, ...] = (".git", ".claude", ".dsh", "dsh.toml")
    config_file: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(abs_path)
    )
    install: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    runtime: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    deny_read: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    deny_patterns: tuple[str, ...] = ()
    own_state: tuple[Path, ...] = attrs.field(converter=abs_paths, default=(), kw_only=True)
    unix_sockets: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    config_files: tuple[Path, ...] = attrs.field(converter=abs_paths, default=())
    pins: tuple[RootPin, ...] = ()
    resolved: _Resolved | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """The canonical roots and protected paths, computed once by `pin_roots` (else per call).

    Not an ``__init__`` argument, so ``attrs.evolve`` never carries it over to a changed policy.
    """


@attrs.frozen
class _Resolved:
    """What `pin_roots` computes once so that a call does no path work on the roots."""

    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    protected: tuple[Path, ...]
    readable_text: tuple[str, ...]
    writable_text: tuple[str, ...]
    pins: dict[str, RootPin]  # by canonical path
    prefixes: tuple[tuple[str, RootPin], ...]  # canonical pinned roots + "/", deepest first
    canonical: tuple[tuple[str, RootPin], ...]  # pins whose path is canonical, with it as text
    others: tuple[RootPin, ...]  # pins spelled through a symlink (checked the long way)


@attrs.frozen
class RootPin:
    """A root as it was when the host started: its canonical path and its device and inode."""

    path: Path
    real: Path
    dev: int
    ino: int


class RootReplaced(Exception):
    """A pinned root was replaced (moved, swapped for a symlink) after the host started."""

    def __init__(self, pin: RootPin, now: str) -> None:
        super().__init__(
            f'the sandbox root "{pin.path}" was replaced after the host started ({now}); '
            "refusing to run: restart dsh if the move was intended"
        )
        self.pin = pin


def _canonical_roots(roots: Iterable[Path]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for root in roots:
        try:
            canonical = Path(resolve_abs(str(root)))
        except OSError:
            continue
        if canonical.is_dir():  # a missing root matches nothing until it exists
            seen.setdefault(canonical, None)
    return tuple(seen)


def writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical, existing, deduplicated roots a policy lets anything write under.

    Both the fence and the process confinement derive their writable set from this function.

    Args:
        policy: The sandbox policy.

    Returns:
        ``()`` for ``read-only``, ``(Path("/"),)`` for ``danger-full-access``, else the roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    if policy.mode == "read-only":
        return ()
    if policy.resolved is not None:
        return policy.resolved.writable
    return _canonical_roots(policy.writable_roots)


def readable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical roots the file tools may read under.

    Args:
        policy: The sandbox policy.

    Returns:
        ``(Path("/"),)`` for ``danger-full-access``; else the workspace, the configured writable
        roots and the extra read roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    if policy.resolved is not None:
        return policy.resolved.readable
    return _canonical_roots((policy.workspace, *policy.writable_roots, *policy.read_roots))
