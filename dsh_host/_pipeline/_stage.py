"""Hook stages: one cancel scope per stage whose deadline follows the link running now.

`_Stage` bounds each hook implementation's own time (`_Budget`, paused while it waits
downstream in ``call_next``); `_Driven` awaits one implementation under its budget and blames it
when the stage's deadline passes. A stage is made only when a hook first waits (`_Staging`): most
calls open no cancel scope at all. Used by `dsh_host._pipeline._pipeline`, `dsh_host._pipeline._chain` and
`dsh_host._pipeline._wrappers`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Generator
from typing import Any, NoReturn

import trio

from .._model._errors import PluginFailure
from ._contain import HookTimeout, _late, genuine, is_cancellation
from ._trio_internals import cancel_status, unshielded


class _Stage:
    """One hook stage's cancel scope, whose deadline follows the link that is running now.

    Each awaited implementation pushes its `_Budget`; while a link waits in ``call_next`` its
    budget is paused (the deadline is then the downstream link's, or none during the body), and
    it is re-armed with what is left of the link's own time when ``call_next`` returns. When the
    deadline passes, the implementation running then is blamed (`blame`).

    Time is read from trio's clock only when the task is about to suspend (`_Driven`), and the
    deadline is written only then, and only when it changed: a hook that answers without
    suspending costs no clock reads and no deadline bookkeeping. A hook's own time therefore
    counts from its first suspension; what it ran synchronously before that is the watchdog's
    business (and, for an ``async`` hook, not bounded: see the pipeline guide).

    An *eager* stage's scope is entered by the caller (``with stage.scope``) before any link
    runs. A *lazy* stage (`lazy`) opens no scope until a link first suspends in its own time:
    trio's cancel scopes cost several microseconds each, and most wrappers never wait on their
    own (they only wait in ``call_next``). At that first suspension:

    - if the task's cancel status is the one the stage started in (the link has no cancel scope
      of its own open), the stage's scope is entered there, outermost to everything the links
      do from then on, and the caller exits it (`leave`) when the stage ends: from then on it
      is the eager case;
    - else (the link suspends inside a scope or nursery of its own), a scope is entered around
      this one suspension only and exited before the link resumes, so scopes stay nested; if
      its deadline fires, the ``Cancelled`` is passed on to the link as trio raised it, the stage
      counts as lapsed, and every later suspension of the link is cancelled at once. Inside a
      shielded scope of the link's, no scope is entered (a shield keeps an eager stage's
      cancellation out just the same), but the deadline is still noted (`_Watch`).

    A lazy stage needs the task's current cancel status, which trio does not expose publicly;
    where it cannot be read, the pipeline uses an eager stage (`lazy` returns ``None``).
    """

    __slots__ = ("armed", "base", "blame", "entered", "lapsed", "scope", "stack", "timed")

    def __init__(self, base: object = None) -> None:
        self.base = base  # the cancel status a lazy stage started in; None: an eager stage
        self.scope = trio.CancelScope() if base is None else _UNENTERED
        self.entered = base is None
        self.stack: list[_Budget] = []
        self.blame: tuple[str, str, HookTimeout] | None = None
        self.armed = math.inf
        self.timed = False  # a deadline was ever given to trio (else nothing can cancel us)
        self.lapsed = False  # a lazy stage's per-suspension deadline fired

    @classmethod
    def lazy(cls) -> _Stage | None:
        base = cancel_status()
        return None if base is None else cls(base)

    def arm(self, budget: _Budget) -> trio.CancelScope | _Watch | None:
        """Give trio the deadline of the link running now (none while it waits downstream).

        Returns a scope entered for this one suspension (a lazy stage, inside the link's own
        scopes): the caller exits it before resuming the link.
        """
        stack = self.stack
        if not stack or stack[-1].paused:
            want = math.inf
        else:
            top = stack[-1]
            if top.since is None:
                top.since = trio.current_time()
            want = top.since + top.limit - top.used
        if self.entered:
            if want != self.armed:
                self.armed = want
                self.scope.deadline = want
                self.timed = True
            return None
        if want == math.inf or stack[-1] is not budget:
            return None  # nothing to bound, or the innermost link's driver already did
        status = cancel_status()
        if status is self.base:
            scope = self.scope = trio.CancelScope(deadline=want)
            scope.__enter__()
            self.entered = self.timed = True
            self.armed = want
            return None
        if not unshielded(status, self.base):
            return _Watch(want)  # nothing may cancel it here; the deadline is still kept
        once = trio.CancelScope(deadline=want)
        once.__enter__()
        return once

    def __enter__(self) -> _Stage:
        if self.base is None:
            self.scope.__enter__()
        return self

    def __exit__(self, etype: Any, exc: BaseException | None, tb: Any) -> bool:
        """Exit the stage's scope (an eager stage's, or a lazy stage's if it was entered)."""
        if self.base is None:
            return bool(self.scope.__exit__(etype, exc, tb))
        return self.leave(exc)

    def leave(self, exc: BaseException | None) -> bool:
        """Exit a lazy stage's scope, if it was entered; whether it swallowed *exc*."""
        if self.base is None or not self.entered:
            return False
        if exc is None:
            return bool(self.scope.__exit__(None, None, None))
        return bool(self.scope.__exit__(type(exc), exc, exc.__traceback__))

    def run(self, awaitable: Any, budget: _Budget, plugin: str, hook: str) -> _Driven:
        """Await *awaitable* (one implementation) under *budget*; blame it if time runs out."""
        return _Driven(self, awaitable, budget, plugin, hook)

    def expired(self) -> bool:
        """Whether the deadline cancelled the scope (never without one: nobody else cancels it)."""
        return self.lapsed or (self.timed and self.scope.cancel_called)

    def fail(self) -> None:
        """After the stage's scope exits: raise `PluginFailure` if its deadline passed."""
        if self.expired():
            raise PluginFailure(*(self.blame or ("?", "?", HookTimeout("a hook stage timed out"))))


class _Watch:
    """A lazy stage's deadline over one suspension inside a shield of the link's own.

    No scope may cancel the link there (an eager stage's could not either); on resumption,
    `__exit__` notes whether the deadline passed, so the stage lapses as if it had fired.
    """

    __slots__ = ("cancel_called", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.cancel_called = False

    def __exit__(self, *exc: object) -> None:
        self.cancel_called = trio.current_time() >= self.deadline


_NO_TRAP: Any = object()


_UNENTERED = trio.CancelScope()
"""A lazy stage's scope until it is entered (never entered itself; never cancelled)."""


class _Driven:
    """Awaits one implementation's awaitable under its budget, in its stage.

    Pushes the budget, arms the stage's deadline before each suspension (never otherwise),
    forwards what trio sends or throws in exactly as ``await`` would, and pops the budget; when
    the stage's deadline passed, blames the implementation that was running.
    """

    __slots__ = ("awaitable", "budget", "depth", "first", "hook", "plugin", "stage")

    def __init__(
        self,
        stage: _Stage,
        awaitable: Any,
        budget: _Budget,
        plugin: str,
        hook: str,
        first: Any = _NO_TRAP,
        depth: int = 0,
    ) -> None:
        """*first*: the trap a coroutine whose first step already ran yielded (it is driven
        on from there); *depth*: the stage's stack height when that first step began."""
        self.stage = stage
        self.awaitable = awaitable
        self.budget = budget
        self.plugin = plugin
        self.hook = hook
        self.first = first
        self.depth = depth

    def _late(self) -> tuple[str, str, HookTimeout]:
        return (self.plugin, self.hook, _late(self.plugin, self.hook, self.budget.limit))

    def __await__(self) -> Generator[Any, Any, Any]:
        stage, budget, first = self.stage, self.budget, self.first
        budget.stage = stage
        if first is _NO_TRAP:
            stage.stack.append(budget)
        else:  # links it called meanwhile (still waiting) keep their budgets above its own
            stage.stack.insert(self.depth, budget)
        it = self.awaitable
        if not inspect.iscoroutine(it):
            it = it.__await__()
        send, throw, arm = it.send, it.throw, stage.arm
        sent: Any = None
        error: BaseException | None = None
        try:
            while True:
                if first is not _NO_TRAP:
                    trap, first = first, _NO_TRAP
                else:
                    try:
                        trap = send(sent) if error is None else throw(error)
                    except StopIteration as stop:
                        value = stop.value
                        break
                once = arm(budget)
                try:
                    sent, error = (yield trap), None
                except BaseException as exc:
                    sent, error = None, exc
                if once is not None:  # a lazy stage's scope for this one suspension
                    if error is None:
                        once.__exit__(None, None, None)
                    else:
                        once.__exit__(type(error), error, error.__traceback__)
                    if once.cancel_called:
                        stage.lapsed = True
                        if stage.blame is None:
                            stage.blame = self._late()
        except BaseException as exc:
            if stage.expired():
                if stage.blame is None:
                    stage.blame = self._late()
                if not stage.entered and is_cancellation(exc):
                    raise PluginFailure(*stage.blame) from exc  # ours: its scope is gone
            raise
        finally:
            stage.stack.remove(budget)
        if stage.expired():  # it swallowed it and answered late
            raise PluginFailure(*(stage.blame or self._late()))
        return value


class _Budget:
    """One hook's own time: paused while it waits in ``call_next`` for downstream work.

    ``used`` is the own time spent in earlier stretches; ``since`` the trio time the current
    stretch was first seen suspending (``None``: not yet, so no clock read was needed).
    """

    __slots__ = ("limit", "paused", "since", "stage", "used")

    def __init__(self, limit: float, stage: _Stage | None) -> None:
        self.limit = limit
        self.stage = stage
        self.paused = False
        self.since: float | None = None
        self.used = 0.0

    def close(self) -> None:
        """End the current stretch of own time (it starts again at the next suspension)."""
        if self.since is not None:
            self.used += trio.current_time() - self.since
            self.since = None

    def pausing(self, call_next: Callable[..., Any]) -> Callable[..., Any]:
        async def paused(*args: Any, **kwargs: Any) -> Any:
            if self.stage is None:  # not awaited under a stage: nothing to pause
                return await call_next(*args, **kwargs)
            self.close()
            self.paused = True
            try:
                return await call_next(*args, **kwargs)
            finally:
                self.paused = False

        return paused


class _Staging:
    """A stage made only when a hook first waits: a lazy one from the cancel status the work
    started in (*base*), or, where that cannot be read (*base* is ``None``), an eager one entered
    at once by ``with``. ``with`` leaves whichever was entered."""

    __slots__ = ("base", "stage")

    base: object
    stage: _Stage | None

    def staged(self) -> _Stage:
        """The stage (a lazy one, made now if no hook waited before)."""
        stage = self.stage
        if stage is None:
            stage = self.stage = _Stage(self.base)
        return stage

    def __enter__(self) -> _Staging:
        if self.base is None and self.stage is None:
            self.stage = _Stage()
            self.stage.__enter__()
        return self

    def __exit__(self, etype: Any, exc: BaseException | None, tb: Any) -> bool:
        stage = self.stage
        return stage is not None and stage.__exit__(etype, exc, tb)

    def fail(self) -> None:
        """After ``with``: raise `PluginFailure` if the stage's deadline passed."""
        if self.stage is not None:
            self.stage.fail()


async def _settle(value: Any, budget: _Budget, stage: _Stage, plugin: str, hook: str) -> Any:
    """Await one implementation's awaitable in its stage: a coroutine's first step undriven
    (one that never waits costs no `_Driven`), the rest driven."""
    if inspect.iscoroutine(value):
        depth = len(stage.stack)
        try:
            trap = value.send(None)
        except StopIteration as stop:
            return stop.value
        return await _Driven(stage, value, budget, plugin, hook, trap, depth)
    return await stage.run(value, budget, plugin, hook)


async def _contained(plugin: str, hook: str, exc: BaseException) -> NoReturn:
    """Raise what *exc*, raised in *plugin*'s *hook*, becomes: itself when it is a
    `PluginFailure` already or a genuine cancellation or interrupt (`genuine`), else a
    `PluginFailure` naming the plugin and the hook."""
    if isinstance(exc, PluginFailure) or await genuine(exc):
        raise exc
    raise PluginFailure(plugin, hook, exc) from exc


def _stage_failed(stage: _Stage | None) -> NoReturn:
    """After a stage's scope absorbed its own cancellation: the `PluginFailure` it means."""
    if stage is not None:
        stage.fail()
    raise AssertionError("a hook stage ended without an answer")  # pragma: no cover
