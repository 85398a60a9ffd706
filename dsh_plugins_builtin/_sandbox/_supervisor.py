r"""The supervisor of a Landlock command: waits for it, then kills every descendant.

It is the command's parent and a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every
descendant that is orphaned (the ones that called ``setsid`` included) is re-parented to it and
found in ``/proc/self/task/TID/children`` when the command ends or the host says ``SIGTERM``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
from collections.abc import Iterator
from typing import NoReturn

__all__ = ["REPORT", "REPORT_STATUS", "children", "exited", "supervise"]

REPORT = struct.Struct("=ii")  # a fork-server launcher's (kind, value) records to the host
REPORT_STATUS = 3  # the kind of the record that carries the command's exit code


def children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as handle:
            return [int(pid) for pid in handle.read().split()]
    except (OSError, ValueError):
        return []


def exited() -> Iterator[tuple[int, int]]:
    """Reap the children that have exited, without waiting: ``(pid, wait status)`` each."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child at all
            return
        if pid == 0:  # none has exited (yet)
            return
        yield pid, status


def _kill_descendants() -> None:
    """SIGKILL every child until none is left (orphans of killed ones come back as children)."""
    while True:
        kids = children()
        if not kids:
            while True:  # reap anything /proc did not list
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    break
            continue
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in kids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def supervise(child: int, report: int = -1) -> NoReturn:
    """Wait for the command, then kill every descendant; exit as the command did.

    *report*: a socket kept open, on which the command's exit code is sent once every
    descendant has been killed and reaped, before exiting: the host takes it for the end of
    them all (the fork server's launcher; see `dsh_plugins_builtin._sandbox._forkserver`).
    Nothing is sent when that fails: the host then waits for this process's exit.
    """
    status: int | None = None
    try:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        top = os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536
        if report < 0:
            os.closerange(3, top)
        else:
            os.closerange(3, report)
            os.closerange(report + 1, top)
        while status is None:
            info = signal.sigwaitinfo({signal.SIGTERM, signal.SIGCHLD})
            if info.si_signo == signal.SIGTERM:
                break
            for pid, st in exited():
                if pid == child:
                    status = st
                    break
        _kill_descendants()
        if report >= 0:  # only now: the host takes the report for the end of all of them
            code = -signal.SIGKILL if status is None else os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                os.write(report, REPORT.pack(REPORT_STATUS, code))
    finally:
        if status is None or os.WIFSIGNALED(status):
            sig = signal.SIGKILL if status is None else os.WTERMSIG(status)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status))
