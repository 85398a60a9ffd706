"""The asyncio host's abort signal, followed by its worker from the call's first suspension on
(`dsh_host.aio._worker.Worker._arm`, `dsh_host._pipeline._body.body_raised`): a body that
never suspends runs with no cancel scope of the pipeline's; one that suspends is cancelled when
the asyncio task is, and sees its signal aborted; every result is trio's."""

from __future__ import annotations

import asyncio
import sys

import pytest
import trio

import dsh_host
import dsh_host.aio
from dsh_host import hookimpl


class Tools:
    """Bodies that suspend at various points (no hook: the calls take the bare path)."""

    def __init__(self):
        self.seen = []
        self.started = None
        self.trio_host = None
        self.signals = []
        self.awaited_by = None

    @hookimpl
    def dsh_register_tools(self, register):
        tools = self

        async def answers(args, ctx):
            tools.signals.append(ctx.signal)
            tools.awaited_by = sys._getframe(1).f_code.co_name  # the coroutine awaiting it
            return f"now {ctx.signal.aborted}"

        async def sleeps(args, ctx):  # its first suspension is the wait it is cancelled in
            await tools.wait(ctx, "sleeps")

        async def scoped(args, ctx):  # a scope and a nursery opened before it first suspends
            with trio.CancelScope():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.sleep, 0)
                    await tools.wait(ctx, "scoped")

        async def later(args, ctx):  # cancelled after its first suspension
            await trio.sleep(0)
            await tools.wait(ctx, "later")

        async def nests(args, ctx):  # a call of its own with the same signal, which suspends
            try:
                result = await tools.trio_host.call("sleeps", {}, signal=ctx.signal)
            except BaseException as exc:
                tools.seen.append(("nests", type(exc).__name__))
                raise
            tools.seen.append(("nests", result.error.code, ctx.signal.aborted))
            return "nested"

        async def peeks(args, ctx):  # keeps nothing of its call
            return f"{id(ctx.signal)} {ctx.signal.aborted}"

        for name, body in (
            ("answers", answers),
            ("peeks", peeks),
            ("sleeps", sleeps),
            ("scoped", scoped),
            ("later", later),
            ("nests", nests),
            *OUTCOMES.items(),
        ):
            register(dsh_host.define_tool(name=name, description=name, parameters={}, execute=body))

    async def wait(self, ctx, name):
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.seen.append((name, "cancelled", ctx.signal.aborted, ctx.signal.reason))
            raise


async def _returns(args, ctx):
    await trio.sleep(0)
    return "after a suspension"


async def _raises(args, ctx):
    await trio.sleep(0)
    raise ValueError("after a suspension")


async def _aborts_itself(args, ctx):
    ctx.signal.abort("by the body")
    await trio.sleep(0)
    return "unreachable"


async def _aborts_itself_later(args, ctx):
    await trio.sleep(0)
    ctx.signal.abort("by the body")
    await trio.sleep(0)
    return "unreachable"


async def _catches_its_abort(args, ctx):
    await trio.sleep(0)
    ctx.signal.abort("by the body")
    try:
        await trio.sleep(0)
    except trio.Cancelled:
        return "caught"
    return "not cancelled"


OUTCOMES = {
    "returns": _returns,
    "raises": _raises,
    "aborts_itself": _aborts_itself,
    "aborts_itself_later": _aborts_itself_later,
    "catches_its_abort": _catches_its_abort,
}


def open_test_host(tools):
    return dsh_host.aio.open_host(plugins=[tools], entry_points=False)


def test_a_call_that_never_suspends_takes_no_cancel_scope_and_leaves_a_plain_signal(monkeypatch):
    """The bare path runs the body under the worker-followed signal (`Pipeline._bare`), not
    `followed`; the signal the body saw is a plain one afterwards (no worker attached)."""
    from dsh_host._pipeline import _pipeline

    def not_followed(*args):
        raise AssertionError("the pipeline followed the asyncio host's signal itself")

    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            assert (await host.call("answers", {})).content[0].text == "now False"  # now bare
            monkeypatch.setattr(_pipeline, "followed", not_followed)
            for _ in range(3):
                assert (await host.call("answers", {})).content[0].text == "now False"
                assert tools.awaited_by == "_bare"  # on its frame: no coroutine between
            monkeypatch.undo()
        assert all(signal._follower is None for signal in tools.signals)

    asyncio.run(main())


@pytest.mark.parametrize("tool", ["sleeps", "scoped", "later"])
def test_cancelled_from_asyncio_at_or_after_the_first_suspension_the_body_sees_its_abort(tool):
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            assert (await host.call("answers", {})).content[0].text == "now False"  # now bare
            for _ in range(2):  # the same worker, twice
                tools.started = trio.Event()
                task = asyncio.ensure_future(host.call(tool, {}))
                while not tools.started.is_set():
                    await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                reason = "the asyncio task was cancelled"
                assert tools.seen.pop() == (tool, "cancelled", True, reason)
                assert (await host.call("answers", {})).content[0].text == "now False"
            assert len(host._guest.workers.idle) >= 1

    asyncio.run(main())


def test_cancelled_before_its_first_step_the_call_does_not_run():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            assert (await host.call("answers", {})).content[0].text == "now False"
            task = asyncio.ensure_future(host.call("answers", {}))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert len(tools.signals) == 1
            assert (await host.call("answers", {})).content[0].text == "now False"

    asyncio.run(main())


@pytest.mark.parametrize("outer", ["bare", "full pipeline"])
def test_a_call_the_body_makes_with_the_same_signal_is_cancelled_with_it(outer):
    """The body's own call under its signal is followed by the pipeline (the worker follows
    the call's own body only, on its bare path); cancelling the asyncio task reaches both,
    with no misnested scope, as aborting the signal does under trio (the outer scope absorbs
    the cancellation: the inner call raises it rather than end ``ABORTED``). After a tool
    came, a call takes the full pipeline (`Pipeline._run`), and the call its body makes the
    bare path."""

    async def under_trio():
        tools = Tools()
        async with dsh_host.open_host(plugins=[tools], entry_points=False) as host:
            tools.trio_host = host
            await host.call("answers", {})
            tools.started, signal, results = trio.Event(), dsh_host.AbortSignal(), []
            async with trio.open_nursery() as nursery:

                async def call():
                    results.append(await host.call("nests", {}, signal=signal))

                nursery.start_soon(call)
                await tools.started.wait()
                signal.abort("the asyncio task was cancelled")
        assert results[0].error.code == "ABORTED"
        return tools.seen

    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            tools.trio_host = host.host
            assert (await host.call("answers", {})).content[0].text == "now False"
            if outer == "full pipeline":  # a tool came: the next call finds out afresh
                extra = dsh_host.define_tool(
                    name="extra", description="extra", parameters={}, execute=_returns
                )
                host.host.registry.register(extra)
            tools.started = trio.Event()
            task = asyncio.ensure_future(host.call("nests", {}))
            while not tools.started.is_set():
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert tools.seen == expected
            assert (await host.call("answers", {})).content[0].text == "now False"

    expected = trio.run(under_trio)
    reason = "the asyncio task was cancelled"
    assert expected == [("sleeps", "cancelled", True, reason), ("nests", "Cancelled")]
    asyncio.run(main())


@pytest.mark.parametrize("tool", sorted(OUTCOMES))
def test_a_call_that_suspends_ends_as_under_trio_with_a_signal(tool):
    async def under_trio():
        async with dsh_host.open_host(plugins=[Tools()], entry_points=False) as host:
            await host.call("answers", {})
            return await host.call(tool, {}, call_id="c", signal=dsh_host.AbortSignal())

    async def under_asyncio():
        async with open_test_host(Tools()) as host:
            await host.call("answers", {})
            return await host.call(tool, {}, call_id="c")

    expected = trio.run(under_trio)
    assert asyncio.run(under_asyncio()) == expected
    if tool.startswith("aborts"):
        assert expected.error.code == "ABORTED"


def test_a_call_the_full_pipeline_runs_after_bare_ones_gets_no_scope_of_its_worker():
    """A bare body that ended in its first step leaves its worker with no body running
    unscoped (`Worker.unscoped`): a later call that the full pipeline runs (`Pipeline._run`,
    which follows its signal itself) and that suspends is not given the worker's scope."""

    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            for _ in range(3):
                await host.call("peeks", {})  # bare, each ended in its first step
            extra = dsh_host.define_tool(
                name="extra", description="extra", parameters={}, execute=_returns
            )
            host.host.registry.register(extra)  # a tool came: the next call takes `_run`
            for tool in ("returns", "returns", "peeks"):
                result = await host.call(tool, {})
                assert not result.is_error, result
                workers = host._guest.workers.idle
                assert workers
                assert all(w.scope is None and not w.unscoped for w in workers)

    asyncio.run(main())
