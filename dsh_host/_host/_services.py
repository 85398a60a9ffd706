"""`HostServices`: long-lived trio tasks of a host that one trio run owns (``open_host``).

``open_host`` makes one before starting the host, so plugins see it as ``host.services`` in
``dsh_host_started``; it starts what they asked for before handing the host over, and stops
what is left after ``dsh_host_stopping``. The tasks are system tasks of the run (`trio.lowlevel
.spawn_system_task`): they outlive any one call and any one task of the run, which
``dsh_host.aio.open_host`` needs (its trio guest run enters and leaves ``open_host`` from two
different tasks).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable

import trio

__all__ = [
    "HostServices",
    "opening_services",
    "services_opening",
    "start_services",
    "stop_services",
]

logger = logging.getLogger("dsh_host")

Service = Callable[[Callable[[], None]], Awaitable[None]]
"""A service: ``async def service(started)``; it calls ``started()`` once ready."""

_OPENING: contextvars.ContextVar[HostServices | None] = contextvars.ContextVar(
    "dsh_host_opening", default=None
)


class HostServices:
    """Long-lived trio tasks of a host opened by `open_host`: ``host.services``.

    A plugin that holds connections as long as the host (the ``mcp`` plugin's client sessions)
    starts them here from ``dsh_host_started``, as tasks of the trio run that owns the host,
    instead of in a thread of its own. ``host.services`` is ``None`` where no trio run owns the
    host (``Host(...)`` made directly, as the command line does): keep a fallback for that.

    Example::

        @hookimpl
        def dsh_host_started(self, host):
            if host.services is not None:
                host.services.start(self.serve, name="my-plugin")

        async def serve(self, started):
            async with connect() as self.connection:
                started()  # the host is handed over once every service has started
                await self.closed.wait()  # set by dsh_host_stopping
    """

    def __init__(self) -> None:
        self._pending: list[tuple[str, Service]] = []
        self._running: list[tuple[trio.CancelScope, trio.Event]] = []
        self._claimed = False
        self._handed_over = False

    def start(self, service: Service, *, name: str) -> None:
        """Run ``await service(started)`` in the host's trio run, from when the host has been
        made until it closes.

        The host is handed over (``open_host`` returns it) once each service has called
        ``started()`` or ended. A service is cancelled when the host closes, after every
        ``dsh_host_stopping`` (end it there for a clean goodbye). An exception it raises is
        logged and ends only that service.

        Raises:
            RuntimeError: called after the host was handed over (call from
                ``dsh_host_started``).
        """
        if self._handed_over:
            raise RuntimeError(
                f"service {name!r}: start services from dsh_host_started, before open_host "
                "hands the host over"
            )
        self._pending.append((name, service))


async def start_services(services: HostServices) -> None:
    """Start the services asked for, and wait until each has started or ended (``open_host``,
    before it hands the host over)."""
    services._handed_over = True
    readies = []
    for name, service in services._pending:
        ready, ended, scope = trio.Event(), trio.Event(), trio.CancelScope()
        services._running.append((scope, ended))
        readies.append(ready)
        trio.lowlevel.spawn_system_task(_run, name, service, scope, ready, ended, name=name)
    services._pending.clear()
    for ready in readies:
        await ready.wait()


async def stop_services(services: HostServices) -> None:
    """Cancel the services still running and wait for them to end (``open_host``, at exit)."""
    running, services._running = services._running, []
    for scope, _ in running:
        scope.cancel()
    for _, ended in running:
        await ended.wait()


async def _run(
    name: str,
    service: Service,
    scope: trio.CancelScope,
    ready: trio.Event,
    ended: trio.Event,
) -> None:
    try:
        with scope:
            await service(ready.set)
    except Exception as exc:  # contained: one service's failure ends no other, nor the run
        logger.warning("dsh: service %r failed: %s: %s", name, type(exc).__name__, exc)
    finally:
        ready.set()
        ended.set()


def services_opening(services: HostServices) -> contextvars.Token[HostServices | None]:
    """Offer *services* to the next `Host` made in this context (``open_host``)."""
    return _OPENING.set(services)


def opening_services() -> HostServices | None:
    """The services ``open_host`` offers the host being made, once (`Host.__init__`)."""
    services = _OPENING.get()
    if services is None or services._claimed:
        return None
    services._claimed = True
    return services
