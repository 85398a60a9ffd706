"""Confining a mounted stdio server: the sandbox's own policy and bubblewrap, per server.

A server is confined unless its table says ``sandbox = false``. Its policy is the sandbox
plugin's (protected paths, the protected installation, the config file, and whatever else that
policy carries), with the server's own ``writable_roots`` (default none: the workspace and
everything else are read-only to it, ``/tmp`` is a private empty tmpfs), ``read_roots`` and
``network`` (default off). It runs under bubblewrap with the sandbox's seccomp filter, in its
own PID namespace (so every descendant dies with it), with the sandbox's scrubbed environment
plus the server's ``env``. Whatever the server runs on the agent's behalf (git's fsmonitor,
hooks, pagers) runs inside that sandbox too.

Only bubblewrap confines a server here (Landlock confines a command in the child before
``exec``, which the mount's process start does not offer): without a working bubblewrap, a
server that asks to be confined is refused, never started unconfined.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from dsh_host import Host

from .._hooks._launch import sandbox_policy
from .._sandbox._confine import confine_argv, probe_backends, resolve_bwrap, scrub_env
from .._sandbox._fence import SandboxPolicy
from .._sandbox._seccomp import filter_bpf

__all__ = ["Confinement", "confinement_for"]


@attrs.frozen
class Confinement:
    """How one server is confined: its policy, the bubblewrap binary and the allowed env."""

    policy: SandboxPolicy
    bwrap: str
    env_allow: tuple[str, ...] = ()

    def wrap(self, argv: list[str], cwd: str) -> tuple[list[str], list[int]]:
        """*argv* wrapped in bubblewrap; the descriptors the child must inherit (close them
        after the start)."""
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, filter_bpf(not self.policy.network))  # a few KiB: never blocks
        finally:
            os.close(write_fd)
        wrapped = confine_argv(
            argv, self.policy, "bwrap", cwd=Path(cwd), bwrap=self.bwrap, seccomp_fd=read_fd
        )
        return wrapped, [read_fd]

    def environment(self, extra: dict[str, str]) -> dict[str, str]:
        """The sandbox's scrubbed environment, plus the server's own ``env``."""
        return {**scrub_env(os.environ, self.env_allow), **extra}


def _roots(paths: tuple[str, ...], workspace: Path) -> tuple[Path, ...]:
    return tuple(Path(os.path.join(workspace, os.path.expanduser(p))) for p in paths)


def confinement_for(
    name: str,
    host: Host,
    *,
    writable_roots: tuple[str, ...],
    read_roots: tuple[str, ...],
    network: bool,
) -> Confinement | str:
    """The confinement of server *name*, or why it cannot be confined (a message to show)."""
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
    bwrap, why = resolve_bwrap(policy)
    problem = probe_backends((bwrap, why)).get("bwrap") if bwrap is not None else why
    if bwrap is None or problem is not None:
        return (
            f"MCP server {name!r} cannot be confined: bubblewrap is not usable here ({problem}); "
            f"install bubblewrap, or set [plugin.mcp.servers.{name}] sandbox = false to run it "
            "unconfined"
        )
    sandbox = host.pm.get_plugin("sandbox")
    env_allow = tuple(getattr(getattr(sandbox, "config", None), "env_allow", ()) or ())
    return Confinement(policy, bwrap, env_allow)
