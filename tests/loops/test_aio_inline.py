"""`dsh_host.aio`'s workers: a call's first step runs on the asyncio task as a step of a parked
trio task (`dsh_host.aio._worker`), and a call that suspends goes on in that same trio task."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
import sniffio
import trio
import trio.testing

import dsh_host
import dsh_host.aio
from dsh_host import hookimpl
from dsh_host.aio import _guest, _worker

request_id = contextvars.ContextVar("request_id", default="none")


def tool(name, body):
    return dsh_host.define_tool(name=name, description=name, parameters={}, execute=body)


class Tools:
    def __init__(self):
        self.tasks = []
        self.gate = None

    @hookimpl
    def dsh_register_tools(self, register):
        tools = self

        async def task(args, ctx):
            tools.tasks.append(trio.lowlevel.current_task())
            return sniffio.current_async_library()

        async def nested(args, ctx):
            # a cancel scope, a checkpoint, a nursery whose child reads the caller's context
            seen = []
            with trio.CancelScope():
                await trio.sleep(0)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: _append(seen, request_id.get()))
            with trio.move_on_after(0):
                await trio.sleep(10)
            return f"{seen[0]} {request_id.get()} {sniffio.current_async_library()}"

        async def gated(args, ctx):
            first = trio.lowlevel.current_task()
            await tools.gate.wait()
            assert trio.lowlevel.current_task() is first  # one trio task from start to end
            return request_id.get()

        async def foreign(args, ctx):
            await asyncio.sleep(0)  # an asyncio await inside a trio body
            return "unreachable"

        async def selfcancel(args, ctx):
            with trio.CancelScope() as scope:
                scope.cancel()  # pending from the first step on: delivered at the checkpoint
                await trio.sleep(0)
                return "not reached"
            with trio.move_on_at(trio.current_time() - 1):  # a deadline already past
                await trio.sleep_forever()
            return "cancelled twice"

        async def counted(args, ctx):
            with trio.testing.assert_checkpoints():  # counts the first step's checkpoint too
                await trio.sleep(0)
            return "counted"

        async def instrument(args, ctx):
            trio.lowlevel.add_instrument(Steps())
            return "added"

        for name, body in (
            ("task", task),
            ("nested", nested),
            ("gated", gated),
            ("foreign", foreign),
            ("instrument", instrument),
            ("selfcancel", selfcancel),
            ("counted", counted),
        ):
            register(tool(name, body))


async def _append(seen, value):
    seen.append(value)


class Steps(trio.abc.Instrument):
    steps = 0

    def before_task_step(self, task):
        Steps.steps += 1


def open_test_host(tools):
    return dsh_host.aio.open_host(plugins=[tools], entry_points=False)


def text(result):
    assert not result.is_error, result
    return result.content[0].text


def test_this_trio_has_what_a_worker_step_needs():
    # Fails when a trio release moves the private names `_worker` uses (calls then still work,
    # one trio task each, slower): update `_worker` for that release.
    assert _worker.CAN_STEP


def test_calls_that_do_not_suspend_run_in_one_reused_trio_task_as_trio():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            request_id.set("req-0")
            results = [text(await host.call("task", {})) for _ in range(3)]
            assert results == ["trio"] * 3
            assert request_id not in tools.tasks[0].context  # an idle worker keeps no context
            assert sniffio.current_async_library() == "asyncio"  # restored after each step
            assert tools.tasks[0] is tools.tasks[1] is tools.tasks[2]

    asyncio.run(main())


def test_a_call_that_suspends_goes_on_in_its_worker_with_the_callers_context():
    async def main():
        async with open_test_host(Tools()) as host:
            request_id.set("req-1")
            assert text(await host.call("nested", {})) == "req-1 req-1 trio"
            assert text(await host.call("task", {})) == "trio"  # the worker parked again
            for worker in host._guest.workers.idle:  # it keeps no call's context alive
                assert request_id not in worker.task.context

    asyncio.run(main())


def test_concurrent_suspended_calls_each_get_a_worker_and_few_stay_idle():
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            tools.gate = trio.Event()

            async def one(i):
                request_id.set(f"r{i}")
                return text(await host.call("gated", {}))

            tasks = [asyncio.ensure_future(one(i)) for i in range(40)]
            for _ in range(5):
                await asyncio.sleep(0)
            tools.gate.set()
            assert await asyncio.gather(*tasks) == [f"r{i}" for i in range(40)]
            assert 1 <= len(host._guest.workers.idle) <= _worker.MAX_IDLE
        assert host._guest.workers.closed
        assert not host._guest.workers.idle

    asyncio.run(main())


def test_an_asyncio_await_in_a_body_fails_the_call_and_the_worker_goes_on():
    async def main():
        async with open_test_host(Tools()) as host:
            result = await host.call("foreign", {})
            assert result.is_error
            assert "unrecognized yield message" in str(result.content)
            assert text(await host.call("task", {})) == "trio"

    asyncio.run(main())


def test_with_a_trio_instrument_on_steps_every_step_is_the_run_loops():
    async def main():
        async with open_test_host(Tools()) as host:
            assert text(await host.call("instrument", {})) == "added"
            before = Steps.steps
            assert text(await host.call("task", {})) == "trio"
            assert Steps.steps > before  # the instrument saw the call's step

    asyncio.run(main())


def test_without_workers_each_call_is_a_trio_task_of_its_own(monkeypatch):
    monkeypatch.setattr(_guest, "CAN_STEP", False)

    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            request_id.set("req-2")
            assert [text(await host.call("task", {})) for _ in range(2)] == ["trio", "trio"]
            assert tools.tasks[0] is not tools.tasks[1]
            assert text(await host.call("nested", {})) == "req-2 req-2 trio"
            assert not host._guest.workers.idle

    asyncio.run(main())


@pytest.mark.parametrize("when", ["idle", "busy"])
def test_closing_the_last_host_ends_idle_and_busy_workers(when):
    async def main():
        tools = Tools()
        async with open_test_host(tools) as host:
            await host.call("task", {})
            workers = list(host._guest.workers.idle)
            assert workers
            if when == "busy":
                tools.gate = trio.Event()
                pending = asyncio.ensure_future(host.call("gated", {}))
                await asyncio.sleep(0)
                tools.gate.set()
                await pending
        assert all(worker.stopping for worker in workers)

    asyncio.run(main())


def test_cancel_scopes_a_call_cancels_itself_hold_across_the_hand_off():
    async def main():
        async with open_test_host(Tools()) as host:
            assert text(await host.call("selfcancel", {})) == "cancelled twice"
            assert text(await host.call("counted", {})) == "counted"
            assert text(await host.call("task", {})) == "trio"

    asyncio.run(main())


def test_an_exception_from_a_calls_first_step_reaches_the_caller_and_the_worker_stays():
    async def main():
        async with open_test_host(Tools()) as host:
            await host.call("task", {})
            guest = host._guest
            idle = len(guest.workers.idle)

            async def fails(signal):
                raise LookupError("in the first step")

            async def fails_later(signal):
                await trio.sleep(0)
                raise LookupError("in a later step")

            with pytest.raises(LookupError, match="in the first step"):
                await _guest.in_trio(guest, fails)
            assert len(guest.workers.idle) == idle
            with pytest.raises(LookupError, match="in a later step"):
                await _guest.in_trio(guest, fails_later)
            assert len(guest.workers.idle) == idle
            assert "task" not in _worker.GLOBAL_RUN_CONTEXT.__dict__
            assert sniffio.current_async_library() == "asyncio"
            assert text(await host.call("task", {})) == "trio"

    asyncio.run(main())


def test_an_asyncio_call_steps_the_pipelines_coroutine_with_no_host_call_frame(monkeypatch):
    """`AsyncioHost.call` takes the coroutine from `Host._call` (`Host.call`'s checks, one
    implementation) rather than stepping a `Host.call` coroutine; a host closed under it still
    refuses the call (the check in `Host._call`)."""

    def no_host_call(*args, **kwargs):
        raise AssertionError("the asyncio host made a Host.call coroutine")

    async def main():
        async with open_test_host(Tools()) as host:
            monkeypatch.setattr(dsh_host.Host, "call", no_host_call)
            request_id.set("req-3")
            assert text(await host.call("task", {})) == "trio"
            assert text(await host.call("nested", {})) == "req-3 req-3 trio"
            monkeypatch.undo()
            await host._run(lambda signal: host.host.aclose())  # the plain host alone
            with pytest.raises(RuntimeError, match="closed"):
                await host.call("task", {})

    asyncio.run(main())
