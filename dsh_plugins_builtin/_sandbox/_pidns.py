"""bwrap's PID namespace, seen from the host: its first process, named on ``--info-fd``.

When that process has exited, the kernel has killed and reaped every process in the namespace
(``setsid`` ones included). With bwrap's ``--block-fd``, that process waits, before it is
started, until the host has set its resource limits (``prlimit``): it may be the relay of a
network list, which the command's own shell (`~dsh_plugins_builtin._sandbox._limits.ulimit_prefix`)
does not reach and into which a command could write code through ``/proc/1/mem`` (bwrap's own
init was, before ``--as-pid-1``); every process after it inherits them.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from dsh_plugins_builtin._sandbox._output import Output

__all__ = ["SUPERVISOR_GRACE", "Block", "Namespace"]

Block = tuple[int, tuple[tuple[int, int], ...]]
"""bwrap's ``--block-fd`` write end, and the limits (``(RLIMIT_*, value)``) to set before it."""

SUPERVISOR_GRACE: Final = 5.0
_READ_CHUNK: Final = 65536


class Namespace:
    """The first process of bwrap's PID namespace (see the module docs). With *block*, its
    limits are set before it goes on; if they cannot be, it is killed first, and the output
    says why."""

    def __init__(self, block: Block | None = None) -> None:
        self.pidfd: int | None = None
        self.known = trio.Event()
        self.block = block

    async def watch(self, info_fd: int, stop: Callable[[], Awaitable[None]], out: Output) -> None:
        data = bytearray()
        pid = None
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
        if self.block is not None:
            await self._release(pid, stop, out)

    async def _release(
        self, pid: int | None, stop: Callable[[], Awaitable[None]], out: Output
    ) -> None:
        assert self.block is not None
        fd, limits = self.block
        self.block = None
        try:
            if pid is None or self.pidfd is None:
                raise ProcessLookupError(f"bwrap named no process ({pid})")
            for which, value in limits:
                resource.prlimit(pid, which, (value, value))
            os.write(fd, b"g")
        except OSError as exc:
            out.notes.append(f"[sandbox: the command was not run: its limits were not set ({exc})]")
            if self.pidfd is not None:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            await stop()
        finally:
            os.close(fd)  # bwrap goes on only once its namespace was limited (or killed)

    async def wait_gone(self) -> bool:
        """Wait (a bounded time) until the namespace's init is gone; whether it is."""
        with trio.move_on_after(SUPERVISOR_GRACE):
            await self.known.wait()
            if self.pidfd is not None:
                await trio.lowlevel.wait_readable(self.pidfd)
            return True
        return False

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.block is not None:  # never released: bwrap was killed, or never got that far
            os.close(self.block[0])
            self.block = None
