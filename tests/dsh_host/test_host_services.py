"""`HostServices`: long-lived trio tasks of a host opened by ``open_host`` (``host.services``)."""

from __future__ import annotations

import logging

import trio
import trio.testing

import dsh_host
from dsh_host import Host, HostServices, hookimpl


class _Serving:
    """Starts one service at start; says what happened when."""

    def __init__(self, fail: bool = False) -> None:
        self.log: list[str] = []
        self.fail = fail
        self.services: HostServices | None = None

    @hookimpl
    def dsh_host_started(self, host):
        self.services = host.services
        if host.services is not None:
            host.services.start(self.serve, name="serving")

    @hookimpl
    def dsh_host_stopping(self):
        self.log.append("stopping")

    async def serve(self, started):
        self.log.append("serving")
        if self.fail:
            raise RuntimeError("cannot connect")
        await trio.sleep(1)  # virtual time: the host is not handed over before started()
        started()
        try:
            await trio.sleep_forever()
        finally:
            self.log.append("cancelled")


def test_open_host_starts_services_before_handing_over_and_stops_them_after_closing():
    plugin = _Serving()

    async def main():
        async with dsh_host.open_host(plugins=[plugin], entry_points=False) as host:
            plugin.log.append(f"open at {trio.current_time():.0f}")
            assert host.services is plugin.services is not None
        return plugin.log

    log = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert log == ["serving", "open at 1", "stopping", "cancelled"]


def test_a_failing_service_is_logged_and_ends_only_itself(caplog):
    plugin = _Serving(fail=True)

    async def main():
        async with dsh_host.open_host(plugins=[plugin], entry_points=False) as host:
            return sorted(t.name for t in host.registry.tools())

    with caplog.at_level(logging.WARNING, logger="dsh_host"):
        trio.run(main)
    assert "service 'serving' failed: RuntimeError: cannot connect" in caplog.text
    assert plugin.log == ["serving", "stopping"]


def test_a_host_made_directly_has_no_services():
    """No trio run owns it: plugins keep their own fallback (the mcp plugin's thread)."""
    plugin = _Serving()
    assert Host(plugins=[plugin], load_entrypoints=False).services is None
    assert plugin.log == []


def test_only_the_host_open_host_makes_gets_its_services():
    inner: list[Host] = []

    class MakesAnother:
        @hookimpl
        def dsh_host_started(self, host):
            inner.append(Host(load_entrypoints=False))

    async def main():
        async with dsh_host.open_host(plugins=[MakesAnother()], entry_points=False) as host:
            return host.services

    assert trio.run(main) is not None
    assert inner[0].services is None


def test_a_service_started_after_the_host_was_handed_over_is_refused():
    async def main():
        async with dsh_host.open_host(entry_points=False) as host:
            assert host.services is not None
            try:
                host.services.start(_Serving().serve, name="late")
            except RuntimeError as exc:
                return str(exc)
        return None

    assert "start services from dsh_host_started" in (trio.run(main) or "")
