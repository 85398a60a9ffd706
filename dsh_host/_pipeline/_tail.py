"""A chain of plain functions (hooks and waterfall links), resolved without a `_Chain`.

Such a chain (`_Links.tail`: the default stack's pre-execute, ``audit``'s plain hook and the
``permissions`` link, and its post-execute, ``output_budget`` and ``guards``) needs no `_Chain`
for as long as every hook abstains or answers a decision and every link answers one, returns
``None`` or passes the call on (its ``call_next()`` unawaited, a tail call): the links after it
then decide, and after the last one the host's default does. A link's ``call_next`` is a
`_Lazy`, which makes the chain only if something needs it (the link awaits it, or its budget is
asked for). Anything else (an awaitable, an exception, a blocking hook) makes the chain there
and goes on exactly as `_Chain.resolve` would from that hook: `resolve_tail` raises `_Handed`
with the chain and where it stopped.
"""

from __future__ import annotations

from typing import Any

from .._model._errors import PluginFailure
from ._answers import _clock
from ._chain import _DECISIONS, _Chain, _Links, _Next, _Raised, _Suspend

__all__ = ["_Handed", "_Lazy", "resolve_tail"]


class _Lazy(_Next):
    """A link's ``call_next`` on the tail path: a `_Next` whose chain is made on first need
    (`_chain`), to resolve the links after link *index* - 1 as `_Next` would."""

    __slots__ = ("lazy",)

    def __init__(self, links: _Links, args: tuple[Any, ...], base: object, index: int) -> None:
        self.chain = None
        self.index = index
        self.answer = None
        self.budget = None
        self.lazy: tuple[_Links, tuple[Any, ...], object] | None = (links, args, base)

    def _chain(self) -> _Chain:
        lazy = self.lazy
        if lazy is not None:
            self.lazy = None
            self.chain = _Chain(*lazy)
        return super()._chain()


class _Handed(Exception):
    """`resolve_tail` stopped where `_Chain.resolve` would raise *slow*: go on with *chain*."""

    def __init__(self, chain: _Chain, slow: _Suspend | _Raised) -> None:
        self.chain = chain
        self.slow = slow


def resolve_tail(
    links: _Links, args: tuple[Any, ...], base: object, tool: str
) -> tuple[Any, str | None]:
    """``_Chain(links, args, base).resolve(0)`` for a chain with `_Links.tail`, with no chain
    made unless needed (see the module docstring); raises `_Handed` where it would raise."""
    hook, watchdog = links.hook, links.pipeline.watchdog
    now = None  # when the last link answered: the next one's start (one clock read per link)
    for i, impl in enumerate(links.impls):
        nxt = _Lazy(links, args, base, i + 1) if impl.waterfall else None
        try:  # `Pipeline.watched`, inline, as in `_Chain.resolve`
            if watchdog.registered:
                watchdog.hook, watchdog.tool = hook, tool
                watchdog.started = _clock() if now is None else now
                watchdog.plugin = impl.plugin  # last: the watching thread reads it first
            else:
                watchdog.enter(impl.plugin, hook, tool)
            try:
                plain = impl.positional
                value = plain(*args) if nxt is None else impl.function(*args, nxt)  # type: ignore[misc]
            finally:
                watchdog.plugin = None
                now = _clock()
                ran = now - watchdog.started
                if ran > watchdog.bound:  # it answered late, so it fails closed
                    raise watchdog.overran(impl.plugin, hook, ran)
        except BaseException as exc:
            chain = _Chain(links, args, base) if nxt is None else nxt._chain()
            slow = exc if isinstance(exc, _Suspend | _Raised) else _Raised(i, impl, exc)
            raise _Handed(chain, slow) from None
        if value is None and (nxt is None or nxt.answer is None):
            continue
        if value is nxt and nxt is not None:
            nxt.lazy = nxt.chain = None  # spent: never to be awaited (see `_Next`)
            continue  # a tail call: the links after it decide, right here
        if type(value) in _DECISIONS and (nxt is None or nxt.answer is None):
            try:  # `_Chain.answer`, with no downstream decision to compare with
                return links.accept(value), impl.plugin
            except TypeError as exc:
                raise PluginFailure(impl.plugin, hook, exc) from None
        chain = _Chain(links, args, base) if nxt is None else nxt._chain()
        try:  # an awaitable, or an answer to compare with a downstream one: as `_Chain` goes on
            return chain.went_on(i, impl, value, nxt)
        except (_Suspend, _Raised) as slow:
            raise _Handed(chain, slow) from None
    return links.default, None
