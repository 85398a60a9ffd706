"""The sessions of a host opened by ``open_host``: trio tasks of its own run, no thread.

A host opened by `dsh_host.open_host` (or `dsh_host.aio.open_host`, whose trio guest run opens
it) lives in one trio run, and offers that run for long-lived tasks (`dsh_host.HostServices`).
There the ``mcp`` plugin runs every client session as a task (the SDK runs on anyio, so on
trio too), and a tool call awaits the session directly in the calling task: no hop to a thread
and back. Cancelling the call cancels the request (the SDK sends ``notifications/cancelled``),
as in the mount thread. The links are the same `Link` objects as `_mountloop.Mount`'s, with the same
transport, bounds, guard, confinement and reaping; `Mount` stays for hosts no trio run owns
(``Host(...)`` made directly: the CLI, tests), and for HTTP servers: the SDK's HTTP client
leaves async generators for the loop to finalize, which trio reports as a `ResourceWarning`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import trio

from ._mount import Link
from ._mountloop import Mount

__all__ = ["STOP_WAIT", "NativeMount", "virtual_time"]

T = TypeVar("T")

STOP_WAIT = 10.0
"""Seconds closing waits for the sessions to end (their servers reaped), before cancelling."""


class NativeMount:
    """The links of a host's mounted servers, run as tasks of the host's trio run."""

    def __init__(self, links: list[Link], timeout: float, fallback: Mount | None = None) -> None:
        self.links: dict[str, Link] = {link.name: link for link in links}
        for link in links:
            link.runner = self
        self._fallback = fallback
        """The mount thread of the HTTP servers (started already), if any."""
        if fallback is not None:
            self.links.update(fallback.links)
        self._starting = links
        self._timeout = timeout
        self._scope: trio.CancelScope | None = None
        self._ended = trio.Event()

    async def serve(self, started: Callable[[], None], on_ready: Callable[[], None]) -> None:
        """Start the links at once; when each is running or failed (or the start timeout
        passed), call *on_ready* (the plugin registers the tools) and *started*; then hold the
        sessions until `aclose`."""
        import anyio

        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                readies = []
                for link in self._starting:
                    ready = anyio.Event()
                    nursery.start_soon(link.run, ready, name=f"dsh-mcp {link.name}")
                    readies.append(ready)
                with trio.move_on_after(self._timeout):
                    for ready in readies:
                        await ready.wait()
                on_ready()
                started()
        finally:
            self._ended.set()

    async def run(self, coroutine: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run *coroutine()* here, in the calling task (the sessions live in this run)."""
        return await coroutine()

    async def wait(self, event: Any) -> None:
        """Wait for a re-listing's *event* (an `anyio.Event` set in this run)."""
        await event.wait()

    async def aclose(self) -> None:
        """Close every session (stdio servers see end of input, then are reaped) and wait for
        them, at most `STOP_WAIT` seconds before the rest is cancelled."""
        for link in self._starting:
            link.stop()
        with trio.move_on_after(STOP_WAIT):
            await self._ended.wait()
        if self._scope is not None and not self._ended.is_set():
            self._scope.cancel()
            await self._ended.wait()
        for link in self._starting:
            link.close()
        if self._fallback is not None:
            await trio.to_thread.run_sync(self._fallback.close)

    def close(self) -> None:
        """Close the mount thread's sessions, if any (at exit); the sessions of the run end
        with the host's closing (`aclose`)."""
        if self._fallback is not None:
            self._fallback.close()


def virtual_time() -> bool:
    """Whether this trio run keeps virtual time (`trio.testing.MockClock`): a mounted server's
    timeouts are real ones, so its sessions then stay in the mount thread."""
    if "trio.testing" not in sys.modules:
        return False
    import trio.testing

    return isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)
