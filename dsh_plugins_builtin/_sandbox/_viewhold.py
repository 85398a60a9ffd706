"""A kept view held (`dsh_plugins_builtin._sandbox._views`): bwrap holding it, with ``cat`` as
its command, checked against its line once built (`_viewtable`), and the fork server that
entered it."""

from __future__ import annotations

import json
import os
import select
import subprocess
from typing import Any, Final

from dsh_plugins_builtin._sandbox import _viewtable
from dsh_plugins_builtin._sandbox._bwrap import seccomp_pipe
from dsh_plugins_builtin._sandbox._forkclient import ForkServer
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf
from dsh_plugins_builtin._sandbox._viewline import Split

__all__ = ["View", "hold"]

_INFO_TIMEOUT: Final = 10.0  # seconds for bwrap to build a view and say its pid


class View:
    """A view: bwrap holding it (its command, ``cat``, waits on a pipe of ours) and the fork
    server that entered it."""

    def __init__(self, holder: subprocess.Popen[bytes], server: ForkServer) -> None:
        self.holder = holder
        self.server = server
        self.busy = 0

    @property
    def usable(self) -> bool:
        """Its server works, its mounts are as made, and its holder still holds it."""
        return self.server.broken is None and not self.server.stale and self.holder.poll() is None

    def close(self) -> None:
        """End the view: its first process first (the kernel kills what is left in the view's
        PID namespace, the server's launchers, which the server, still there, reaps at once;
        orphaned, they would wait for the machine's init), then the server."""
        if self.holder.stdin is not None:
            self.holder.stdin.close()  # cat ends, and bwrap with it
        try:
            self.holder.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()
        self.server.close()


def hold(parts: Split, cat: str) -> tuple[subprocess.Popen[bytes], int, str] | None:
    """Start bwrap with the view and *cat* as its command, under the commands' seccomp filter;
    it, a pidfd of ``cat`` (the view's first process, which `_forkserver._enter` joins) and the
    digest of the view's mount table, which shows every mount of the line where the line puts
    it (`_viewtable`); or ``None``. The table is read once ``cat`` runs (it echoes a byte
    back): bwrap has built the whole view by then."""
    info_r, info_w = os.pipe()
    seccomp = seccomp_pipe(filter_bpf("--share-net" not in parts.head))
    try:
        holder = subprocess.Popen(
            [*parts.head, "--seccomp", str(seccomp), "--info-fd", str(info_w), "--", cat],
            pass_fds=(info_w, seccomp, *parts.fds), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
        )  # fmt: skip
    except OSError:
        os.close(info_r)
        return None
    finally:
        os.close(info_w)
        os.close(seccomp)
    try:
        info = _read_info(info_r)
        pid = info.get("child-pid") if isinstance(info, dict) else None
        if not isinstance(pid, int):
            raise ProcessLookupError
        pidfd = os.pidfd_open(pid)
        try:
            table = _table_once_running(holder, pid)
            if not _viewtable.shows(table, parts.mounted) or select.select([pidfd], [], [], 0)[0]:
                raise ProcessLookupError  # a place renamed while it was made; or it is gone
        except BaseException:
            os.close(pidfd)
            raise
        return holder, pidfd, _viewtable.digest(table)
    except (OSError, ValueError):
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
        holder.kill()
        holder.wait()
        return None
    finally:
        os.close(info_r)


def _table_once_running(holder: subprocess.Popen[bytes], pid: int) -> bytes:
    """The view's mount table, read once ``cat`` answers (bwrap runs it last)."""
    assert holder.stdin is not None
    assert holder.stdout is not None
    with holder.stdout:
        os.write(holder.stdin.fileno(), b"\n")
        ready, _, _ = select.select([holder.stdout], [], [], _INFO_TIMEOUT)
        if not ready or os.read(holder.stdout.fileno(), 1) != b"\n":
            raise ProcessLookupError
    fd = os.open(f"/proc/{pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _viewtable.read(fd)
    finally:
        os.close(fd)


def _read_info(fd: int) -> Any:
    """bwrap's ``--info-fd`` JSON (it closes its end once written, or on failure)."""
    data = b""
    while True:
        ready, _, _ = select.select([fd], [], [], _INFO_TIMEOUT)
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            return json.loads(data)  # ValueError when bwrap failed before writing it
        data += chunk
