"""Which backend confines a command here: probing bubblewrap and Landlock, choosing one."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Final

import trio

from dsh_plugins_builtin._sandbox import _forkclient, _landlock
from dsh_plugins_builtin._sandbox._bwrap import (
    canonical,
    layout_of,
    mount_plan,
    rw_roots,
    seccomp_pipe,
)
from dsh_plugins_builtin._sandbox._env import scrub_env
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._paths import inside_any
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots
from dsh_plugins_builtin._sandbox._protected import protected_paths
from dsh_plugins_builtin._sandbox._seccomp import SeccompUnavailable, filter_bpf
from dsh_plugins_builtin._sandbox._which import resolve_bwrap

__all__ = [
    "BACKENDS",
    "SandboxUnavailable",
    "landlock_prepared",
    "prepare_landlock",
    "probe_backends",
    "probe_fork_server",
    "resolve_bwrap",
    "select_backend",
    "startup_problem",
]

BACKENDS: Final = ("bwrap", "landlock")
_BACKEND_CHOICES: Final = ("auto", "bwrap", "landlock", "none")
_PROBE_TIMEOUT: Final = 10.0


PROBE_PLAN: Final = (("proc",),)  # the namespaces a command gets, and nothing hidden


def landlock_prepared(
    roots: tuple[str, ...], block_network: bool, plan: tuple[tuple[Any, ...], ...] = ()
) -> _landlock.Prepared:
    """The prepared confinement: the ruleset of *roots* (built once: the roots are opened the
    first time, at start, and never again by path), with the mount *plan* of this call."""
    return _with_plan(_landlock_base(roots, block_network), plan)


@functools.cache
def _landlock_base(roots: tuple[str, ...], block_network: bool) -> _landlock.Prepared:
    return _landlock.prepare(roots, block_network=block_network)


@functools.lru_cache(maxsize=64)
def _with_plan(base: _landlock.Prepared, plan: tuple[tuple[Any, ...], ...]) -> _landlock.Prepared:
    return base.with_plan(plan)


landlock_prepared.cache_clear = _landlock_base.cache_clear  # type: ignore[attr-defined]


def _probe_run(argv: list[str], **extra: Any) -> str | None:
    try:
        done = subprocess.run(
            argv,
            **extra,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            env=scrub_env(os.environ),
            cwd="/",
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{argv[0]} could not be started: {exc}"
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    detail = lines[-1] if lines else "no output"
    return f"the probe exited {done.returncode}: {detail}"


def _seccomp_reason(block_network: bool) -> str | None:
    try:
        filter_bpf(block_network)
    except SeccompUnavailable as exc:
        return str(exc)
    return None


def _probe_bwrap(bwrap: str) -> str | None:
    reason = _seccomp_reason(True)
    if reason is not None:
        return reason
    read_fd = seccomp_pipe(filter_bpf(True))
    try:
        return _probe_run(
            [
                bwrap,
                *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
                *("--unshare-all", "--unshare-user-try", "--cap-drop", "ALL"),
                *("--die-with-parent", "--new-session", "--seccomp", str(read_fd), "--", "true"),
            ],
            pass_fds=(read_fd,),
        )
    finally:
        os.close(read_fd)


def _probe_landlock(block_network: bool) -> str | None:
    try:
        prepared = landlock_prepared((), block_network, PROBE_PLAN)
    except _landlock.LandlockUnavailable as exc:
        return str(exc)
    return _probe_run(["true"], preexec_fn=prepared.preexec)


@functools.cache
def _probe_all(bwrap: str | None, bwrap_why: str) -> tuple[tuple[str, str | None], ...]:
    if not sys.platform.startswith("linux"):
        reason = f"bwrap and Landlock are Linux-only (platform {sys.platform})"
        return (("bwrap", reason), ("landlock", reason), ("landlock-net", reason))
    landlock = _probe_landlock(False)
    return (
        ("bwrap", bwrap_why if bwrap is None else _probe_bwrap(bwrap)),
        ("landlock", landlock),
        ("landlock-net", landlock or _probe_landlock(True)),
    )


def probe_backends(bwrap: tuple[str | None, str] | None = None) -> dict[str, str | None]:
    """Report which confinement backends work here (probed once per process, then cached).

    Each backend really runs ``true``: ``bwrap`` with the full profile and the seccomp filter,
    Landlock once without and once with ``network = false``.

    Args:
        bwrap: `resolve_bwrap`'s answer (default: resolved from ``PATH``).

    Returns:
        ``{"bwrap": ..., "landlock": ..., "landlock-net": ...}`` mapping to ``None`` when the
        backend works, else the reason it does not. ``landlock-net`` is Landlock able to honour
        ``network = false``.
    """
    path, why = resolve_bwrap() if bwrap is None else bwrap
    probes = dict(_probe_all(path, why))
    _probed.add((path, why))
    return probes


_probed: set[tuple[str | None, str]] = set()  # what `probe_backends` answers from its cache


def probe_fork_server() -> str | None:
    """Whether Landlock commands start from the fork server here (``None``), or why they
    start from a fork of the host instead. Runs ``true`` through the server (outside trio)."""
    if not _forkclient.ENABLED:
        return "the fork server is switched off"
    try:
        prepared = landlock_prepared((), False, PROBE_PLAN)
    except _landlock.LandlockUnavailable as exc:
        return str(exc)

    async def probe() -> str | None:
        server = _forkclient.shared()
        read_fd, write_fd = os.pipe()
        try:
            launched = await server.spawn(
                ["true"], env=scrub_env(os.environ), cwd="/", prepared=prepared, stdout=write_fd
            )
        except OSError as exc:
            return f"the fork server could not start true: {exc}"
        finally:
            os.close(write_fd)
            os.close(read_fd)
        if launched is None:
            return server.broken or "the fork server did not start true"
        try:
            code = await launched.wait()
        finally:
            launched.close()
        return None if code == 0 else f"true, started by the fork server, exited {code}"

    return trio.run(probe)


def _protected_problem(policy: SandboxPolicy) -> str | None:
    roots = writable_roots(policy)  # a protected path elsewhere is read-only under Landlock too
    inside = tuple(p for p in protected_paths(policy) if inside_any(p, roots))
    if not inside:
        return None
    shown = ", ".join(str(p) for p in inside[:4]) + (" ..." if len(inside) > 4 else "")
    configs = {canonical(path) for path in policy.config_files}
    planted = [str(p) for p in inside if p in configs]
    if planted:
        shown = f"{shown} (the config files the next dsh run reads: {', '.join(planted)})"
    return (
        f"[plugin.sandbox] protected: {shown} lie inside writable roots, and Landlock cannot "
        "keep a path read-only inside a writable tree; use bwrap (install bubblewrap, "
        'backend = "bwrap"), or move those paths out of the writable roots (a config file '
        "there is always protected: keep it outside, e.g. with DSH_CONFIG; so are dsh's own "
        "installation and the directories on its Python import path, unless "
        "protect_install = false, and every config file the next run "
        "reads, unless protect_config = false), or set protected = [] to accept that "
        "commands may rewrite them"
    )


def select_backend(
    policy: SandboxPolicy, backend: str = "auto", probes: Mapping[str, str | None] | None = None
) -> str:
    """Choose the backend a run would use.

    Args:
        policy: The sandbox policy.
        backend: ``"auto"`` (bwrap, then landlock), or a backend name to insist on.
        probes: Probe results (default: `probe_backends`).

    Returns:
        ``"none"`` for ``danger-full-access``, else ``"bwrap"`` or ``"landlock"``.

    Raises:
        SandboxUnavailable: No candidate backend can confine the policy.
        ValueError: ``backend`` is not a known name.
    """
    if backend not in _BACKEND_CHOICES:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {_BACKEND_CHOICES}")
    if policy.mode == "danger-full-access":
        return "none"
    if backend == "none":
        raise SandboxUnavailable(
            'backend "none" cannot confine; only danger-full-access runs unconfined',
            mode=policy.mode,
        )
    results = probe_backends() if probes is None else probes
    candidates = BACKENDS if backend == "auto" else (backend,)
    reasons: list[str] = []
    for name in candidates:
        key = "landlock-net" if name == "landlock" and not policy.network else name
        reason = results.get(key, "not probed")
        if reason is None and name == "landlock":
            reason = _protected_problem(policy)
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    raise SandboxUnavailable("; ".join(reasons), mode=policy.mode)


def startup_problem(
    policy: SandboxPolicy, backend: str, probes: Mapping[str, str | None]
) -> tuple[str, str] | None:
    """What in the configuration this machine cannot enforce, as ``(key, message)``.

    ``None`` when a backend confines the policy, or when nothing can confine anything here
    (then every command fails closed with ``SANDBOX_UNAVAILABLE`` and ``dsh sandbox check``
    says why). A configuration that *would* be enforceable after changing one key is an error
    at start naming that key: never a quietly weaker sandbox.
    """
    if policy.mode == "danger-full-access" or backend == "none":
        return None
    try:
        select_backend(policy, backend, probes)
    except SandboxUnavailable as exc:
        reason = exc.reason
    else:
        return None
    landlock_ok = probes.get("landlock") is None
    landlock_net_ok = probes.get("landlock-net") is None
    bwrap_ok = probes.get("bwrap") is None and backend in ("auto", "bwrap")
    if backend == "bwrap":
        return "backend", f'backend = "bwrap" cannot be used here: {reason}'
    if bwrap_ok:
        return None
    if landlock_ok and not policy.network and not landlock_net_ok:
        return "network", (
            "network = false cannot be enforced here (bwrap is unusable and "
            f"{probes.get('landlock-net')}); install bubblewrap, or set network = true knowingly"
        )
    problem = _protected_problem(policy)
    if landlock_ok and problem is not None:
        return "protected", problem.removeprefix("[plugin.sandbox] protected: ")
    if backend == "landlock":
        return "backend", f'backend = "landlock" cannot be used here: {reason}'
    return None


def prepare_landlock(policy: SandboxPolicy) -> None:
    """Build the Landlock ruleset and seccomp program for ``policy`` now (at start), not at the
    first command, and start the fork server (`dsh_plugins_builtin._sandbox._forkclient`).

    Raises:
        SandboxUnavailable: Landlock cannot confine the policy here.
    """
    roots = tuple(str(root) for root in rw_roots(policy))
    try:
        landlock_prepared(roots, not policy.network, mount_plan(policy))
    except _landlock.LandlockUnavailable as exc:
        raise SandboxUnavailable(f"landlock: {exc}", mode=policy.mode) from None
    layout = layout_of(policy)
    python = _forkclient.trusted_interpreter(layout.rw, layout.protected)
    if _forkclient.ENABLED and python is not None:  # (none: commands fork the host)
        _forkclient.shared().start(python)  # now, so that no command waits for its interpreter
