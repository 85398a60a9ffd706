"""`resolve_tail` reads the clock once per link: a link starts when the one before it answered."""

from __future__ import annotations

from typing import Any

from dsh_host import Host, ToolExecutionInput, hookimpl
from dsh_host._pipeline import _tail
from tests.conftest import make_echo

CALL = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"})


class TailLink:
    """A plain post-execute link that passes the call on (a tail call)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def dsh_tool_post_execute(self, execution: Any, result: Any, call_next: Any) -> Any:
        return call_next()


def _host() -> Host:
    host = Host(plugins=[TailLink("p0"), TailLink("p1")], load_entrypoints=False)
    host.registry.register(make_echo())
    return host


async def test_a_tail_chain_reads_the_clock_once_per_link_and_once_more(monkeypatch):
    host = _host()
    await host.registry.execute(CALL)  # the first call registers the watchdog
    reads: list[float] = []

    def clock() -> float:
        reads.append(0.0)
        return 0.0

    monkeypatch.setattr(_tail, "_clock", clock)
    result = await host.registry.execute(CALL)
    assert (result.is_error, result.text) == (False, "x")
    assert len(reads) == 3  # two links: the first's start, then each one's end


async def test_a_link_that_answers_late_after_another_still_fails_closed(monkeypatch):
    host = _host()
    await host.registry.execute(CALL)
    times = iter([0.0, 1.0, 100.0])  # p1 runs first (pluggy: last registered), then p0: late
    monkeypatch.setattr(_tail, "_clock", lambda: next(times))
    result = await host.registry.execute(CALL)
    assert result.is_error
    assert result.code == "PLUGIN_FAILED"
    assert result.decided_by == "p0"
