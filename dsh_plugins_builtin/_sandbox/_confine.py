"""Process confinement for the ``bash`` tool: bubblewrap first, Landlock as the fallback.

A command runs as ``bash -c CMD`` wrapped by the first backend that works on this host:

* ``bwrap`` (resolved once, to an absolute path outside every writable root; see
  `resolve_bwrap`): read-only bind of ``/``, every writable root bound read-write at its pinned
  real path, every protected path (`dsh_plugins_builtin._sandbox._fence.protected_paths`) bound
  read-only over it (a missing one gets an empty read-only tmpfs, so it cannot be created by
  the command either; bwrap makes an empty directory there as the mount point, which
  `_MountPoints` removes once no running command needs it), a fresh ``/dev`` and ``/proc``, a
  fresh ``/tmp`` unless ``/tmp`` is itself a writable root, ``--unshare-all`` (user where the
  kernel allows it, IPC, UTS, cgroup, PID; network unless ``network`` is true), ``--cap-drop ALL``,
  ``--die-with-parent``, ``--new-session`` and the seccomp filter of
  `dsh_plugins_builtin._sandbox._seccomp` through ``--seccomp FD``.
* ``landlock``: set up in a forked child before ``exec`` (`dsh_plugins_builtin._sandbox._landlock`):
  a supervisor that kills every descendant when the command ends, Landlock (writes only under
  the writable roots), no capabilities, ``no_new_privs`` and the same seccomp filter. The child
  is forked by a small fork server (`dsh_plugins_builtin._sandbox._forkserver`), not by the host, unless
  the server cannot be used. It cannot
  keep protected paths read-only inside a writable root, so it is refused when there are any.

Before every spawn the pinned roots are checked (`dsh_plugins_builtin._sandbox._fence.check_pinned`); a
root replaced since the host started ends the call with `SandboxUnavailable` naming it.

Known gap (both backends): ``network = false`` does not stop connecting to a host *pathname*
Unix socket that the read-only filesystem view exposes (a Docker or D-Bus socket, say).

When no backend can confine a non-``danger-full-access`` mode, `SandboxUnavailable` is raised
and nothing runs. ``danger-full-access`` runs unconfined and reports ``backend="none"``.

Every run is a fresh process group (``start_new_session``) with stdin on ``/dev/null`` and stdout
and stderr interleaved in one pipe. Only a head and a tail of the output are kept. On timeout,
on cancellation and after a normal exit every process of the command is killed: under bwrap
the PID namespace dies with it; under Landlock the supervisor kills every descendant, the ones
that left the group with ``setsid`` included.

The environment is scrubbed of names containing ``KEY``, ``TOKEN``, ``SECRET`` or ``PASSWORD``
(case-insensitive) and of every ``DSH_*`` name, except names on the caller's allow-list; then
``NO_COLOR=1``, ``TERM=dumb``, ``PAGER=cat`` and ``GIT_PAGER=cat`` are set. The scrub is a name
heuristic only (``*PASSPHRASE*`` would leak).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import attrs
import trio

from dsh_plugins_builtin._sandbox import _landlock
from dsh_plugins_builtin._sandbox._backends import (
    BACKENDS,
    _probed,
    prepare_landlock,
    probe_backends,
    probe_fork_server,
    resolve_bwrap,
    select_backend,
    startup_problem,
)
from dsh_plugins_builtin._sandbox._backends import landlock_prepared as _landlock_prepared
from dsh_plugins_builtin._sandbox._bwrap import (
    MOUNT_POINTS,
    bwrap_argv,
    layout_of,
    mount_plan,
    open_roots,
    rw_roots,
    seccomp_pipe,
)
from dsh_plugins_builtin._sandbox._env import EnvConfig, command_env, scrub_env
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable
from dsh_plugins_builtin._sandbox._forkclient import trusted_interpreter
from dsh_plugins_builtin._sandbox._limits import LimitsConfig, explain, rlimits, ulimit_prefix
from dsh_plugins_builtin._sandbox._mountpoints import MountPointBusy
from dsh_plugins_builtin._sandbox._mountpoints import _MountPoints as _MountPoints
from dsh_plugins_builtin._sandbox._netns import proxied, proxy_env, relay_argv
from dsh_plugins_builtin._sandbox._pins import check_pinned
from dsh_plugins_builtin._sandbox._policy import RootReplaced, SandboxPolicy
from dsh_plugins_builtin._sandbox._run import Output, ProcessResult, Sink, result, run
from dsh_plugins_builtin._sandbox._run import runner_failure as _runner_failure
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf
from dsh_plugins_builtin._sandbox._tmpway import ready
from dsh_plugins_builtin._sandbox._views import in_view, programs

__all__ = [
    "BACKENDS",
    "ProcessResult",
    "SandboxUnavailable",
    "confine_argv",
    "prepare_landlock",
    "probe_backends",
    "probe_fork_server",
    "resolve_bwrap",
    "run_confined",
    "scrub_env",
    "select_backend",
    "startup_problem",
]


def confine_argv(
    argv: Sequence[str],
    policy: SandboxPolicy,
    backend: str,
    *,
    cwd: Path | None = None,
    bwrap: str = "bwrap",
    seccomp_fd: int | None = None,
    root_fds: Mapping[Path, int] | None = None,
    missing: Collection[Path] | None = None,
    tmpfs_bytes: int | None = None,
    ways: Sequence[tuple[str, int]] = (),
) -> list[str]:
    """Build the command line that runs ``argv`` confined by ``backend`` under ``policy``.

    Args:
        argv: The command to confine, e.g. ``["bash", "-c", command]``.
        policy: The sandbox policy (mode, roots, network, protected paths).
        backend: ``"bwrap"`` or ``"landlock"``; ``"none"`` only for ``danger-full-access``.
        cwd: The working directory (bwrap ``--chdir``; kept visible under a masked ``/tmp``).
        bwrap: The bwrap binary (`resolve_bwrap`).
        seccomp_fd: The descriptor bwrap reads the seccomp filter from.
        root_fds: Open descriptors of the writable roots, bound with ``--bind-fd``.
        missing: The protected paths to mount an empty read-only tmpfs over (`_MountPoints.take`);
            ``None``: the ones that do not exist now, and the mount points of running commands,
            held while the process lives (`_MountPoints.hold`).
        tmpfs_bytes: What the directories in RAM the command may write (``/dev/shm``, the
            fresh ``/run``...) hold together: its memory limit (bwrap; Landlock refuses
            writes there).
        ways: The directories on the way to a root inside the private tmp, with a descriptor
            of each, bound onto themselves (`_tmpway`; bwrap).

    Returns:
        The wrapped argv; ``argv`` unchanged for ``danger-full-access`` and for ``landlock``
        (which confines in the child before ``exec``, with no wrapper process).

    Raises:
        SandboxUnavailable: ``backend="none"`` for a confined mode.
        ValueError: Unknown backend.
    """
    if policy.mode == "danger-full-access":
        return list(argv)
    if backend == "bwrap":
        return bwrap_argv(
            argv, policy, cwd, bwrap, seccomp_fd, root_fds, missing, tmpfs_bytes, ways
        )
    if backend == "landlock":
        return list(argv)
    if backend == "none":
        raise SandboxUnavailable(
            'backend "none" cannot confine; only danger-full-access runs unconfined',
            mode=policy.mode,
        )
    raise ValueError(f"unknown sandbox backend {backend!r}")


async def run_confined(
    command: str,
    *,
    cwd: Path,
    policy: SandboxPolicy,
    backend: str = "auto",
    timeout: float | None,
    max_output_bytes: int = 64_000,
    env_allow: Sequence[str] = (),
    bwrap: tuple[str | None, str] | None = None,
    env: EnvConfig | None = None,
    limits: LimitsConfig | None = None,
    sink: Sink | None = None,
) -> ProcessResult:
    """Run ``bash -c command`` confined by ``policy``.

    Honours trio cancellation: if the caller's cancel scope fires, every process of the command
    is killed and ``Cancelled`` propagates.

    Args:
        command: The shell command.
        cwd: The working directory.
        policy: The sandbox policy.
        backend: ``"auto"``, ``"bwrap"``, ``"landlock"`` or ``"none"`` (``"none"`` only works for
            ``danger-full-access``, which never confines anyway).
        timeout: Seconds before the command is killed; ``None`` for no limit.
        max_output_bytes: How many output bytes to keep (a head and a tail).
        env_allow: Names to keep in the environment even though they look secret.
        bwrap: `resolve_bwrap`'s answer, resolved once at start (default: resolved now).
        env: ``[plugin.sandbox.env]`` (default: ``inherit = "core"``).
        limits: ``[plugin.sandbox.limits]`` for a confined command (default: none).
        sink: Stream the output to it as it arrives (`dsh_plugins_builtin._sandbox._run.run`).

    Returns:
        The result; ``backend`` says what confined it.

    Raises:
        SandboxUnavailable: No backend can confine the policy (nothing was run), a pinned root
            was replaced, or the chosen backend failed to set up confinement.
        ValueError: Unknown backend.
    """
    if policy.mode == "danger-full-access":
        spawn = _Spawn(["bash", "-c", command], cwd, {}, timeout, max_output_bytes, sink)
        return await _run_unconfined(spawn, command_env(os.environ, env, allow=env_allow))
    tmp, ways = _prepared(policy, cwd)
    try:
        resolved = bwrap if bwrap is not None else resolve_bwrap(policy)
        chosen = select_backend(policy, backend, await _probes(resolved))
        argv = ["bash", "-c", ulimit_prefix(limits) + command]
        tmpdir = None if tmp is None else "/tmp"  # both backends show the private tmp there
        environ = command_env(os.environ, env, allow=env_allow, tmpdir=tmpdir)
        spawn = _Spawn(argv, cwd, environ, timeout, max_output_bytes, sink, rlimits(limits), ways)
        done = await _run_chosen(chosen, spawn, policy, resolved[0])
    finally:
        for _, fd in ways:
            os.close(fd)
    note = explain(limits, done.output, done.signal)
    if note is not None:
        done = attrs.evolve(done, output=f"{done.output.rstrip()}\n{note}\n", limit=note)
    return done


def _prepared(policy: SandboxPolicy, cwd: Path) -> tuple[Path | None, tuple[tuple[str, int], ...]]:
    """Check the pinned roots, and make the way to a root under ``/tmp`` real directories
    again, not a command's links (`_tmpway`); the private tmp, if there is one, and the
    directories on that way with a descriptor of each (the caller closes them)."""
    try:
        check_pinned(policy)
    except RootReplaced as exc:
        raise SandboxUnavailable(str(exc), mode=policy.mode) from None
    layout = layout_of(policy)
    if layout.tmp is None:
        return None, ()
    places = (path for path, _ in layout.mounts_now(cwd))
    return layout.tmp, tuple(ready(layout.tmp, layout.host_tmp, places))


async def _run_unconfined(spawn: _Spawn, environ: dict[str, str]) -> ProcessResult:
    out, returncode, timed_out = await run(
        spawn.argv, cwd=spawn.cwd, env=environ, timeout=spawn.timeout, cap=spawn.cap,
        sink=spawn.sink,
    )  # fmt: skip
    return result(out, returncode, timed_out, "none")


async def _run_chosen(
    chosen: str, spawn: _Spawn, policy: SandboxPolicy, bwrap: str | None
) -> ProcessResult:
    if chosen == "landlock" and policy.network_allow is not None:
        raise SandboxUnavailable(
            "[plugin.sandbox] network: a list of names needs the bubblewrap backend (Landlock "
            "cannot put a command behind the proxy); install bubblewrap, or set network to "
            "true or false",
            mode=policy.mode,
        )
    if chosen == "landlock":
        out, returncode, timed_out = await _run_landlock(spawn, policy)
    else:
        assert bwrap is not None  # the probe failed otherwise
        out, returncode, timed_out = await _run_bwrap(spawn, policy, bwrap)
    done = result(out, returncode, timed_out, chosen)
    if not timed_out:
        failure = _runner_failure(done.output, done.exit_code, chosen)
        if failure is not None:
            raise SandboxUnavailable(f"{chosen} failed to confine: {failure}", mode=policy.mode)
    return done


async def _probes(resolved: tuple[str | None, str]) -> dict[str, str | None]:
    if resolved in _probed:  # cached: no thread hop (the first probe runs processes)
        return probe_backends(resolved)
    return await trio.to_thread.run_sync(probe_backends, resolved)


@attrs.frozen
class _Spawn:
    """What every backend runs: the command line, where, with what, for how long."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout: float | None
    cap: int
    sink: Sink | None = None
    limits: tuple[tuple[int, int], ...] = ()  # what anything before the command's shell sets
    ways: tuple[tuple[str, int], ...] = ()  # bound onto themselves (`_tmpway`)


def _memory(limits: Sequence[tuple[int, int]]) -> int | None:
    return next((value for which, value in limits if which == resource.RLIMIT_AS), None)


async def _run_landlock(spawn: _Spawn, policy: SandboxPolicy) -> tuple[Output, int | None, bool]:
    roots = tuple(str(root) for root in rw_roots(policy))
    try:
        prepared = _landlock_prepared(roots, not policy.network, mount_plan(policy))
    except _landlock.LandlockUnavailable as exc:
        raise SandboxUnavailable(f"landlock: {exc}", mode=policy.mode) from None
    layout = layout_of(policy)
    return await run(
        spawn.argv,
        cwd=spawn.cwd,
        env=spawn.env,
        timeout=spawn.timeout,
        cap=spawn.cap,
        landlock=prepared,
        sink=spawn.sink,
        python=trusted_interpreter(layout.rw, layout.protected),
    )


async def _run_bwrap(
    spawn: _Spawn, policy: SandboxPolicy, path: str
) -> tuple[Output, int | None, bool]:
    if policy.network_allow is None:
        return await _bwrap_once(spawn, policy, path, None)
    async with proxied(policy.network_allow) as (control, session):
        behind = attrs.evolve(
            spawn,
            argv=relay_argv(control, spawn.argv, policy.deny_read),
            env=proxy_env(spawn.env),
        )
        out, returncode, timed_out = await _bwrap_once(behind, policy, path, control)
    out.notes.extend(session.denials)
    return out, returncode, timed_out


async def _bwrap_once(
    spawn: _Spawn, policy: SandboxPolicy, path: str, control: int | None
) -> tuple[Output, int | None, bool]:
    fds: list[int] = []
    try:
        taken = MOUNT_POINTS.take(layout_of(policy).held)
    except MountPointBusy as exc:
        raise SandboxUnavailable(str(exc.strerror), mode=policy.mode) from None
    try:
        root_fds = open_roots(policy, fds)
        if control is None:  # a kept view, where one can be used
            layout = layout_of(policy)
            line = bwrap_argv(
                ["true"], policy, spawn.cwd, path, root_fds=root_fds, missing=taken.over,
                tmpfs_bytes=_memory(spawn.limits), ways=spawn.ways,
            )  # fmt: skip
            done = await in_view(
                line, taken.over, argv=spawn.argv, env=spawn.env, timeout=spawn.timeout,
                cap=spawn.cap, sink=spawn.sink, limits=spawn.limits, network=policy.network,
                using=programs(layout.rw, layout.protected),
            )  # fmt: skip
            if done is not None:
                return done
        seccomp_fd = seccomp_pipe(filter_bpf(not policy.network, inet=control is not None))
        fds.append(seccomp_fd)
        wrapped = confine_argv(
            spawn.argv, policy, "bwrap", cwd=spawn.cwd, bwrap=path, seccomp_fd=seccomp_fd,
            root_fds=root_fds, missing=taken.over, tmpfs_bytes=_memory(spawn.limits),
            ways=spawn.ways,
        )  # fmt: skip
        info_r, info_w = os.pipe()  # run owns both from here
        wrapped[1:1] = ["--info-fd", str(info_w)]
        block, block_fds = None, []
        if spawn.limits:  # set on bwrap's first process, before it starts any other (`run`)
            block_r, block_w = os.pipe2(os.O_CLOEXEC)
            fds.append(block_r)
            block, block_fds = (block_w, spawn.limits), [block_r]
            wrapped[1:1] = ["--block-fd", str(block_r)]
        return await run(
            wrapped,
            cwd=spawn.cwd,
            env=spawn.env,
            timeout=spawn.timeout,
            cap=spawn.cap,
            pass_fds=(
                seccomp_fd,
                info_w,
                *block_fds,
                *(fd for _, fd in spawn.ways),
                *root_fds.values(),
                *([] if control is None else [control]),
            ),
            info=(info_r, info_w),
            block=block,
            sink=spawn.sink,
        )
    finally:
        for fd in fds:
            os.close(fd)
        MOUNT_POINTS.give_back(taken)
