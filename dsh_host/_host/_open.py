"""`open_host`, `own_host`: ``async with open_host(...) as host`` under trio (see `_lifecycle`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable

import trio

from ._host import Host
from ._lifecycle import ConfigSource, close_host, host_config
from ._services import HostServices, services_opening, start_services, stop_services

__all__ = ["open_host", "own_host"]


@contextlib.asynccontextmanager
async def open_host(
    config: ConfigSource = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    plugins: Iterable[object] = (),
    entry_points: bool = True,
) -> AsyncIterator[Host]:
    """``async with open_host(...) as host:`` a started `Host`, closed (`Host.aclose`) on exit.

    Args:
        config: ``None`` (defaults), a TOML path, a dict of the same structure, or a `Config`.
        workspace: overrides ``[host] workspace``.
        plugins: plugin objects registered after the entry points, in this order.
        entry_points: load the plugins installed under ``dsh.plugins`` (tests pass ``False``).

    The host lives in this trio run: plugins may start long-lived tasks in it
    (``host.services``, `HostServices`), started before the host is handed over and stopped
    after it has closed.
    """
    settings = host_config(config, workspace)
    async with own_host(
        lambda: Host(settings, plugins=plugins, load_entrypoints=entry_points)
    ) as host:
        yield host


@contextlib.asynccontextmanager
async def own_host(make: Callable[[], Host]) -> AsyncIterator[Host]:
    """``async with own_host(make) as host:`` the host ``make()`` makes, owned by this trio run
    as `open_host` owns its own: started with its plugins' services (`HostServices`) in this
    run, closed on exit. For a host made otherwise, e.g.
    ``own_host(lambda: Host.from_config(path))``.

    Raises:
        ValueError: ``make()`` returned a host it did not make then (one made earlier has no
            services to run here).
    """
    services = HostServices()
    offered = services_opening(services)
    try:
        host = make()
    finally:
        offered.var.reset(offered)
    if host.services is not services:
        raise ValueError("own_host: make() must make the host (Host(...), Host.from_config(...))")
    try:
        await start_services(services)
        yield host
    finally:
        with trio.CancelScope(shield=True):  # a cancelled body still flushes and reaps
            await close_host(host)
            await stop_services(services)
