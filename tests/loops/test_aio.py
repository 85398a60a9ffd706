"""`dsh_host.aio`: the trio pipeline driven from asyncio (a trio guest run on the asyncio loop)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

import anyio
import pytest
import trio

import dsh_host
import dsh_host.aio
from dsh_host import hookimpl
from tests.conftest import make_echo

request_id = contextvars.ContextVar("request_id", default="none")


class Tools:
    def __init__(self):
        self.seen = []
        self.results = []
        self.started = None
        self.stopped = 0

    @hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())
        tools = self

        async def slow(args, ctx):
            tools.started.set()
            try:
                await trio.sleep_forever()
            finally:
                tools.seen.append(("aborted", ctx.signal.aborted, ctx.signal.reason))

        register(
            dsh_host.define_tool(name="slow", description="waits", parameters={}, execute=slow)
        )

        async def whoami(args, ctx):
            return request_id.get()

        register(
            dsh_host.define_tool(name="whoami", description="ctx", parameters={}, execute=whoami)
        )

    @hookimpl
    def dsh_tool_result(self, execution, result):
        self.results.append((execution.name, result.error.code if result.error else None))

    @hookimpl
    def dsh_host_stopping(self):
        self.stopped += 1


def open_test_host(tools):
    return dsh_host.aio.open_host(plugins=[tools], entry_points=False)


async def scenario():
    tools = Tools()
    async with open_test_host(tools) as host:
        assert (await host.call("echo", {"text": "hi"})).content[0].text == "hi"
        assert (await host.call("echo", '{"text": "json"}', call_id="c1")).content[0].text == "json"
        batch = await host.call_many(
            [("echo", {"text": "a"}), {"name": "echo", "arguments": '{"text": "b"}'}, ("nope", {})]
        )
        assert [r.content[0].text for r in batch[:2]] == ["a", "b"]
        assert batch[2].error.code == "UNKNOWN_TOOL"
        out = await host.run_tool_calls(
            [{"type": "tool_use", "id": "t", "name": "echo", "input": {"text": "x"}}],
            format="anthropic",
        )
        assert out[0]["content"] == [{"type": "text", "text": "x"}]
        assert host.schemas(format="openai")[0]["type"] == "function"
        request_id.set("req-7")
        assert (await host.call("whoami", {})).content[0].text == "req-7"
    assert tools.stopped == 1
    return tools


def test_under_asyncio_run():
    asyncio.run(scenario())


def test_under_anyio_asyncio_backend():
    anyio.run(scenario, backend="asyncio")


def test_two_hosts_share_the_loop_and_open_again_after_the_last_closes():
    async def main():
        async with open_test_host(Tools()) as a, open_test_host(Tools()) as b:
            ra, rb = await asyncio.gather(
                a.call("echo", {"text": "a"}), b.call("echo", {"text": "b"})
            )
            assert (ra.content[0].text, rb.content[0].text) == ("a", "b")
        await scenario()  # a new guest run after the last one ended
        await asyncio.gather(scenario(), scenario())

    asyncio.run(main())


def test_cancelling_the_asyncio_task_aborts_the_call_and_waits_for_it():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            tools.started = trio.Event()  # set from the trio side
            task = asyncio.ensure_future(host.call("slow", {}))
            while not tools.started.is_set():
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Settled before the cancellation reached the caller: the body saw its abort signal
            assert tools.seen == [("aborted", True, "the asyncio task was cancelled")]
            assert ("slow", "ABORTED") in tools.results
            assert (await host.call("echo", {"text": "still"})).content[0].text == "still"

    asyncio.run(main())


def test_timeout_from_asyncio_aborts_the_call():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            tools.started = trio.Event()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0):
                    await host.call("slow", {})
            assert ("slow", "ABORTED") in tools.results or (
                "slow",
                "ABORTED_BEFORE_DISPATCH",
            ) in tools.results

    asyncio.run(main())


async def test_under_trio_it_says_to_use_the_trio_host():
    with pytest.raises(RuntimeError, match=r"under trio use `dsh_host.open_host`"):
        async with open_test_host(Tools()):
            pass


def test_outside_any_loop_it_says_so():
    cm = open_test_host(Tools())
    with pytest.raises(RuntimeError, match="this is no event loop"):
        cm.__aenter__().send(None)


def test_a_cancellation_racing_the_calls_end_neither_hangs_nor_abandons():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            for _ in range(50):  # cancel at every point of a call's life (once it began)
                for ticks in range(1, 7):
                    task = asyncio.ensure_future(host.call("echo", {"text": "x"}))
                    for _ in range(ticks):
                        await asyncio.sleep(0)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait_for(asyncio.shield(task), timeout=30)
            assert len(tools.results) == 300  # every call settled, each exactly once

    asyncio.run(main())


CLOSED = r"this dsh host is closed \(its `async with dsh_host\.aio\.open_host\(\)`"


def test_a_closed_host_says_so():
    async def main():
        async with open_test_host(Tools()) as host:
            await host.aclose()
            await host.aclose()  # once
            with pytest.raises(RuntimeError, match=CLOSED):  # says so itself, for asyncio
                await host.call("echo", {"text": "late"})
        with pytest.raises(RuntimeError, match=CLOSED):
            await host.call("echo", {"text": "later"})

    asyncio.run(main())


def test_a_call_the_guest_run_ends_at_once_takes_no_turn_of_the_asyncio_loop(monkeypatch):
    # Warm for the whole test, so a guest tick is always queued when a call starts.
    monkeypatch.setattr(dsh_host.aio._guest, "WARM", 3600.0)

    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            await host.call("echo", {"text": "warm"})
            turned = []
            asyncio.get_running_loop().call_soon(turned.append, True)
            request_id.set("req-9")
            first = await host.call("echo", {"text": "now"})
            second = await host.call("whoami", {})
            assert (first.content[0].text, second.content[0].text) == ("now", "req-9")
            assert turned == []  # both ran, and their results came back, within this step
            assert tools.results[-2:] == [("echo", None), ("whoami", None)]

    asyncio.run(main())


@pytest.fixture(params=["asyncio's loop", "a loop without _thread_id"])
def loop_kind(request, monkeypatch):
    """The loop check's fast path reads asyncio's ``loop._thread_id``; another kind of loop (a
    uvloop, say) has none, and the check then asks `Guest.here`: both must refuse a foreign loop."""
    if request.param != "asyncio's loop":
        monkeypatch.setattr(dsh_host.aio, "_known_thread", lambda loop: dsh_host.aio._Unknown)
    return request.param


def test_a_host_used_from_another_event_loop_says_so(loop_kind):
    async def main():
        async with open_test_host(Tools()) as host:
            assert (await host.call("echo", {"text": "x"})).content[0].text == "x"

            async def elsewhere():
                await host.call("echo", {"text": "x"})

            with pytest.raises(RuntimeError, match="opened on another event loop"):
                await asyncio.to_thread(asyncio.run, elsewhere())

    asyncio.run(main())


def test_a_host_used_from_another_loop_on_its_own_thread_says_so(loop_kind):
    """The loop check's fast path (`Guest.here`: this thread, and the host's loop running)
    still refuses another loop that runs on the host's thread while the host's loop waits."""
    loop = asyncio.new_event_loop()
    try:
        opened = open_test_host(Tools())
        host = loop.run_until_complete(opened.__aenter__())
        assert loop.run_until_complete(host.call("echo", {"text": "x"})).content[0].text == "x"
        with pytest.raises(RuntimeError, match="opened on another event loop"):
            asyncio.run(host.call("echo", {"text": "elsewhere"}))
        loop.run_until_complete(opened.__aexit__(None, None, None))
    finally:
        loop.close()


class Bare:
    """Tools only, no hook: the asyncio host's calls take the pipeline's bare path."""

    def __init__(self):
        self.seen = []
        self.started = None

    @hookimpl
    def dsh_register_tools(self, register):
        bare = self

        async def answers(args, ctx):
            signal = ctx.signal
            bare.seen.append(("answers", signal.aborted, signal is ctx.signal))
            return "now"

        async def waits(args, ctx):
            await trio.sleep(0)  # suspends after its first step: handed to its worker
            bare.started.set()
            try:
                await trio.sleep_forever()
            finally:
                bare.seen.append(("waits", ctx.signal.aborted, ctx.signal.reason))

        for name, body in (("answers", answers), ("waits", waits)):
            register(dsh_host.define_tool(name=name, description=name, parameters={}, execute=body))


def test_a_call_that_does_not_suspend_runs_bare_under_a_live_signal(monkeypatch):
    """The asyncio host passes an abort signal with every call; a call no hook sees still
    takes the bare path (no full pipeline), and its body sees a live signal."""
    from dsh_host._pipeline._pipeline import Pipeline

    async def main():
        bare = Bare()
        async with dsh_host.aio.open_host(plugins=[bare], entry_points=False) as host:
            assert (await host.call("answers", {})).content[0].text == "now"  # seen hookless

            def not_bare(*args):
                raise AssertionError("the asyncio host's call left the bare path")

            monkeypatch.setattr(Pipeline, "_run", not_bare)
            assert (await host.call("answers", {})).content[0].text == "now"
            monkeypatch.undo()
        assert bare.seen == [("answers", False, True)] * 2

    asyncio.run(main())


def test_a_bare_call_cancelled_from_asyncio_after_it_suspended_sees_its_abort():
    async def main():
        bare = Bare()
        async with dsh_host.aio.open_host(plugins=[bare], entry_points=False) as host:
            assert (await host.call("answers", {})).content[0].text == "now"  # now bare
            bare.started = trio.Event()
            task = asyncio.ensure_future(host.call("waits", {}))
            while not bare.started.is_set():
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert bare.seen[-1] == ("waits", True, "the asyncio task was cancelled")
            assert (await host.call("answers", {})).content[0].text == "now"  # worker back
            assert len(host._guest.workers.idle) >= 1

    asyncio.run(main())
