"""Waterfall chains (pre-execute, post-execute, approval), resolved on the caller's frame.

A `_Chain` calls its links in order synchronously for as long as none waits; each waterfall
link's ``call_next`` is a `_Next`. Only a link that really waits hands the chain to its stage
(`dsh_host._pipeline._stage`). `dsh_host._pipeline._chains` runs the chains; this module holds their state.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from types import CoroutineType
from typing import Any, Protocol

import attrs

from .._model._errors import PluginFailure
from .._registry._hooks import Impl
from ._answers import _ANSWERS, _clock
from ._contain import Watchdog
from ._stage import (
    _NO_TRAP,
    _Budget,
    _contained,
    _Driven,
    _Stage,
    _stage_failed,
    _Staging,
)

_DECISIONS = frozenset(_ANSWERS)
"""The classes of a link's answers themselves (exactly: a subclass may be awaitable)."""


class _Watched(Protocol):
    """What a chain needs of the pipeline (`dsh_host._pipeline._calling._Calling`): a protocol,
    so this module does not import the pipeline that imports it."""

    watchdog: Watchdog


class _Links:
    """What a `_Chain` needs that depends only on the plugin set: one hook's implementations,
    its default and check, and the links' bound (made once per plan, not per call)."""

    __slots__ = (
        "accept", "count", "default", "hook", "impls", "limit", "pipeline", "spec", "tail",
    )  # fmt: skip

    def __init__(
        self,
        pipeline: _Watched,
        impls: tuple[Impl, ...],
        hook: str,
        default: Any,
        accept: Callable[[Any], Any],
        limit: float,
    ) -> None:
        self.impls = impls
        self.count = len(impls)
        self.hook = hook
        self.default = default
        self.accept = accept
        self.limit = limit
        self.spec = spec = _WATERFALL_ARGS[hook]
        self.pipeline = pipeline
        self.tail = any(i.waterfall for i in impls) and all(
            not i.is_async and (i.argnames == spec if i.waterfall else i.positional is not None)
            for i in impls
        )
        """Plain functions only, a waterfall link among them: `_tail.resolve_tail` resolves
        such a chain without a `_Chain` until something needs one."""


class _Chain(_Staging):
    """One waterfall chain of one call (`Pipeline._first` without a trace), resolved
    synchronously for as long as no link waits.

    `resolve` calls the links in order on this frame: a plain link is called (watched), a
    coroutine's first step runs undriven, and each waterfall link's ``call_next`` is a
    `_Next`, which resolves the links after it the same way, inside that first step. A plain
    link that returns its ``call_next()`` unawaited (a tail call) is passed over, as if it
    abstained: the links after it decide, credited as they would be through it. Only when a
    link's awaitable really waits does `resolve` raise `_Suspend` (and `_Raised` for what a
    link raised), and `settle` takes over from that link with `_Driven`, asynchronously,
    under the stage: the same budgets, deadlines, blame and credit as if every link had been
    awaited.

    The stage is made only when a link waits (`staged`); until then the chain holds the
    cancel status it started in (*base*). A lazy stage's scope is entered by the first link
    that waits at *base*, and left by `finish` (or by a caller that entered the stage itself,
    around `run`).
    """

    __slots__ = ("args", "links", "tool")

    def __init__(
        self, links: _Links, args: tuple[Any, ...], base: object, stage: _Stage | None = None
    ) -> None:
        self.links = links
        self.args = args
        self.base = base
        self.stage = stage
        self.tool = (args[0] if links.hook != "dsh_tool_approve" else args[0].execution).name

    def resolve(self, i: int) -> tuple[Any, str | None]:
        """The decision of links *i* on and who made it, if none of them waits. Raises
        `_Suspend` when a link's awaitable waits (its first step already ran), and `_Raised` for
        what a link raised (a `PluginFailure` included)."""
        links, args = self.links, self.args
        impls, count, hook, spec = links.impls, links.count, links.hook, links.spec
        watchdog = links.pipeline.watchdog
        while i < count:
            impl = impls[i]
            nxt: _Next | None = None
            try:
                if impl.waterfall:
                    nxt = _Next(self, i + 1)
                if impl.is_async:  # only makes the coroutine: nothing to watch
                    value = _called(impl, args, nxt, spec)
                else:  # `Pipeline.watched`, inline (once per plain link of every call)
                    if watchdog.registered:
                        watchdog.hook, watchdog.tool = hook, self.tool
                        watchdog.started = _clock()
                        watchdog.plugin = impl.plugin  # last: the watching thread reads it first
                    else:
                        watchdog.enter(impl.plugin, hook, self.tool)
                    try:
                        if nxt is None:
                            value = impl.positional(*args)  # type: ignore[misc]
                        elif impl.argnames == spec:
                            value = impl.function(*args, nxt)
                        else:
                            value = _called(impl, args, nxt, spec)
                    finally:
                        watchdog.plugin = None
                        ran = _clock() - watchdog.started
                        if ran > watchdog.bound:  # it answered late, so it fails closed
                            raise watchdog.overran(impl.plugin, hook, ran)
                    if value is nxt and nxt is not None:
                        nxt.chain = None  # passed over: never to be awaited (see `_Next`)
                        i += 1  # a tail call: the links after it decide, right here
                        continue
            except (_Suspend, _Raised):
                raise
            except BaseException as exc:
                raise _Raised(i, impl, exc) from None
            if value is None and (nxt is None or nxt.answer is None):
                i += 1  # it abstained
                continue
            if type(value) in _DECISIONS:  # no Awaitable ABC check for an answer
                return self.answer(impl, value, nxt)
            return self.went_on(i, impl, value, nxt)  # an awaitable (rare)
        return links.default, None

    def went_on(self, i: int, impl: Impl, value: Any, nxt: _Next | None) -> tuple[Any, str | None]:
        """`resolve`, on from what link *i* returned (*value*: not a tail call): its awaitable's
        first step, then its answer, or what the links after it decide. Raises as `resolve`."""
        try:
            if (
                value is not None
                and type(value) not in _DECISIONS
                and (type(value) is CoroutineType or impl.is_async or inspect.isawaitable(value))
            ):
                value = self.first_step(i, impl, value, nxt)
        except (_Suspend, _Raised):
            raise
        except BaseException as exc:
            raise _Raised(i, impl, exc) from None
        if value is None:
            if nxt is not None and nxt.answer is not None:
                return nxt.answer
            return self.resolve(i + 1)
        return self.answer(impl, value, nxt)

    def first_step(self, i: int, impl: Impl, value: Any, nxt: _Next | None) -> Any:
        """What link *i*'s awaitable *value* gives if its first step does not wait; else raise
        `_Suspend` (after that step, for a coroutine)."""
        stage = self.stage
        depth = 0 if stage is None else len(stage.stack)
        if type(value) is not CoroutineType:
            raise _Suspend(i, impl, value, _NO_TRAP, depth, nxt)
        try:
            trap = value.send(None)
        except StopIteration as stop:
            return stop.value
        raise _Suspend(i, impl, value, trap, depth, nxt)

    def answer(self, impl: Impl, value: Any, nxt: _Next | None) -> tuple[Any, str | None]:
        """What link *impl* answered (not ``None``), checked and credited."""
        memo = nxt.answer if nxt is not None else None
        if memo is not None and value is memo[0]:
            return memo  # the downstream decision, passed on: checked and credited already
        try:
            value = self.links.accept(value)
        except TypeError as exc:
            raise PluginFailure(impl.plugin, self.links.hook, exc) from None
        if memo is not None and _same_decision(value, memo[0]):
            return value, memo[1]
        return value, impl.plugin

    async def finish(self, slow: _Suspend | _Raised) -> tuple[Any, str | None]:
        """`settle`, for a caller that did not enter the stage: the stage is left here.

        Nothing can have entered a lazy stage's scope before `resolve` raised *slow* without
        it being a `_Suspend` (a link waited), so `resolve` itself needs no ``with``.
        """
        with self:
            return await self.settle(slow)
        _stage_failed(self.stage)  # reached only when the stage's own deadline cancelled it

    async def run(self, i: int) -> tuple[Any, str | None]:
        """`resolve`, awaiting what waits (the caller entered the stage)."""
        try:
            return self.resolve(i)
        except (_Suspend, _Raised) as slow:
            return await self.settle(slow)

    async def settle(self, slow: _Suspend | _Raised) -> tuple[Any, str | None]:
        """On from the link that waited (`_Suspend`) or raised (`_Raised`): the decision."""
        impl = slow.impl
        hook = self.links.hook
        if isinstance(slow, _Raised):
            await _contained(impl.plugin, hook, slow.error)
        stage = self.staged()
        nxt = slow.nxt
        budget = _Budget(self.links.limit, stage) if nxt is None else nxt.own()
        try:
            if slow.trap is _NO_TRAP:
                value = await stage.run(slow.error, budget, impl.plugin, hook)
            else:
                value = await _Driven(
                    stage, slow.error, budget, impl.plugin, hook, slow.trap, slow.depth
                )
        except BaseException as exc:
            await _contained(impl.plugin, hook, exc)
        if value is None:
            if nxt is not None and nxt.answer is not None:
                return nxt.answer
            return await self.run(slow.index + 1)
        return self.answer(impl, value, nxt)


def _called(impl: Impl, args: tuple[Any, ...], nxt: _Next | None, spec: tuple[str, ...]) -> Any:
    """*impl* called with the hook's *args* (and *nxt*, a waterfall link's ``call_next``)."""
    if nxt is None:
        return impl.positional(*args)  # type: ignore[misc]
    if impl.argnames == spec:
        return impl.function(*args, nxt)
    return impl.call_sync(dict(zip(spec, (*args, nxt), strict=True)))


class _Next:
    """A waterfall link's ``call_next`` in a `_Chain`: calling it returns itself, an awaitable
    of the decision of the links after it, resolved once (memoised in `answer`).

    While the links after it run, the link's own time is paused (its `_Budget`, made only
    when it waits: before that, it has no own time to pause). One that its link returned
    unawaited (a tail call) is spent: the links after it already decided, so awaiting it later
    raises `RuntimeError` rather than run them again outside the call.
    """

    __slots__ = ("answer", "budget", "chain", "index")

    def __init__(self, chain: _Chain, index: int) -> None:
        self.chain: _Chain | None = chain
        self.index = index
        self.answer: tuple[Any, str | None] | None = None
        self.budget: _Budget | None = None

    def __call__(self) -> _Next:
        return self

    def own(self) -> _Budget:
        """The link's own budget (made on first need)."""
        budget = self.budget
        if budget is None:
            chain = self._chain()
            budget = self.budget = _Budget(chain.links.limit, chain.staged())
        return budget

    def _chain(self) -> _Chain:
        chain = self.chain
        if chain is None:
            raise RuntimeError(
                "call_next() was awaited after its link returned it unawaited (a tail call): the "
                "links after it already decided; await call_next() inside the link instead"
            )
        return chain

    def __await__(self) -> Generator[Any, Any, Any]:
        if self.answer is None:
            chain = self._chain()
            budget = self.budget
            if budget is not None:  # downstream is not the link's own time
                budget.close()
                budget.paused = True
            try:
                try:
                    self.answer = chain.resolve(self.index)
                except (_Suspend, _Raised) as slow:
                    self.answer = yield from chain.settle(slow).__await__()
            finally:
                if budget is not None:
                    budget.paused = False
        return self.answer[0]


class _Later(Exception):
    """`Pipeline._post_now` stopped where a plain hook waits or raised (*plain*), or a link of
    *chain* did (*slow*); with neither, before any hook ran."""

    def __init__(
        self,
        plain: _Raised | _Pending | None,
        chain: _Chain | None = None,
        slow: _Suspend | _Raised | None = None,
    ) -> None:
        self.plain = plain
        self.chain = chain
        self.slow = slow


class _Suspend(Exception):
    """The link at *index* waits: its awaitable (``error``), the trap its first step yielded
    (`_NO_TRAP`: not a coroutine, nothing ran yet) and the stage's stack height then."""

    def __init__(
        self, index: int, impl: Impl, awaitable: Any, trap: Any, depth: int, nxt: _Next | None
    ) -> None:
        self.index = index
        self.impl = impl
        self.error = awaitable
        self.trap = trap
        self.depth = depth
        self.nxt = nxt


class _Raised(Exception):
    """What the plain implementation at *index* raised (see `Pipeline._plain`)."""

    def __init__(self, index: int, impl: Impl, error: BaseException) -> None:
        self.index = index
        self.impl = impl
        self.error = error


class _Pending(Exception):
    """The awaitable (``error``) the plain implementation at *index* returned (`Pipeline._decide`)."""

    def __init__(self, index: int, impl: Impl, awaitable: Any) -> None:
        self.index = index
        self.impl = impl
        self.error = awaitable


_HOOK_ARGS: dict[str, tuple[str, ...]] = {
    "dsh_tool_approve": ("request",),
    "dsh_tool_pre_execute": ("execution",),
    "dsh_tool_guard": ("execution",),
    "dsh_tool_post_execute": ("execution", "result"),
    "dsh_tool_result": ("execution", "result"),
}


_WATERFALL_ARGS = {hook: (*names, "call_next") for hook, names in _HOOK_ARGS.items()}


def _same_decision(a: Any, b: Any) -> bool:
    """Whether waterfall link *a* passed downstream decision *b* on, at most adding contexts."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    names = _DECISION_FIELDS.get(kind)
    if names is None:
        if not attrs.has(kind):
            return False
        names = _DECISION_FIELDS[kind] = tuple(
            f.name for f in attrs.fields(kind) if f.name != "additional_contexts"
        )
    for name in names:  # noqa: SIM110 - a loop: no generator per comparison
        if getattr(a, name) != getattr(b, name):
            return False
    return True


_DECISION_FIELDS: dict[type, tuple[str, ...]] = {}
"""Per decision class: the fields a link must pass on unchanged to leave the credit downstream."""
