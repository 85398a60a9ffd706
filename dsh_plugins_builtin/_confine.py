"""Process confinement for the ``bash`` tool: bubblewrap first, Landlock as the fallback.

A command runs as ``bash -c CMD`` wrapped by the first backend that works on this host:

* ``bwrap``: read-only bind of ``/``, every writable root bound read-write, a fresh ``/dev`` and
  ``/proc``, a fresh ``/tmp`` unless ``/tmp`` is itself a writable root (paths under a masked
  ``/tmp`` that must stay visible, such as the workspace, are bound back read-only),
  ``--unshare-net`` unless ``network`` is true, ``--unshare-pid``, ``--die-with-parent`` and
  ``--new-session``. Capabilities are dropped by bwrap.
* ``landlock``: the `dsh_plugins_builtin._landlock` runner (run by path with ``python -I``),
  which restricts itself and execs the command. Reads stay unrestricted; writes are allowed
  under the writable roots and on ``/dev/null`` only. With ``network = false`` it needs
  Landlock ABI >= 4 (TCP rules) and adds a seccomp filter refusing non-``AF_UNIX`` sockets, so
  UDP cannot leave either; below ABI 4 Landlock is reported as unable to satisfy
  ``network = false`` and is not used (fail closed, never a silently networked run).

Known gap (both backends): ``network = false`` does not stop connecting to a host *pathname*
Unix socket that the read-only filesystem view exposes (a Docker or D-Bus socket, say); bwrap's
new network namespace and Landlock's abstract-socket scoping only cover abstract sockets.

When no backend can confine a non-``danger-full-access`` mode, `SandboxUnavailable` is raised
and nothing runs. ``danger-full-access`` runs unconfined and reports ``backend="none"``.

Every run is a fresh process group (``start_new_session``) with stdin on ``/dev/null`` and stdout
and stderr interleaved in one pipe. Only a head and a tail of the output are kept (memory stays
bounded whatever the command prints). On timeout, on cancellation and after a normal exit the
whole group is killed with ``SIGKILL``, so background children do not outlive the call; under
bwrap the PID namespace dies with the command. Known limit: under ``landlock`` (and unconfined
``danger-full-access``) a child that calls ``setsid`` leaves the group and survives; the output
pipe is then abandoned after a short drain grace.

The environment is scrubbed of names containing ``KEY``, ``TOKEN``, ``SECRET`` or ``PASSWORD``
(case-insensitive) and of every ``DSH_*`` name, except names on the caller's allow-list; then
``NO_COLOR=1``, ``TERM=dumb``, ``PAGER=cat`` and ``GIT_PAGER=cat`` are set. The scrub is a name
heuristic only (``*PASSPHRASE*`` would leak).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import signal as _signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from dsh_plugins_builtin import _landlock
from dsh_plugins_builtin._fence import SandboxPolicy, writable_roots

__all__ = [
    "BACKENDS",
    "ProcessResult",
    "SandboxUnavailable",
    "confine_argv",
    "probe_backends",
    "run_confined",
    "scrub_env",
    "select_backend",
]

BACKENDS: Final = ("bwrap", "landlock")
_BACKEND_CHOICES: Final = ("auto", "bwrap", "landlock", "none")
_RUNNER: Final = Path(_landlock.__file__).resolve()
_PROBE_TIMEOUT: Final = 10.0
_DRAIN_GRACE: Final = 1.0
_READ_CHUNK: Final = 65536
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


def _probe_run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv,
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


@functools.cache
def _probe_all() -> tuple[tuple[str, str | None], ...]:
    results: list[tuple[str, str | None]] = []
    if not sys.platform.startswith("linux"):
        reason = f"bwrap and Landlock are Linux-only (platform {sys.platform})"
        return (("bwrap", reason), ("landlock", reason), ("landlock-net", reason))
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        results.append(("bwrap", "bwrap is not installed (not found on PATH)"))
    else:
        results.append(
            (
                "bwrap",
                _probe_run(
                    [
                        bwrap,
                        *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"),
                        *("--tmpfs", "/tmp", "--unshare-net", "--unshare-pid"),
                        *("--die-with-parent", "--new-session", "--", "true"),
                    ]
                ),
            )
        )
    runner = [sys.executable, "-I", str(_RUNNER)]
    landlock = _probe_run([*runner, "--", "true"])
    results.append(("landlock", landlock))
    results.append(("landlock-net", landlock or _probe_run([*runner, "--no-net", "--", "true"])))
    return tuple(results)


def probe_backends() -> dict[str, str | None]:
    """Report which confinement backends work here (probed once per process, then cached).

    Each backend really runs ``true``: ``bwrap`` with the full profile, the Landlock runner once
    without and once with ``--no-net``.

    Returns:
        ``{"bwrap": ..., "landlock": ..., "landlock-net": ...}`` mapping to ``None`` when the
        backend works, else the reason it does not. ``landlock-net`` is Landlock able to honour
        ``network = false``.
    """
    return dict(_probe_all())


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
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    raise SandboxUnavailable("; ".join(reasons), mode=policy.mode)


def _under(path: Path, root: Path) -> bool:
    return root == Path("/") or path == root or root in path.parents


def _canonical(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _bwrap_argv(argv: Sequence[str], policy: SandboxPolicy, cwd: Path | None) -> list[str]:
    tmp = _canonical(Path("/tmp"))
    rw = writable_roots(policy)
    out = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
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
    for path in sorted(mounts, key=lambda p: (len(p.parts), str(p))):
        out += ["--bind" if mounts[path] else "--ro-bind", str(path), str(path)]
    if not policy.network:
        out.append("--unshare-net")
    out += ["--unshare-pid", "--die-with-parent", "--new-session"]
    if cwd is not None:
        out += ["--chdir", str(_canonical(cwd))]
    return [*out, "--", *argv]


def _landlock_argv(argv: Sequence[str], policy: SandboxPolicy) -> list[str]:
    out = [sys.executable, "-I", str(_RUNNER)]
    for root in writable_roots(policy):
        out += ["--rw", str(root)]
    if not policy.network:
        out.append("--no-net")
    return [*out, "--", *argv]


def confine_argv(
    argv: Sequence[str], policy: SandboxPolicy, backend: str, *, cwd: Path | None = None
) -> list[str]:
    """Build the command line that runs ``argv`` confined by ``backend`` under ``policy``.

    Args:
        argv: The command to confine, e.g. ``["bash", "-c", command]``.
        policy: The sandbox policy (mode, roots, network).
        backend: ``"bwrap"`` or ``"landlock"``; ``"none"`` only for ``danger-full-access``.
        cwd: The working directory (bwrap ``--chdir``; kept visible under a masked ``/tmp``).

    Returns:
        The wrapped argv; ``argv`` unchanged for ``danger-full-access``.

    Raises:
        SandboxUnavailable: ``backend="none"`` for a confined mode.
        ValueError: Unknown backend.
    """
    if policy.mode == "danger-full-access":
        return list(argv)
    if backend == "bwrap":
        return _bwrap_argv(argv, policy, cwd)
    if backend == "landlock":
        return _landlock_argv(argv, policy)
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


async def _run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None, cap: int
) -> tuple[_Output, int | None, bool]:
    read_fd, write_fd = os.pipe()
    try:
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=str(cwd),
            env=env,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    pidfd: int | None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    stream = trio.lowlevel.FdStream(read_fd)
    out = _Output(cap)
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            drained = trio.Event()
            nursery.start_soon(_pump, stream, out, drained)
            with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                await _wait_exited(proc, pidfd)
            timed_out = deadline.cancelled_caught
            _kill_group(proc.pid)  # the timeout, or background children left after the exit
            await proc.wait()
            with trio.move_on_after(_DRAIN_GRACE):
                await drained.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        if proc.returncode is None:  # not reaped yet, so the group id cannot be recycled
            _kill_group(proc.pid)
        with trio.CancelScope(shield=True):
            await proc.wait()
        raise
    finally:
        if pidfd is not None:
            os.close(pidfd)
        with trio.CancelScope(shield=True):
            await stream.aclose()
    return out, proc.returncode, timed_out


async def run_confined(
    command: str,
    *,
    cwd: Path,
    policy: SandboxPolicy,
    backend: str = "auto",
    timeout: float | None,
    max_output_bytes: int = 64_000,
    env_allow: Sequence[str] = (),
) -> ProcessResult:
    """Run ``bash -c command`` confined by ``policy``.

    Honours trio cancellation: if the caller's cancel scope fires, the process group is killed
    and ``Cancelled`` propagates.

    Args:
        command: The shell command.
        cwd: The working directory.
        policy: The sandbox policy.
        backend: ``"auto"``, ``"bwrap"``, ``"landlock"`` or ``"none"`` (``"none"`` only works for
            ``danger-full-access``, which never confines anyway).
        timeout: Seconds before the process group is killed; ``None`` for no limit.
        max_output_bytes: How many output bytes to keep (a head and a tail).
        env_allow: Names to keep in the environment even though they look secret.

    Returns:
        The result; ``backend`` says what confined it.

    Raises:
        SandboxUnavailable: No backend can confine the policy (nothing was run), or the chosen
            runner failed to set up confinement.
        ValueError: Unknown backend.
    """
    if policy.mode == "danger-full-access":
        chosen = select_backend(policy, backend, {})
    else:
        probes = await trio.to_thread.run_sync(probe_backends)
        chosen = select_backend(policy, backend, probes)
    argv = confine_argv(["bash", "-c", command], policy, chosen, cwd=cwd)
    env = scrub_env(os.environ, env_allow)
    out, returncode, timed_out = await _run(
        argv, cwd=cwd, env=env, timeout=timeout, cap=max_output_bytes
    )
    exit_code = returncode if returncode is not None and returncode >= 0 else None
    sig = -returncode if returncode is not None and returncode < 0 else None
    text = out.text()
    if not timed_out:
        failure = _runner_failure(text, exit_code, chosen)
        if failure is not None:
            raise SandboxUnavailable(f"{chosen} failed to confine: {failure}", mode=policy.mode)
    return ProcessResult(
        output=text,
        exit_code=exit_code,
        signal=sig,
        truncated=out.truncated,
        timed_out=timed_out,
        backend=chosen,
        total_bytes=out.total,
    )
