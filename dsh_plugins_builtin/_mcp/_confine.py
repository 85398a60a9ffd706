"""Confining a mounted stdio server: the sandbox's own policy and bubblewrap, per server.

A server is confined unless its table says ``sandbox = false``. Its policy is the sandbox
plugin's (protected paths, the protected installation, the config file, and whatever else that
policy carries), with the server's own ``writable_roots`` (default none: the workspace and
everything else are read-only to it, ``/tmp`` is a private empty tmpfs), ``read_roots`` and
``network`` (default off). It runs under bubblewrap with the sandbox's seccomp filter, in its
own PID namespace (so every descendant dies with it), under the sandbox's resource limits
(``[plugin.sandbox.limits]``, set by its first process before it starts the server; the
tmpfs directories it may write hold at most ``memory_mib`` together), with the environment a
command gets (``[plugin.sandbox.env]``: ``core`` names by default) plus the server's ``env``. Whatever the server runs on the agent's behalf (git's fsmonitor,
hooks, pagers) runs inside that sandbox too.

Bubblewrap confines a server where it works; where it does not, the sandbox's Landlock backend
does (`_landlock_exec`: the same ruleset, seccomp filter, namespaces and supervisor the sandbox
gives a command, applied by a small launcher before it starts the server). Landlock cannot
keep a protected path read-only inside a writable root, so such a server is refused there, as
is one whose network is a list of names; without either backend, a server that asks to be
confined is refused, never started unconfined.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from dsh_host import Host

from .._hooks._launch import sandbox_policy
from .._sandbox import _viewline
from .._sandbox._backends import landlock_prepared
from .._sandbox._bwrap import mount_plan, rw_roots
from .._sandbox._confine import confine_argv, probe_backends, resolve_bwrap
from .._sandbox._denyglob import matching
from .._sandbox._env import EnvConfig, command_env
from .._sandbox._fence import SandboxPolicy
from .._sandbox._landlock import LandlockUnavailable, Prepared
from .._sandbox._layout import layout_of
from .._sandbox._limits import LimitsConfig, ulimit_prefix
from .._sandbox._mountns import places
from .._sandbox._paths import inside_any
from .._sandbox._protected import protected_paths
from .._sandbox._seccomp import SeccompUnavailable, filter_bpf
from ._landlock_exec import command
from ._watch import Hiding, absent

__all__ = ["Confinement", "confinement_for"]


@attrs.frozen
class Confinement:
    """How one server is confined: its policy, the bubblewrap binary (``None``: Landlock, with
    the sandbox's *prepared* ruleset) and the allowed env."""

    policy: SandboxPolicy
    bwrap: str | None
    env_allow: tuple[str, ...] = ()
    prepared: Prepared | None = None
    limits: LimitsConfig | None = None  # the sandbox's [plugin.sandbox.limits], as a command's
    env: EnvConfig | None = None  # the sandbox's [plugin.sandbox.env], as a command's
    unix_sockets: bool = False  # socket(AF_UNIX) allowed (`_seccomp`: refused by default)

    @property
    def backend(self) -> str:
        return "bwrap" if self.bwrap is not None else "landlock"

    def wrap(self, argv: list[str], cwd: str) -> tuple[list[str], list[int], Hiding]:
        """*argv* wrapped in bubblewrap (or the Landlock launcher), made now from what exists
        now; the descriptors the child must inherit (close them after the start); and what
        its sandbox hides, for `_watch.Watch` to check while it runs."""
        prefix = ulimit_prefix(self.limits)
        if prefix:  # the server's first process sets them, before it execs the server
            argv = ["bash", "-c", prefix + 'exec "$@"', "dsh-mcp-server", *argv]
        layout = layout_of(self.policy)
        # Before the line is made: one made meanwhile is hidden and listed (a needless restart).
        missing = absent(tuple(str(p) for p in (*layout.denied, *layout.masked_denied)))
        keep = tuple(str(root) for root in layout.rw)
        matched = frozenset(str(path) for path, _ in matching(layout.patterns, layout.rw))
        globs = (layout.patterns, keep, matched)  # what `Hiding.new_match` checks again
        if self.bwrap is None:
            assert self.prepared is not None
            plan = mount_plan(self.policy)  # what exists now, not at the host's start
            prepared = self.prepared.with_plan(plan)  # its filter: `_landlock` below
            ruleset = os.dup(prepared.ruleset_fd)  # the sandbox keeps its own
            hiding = Hiding(places(plan), missing, *globs)
            return command(prepared, argv, ruleset), [ruleset], hiding
        read_fd, write_fd = os.pipe()
        try:
            program = filter_bpf(not self.policy.network, unix=self.unix_sockets)
            os.write(write_fd, program)  # a few KiB: never blocks
        finally:
            os.close(write_fd)
        memory = self.limits.memory_mib if self.limits is not None else None
        wrapped = confine_argv(
            argv, self.policy, "bwrap", cwd=Path(cwd), bwrap=self.bwrap, seccomp_fd=read_fd,
            tmpfs_bytes=None if memory is None else memory << 20,
        )  # fmt: skip
        mounted = _viewline.places(wrapped)
        if mounted is None:  # a word of bwrap's this does not know: nothing could be checked
            os.close(read_fd)
            raise RuntimeError(f"cannot tell where the sandbox of {argv[0]!r} mounts")
        return wrapped, [read_fd], Hiding(mounted, missing, *globs)

    def environment(self, extra: dict[str, str]) -> dict[str, str]:
        """The environment a command gets (the sandbox's ``[plugin.sandbox.env]`` allowlist,
        ``env_allow``), plus the server's own ``env``."""
        return {**command_env(os.environ, self.env, allow=self.env_allow), **extra}


def _roots(paths: tuple[str, ...], workspace: Path) -> tuple[Path, ...]:
    return tuple(Path(os.path.join(workspace, os.path.expanduser(p))) for p in paths)


def confinement_for(
    name: str,
    host: Host,
    *,
    writable_roots: tuple[str, ...],
    read_roots: tuple[str, ...],
    network: bool,
    unix_sockets: bool = False,
) -> Confinement | str:
    """The confinement of server *name*, or why it cannot be confined (a message to show).

    Unix sockets are refused to it (`_seccomp`) unless *unix_sockets*, or the sandbox lets
    commands reach some host sockets (``allow_unix_sockets``)."""
    workspace = Path(host.workspace)
    base = sandbox_policy(host) or SandboxPolicy("read-only", workspace)
    writable = _roots(writable_roots, workspace)
    policy = attrs.evolve(
        base,
        mode="workspace-write" if writable else "read-only",
        writable_roots=writable,
        read_roots=(*base.read_roots, *_roots(read_roots, workspace)),
        network=network,
        pins=(),
    )
    sandbox = host.pm.get_plugin("sandbox")
    env_allow = tuple(getattr(getattr(sandbox, "config", None), "env_allow", ()) or ())
    limits = getattr(getattr(sandbox, "config", None), "limits", None)
    limits = limits if isinstance(limits, LimitsConfig) else None
    env = getattr(getattr(sandbox, "config", None), "env", None)
    env = env if isinstance(env, EnvConfig) else None
    unix = unix_sockets or bool(policy.unix_sockets)
    bwrap, why = resolve_bwrap(policy)
    problem = probe_backends((bwrap, why)).get("bwrap") if bwrap is not None else why
    if bwrap is not None and problem is None:
        return Confinement(policy, bwrap, env_allow, None, limits, env, unix)
    prepared = _landlock(policy, unix)
    if not isinstance(prepared, str):
        return Confinement(policy, None, env_allow, prepared, limits, env, unix)
    return (
        f"MCP server {name!r} cannot be confined: bubblewrap is not usable here ({problem}), "
        f"nor Landlock ({prepared}); install bubblewrap, or set [plugin.mcp.servers.{name}] "
        "sandbox = false to run it unconfined"
    )


def _landlock(policy: SandboxPolicy, unix: bool) -> Prepared | str:
    """The sandbox's prepared Landlock confinement of *policy* (its seccomp filter refusing
    Unix sockets unless *unix*), or why there is none."""
    rw = rw_roots(policy)
    inside = [str(path) for path in protected_paths(policy) if inside_any(path, rw)]
    if inside:
        shown = ", ".join(inside[:3]) + (" ..." if len(inside) > 3 else "")
        return (
            f"it cannot keep protected paths read-only inside the server's writable roots "
            f"({shown}; [plugin.sandbox] protected = [] accepts that the server may rewrite them)"
        )
    if policy.network_allow is not None:
        return "it cannot put a server behind the proxy of a network list"
    try:
        prepared = landlock_prepared(
            tuple(str(r) for r in rw), not policy.network, mount_plan(policy)
        )
        program = filter_bpf(not policy.network, unix=unix)
    except (LandlockUnavailable, SeccompUnavailable) as exc:
        return str(exc)
    return Prepared(prepared.ruleset_fd, program, prepared.abi, prepared.plan, prepared.limits)
