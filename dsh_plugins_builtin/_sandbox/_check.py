"""``dsh sandbox check``: the report behind `dsh_plugins_builtin.sandbox.sandbox_check_command`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from dsh_host import Host
from dsh_plugins_builtin._sandbox._bwrap import layout_of
from dsh_plugins_builtin._sandbox._confine import SandboxUnavailable, resolve_bwrap, select_backend
from dsh_plugins_builtin._sandbox._env import command_env
from dsh_plugins_builtin._sandbox._fence import (
    import_paths,
    install_in_roots,
    protected_paths,
    readable_roots,
    writable_roots,
)
from dsh_plugins_builtin._sandbox._paths import resolve_abs
from dsh_plugins_builtin._sandbox._starting import check_enforceable

__all__ = ["check_report", "render_report"]

FIX_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or use a Linux kernel with "
    'Landlock, or set [plugin.sandbox] mode = "danger-full-access" to run commands unconfined; '
    "`dsh sandbox check` shows what works on this machine"
)


def _find_plugin(host: Host, plugin_class: type) -> tuple[Any, str | None]:
    plugin = host.pm.get_plugin("sandbox")
    if isinstance(plugin, plugin_class):
        return plugin, None
    if plugin is not None:
        return None, "a plugin registered as 'sandbox' is not dsh's SandboxPlugin"
    for row in host.plugins():
        if row.name == "sandbox":
            error = f" ({row.error})" if row.error else ""
            return None, f"the sandbox plugin is {row.status.value}{error}"
    return None, None


def _check_host(config_path: str | None, plugin_class: type) -> Host:
    """The host the configuration describes, with this plugin in it even if not installed."""
    import importlib.metadata  # here: the sandbox plugin imports this module at every start

    installed = importlib.metadata.entry_points(group="dsh.plugins", name="sandbox")
    extra: list[object] = [] if installed else [plugin_class()]
    return Host.from_config(config_path, plugins=extra)


def check_report(
    config_path: str | None,
    plugin_class: type,
    probe_backends: Callable[..., Mapping[str, str | None]],
    probe_fork_server: Callable[[], str | None] | None = None,
) -> tuple[dict[str, Any], int]:
    """The report and the exit status of ``dsh sandbox check``.

    Args:
        config_path: ``--config``, or ``None`` to find the config file as ``dsh`` does.
        plugin_class: `SandboxPlugin` (passed in to keep this module free of an import cycle).
        probe_backends: What works on this machine (`dsh_plugins_builtin._sandbox._confine`).
        probe_fork_server: Why Landlock commands would not start from the fork server (asked
            only when Landlock is chosen).

    Returns:
        ``(report, 0)`` when commands can run as configured, ``(report, 1)`` when ``bash``
        would fail closed.

    Raises:
        ConfigError: The configuration is wrong.
    """
    host = _check_host(config_path, plugin_class)
    plugin, problem = _find_plugin(host, plugin_class)
    bwrap = plugin.bwrap if plugin is not None else resolve_bwrap()
    probes = probe_backends(bwrap)
    report: dict[str, Any] = {
        "config": host.config.source,
        "bwrap": {"path": bwrap[0], "why": bwrap[1]},
        "backends": {name: {"usable": why is None, "reason": why} for name, why in probes.items()},
        "enabled": plugin is not None,
        "problem": problem,
    }
    if plugin is None:
        report["problem"] = (
            f"{problem or 'the sandbox plugin is not loaded'}: write_file, edit_file and bash fail closed with SANDBOX_UNAVAILABLE; "
            "enable the sandbox plugin"
        )
        return report, 1
    # A host defers this to its first command: refuse here what this machine cannot enforce.
    check_enforceable(host, "sandbox", plugin.config, plugin.policy, plugin.bwrap)
    report.update(_policy_report(plugin))
    policy, config = plugin.policy, plugin.config
    try:
        report["chosen"] = select_backend(policy, config.backend, probes)
    except SandboxUnavailable as exc:
        report["chosen"] = None
        report["problem"] = f"{exc}; {FIX_HINT}"
        return report, 1
    if report["chosen"] == "landlock" and probe_fork_server is not None:
        why = probe_fork_server()
        report["fork_server"] = {"usable": why is None, "reason": why}
    return report, 0


def render_report(report: dict[str, Any]) -> list[str]:
    """The report as text lines."""
    lines = ["sandbox backends on this machine:"]
    for name, probe in report["backends"].items():
        label = "landlock (network = false)" if name == "landlock-net" else name
        verdict = "works" if probe["usable"] else f"unusable: {probe['reason']}"
        lines.append(f"  {label:<28}{verdict}")
    bwrap = report["bwrap"]
    lines.append(f"bwrap binary: {bwrap['path'] or 'none'} ({bwrap['why']})")
    lines.append(f"config: {report['config'] or 'built-in defaults (no config file)'}")
    if report.get("mode") is not None:
        lines.append(
            f"[plugin.sandbox] mode = {report['mode']}, backend = {report['backend']}, "
            f"network = {json.dumps(report['network'])}"
        )
        lines.append(f"workspace: {report['workspace']}")
        lines.append(f"writable roots: {', '.join(report['writable_roots']) or 'none'}")
        lines += _boundary_lines(report)
        install = report["install"]
        if install["protected"]:
            shown = ", ".join(install["protected"])
            lines.append(
                f"dsh's own installation and import path, read-only to every tool and command: "
                f"{shown}"
            )
        if install["exposed"]:
            shown = ", ".join(install["exposed"])
            lines.append(
                f"WARNING: dsh's own installation or import path is writable by tools and "
                f"commands (protect_install = false), so they can plant code the next run "
                f"executes: {shown}"
            )
    chosen = report.get("chosen")
    if chosen == "none":
        lines.append("bash runs UNCONFINED (danger-full-access): no backend is used")
    elif chosen:
        lines.append(f"bash commands would run confined by: {chosen}")
    fork_server = report.get("fork_server")
    if fork_server is not None:
        how = "the fork server" if fork_server["usable"] else "a fork of the host"
        why = "" if fork_server["usable"] else f" ({fork_server['reason']})"
        lines.append(f"landlock commands would start from: {how}{why}")
    if report.get("problem"):
        lines.append(f"problem: {report['problem']}")
    return lines


def _home(text: str) -> str:
    home = os.path.expanduser("~")
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def _policy_report(plugin: Any) -> dict[str, Any]:
    """What the plugin's policy lets a command and a tool do (the report's policy part)."""
    policy, config = plugin.policy, plugin.config
    # dsh's own installation: read-only to tools where it lies in a writable root, unless
    # protect_install is off (then it is reported as exposed)
    roots = writable_roots(policy) if policy.mode == "workspace-write" else ()
    everywhere = attrs.evolve(policy, install=(*plugin.install, *import_paths()))
    inside = [str(p) for p in install_in_roots(everywhere, roots)]
    configs = {Path(resolve_abs(str(path))) for path in policy.config_files}
    config_inside = [str(p) for p in protected_paths(policy) if p in configs]
    environ = command_env(os.environ, config.env, allow=config.env_allow, tmpdir="/tmp")
    limits = attrs.asdict(config.limits)
    return {
        "tmp": None if policy.tmp is None else str(policy.tmp),
        "config_files": {"protected": config_inside, "protect_config": config.protect_config},
        "deny_read": [_home(str(p)) for p in policy.deny_read] + list(policy.deny_patterns),
        "unix_sockets": [str(p) for p in policy.unix_sockets],
        "sockets_covered": _covered_sockets(policy),
        "env": sorted(environ),
        "limits": limits,
        "processes_enforced": os.geteuid() != 0 and limits["processes"] is not None,
        "core_helper": core_helper(),
        "mode": policy.mode,
        "backend": config.backend,
        "network": policy.network if policy.network_allow is None else policy.network_allow.names,
        "workspace": str(policy.workspace),
        "writable_roots": [str(r) for r in writable_roots(policy)],
        "readable_roots": [str(r) for r in readable_roots(policy)],
        "install": {
            "protected": inside if config.protect_install else [],
            "exposed": [] if config.protect_install else inside,
        },
    }


def core_helper(pattern_file: str = "/proc/sys/kernel/core_pattern") -> str | None:
    """The program the kernel starts on the host for each crash (``core_pattern`` a pipe), or
    ``None``."""
    try:
        with open(pattern_file, encoding="utf-8", errors="replace") as file:
            pattern = file.read().strip()
    except OSError:
        return None
    return pattern[1:].split()[0] if pattern.startswith("|") and pattern[1:].split() else None


def _covered_sockets(policy: Any) -> list[str]:
    """The host's listening Unix sockets a command in the workspace would see, each covered."""
    if policy.mode == "danger-full-access":
        return []
    layout = layout_of(policy)
    mounts = layout.mounts_now(policy.workspace)
    return [str(p) for p in layout.sockets_now(mounts, layout.denied_now(mounts))]


def _boundary_lines(report: dict[str, Any]) -> list[str]:
    """What lies next to a command's files: tmp, config files, credentials, env, limits."""
    lines = []
    tmp = report["tmp"]
    lines.append(
        f"private tmp (commands' /tmp and TMPDIR, the file tools' /tmp): {tmp}"
        if tmp
        else "private tmp: off (private_tmp = false): commands share the host's /tmp"
    )
    protected = report["config_files"]["protected"]
    if protected:
        lines.append(f"config files the next run reads, read-only: {', '.join(protected)}")
    elif not report["config_files"]["protect_config"]:
        lines.append("WARNING: protect_config = false: commands may plant the next run's config")
    lines.append(f"unreadable (deny_read): {', '.join(report['deny_read']) or 'nothing'}")
    lines.append(
        f"host Unix sockets a command may use: {', '.join(report['unix_sockets']) or 'none'}"
    )
    covered = report["sockets_covered"]
    lines.append(
        "other host Unix sockets in view, covered for each command (connect is refused): "
        + (", ".join(covered) or "none now")
    )
    lines.append(f"environment names a command gets: {', '.join(report['env'])}")
    limits = ", ".join(f"{k} = {v}" for k, v in report["limits"].items() if v is not None)
    lines.append(f"limits per command: {limits or 'none'}")
    if not report["processes_enforced"] and report["limits"]["processes"] is not None:
        lines.append("  (processes is not enforced: the kernel never limits uid 0's processes)")
    lines.append(
        "core dumps: none (hard limit 0); memfd and System V IPC, memory no limit counts: refused"
    )
    if report["core_helper"]:
        lines.append(
            f"  (a crashing command still makes the kernel start {report['core_helper']} on the "
            "host, outside the sandbox; it is told the limit is 0 and should keep nothing)"
        )
    return lines
