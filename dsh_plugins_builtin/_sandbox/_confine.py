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

import contextlib
import functools
import json
import math
import os
import signal as _signal
import subprocess
import sys
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from dsh_plugins_builtin._sandbox import _forkclient, _landlock
from dsh_plugins_builtin._sandbox._beneath import open_dir_nofollow
from dsh_plugins_builtin._sandbox._fence import (
    RootReplaced,
    SandboxPolicy,
    check_pinned,
    protected_paths,
    writable_roots,
)
from dsh_plugins_builtin._sandbox._seccomp import SeccompUnavailable, filter_bpf

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

BACKENDS: Final = ("bwrap", "landlock")
_BACKEND_CHOICES: Final = ("auto", "bwrap", "landlock", "none")
_PROBE_TIMEOUT: Final = 10.0
_DRAIN_GRACE: Final = 1.0
_SUPERVISOR_GRACE: Final = 5.0
_READ_CHUNK: Final = 65536
_USE_FORK_SERVER = True  # Landlock commands start from the fork server when it works
_SECRET_MARKERS: Final = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_FORCED_ENV: Final = {"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}


@attrs.frozen
class ProcessResult:
    """The outcome of one (possibly confined) command.

    Attributes:
        output: stdout and stderr interleaved; if truncated, the head, a notice and the tail.
        exit_code: The exit status, or ``None`` when a signal ended the process.
        signal: The signal that ended the process, or ``None``.
        truncated: Whether bytes were dropped from the middle of the output.
        timed_out: Whether the timeout killed the process group.
        backend: ``"bwrap"``, ``"landlock"`` or ``"none"`` (unconfined).
        total_bytes: How many bytes the command wrote in all.
    """

    output: str
    exit_code: int | None
    signal: int | None
    truncated: bool
    timed_out: bool
    backend: str
    total_bytes: int


class SandboxUnavailable(Exception):
    """No sandbox backend can confine the requested mode; nothing was run.

    Attributes:
        reason: Why each candidate backend cannot be used.
        mode: The sandbox mode that was requested.
    """

    def __init__(self, reason: str, *, mode: str = "") -> None:
        """Build the error.

        Args:
            reason: Why no backend is usable (one clause per backend).
            mode: The requested sandbox mode.
        """
        super().__init__(
            f'sandbox mode "{mode}" is requested but no sandbox backend is usable on this host; '
            f"refusing to run the command unconfined: {reason}"
        )
        self.reason = reason
        self.mode = mode


def scrub_env(environ: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """Return the environment a sandboxed process gets.

    Args:
        environ: The source environment (usually ``os.environ``).
        allow: Names to keep even though they look secret (exact, case-sensitive match).

    Returns:
        ``environ`` minus names containing KEY/TOKEN/SECRET/PASSWORD (case-insensitive) and names
        starting with ``DSH_`` (case-insensitive), unless allowed; plus ``NO_COLOR=1``,
        ``TERM=dumb``, ``PAGER=cat`` and ``GIT_PAGER=cat``.
    """
    keep = frozenset(allow)
    env: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        secret = upper.startswith("DSH_") or any(marker in upper for marker in _SECRET_MARKERS)
        if name in keep or not secret:
            env[name] = value
    env.update(_FORCED_ENV)
    return env


def _seccomp_pipe(program: bytes) -> int:
    """A pipe holding ``program`` (bwrap reads ``--seccomp FD`` to its end); the read end."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)  # a few KiB: fits the pipe buffer, never blocks
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return read_fd


@functools.cache
def _landlock_prepared(roots: tuple[str, ...], block_network: bool) -> _landlock.Prepared:
    return _landlock.prepare(roots, block_network=block_network)


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


def _inside_any(path: Path, roots: Iterable[Path]) -> bool:
    return any(_under(path, root) for root in roots)


def resolve_bwrap(
    policy: SandboxPolicy | None = None, configured: str | None = None
) -> tuple[str | None, str]:
    """Find the bwrap binary to trust: absolute, executable, outside every writable root.

    Args:
        policy: Its writable roots are excluded (a planted ``bwrap`` there is skipped).
        configured: ``[plugin.sandbox] bwrap``: used as given, or refused, never searched around.

    Returns:
        ``(path, why)``: the real path (``None`` when there is none) and a sentence saying why.
    """
    roots = writable_roots(policy) if policy is not None else ()
    roots = () if roots == (Path("/"),) else roots
    if configured is not None:
        if not os.path.isabs(configured):
            return None, f'[plugin.sandbox] bwrap = "{configured}" is not an absolute path'
        real = _canonical(Path(configured))
        if _inside_any(real, roots):
            return None, (
                f'[plugin.sandbox] bwrap = "{configured}" lies in a writable root ({real}), so a '
                "command could replace it; install bwrap outside the writable roots"
            )
        if not (os.path.isfile(real) and os.access(real, os.X_OK)):
            return None, f'[plugin.sandbox] bwrap = "{configured}" is not an executable file'
        return str(real), f'configured: [plugin.sandbox] bwrap = "{configured}"'
    skipped: list[str] = []
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isabs(entry):
            continue  # a relative PATH entry depends on the working directory
        candidate = Path(entry) / "bwrap"
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue  # (os.path.isfile: an unreadable PATH entry is no error)
        real = _canonical(candidate)
        if _inside_any(real, roots):
            skipped.append(str(candidate))
            continue
        note = f" (skipped {', '.join(skipped)}: inside a writable root)" if skipped else ""
        return str(real), f"found on PATH as {candidate}{note}"
    if skipped:
        return None, (
            f"the only bwrap on PATH ({', '.join(skipped)}) lies in a writable root, where a "
            "command could have planted it; install bubblewrap system-wide or set "
            "[plugin.sandbox] bwrap"
        )
    return None, "bwrap is not installed (not found on PATH)"


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
    read_fd = _seccomp_pipe(filter_bpf(True))
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
        prepared = _landlock_prepared((), block_network)
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
    if not _USE_FORK_SERVER:
        return "the fork server is switched off"
    try:
        prepared = _landlock_prepared((), False)
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
    inside = protected_paths(policy)
    if not inside:
        return None
    shown = ", ".join(str(p) for p in inside[:4]) + (" ..." if len(inside) > 4 else "")
    return (
        f"[plugin.sandbox] protected: {shown} lie inside writable roots, and Landlock cannot "
        "keep a path read-only inside a writable tree; use bwrap (install bubblewrap, "
        'backend = "bwrap"), or move those paths out of the writable roots (a config file '
        "there is always protected: keep it outside, e.g. with DSH_CONFIG; so is dsh's own "
        "installation, unless protect_install = false), or set protected = [] to accept that "
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
    roots = tuple(str(root) for root in _rw_roots(policy))
    try:
        _landlock_prepared(roots, not policy.network)
    except _landlock.LandlockUnavailable as exc:
        raise SandboxUnavailable(f"landlock: {exc}", mode=policy.mode) from None
    if _USE_FORK_SERVER:
        _forkclient.shared().start()  # now, so that no command waits for its interpreter


def _under(path: Path, root: Path) -> bool:
    return root == Path("/") or path == root or root in path.parents


def _canonical(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _rw_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The writable roots as pinned at start (their real paths then), never re-resolved: a root
    swapped for a symlink later must not move the confinement with it. A policy that was never
    pinned (built by hand) uses `writable_roots`."""
    current = writable_roots(policy)
    if not policy.pins or policy.mode != "workspace-write":
        return current
    pinned = {pin.path: pin.real for pin in policy.pins}
    out: dict[Path, None] = {}
    for root in policy.writable_roots:
        real = pinned.get(root)
        if real is not None:  # a root missing at start matches nothing
            out.setdefault(real, None)
    return tuple(out)


def _open_roots(policy: SandboxPolicy, opened: list[int]) -> dict[Path, int]:
    """Open every writable root and check it is still the pinned directory (appends to
    ``opened``). bwrap then binds these descriptors, so a swap after this check binds nothing
    else."""
    pins = {pin.real: pin for pin in policy.pins}
    fds: dict[Path, int] = {}
    for root in _rw_roots(policy):
        try:
            fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SandboxUnavailable(
                f'the writable root "{root}" cannot be opened ({exc.strerror}); it was replaced '
                "or removed since the host started",
                mode=policy.mode,
            ) from None
        opened.append(fd)
        st = os.fstat(fd)
        pin = pins.get(root)
        if pin is not None and (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            raise SandboxUnavailable(
                f'the writable root "{pin.path}" was replaced since the host started (it is now '
                "another directory); restart the host on the intended directory",
                mode=policy.mode,
            )
        fds[root] = fd
    return fds


def _bwrap_argv(
    argv: Sequence[str],
    policy: SandboxPolicy,
    cwd: Path | None,
    bwrap: str = "bwrap",
    seccomp_fd: int | None = None,
    root_fds: Mapping[Path, int] | None = None,
    missing: Collection[Path] | None = None,
) -> list[str]:
    tmp = _canonical(Path("/tmp"))
    rw = _rw_roots(policy)
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    mounts: dict[Path, bool] = {}  # path -> writable
    if not any(_under(tmp, root) for root in rw):
        out += ["--tmpfs", str(tmp)]
        visible = [policy.workspace, *policy.read_roots, *([cwd] if cwd is not None else [])]
        for path in visible:
            real = _canonical(path)
            covered = any(_under(real, root) for root in rw)
            if _under(real, tmp) and real.exists() and not covered:
                mounts.setdefault(real, False)
    for root in rw:
        if not any(_under(root, other) for other in rw if other != root):
            mounts[root] = True  # a root nested in another writable root is already writable
    fds = root_fds or {}
    for path in sorted(mounts, key=lambda p: (len(p.parts), str(p))):
        if mounts[path] and path in fds:
            out += ["--bind-fd", str(fds[path]), str(path)]  # the pinned directory itself
        else:
            out += ["--bind" if mounts[path] else "--ro-bind", str(path), str(path)]
    for path in protected_paths(policy):
        if not _inside_any(path, rw):
            continue  # outside every writable root it is read-only already
        if path in missing if missing is not None else not os.path.lexists(path):
            # Not there yet: an empty read-only tmpfs is mounted there, so the command cannot
            # create it, nor .git/config or .claude/hooks/x inside it. bwrap makes an empty
            # directory as the mount point (see `_MountPoints`).
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    out += ["--unshare-all", "--unshare-user-try"]
    if policy.network:
        out.append("--share-net")
    out += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    if cwd is not None:
        out += ["--chdir", str(_canonical(cwd))]
    return [*out, "--", *argv]


class _MountPoints:
    """The empty directories bwrap makes where it mounts a tmpfs over a missing protected path.

    Without this, every command would leave ``.git``, ``.claude``, ``.dsh`` and ``dsh.toml``
    behind as empty directories in each writable root (``/tmp`` included), where a person or a
    tool later trips over them. A path is *ours* from the first command that finds it missing
    until the last command that mounted over it has ended; then its directory is removed if it
    is still empty (``rmdir``: never a file, a link or anything with contents). A command that
    starts meanwhile mounts over it too, rather than bind it as an existing path that may
    vanish before bwrap gets to it. Commands of other processes may still race with the removal;
    they then fail to set up (closed), never run unconfined.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, tuple[int, tuple[Path, ...]]] = {}  # uses, parents bwrap makes

    def take(self, paths: Iterable[Path]) -> frozenset[Path]:
        """Of *paths*, the ones to mount over (missing now, or ours); each is counted in use."""
        taken: set[Path] = set()
        with self._lock:
            for path in paths:
                if path in self._users:
                    uses, parents = self._users[path]
                    self._users[path] = (uses + 1, parents)
                elif not os.path.lexists(path):
                    missing = []  # bwrap makes these too (`mkdir -p`); removed after the path
                    parent = path.parent
                    while parent != parent.parent and not os.path.lexists(parent):
                        missing.append(parent)
                        parent = parent.parent
                    self._users[path] = (1, tuple(missing))
                else:
                    continue
                taken.add(path)
        return frozenset(taken)

    def give_back(self, paths: Iterable[Path]) -> None:
        """The command that took *paths* has ended: remove the ones no command uses now."""
        with self._lock:
            for path in paths:
                uses, parents = self._users[path]
                if uses > 1:
                    self._users[path] = (uses - 1, parents)
                    continue
                del self._users[path]
                for directory in (path, *parents):  # the deepest first
                    if not _remove_empty(directory):
                        break  # not empty, gone, not a directory: keep it (and above)


def _remove_empty(directory: Path) -> bool:
    """``rmdir`` the canonical *directory*, reached from ``/`` through no symlink (a command may
    have swapped a parent for one, to aim the removal elsewhere); whether it was removed."""
    try:
        parent = open_dir_nofollow(str(directory.parent))
    except OSError:
        return False
    try:
        os.rmdir(directory.name, dir_fd=parent)
    except OSError:
        return False
    finally:
        os.close(parent)
    return True


_MOUNT_POINTS = _MountPoints()


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
            ``None``: the ones that do not exist now.

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
        return _bwrap_argv(argv, policy, cwd, bwrap, seccomp_fd, root_fds, missing)
    if backend == "landlock":
        return list(argv)
    if backend == "none":
        raise SandboxUnavailable(
            'backend "none" cannot confine; only danger-full-access runs unconfined',
            mode=policy.mode,
        )
    raise ValueError(f"unknown sandbox backend {backend!r}")


class _Output:
    """Keeps the first and the last bytes of a stream within a fixed budget."""

    def __init__(self, cap: int) -> None:
        self.head_cap = max(cap, 0) // 2
        self.tail_cap = max(cap, 0) - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        tail = self.tail.decode(errors="replace")
        if not self.truncated:
            return (self.head + self.tail).decode(errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        return (
            f"{head}\n[... output truncated: {omitted} of {self.total} bytes omitted ...]\n{tail}"
        )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, _signal.SIGKILL)


async def _wait_exited(proc: trio.Process, pidfd: int | None) -> None:
    """Wait until ``proc`` has exited, without reaping it when a pidfd is available.

    Not reaping keeps the PID (and so the process group id) reserved, so the group kill that
    follows cannot hit a recycled PID.
    """
    if pidfd is None:
        await proc.wait()
    else:
        await trio.lowlevel.wait_readable(pidfd)


async def _pump(stream: trio.lowlevel.FdStream, out: _Output, done: trio.Event) -> None:
    try:
        while True:
            data = await stream.receive_some(_READ_CHUNK)
            if not data:
                return
            out.feed(data)
    finally:
        done.set()


def _runner_failure(output: str, exit_code: int | None, backend: str) -> str | None:
    """Return the runner's own failure line if the wrapper (not the command) failed."""
    if exit_code is None or exit_code == 0:
        return None
    lines = output.splitlines()
    first = lines[0] if lines else ""
    if backend == "landlock" and exit_code == _landlock.EXIT_RUNNER_FAILURE:
        return first if first.startswith(_landlock.PREFIX) else None
    if backend == "bwrap":
        return first if first.startswith("bwrap: ") else None
    return None


class _Local:
    """A command the host spawned itself (`trio.lowlevel.open_process`), seen as `_run` needs.

    It is not reaped before the group kill (a pidfd tells when it has exited), so the group id
    cannot have been recycled when it is killed.
    """

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.pid = proc.pid
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def exited(self) -> None:
        await _wait_exited(self.proc, self.pidfd)

    async def wait(self) -> int:
        return await self.proc.wait()

    def send_signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, number)

    def kill_all(self) -> None:
        _kill_group(self.pid)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)


async def _run(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float | None,
    cap: int,
    landlock: _landlock.Prepared | None = None,
    info: tuple[int, int] | None = None,
    **spawn: Any,
) -> tuple[_Output, int | None, bool]:
    read_fd, write_fd = os.pipe()
    proc: _Local | _forkclient.Launched
    try:
        launched = None
        if landlock is not None and _USE_FORK_SERVER:
            launched = await _forkclient.shared().spawn(
                argv, env=env, cwd=str(cwd), prepared=landlock, stdout=write_fd
            )
        if launched is not None:
            proc = launched
        else:
            if landlock is not None:
                spawn["preexec_fn"] = landlock.preexec
            proc = _Local(
                await trio.lowlevel.open_process(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=write_fd,
                    stderr=write_fd,
                    cwd=str(cwd),
                    env=env,
                    start_new_session=True,
                    **spawn,
                )
            )
    except BaseException:
        os.close(read_fd)
        if info is not None:
            os.close(info[0])
        raise
    finally:
        os.close(write_fd)
        if info is not None:
            os.close(info[1])  # bwrap's copy is the only writer now
    supervised = landlock is not None
    stream = trio.lowlevel.FdStream(read_fd)
    out = _Output(cap)
    timed_out = False

    async def stop() -> None:
        # The Landlock supervisor kills every descendant (setsid ones too) on SIGTERM; a
        # SIGKILL would orphan them. It is our code, so it answers; the group kill follows.
        if supervised and proc.returncode is None:
            proc.send_signal(_signal.SIGTERM)
            with trio.move_on_after(_SUPERVISOR_GRACE):
                await proc.exited()
        proc.kill_all()

    namespace = _Namespace()
    try:
        async with trio.open_nursery() as nursery:
            drained = trio.Event()
            nursery.start_soon(_pump, stream, out, drained)
            if info is not None:
                nursery.start_soon(namespace.watch, info[0])
            with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                await proc.exited()
            timed_out = deadline.cancelled_caught
            await stop()  # the timeout, or background children left after the exit
            await proc.wait()
            if info is not None:
                await namespace.wait_gone()
            with trio.move_on_after(_DRAIN_GRACE):
                await drained.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:  # not reaped yet, so the group id cannot be recycled
                await stop()
            await proc.wait()
        raise
    finally:
        proc.close()
        namespace.close()
        with trio.CancelScope(shield=True):
            await stream.aclose()
    return out, proc.returncode, timed_out


class _Namespace:
    """The init of bwrap's PID namespace, from ``--info-fd``: when it has exited, the kernel has
    killed and reaped every process in the namespace (``setsid`` ones included)."""

    def __init__(self) -> None:
        self.pidfd: int | None = None
        self.known = trio.Event()

    async def watch(self, info_fd: int) -> None:
        data = bytearray()
        async with trio.lowlevel.FdStream(info_fd) as stream:
            while chunk := await stream.receive_some(_READ_CHUNK):
                data += chunk
                try:
                    pid = int(json.loads(data)["child-pid"])
                except (ValueError, KeyError, TypeError):
                    continue
                with contextlib.suppress(OSError):  # already gone: so is the namespace
                    self.pidfd = os.pidfd_open(pid)
                break
        self.known.set()

    async def wait_gone(self) -> None:
        with trio.move_on_after(_SUPERVISOR_GRACE):
            await self.known.wait()
            if self.pidfd is not None:
                await trio.lowlevel.wait_readable(self.pidfd)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


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

    Returns:
        The result; ``backend`` says what confined it.

    Raises:
        SandboxUnavailable: No backend can confine the policy (nothing was run), a pinned root
            was replaced, or the chosen backend failed to set up confinement.
        ValueError: Unknown backend.
    """
    env = scrub_env(os.environ, env_allow)
    if policy.mode == "danger-full-access":
        out, returncode, timed_out = await _run(
            ["bash", "-c", command], cwd=cwd, env=env, timeout=timeout, cap=max_output_bytes
        )
        return _result(out, returncode, timed_out, "none")
    try:
        check_pinned(policy)
    except RootReplaced as exc:
        raise SandboxUnavailable(str(exc), mode=policy.mode) from None
    resolved = bwrap if bwrap is not None else resolve_bwrap(policy)
    if resolved in _probed:  # cached: no thread hop (the first probe runs processes)
        probes = probe_backends(resolved)
    else:
        probes = await trio.to_thread.run_sync(probe_backends, resolved)
    chosen = select_backend(policy, backend, probes)
    argv = ["bash", "-c", command]
    if chosen == "landlock":
        roots = tuple(str(root) for root in _rw_roots(policy))
        try:
            prepared = _landlock_prepared(roots, not policy.network)
        except _landlock.LandlockUnavailable as exc:
            raise SandboxUnavailable(f"landlock: {exc}", mode=policy.mode) from None
        out, returncode, timed_out = await _run(
            argv, cwd=cwd, env=env, timeout=timeout, cap=max_output_bytes, landlock=prepared
        )
    else:
        path = resolved[0]
        assert path is not None  # the probe failed otherwise
        fds: list[int] = []
        rw = _rw_roots(policy)
        missing = _MOUNT_POINTS.take(p for p in protected_paths(policy) if _inside_any(p, rw))
        try:
            root_fds = _open_roots(policy, fds)
            seccomp_fd = _seccomp_pipe(filter_bpf(not policy.network))
            fds.append(seccomp_fd)
            wrapped = confine_argv(
                argv, policy, chosen, cwd=cwd, bwrap=path, seccomp_fd=seccomp_fd,
                root_fds=root_fds, missing=missing,
            )  # fmt: skip
            info_r, info_w = os.pipe()  # _run owns both from here
            wrapped[1:1] = ["--info-fd", str(info_w)]
            out, returncode, timed_out = await _run(
                wrapped,
                cwd=cwd,
                env=env,
                timeout=timeout,
                cap=max_output_bytes,
                pass_fds=(seccomp_fd, info_w, *root_fds.values()),
                info=(info_r, info_w),
            )
        finally:
            for fd in fds:
                os.close(fd)
            _MOUNT_POINTS.give_back(missing)
    result = _result(out, returncode, timed_out, chosen)
    if not timed_out:
        failure = _runner_failure(result.output, result.exit_code, chosen)
        if failure is not None:
            raise SandboxUnavailable(f"{chosen} failed to confine: {failure}", mode=policy.mode)
    return result


def _result(out: _Output, returncode: int | None, timed_out: bool, backend: str) -> ProcessResult:
    exit_code = returncode if returncode is not None and returncode >= 0 else None
    sig = -returncode if returncode is not None and returncode < 0 else None
    return ProcessResult(
        output=out.text(),
        exit_code=exit_code,
        signal=sig,
        truncated=out.truncated,
        timed_out=timed_out,
        backend=backend,
        total_bytes=out.total,
    )
