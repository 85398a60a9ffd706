"""Run one hook command as a process tree that cannot outlive its run.

A process group is not enough to bound a hook: a child that calls ``setsid`` (or double-forks)
leaves the group and outlives ``killpg``. So every hook runs under a *reaper*, a process that

1. makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan of the
   hook's tree -- a ``setsid`` or double-forked child included -- is re-parented to it, not to
   init;
2. forks the hook in a new session, with the hook's stdin, stdout and stderr (pipes to the host);
3. waits until the hook exits **or** its *lifeline* pipe from the host reaches end of file (the
   host closes it on a timeout, an abort, an output cap, a cancellation, or when it dies);
4. then kills every process left in the tree: it SIGKILLs each of its children, reaps them, and
   repeats until it has none (the killed children's own children are re-parented to it, so the
   loop reaches every descendant), and reports what the hook did on a status pipe.

The reapers are forked by one *runner* process per interpreter, started when the first host with
hooks starts:
the host's Python interpreter with ``-I -S`` and the code below passed with ``-c`` (no file a
tool could rewrite) and an environment of ``PATH`` only (the host's own could preload a library
a tool planted, ``LD_PRELOAD``; each hook gets its environment with its request), detached from
the host (its own session) and serving requests on a
``SOCK_SEQPACKET`` socket: each request is the hook's argv and working directory, with the five
pipe ends passed as file descriptors (``SCM_RIGHTS``). Forking the already-started runner costs
about a millisecond; starting an interpreter per hook would cost tens. The runner exits when the
host's end of the socket closes (the plugin is collected, or the host dies). Its code is
`._runner_code.RUNNER_CODE`.

Why hand-written: no packaged library does "subreaper + kill the whole tree" (``psutil`` finds
children but cannot re-parent a ``setsid`` escapee; cgroups and PID namespaces need privileges
that an ordinary user may not have). The runner is some eighty lines of standard library.

The host reads the hook's stdout and stderr, each capped; more than the cap is a failure (the
tree is killed), as is a timeout or an abort (``_supervise``). `HookRunner.run` never raises for
the hook.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import weakref
from collections.abc import Mapping, Sequence

import trio

from dsh_host import AbortSignal

from ._runner_code import RUNNER_CODE
from ._supervise import TreeRun, supervise

__all__ = ["HookRunner", "TreeRun", "shared_runner"]


class HookRunner:
    """The runner process of one plugin: forks a reaper per hook run (see the module docstring).

    One runner per interpreter serves every host of the process (`shared_runner`); each request
    carries the hook's argv, working directory and environment.

    Args:
        interpreter: The absolute path of the Python interpreter that runs the runner.
    """

    def __init__(self, interpreter: str) -> None:
        self.interpreter = interpreter
        self._sock: socket.socket | None = None

    @property
    def started(self) -> bool:
        """Whether the runner is up (as far as the host knows)."""
        return self._sock is not None

    def start(self) -> None:
        """Start the runner (once, when the host starts; again only if it died)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            first = subprocess.Popen(
                [self.interpreter, "-I", "-S", "-c", RUNNER_CODE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), cwd="/", env={"PATH": os.defpath},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if first.wait() != 0:  # it forks the runner and exits
                raise OSError(f"the hook runner exited with code {first.returncode} at start")
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        weakref.finalize(self, ours.close)

    def close(self) -> None:
        """Close the socket; the runner then exits (running hooks are killed by their reapers
        when their lifelines close)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def _send(self, message: bytes, fds: list[int]) -> None:
        for attempt in range(2):
            if self._sock is None:
                self.start()
            assert self._sock is not None
            try:
                while True:
                    try:
                        socket.send_fds(self._sock, [message], fds)
                        return
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(self._sock)
            except (BrokenPipeError, ConnectionError):
                self.close()  # the runner died: start another one, once
                if attempt:
                    raise

    async def run(
        self,
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
        """Run *argv* under a reaper and return what it did; never raises for the hook.

        Args:
            argv: The hook's argv; ``argv[0]`` an absolute path.
            stdin: Bytes written to the hook's stdin (then closed).
            cwd: The hook's working directory.
            env: The hook's whole environment.
            timeout: Seconds the whole tree may run.
            abort: The call's signal: an abort kills the tree.
            max_output_bytes: The cap on each of stdout and stderr.
            grace: Seconds to wait for the reaper to finish killing the tree once told to.
        """
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        life_r, life_w = os.pipe()
        status_r, status_w = os.pipe()
        theirs = [in_r, out_w, err_w, life_r, status_w]
        try:
            request = json.dumps({"argv": list(argv), "cwd": cwd, "env": dict(env)}).encode()
            await self._send(request, theirs)
        except (OSError, ValueError) as exc:
            for fd in (in_w, out_r, err_r, life_w, status_r):
                os.close(fd)
            return TreeRun("error", error=f"the hook runner is unavailable: {exc}")
        finally:
            for fd in theirs:
                os.close(fd)
        return await supervise(
            trio.lowlevel.FdStream(in_w), trio.lowlevel.FdStream(out_r),
            trio.lowlevel.FdStream(err_r), trio.lowlevel.FdStream(status_r), life_w,
            stdin=stdin, timeout=timeout, abort=abort, max_output_bytes=max_output_bytes,
            grace=grace,
        )  # fmt: skip


_RUNNERS: dict[str, HookRunner] = {}


def shared_runner(interpreter: str) -> HookRunner:
    """The process's runner for *interpreter*, started if it is not up (raises `OSError` if it
    cannot start)."""
    runner = _RUNNERS.setdefault(interpreter, HookRunner(interpreter))
    if not runner.started:
        runner.start()
    return runner
