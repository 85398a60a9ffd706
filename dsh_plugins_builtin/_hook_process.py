"""Run one hook command as a process tree that cannot outlive its run.

A process group is not enough to bound a hook: a child that calls ``setsid`` (or double-forks)
leaves the group and outlives ``killpg``. So every hook runs under a small *reaper*: a Python
interpreter started with ``-I -S`` and the code below passed with ``-c`` (no file that a tool
could rewrite), which

1. makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan of the
   hook's tree -- a ``setsid`` or double-forked child included -- is re-parented to it, not to
   init;
2. forks the hook in a new session, with the hook's stdin, stdout and stderr (pipes to the host);
3. waits until the hook exits **or** its *lifeline* pipe from the host reaches end of file (the
   host closes it on a timeout, an abort, an output cap, or when it dies itself);
4. then kills every process left in the tree: it SIGKILLs each of its children, reaps them, and
   repeats until it has none (the killed children's own children are re-parented to it, so the
   loop reaches every descendant), and reports what the hook did on a status pipe.

Why hand-written: no packaged library does "subreaper + kill the whole tree" (``psutil`` finds
children but cannot re-parent a ``setsid`` escapee; cgroups and PID namespaces need privileges
that an ordinary user may not have). The reaper is some forty lines of standard library.

The host reads the hook's stdout and stderr, each capped; more than the cap is a failure (the
tree is killed), as is a timeout or an abort. `run_tree` never raises for the hook.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs
import trio

from dsh_host import AbortSignal

__all__ = ["REAPER_CODE", "TreeRun", "run_tree"]

# Runs as ``python -I -S -c REAPER_CODE <lifeline fd> <status fd> <argv...>``.
REAPER_CODE = r"""
import ctypes, os, select, signal, sys
life, status = int(sys.argv[1]), int(sys.argv[2])
argv = sys.argv[3:]
def report(text):
    os.write(status, text.encode("utf-8", "replace"))
def children():
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found
def reap_all():
    while True:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:
    report("error cannot become a child subreaper: " + os.strerror(ctypes.get_errno()))
    sys.exit(0)
rd, wr = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(life); os.close(status); os.close(rd)
        os.setsid()
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.execv(argv[0], argv)
    except BaseException as exc:
        os.write(wr, (type(exc).__name__ + ": " + str(exc)).encode("utf-8", "replace"))
    os._exit(127)
os.close(wr)
failed = os.read(rd, 4096)
os.close(rd)
if failed:
    reap_all()
    report("error " + failed.decode("utf-8", "replace"))
    sys.exit(0)
pidfd = os.pidfd_open(pid)
ready = select.select([pidfd, life], [], [])[0]
outcome = "killed"
if pidfd in ready:
    _, st = os.waitpid(pid, 0)
    outcome = f"signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st) else f"exit {os.WEXITSTATUS(st)}"
reap_all()
report(outcome)
"""


@attrs.frozen
class TreeRun:
    """What one run of a hook's process tree did.

    Attributes:
        outcome: ``exited`` (see ``code``), ``signaled`` (see ``code``: the signal number),
            ``timeout``, ``aborted``, ``overflow`` (an output stream passed its cap; see
            ``overflow``) or ``error`` (it could not start; see ``error``).
        code: The exit code or the killing signal.
        stdout: What the hook printed on stdout (at most the cap).
        stderr: What it printed on stderr (at most the cap).
        overflow: ``"stdout"`` or ``"stderr"``: the stream that passed the cap.
        error: Why it could not start.
    """

    outcome: Literal["exited", "signaled", "timeout", "aborted", "overflow", "error"]
    code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    overflow: str | None = None
    error: str | None = None


class _Reader:
    def __init__(self, name: str, cap: int, on_overflow: trio.Event) -> None:
        self.name = name
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflowed = False
        self.on_overflow = on_overflow

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            if self.overflowed:
                continue  # keep draining (discarding) until the killed tree closes the pipe
            self.size += len(chunk)
            if self.size > self.cap:
                self.overflowed = True
                self.on_overflow.set()
                continue
            self.chunks.append(bytes(chunk))

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        async with stream:
            await stream.send_all(data)


async def run_tree(
    interpreter: str,
    argv: Sequence[str],
    *,
    stdin: bytes,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    abort: AbortSignal,
    max_output_bytes: int,
    grace: float = 10.0,
) -> TreeRun:
    """Run *argv* under the reaper and return what it did; never raises for the hook.

    Args:
        interpreter: The absolute path of the Python interpreter that runs the reaper.
        argv: The hook's argv; ``argv[0]`` an absolute path.
        stdin: Bytes written to the hook's stdin (then closed).
        cwd: The hook's working directory.
        env: The hook's whole environment.
        timeout: Seconds the whole tree may run.
        abort: The call's signal: an abort kills the tree.
        max_output_bytes: The cap on each of stdout and stderr.
        grace: Seconds to wait for the reaper to finish killing the tree once told to.
    """
    life_r, life_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        process = await trio.lowlevel.open_process(
            [interpreter, "-I", "-S", "-c", REAPER_CODE, str(life_r), str(status_w), *argv],
            stdin=-1, stdout=-1, stderr=-1, cwd=cwd, env=dict(env),
            pass_fds=(life_r, status_w), start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        for fd in (life_r, life_w, status_r, status_w):
            os.close(fd)
        return TreeRun("error", error=str(exc))
    os.close(life_r)
    os.close(status_w)
    overflow = trio.Event()
    out = _Reader("stdout", max_output_bytes, overflow)
    err = _Reader("stderr", max_output_bytes, overflow)
    status = trio.lowlevel.FdStream(status_r)
    said: list[bytes] = []
    stopped: Literal["timeout", "aborted", "overflow"] | None = None

    def cut_lifeline() -> None:
        nonlocal life_w
        if life_w >= 0:
            os.close(life_w)
            life_w = -1

    async def read_status() -> None:
        while chunk := await status.receive_some(4096):
            said.append(chunk)

    async def watch() -> None:
        async with trio.open_nursery() as watchers:

            async def on_abort() -> None:
                nonlocal stopped
                await abort.wait()
                stopped = stopped or "aborted"
                watchers.cancel_scope.cancel()

            async def on_overflow() -> None:
                nonlocal stopped
                await overflow.wait()
                stopped = stopped or "overflow"
                watchers.cancel_scope.cancel()

            watchers.start_soon(on_abort)
            watchers.start_soon(on_overflow)
        cut_lifeline()  # the reaper kills the tree; the pipes then close

    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        async with trio.open_nursery() as nursery:
            deadline = trio.current_time() + timeout
            nursery.start_soon(watch)

            async def until_deadline() -> None:
                nonlocal stopped
                await trio.sleep_until(deadline)
                stopped = stopped or "timeout"
                cut_lifeline()

            nursery.start_soon(until_deadline)
            async with trio.open_nursery() as io:
                io.start_soon(_feed, process.stdin, stdin)
                io.start_soon(out.drain, process.stdout)
                io.start_soon(err.drain, process.stderr)
                io.start_soon(read_status)
            nursery.cancel_scope.cancel()
    finally:
        cut_lifeline()
        with trio.CancelScope(shield=True), trio.move_on_after(grace) as late:
            await process.wait()
        with trio.CancelScope(shield=True):
            if late.cancelled_caught:
                process.kill()  # the reaper is stuck; last resort (its tree may survive)
                await process.wait()
            for stream in (status, process.stdin, process.stdout, process.stderr):
                await stream.aclose()
    if stopped == "overflow":
        name = "stdout" if out.overflowed else "stderr"
        return TreeRun("overflow", stdout=out.data, stderr=err.data, overflow=name)
    if stopped is not None:
        return TreeRun(stopped, stdout=out.data, stderr=err.data)
    text = b"".join(said).decode("utf-8", "replace")
    kind, _, rest = text.partition(" ")
    if kind == "exit":
        return TreeRun("exited", int(rest), out.data, err.data)
    if kind == "signal":
        return TreeRun("signaled", int(rest), out.data, err.data)
    if kind == "error":
        return TreeRun("error", stdout=out.data, stderr=err.data, error=rest)
    return TreeRun("error", error=f"the hook reaper ended without a report ({process.returncode})")
