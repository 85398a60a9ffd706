"""Firstresult chains: a hook's implementations in order until one answers, waterfalls included.

`_first` is the general version (traced, kwargs); `_waterfall` is its fast path (no trace:
`._chain` resolves the links on the caller's frame until one waits); `_chain` the traced
waterfall.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._model._errors import PluginFailure
from .._model._trace import Trace, describe, emit
from .._registry._hooks import Impl, Plan
from ._chain import _HOOK_ARGS, _Chain, _Links, _same_decision
from ._stage import (
    _contained,
    _Stage,
    _stage_failed,
)

if TYPE_CHECKING:
    pass

from ._answers import (
    _ACCEPT,
    _ALLOW,
    _NO_SCOPE,
    _check_post,
    _check_pre,
)
from ._calling import _Calling

__all__ = ["_Chains"]


class _Chains(_Calling):
    """The chain-running part of `Pipeline`."""

    def _stage(self, hook: str) -> _Stage | None:
        """The stage of a hook whose implementations may suspend (``async`` or waterfall links),
        lazy where it can be (see `_Stage`), else ``None``."""
        if self.hooks.may_suspend(hook):
            return _Stage.lazy() or _Stage()
        return None

    async def _first(
        self,
        hook: str,
        kwargs: dict[str, Any],
        default: Any,
        accept: Callable[[Any], Any],
        trace: Trace | None,
        bound: float | None = None,
        *,
        args: tuple[Any, ...] | None = None,
        impls: tuple[Impl, ...] | None = None,
    ) -> tuple[Any, str | None]:
        """A firstresult chain whose links may take ``call_next`` (a waterfall).

        Returns the decision and the name of the plugin that made it: a link that returns the
        downstream decision unchanged (contexts aside) leaves it credited downstream. *args*
        (the hook's arguments in order) and *impls* spare looking them up again.
        """
        if impls is None:
            impls = self.hooks.impls(hook)
        stage = self._stage(hook)
        with stage if stage is not None else _NO_SCOPE:
            if trace is None and stage is not None:
                if args is None:
                    args = tuple(kwargs[name] for name in _HOOK_ARGS[hook])
                limit = self.hook_timeout if bound is None else bound
                return await self._waterfall(impls, hook, args, default, accept, limit, stage)
            if any(impl.waterfall for impl in impls):
                return await self._chain(impls, hook, kwargs, default, accept, trace, bound, stage)
            name = (kwargs.get("execution") or kwargs["request"].execution).name
            for impl in impls:
                if impl.is_async or trace is not None:
                    value = await self._call(impl, hook, trace, kwargs, bound=bound, stage=stage)
                else:  # a plain function: called right here, no coroutine of its own
                    try:
                        value = self.watched(impl.plugin, hook, name, impl.call_sync, kwargs)
                    except BaseException as exc:
                        await _contained(impl.plugin, hook, exc)
                    if value is not None and inspect.isawaitable(value):
                        value = await self._call(
                            impl, hook, trace, kwargs, bound=bound, stage=stage, returned=value
                        )
                if value is not None:
                    try:
                        value = accept(value)
                    except TypeError as exc:
                        raise PluginFailure(impl.plugin, hook, exc) from None
                    return value, impl.plugin
            return default, None
        _stage_failed(stage)  # reached only when the stage's own deadline cancelled it

    def _links(self, plan: Plan) -> tuple[_Links, _Links]:
        """The pre- and post-execute chains' `_Links` for *plan* (made once per plan)."""
        made = self._plan_links
        if made is None or made[0] is not plan:
            pre = _Links(
                self, plan.pre, "dsh_tool_pre_execute", _ALLOW, _check_pre, self.hook_timeout
            )
            post = _Links(
                self, plan.post, "dsh_tool_post_execute", _ACCEPT, _check_post, self.hook_timeout
            )
            made = self._plan_links = (plan, pre, post)
        return made[1], made[2]

    def _waterfall(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        args: tuple[Any, ...],
        default: Any,
        accept: Callable[[Any], Any],
        limit: float,
        stage: _Stage,
    ) -> Awaitable[tuple[Any, str | None]]:
        """`_chain` without a trace: the same decisions and credit, with less machinery.

        Each waterfall link gets one ``call_next`` (memoised, pausing the link's own time)
        and is called with the hook's arguments positionally; the chain is resolved on this
        frame until a link really waits. See `_Chain`.
        """
        links = _Links(self, impls, hook, default, accept, limit)
        return _Chain(links, args, stage.base, stage).run(0)

    async def _chain(
        self,
        impls: tuple[Impl, ...],
        hook: str,
        kwargs: dict[str, Any],
        default: Any,
        accept: Callable[[Any], Any],
        trace: Trace | None,
        bound: float | None,
        stage: _Stage | None,
    ) -> tuple[Any, str | None]:
        """The waterfall case of `_first`: links that take ``call_next``."""

        async def run_from(i: int) -> tuple[Any, str | None]:
            while i < len(impls):
                impl = impls[i]
                memo: list[tuple[Any, str | None]] = []
                started = time.perf_counter() if trace is not None else 0.0
                if impl.waterfall:

                    async def call_next(_i: int = i + 1, _memo: list[Any] = memo) -> Any:
                        if not _memo:
                            _memo.append(await run_from(_i))
                        return _memo[0][0]

                    value = await self._call(
                        impl, hook, trace, kwargs, call_next=call_next, bound=bound,
                        report=False, stage=stage,
                    )  # fmt: skip
                else:
                    value = await self._call(impl, hook, trace, kwargs, bound=bound, stage=stage)
                if value is None:
                    if impl.waterfall and trace is not None:
                        emit(trace, kwargs, hook, impl.plugin, "abstained", started)
                    if memo:
                        return memo[0]
                    i += 1
                    continue
                try:
                    value = accept(value)
                except TypeError as exc:
                    raise PluginFailure(impl.plugin, hook, exc) from None
                if memo and _same_decision(value, memo[0][0]):
                    if trace is not None:
                        passed = f"passed on {describe(value)} from {memo[0][1] or 'the default'}"
                        emit(trace, kwargs, hook, impl.plugin, passed, started)
                    return value, memo[0][1]
                if impl.waterfall and trace is not None:
                    emit(trace, kwargs, hook, impl.plugin, describe(value), started)
                return value, impl.plugin
            return default, None

        return await run_from(0)
