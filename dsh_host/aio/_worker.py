"""Running a call's first step on the asyncio task, as a step of a parked trio task.

A `Worker` is a trio task of the guest run that, while idle, is parked (as in
`trio.lowlevel.wait_task_rescheduled`). `Worker.step` runs a call's coroutine up to its first
suspension right where the asyncio task awaits it, doing exactly what trio's run loop does for
one task step: the worker is trio's current task meanwhile (``trio.lowlevel.current_task``, cancel
scopes, nurseries, deadlines all belong to it), sniffio says ``"trio"``, and the coroutine runs in
a copy of the caller's context, which becomes the worker's context. A call that ends without
suspending has then cost no trio task and no tick. A call that suspends is handed to the worker
with the very message its step yielded, which the worker processes as trio's run loop would
have; from then on the worker is an ordinary trio task running the rest of the call. So the call
runs in one trio task from its first line to its last, whatever its hooks and body do with trio.
A worker runs its calls through one generator (`_calls`) that ``yield from``s each, so that a
call's end raises no `StopIteration` on the way out.

Every read or write of trio's private state for this is here (``Task._abort_func``,
``custom_sleep_data``, ``context``, ``_runner``, ``GLOBAL_RUN_CONTEXT.task``, the run loop's
messages). `CAN_STEP` is ``False`` when a trio release moved any of them, and the calls then run
as one new trio task each (slower, still correct); ``tests/loops/test_aio_inline.py`` fails
loudly when that happens. Trio instruments see task steps, so while any is installed no step
runs outside the run loop either.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context, copy_context
from typing import Any

import attrs
import outcome
import trio
from sniffio import thread_local as sniffio_library

__all__ = ["CAN_STEP", "HANDED", "Pool", "Worker"]


def _private() -> tuple[Any, Any, Any, Any]:
    try:
        from trio._core import _run, _traps

        return (
            _run.GLOBAL_RUN_CONTEXT,
            _run.Task,
            _traps.CancelShieldedCheckpoint,
            _traps.WaitTaskRescheduled,
        )
    except (ImportError, AttributeError):  # pragma: no cover - a trio that moved them
        return None, None, None, None


GLOBAL_RUN_CONTEXT, Task, CancelShieldedCheckpoint, WaitTaskRescheduled = _private()
_IDLE = Context()
"""An idle worker's context: empty, so that it keeps no call's context variables alive."""
HANDED: Any = object()
"""What `Worker.step` returns when the call suspended and its worker took it over."""


def _can_step() -> bool:
    """Whether this trio has every private name `Worker.step` reads or writes."""
    if Task is None or not attrs.has(Task):
        return False
    fields = {field.name for field in attrs.fields(Task)}
    wanted = {"_abort_func", "custom_sleep_data", "context", "_runner", "coro", "_next_send_fn"}
    wanted |= {"_cancel_status", "_cancel_points", "_schedule_points"}
    return wanted <= fields and callable(
        getattr(Task, "_attempt_delivery_of_any_pending_cancel", None)
    )


def _can_follow() -> bool:
    """Whether this trio has what `_enter_below` writes (``Task._activate_cancel_status``, a
    settable ``CancelStatus.parent``): else the pipeline follows every call's signal itself."""
    try:
        from trio._core._run import CancelStatus
    except ImportError:  # pragma: no cover - a trio that moved it
        return False
    parent = getattr(CancelStatus, "parent", None)
    return (
        CAN_STEP
        and callable(getattr(Task, "_activate_cancel_status", None))
        and isinstance(parent, property)
        and parent.fset is not None
    )


CAN_STEP = _can_step()
CAN_FOLLOW = _can_follow()


Finish = Callable[[outcome.Outcome[Any]], None]


MAX_IDLE = 16
"""How many idle workers a guest run keeps (more were needed only for concurrent calls)."""


@attrs.define(eq=False)
class Pool:
    """The guest run's workers that are parked and usable (`idle`)."""

    idle: list[Worker] = attrs.Factory(list)
    closed: bool = False
    instruments: Any = None
    """The run's instruments by hook (set as the first worker starts)."""
    run: dict[str, Any] = attrs.Factory(dict)
    """The guest run thread's ``GLOBAL_RUN_CONTEXT`` attributes (set as the first worker
    starts): ``"task"`` is there while a task of the run steps."""
    sniffio: dict[str, Any] = attrs.Factory(dict)
    """The guest run thread's sniffio attributes (``"name"``), likewise."""

    def take(self) -> Worker | None:
        """The idle worker to run a step (`Worker.step`; it stays last in `idle` meanwhile), if
        a step may run now: between two ticks (no task is trio's current one, so no other
        taker nor `close` runs until the step ends) and with no trio instrument to see it."""
        idle, instruments = self.idle, self.instruments
        if (
            idle
            and "before_task_step" not in instruments
            and "after_task_step" not in instruments
            and "task" not in self.run
        ):
            return idle[-1]
        return None

    def close(self) -> None:
        """End the idle workers, and every busy one once its call ends (from a trio task)."""
        self.closed = True
        while self.idle:
            worker = self.idle.pop()
            worker.stopping = True
            trio.lowlevel.reschedule(worker.task)


@attrs.define(eq=False)
class Worker:
    """A trio task that runs calls handed to it (see the module docstring)."""

    pool: Pool
    first: Coroutine[Any, Any, Any] | None = None
    """The call a new worker starts with (none for one that is to park at once)."""
    finish: Finish | None = None
    """Where the running call's outcome goes."""
    busy: bool = False
    """A call is handed to it (its trio task runs the call's remaining steps)."""
    stopping: bool = False
    task: Any = None
    park: Any = None
    parked: Any = None  # `park`'s abort function
    run: Any = None  # its pool's `run` and `sniffio`, for `step`
    sniffio: Any = None
    calls: Any = None
    """Its `_calls` generator, which runs each call sent in (`send`: its ``send``)."""
    send: Any = None
    value: Any = None
    """The value of the call that `calls` just ended (read once)."""
    unscoped: bool = False
    """A body runs unscoped under the stepped call's signal, which the worker follows: set
    by `Pipeline._bare` as the body starts, cleared as it ends (then `ended`, if `scope`)."""
    scope: Any = None
    """The cancel scope following that signal, from the call's first suspension on (`_arm`)."""
    unsubscribe: Any = None

    async def drive(self) -> None:
        """The worker's trio task."""
        self.task = trio.lowlevel.current_task()
        pool = self.pool
        pool.instruments = self.task._runner.instruments.data  # a UserDict's own dict
        pool.run, pool.sniffio = (
            GLOBAL_RUN_CONTEXT.__dict__,
            sniffio_library.__dict__,
        )  # this thread's
        self.park = WaitTaskRescheduled(self._abort)
        self.parked = self.park.abort_func
        self.run, self.sniffio = pool.run, pool.sniffio
        _ready_calls(self)
        first, self.first = self.first, None
        self.busy = first is not None
        await _Drive(self, first)

    def step(self, coro: Coroutine[Any, Any, Any], signal: Any = None) -> Any:
        """Run *coro*'s first step now as this (idle, parked) worker's step: its value (or its
        exception, raised) if it ended, or `HANDED` when it suspended and the worker took it
        over (set `finish` then, before anything else runs). Call only on the worker its pool
        just gave (`Pool.take`): the last idle one, which stays there unless the call suspends
        (no list shrinking and growing again per call).

        *signal*: the call's, which this worker follows (its ``_follower``, set by the caller):
        a body the pipeline runs unscoped under it (`unscoped`) that is still running at the
        call's first suspension gets the cancel scope following it there (`_arm`), below the
        cancel status the body started in: this step's (`Pipeline._bare` opens none)."""
        task = self.task
        context = task.context = copy_context()
        task._abort_func = task.custom_sleep_data = None  # running now, as `reschedule` leaves it
        base = task._cancel_status
        run, sniffio_now = self.run, self.sniffio
        library = sniffio_now.get("name")
        sniffio_now["name"] = "trio"
        run["task"] = task
        try:
            try:
                message = context.run(self.send, coro)
            except BaseException:
                _ready_calls(self)  # the call's exception ended that one
                self._repark(task)
                if signal is not None:
                    signal._follower = None
                raise
            if message is _ENDED:  # `_repark`, inline
                if signal is not None:  # a body may keep it: a plain one from now on
                    signal._follower = None
                task.context = _IDLE
                task._abort_func = self.parked
                if task._cancel_status.effectively_cancelled:
                    task._attempt_delivery_of_any_pending_cancel()
                value, self.value = self.value, None
                return value
            self.busy = True
            self.pool.idle.remove(self)  # the last one (nothing else takes or parks meanwhile)
            if signal is not None:
                if signal._follower is not None:  # no body started under it: a plain one now
                    signal._follower = None
                elif self.unscoped:
                    self._arm(signal, base)
            _as_the_run_loop_would(task, message)
            return HANDED
        finally:
            del run["task"]
            sniffio_now["name"] = library

    def ended(self, exc: BaseException | None) -> bool:
        """The body ended (raising *exc*): exit the scope `_arm` entered, if it did; whether
        that scope absorbed *exc* (its own cancellation: the call was aborted)."""
        self.unscoped = False
        scope = self.scope
        if scope is None:
            return False
        self.scope = None
        self.unsubscribe()
        if exc is None:
            scope.__exit__(None, None, None)
            return False
        return bool(scope.__exit__(type(exc), exc, exc.__traceback__))

    def _arm(self, signal: Any, base: Any) -> None:
        """At the call's first suspension, in the body: what `Followed` does there (a cancel
        scope below *base*, the status the body started in, cancelled when *signal* aborts)."""
        scope = trio.CancelScope()
        _enter_below(self.task, scope, base)
        self.scope = scope
        self.unsubscribe = signal._subscribe(lambda _signal: scope.cancel())

    def handed(self) -> bool:
        """Whether a call is handed to it (`busy`, read anew: it changes between steps)."""
        return self.busy

    def _repark(self, task: Any) -> None:
        """Back to parked, as the worker's own park left it, still in `idle` (a pending
        cancellation is delivered as trio delivers it to a task that has just parked)."""
        task.context = _IDLE  # holds none of the call's context variables
        task._abort_func = self.parked
        if task._cancel_status.effectively_cancelled:
            task._attempt_delivery_of_any_pending_cancel()

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        """Cancelled while parked idle (the guest run is failing): the worker ends."""
        if self in self.pool.idle:
            self.pool.idle.remove(self)
        self.stopping = True
        return trio.lowlevel.Abort.SUCCEEDED

    def done(self, result: outcome.Outcome[Any]) -> None:
        """The handed call ended: its outcome to its caller; park again, or end."""
        finish, self.finish, self.busy = self.finish, None, False
        self.task.context = _IDLE  # from its next step on
        pool = self.pool
        if not self.stopping and not pool.closed and len(pool.idle) < MAX_IDLE:
            pool.idle.append(self)
        else:
            self.stopping = True
        assert finish is not None
        finish(result)


def _enter_below(task: Any, scope: trio.CancelScope, base: Any) -> None:
    """Enter *scope* in *task* (trio's current one) as if entered while its cancel status was
    *base*: below *base*, above every scope and nursery opened since (`_pipeline`'s
    ``enter_below``, which `Followed` uses, written for the worker's step)."""
    status = task._cancel_status
    if status is base:
        scope.__enter__()
        return
    outermost = status
    while outermost.parent is not base:
        outermost = outermost.parent
        if outermost is None:
            raise RuntimeError("the cancel status a body started in is not above it")
    task._activate_cancel_status(base)
    try:
        scope.__enter__()
    finally:
        inserted = task._cancel_status
        task._activate_cancel_status(status)
    outermost.parent = inserted


def _as_the_run_loop_would(task: Any, message: Any) -> None:
    """What trio's run loop does with the *message* a task step yielded."""
    runner = task._runner
    task._schedule_points += 1
    if message is CancelShieldedCheckpoint:
        runner.reschedule(task)
    elif type(message) is WaitTaskRescheduled:
        task._cancel_points += 1
        task._abort_func = message.abort_func
        task._attempt_delivery_of_any_pending_cancel()
    else:  # a foreign library's yield (or a detach): trio throws this into the task
        error = TypeError(
            f"trio.run received unrecognized yield message {message!r}: dsh_host.aio runs "
            "tool bodies and hooks under trio"
        )
        runner.reschedule(task, error)
        task._next_send_fn = task.coro.throw


@types.coroutine
def _calls(worker: Worker) -> Generator[Any, Any, None]:
    """Runs each call (a coroutine) sent in to its end, yielding what it yields (trio's
    messages), then `_ENDED` with its value in ``worker.value``: a call's end raises no
    `StopIteration` here. A call's exception ends the generator (make a new one then)."""
    call = yield
    while True:
        worker.value = yield from call
        call = None  # hold no finished call while waiting for the next
        call = yield _ENDED


def _ready_calls(worker: Worker) -> None:
    """A new `_calls` generator for *worker* (its ``calls`` and ``send``), ready for a call."""
    calls = worker.calls = _calls(worker)
    worker.send = calls.send
    calls.send(None)  # to its first ``yield``


_ENDED: Any = object()


class _Drive:
    """The worker's loop: park while idle; run the handed call's remaining steps."""

    __slots__ = ("first", "worker")

    def __init__(self, worker: Worker, first: Coroutine[Any, Any, Any] | None) -> None:
        self.worker, self.first = worker, first

    def __await__(self) -> Generator[Any, Any, None]:
        worker = self.worker
        sent: Any = self.first  # the first call, sent into `calls` to start it
        self.first = None
        error: BaseException | None = None
        while True:
            if not worker.busy:
                if worker.stopping:
                    return
                try:
                    sent, error = (yield worker.park), None
                except GeneratorExit:  # the run closed this task's coroutine
                    raise
                except BaseException as exc:  # a foreign yield's error, thrown in by trio
                    sent, error = None, exc
                if not worker.handed():  # woken idle: told to stop, or cancelled
                    if error is not None:
                        raise error
                    if isinstance(sent, outcome.Error):
                        sent.unwrap()
                    return
                continue
            calls = worker.calls
            try:
                message = calls.send(sent) if error is None else calls.throw(error)
            except BaseException as exc:
                _ready_calls(worker)
                worker.done(outcome.Error(exc))
            else:
                if message is _ENDED:
                    value, worker.value = worker.value, None
                    worker.done(outcome.Value(value))
                else:
                    try:
                        sent, error = (yield message), None
                        continue
                    except GeneratorExit:  # the run closed this task's coroutine: and the call
                        calls.close()
                        raise
                    except BaseException as exc:
                        sent, error = None, exc
                        continue
            sent, error = None, None
