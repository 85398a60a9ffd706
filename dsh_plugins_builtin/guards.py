"""The ``guards`` plugin: limits on arguments and call counts, and the repeat-call reminder.

::

    [plugin.guards]
    max_argument_bytes = 1_000_000       # UTF-8 bytes of the arguments' canonical JSON
    max_calls_per_tool = { bash = 50 }   # calls per run (per host); tools not named: no limit
    repeat_thresholds = [3, 5, 8]        # remind the model at these runs of identical calls

The two limits are a ``dsh_tool_guard``: they deny, with a reason that names the limit and the
key that raises it. The reminder is a ``dsh_tool_post_execute`` waterfall link: it counts a
call (denied ones too), lets the rest of the chain decide, and adds a `HookContext` for the
model to whatever was decided, a ``Block`` included, so it never stops another plugin.

Per call the plugin serialises the arguments once (canonical JSON: the size limit and the
repeat count share the text) and encodes it only when non-ASCII text could be over the limit.
The reminder link is a plain function: a call that is not at a threshold is handed on as it is
(``return call_next()``), so only the calls that get a reminder cost a coroutine of its own.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, final

import attrs

from dsh_host import (
    Accept,
    Block,
    HookContext,
    Host,
    Scope,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
)

from ._common._canonical import canonical

__all__ = ["GuardsConfig", "GuardsPlugin"]


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value}")


def _limits(instance: Any, attribute: attrs.Attribute[Any], value: Mapping[str, int]) -> None:
    for tool, limit in value.items():
        if limit < 0:
            raise ValueError(f"{attribute.name}.{tool} must be 0 (no calls) or more, got {limit}")


def _thresholds(instance: Any, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    steps = itertools.pairwise(value)
    if any(n < 2 for n in value) or any(a >= b for a, b in steps):
        raise ValueError(
            f"{attribute.name} must be strictly increasing integers of at least 2 "
            f"(a run of one call is no repeat), got {list(value)}"
        )


@final
@attrs.frozen
class GuardsConfig:
    """The ``[plugin.guards]`` table.

    Attributes:
        max_argument_bytes: the largest arguments a call may have, in UTF-8 bytes of their
            canonical JSON.
        max_calls_per_tool: tool name -> how many calls of it may run per host; 0 forbids it.
        repeat_thresholds: run lengths of identical consecutive calls at which the model is
            reminded to change its approach; empty turns the reminder off.
    """

    max_argument_bytes: int = attrs.field(default=1_000_000, validator=_positive)
    max_calls_per_tool: Mapping[str, int] = attrs.field(factory=dict, validator=_limits)
    repeat_thresholds: tuple[int, ...] = attrs.field(default=(3, 5, 8), validator=_thresholds)


@final
@attrs.define
class _Streak:
    tool: str
    arguments: str
    count: int


@final
class GuardsPlugin:
    """Argument-size and call-count limits, and the repeat-call reminder."""

    name = "guards"

    def __init__(self) -> None:
        self._config = GuardsConfig()
        self._where = "[plugin.guards]"
        self._calls: dict[str, int] = {}
        # Per scope, held weakly: a run of calls is forgotten with its scope object.
        self._streaks: weakref.WeakKeyDictionary[Scope, _Streak] = weakref.WeakKeyDictionary()
        self._global_streak: _Streak | None = None
        # The canonical JSON of the last arguments measured, so post-execute need not redo it.
        self._last: tuple[object, str] = (None, "null")
        self.dsh_idle_hooks: frozenset[str] = frozenset()
        self._thresholds: frozenset[int] = frozenset(self._config.repeat_thresholds)
        self._limit = self._config.max_argument_bytes
        self._most: Mapping[str, int] = self._config.max_calls_per_tool
        # With no post-execute implementation after ours, the host calls `_alone` instead of
        # our link: the downstream decision is then the default accept. Not for a subclass that
        # overrides the link: `_alone` would answer for it.
        own = type(self).dsh_tool_post_execute is GuardsPlugin.dsh_tool_post_execute
        self.dsh_last_links = {"dsh_tool_post_execute": self._alone} if own else {}

    @hookimpl
    def dsh_plugin_config(self) -> type[GuardsConfig]:
        return GuardsConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self._config = host.config_for(self)
        self._thresholds = frozenset(self._config.repeat_thresholds)
        self._limit = self._config.max_argument_bytes
        self._most = self._config.max_calls_per_tool
        if not self._config.repeat_thresholds:  # nothing to remind: no per-call counting
            self.dsh_idle_hooks = frozenset({"dsh_tool_post_execute"})
        if host.config.source is not None:
            self._where = f"[plugin.{self.name}] of {host.config.source}"
        else:
            self._where = f"[plugin.{self.name}]"

    @hookimpl
    def dsh_tool_guard(self, execution: ToolExecution) -> str | None:
        arguments = execution.arguments
        last = self._last
        if arguments is last[0] and arguments is not None:  # `_canonical`, inline
            text = last[1]
        else:
            text = canonical(arguments)
            self._last = (arguments, text)
        limit = self._limit
        # Characters never outnumber UTF-8 bytes, and ASCII text is one byte each: encode only
        # non-ASCII text that could be over. surrogatepass: a lone surrogate ("\udcff") is
        # valid JSON and counts as its 3 bytes.
        size = len(text)
        if size * 4 > limit and not text.isascii():
            size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            return (
                f'the arguments of "{execution.name}" are {size:,} bytes of JSON, over the '
                f"limit of {limit:,}; send less at once, or raise max_argument_bytes in "
                f"{self._where}"
            )
        limits = self._most
        if not limits:
            return None
        name = execution.name
        most = limits.get(name)
        if most is None:
            return None
        done = self._calls.get(name, 0)
        if done >= most:
            return (
                f'"{name}" may be called at most {most} times per run and was called {done} '
                f"times; the limit is max_calls_per_tool.{name} in {self._where}"
            )
        self._calls[name] = done + 1
        return None

    @hookimpl(tryfirst=True)
    def dsh_tool_post_execute(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Awaitable[Accept | Block]:
        # A plain function: a call that is not at a threshold is handed on as it is (the host
        # awaits the downstream decision, which stays credited downstream); only a reminder
        # takes a coroutine of its own.
        count = self._count(execution)
        if count not in self._thresholds:
            return call_next()
        return self._remind(execution.name, count, call_next)

    def _alone(self, execution: ToolExecution, result: ToolExecutionResult) -> Accept | None:
        """What the link answers when no post-execute implementation is called after it (the
        downstream decision is the default accept): ``None`` (handed on) or the reminder."""
        count = self._count(execution)
        if count not in self._thresholds:
            return None
        return Accept(additional_contexts=(self._reminder(execution.name, count),))

    async def _remind(
        self, name: str, count: int, call_next: Callable[[], Awaitable[Accept | Block]]
    ) -> Accept | Block:
        decision = await call_next()
        contexts = (self._reminder(name, count), *decision.additional_contexts)
        return attrs.evolve(decision, additional_contexts=contexts)

    def _reminder(self, name: str, count: int) -> HookContext:
        return HookContext(
            f'You have called "{name}" with the same arguments {count} times in a '
            "row. Repeating it will not give a different result: read the last result "
            "carefully and change your approach (different arguments, another tool, or finish "
            "if you have what you need).",
            self.name,
        )

    def _canonical(self, arguments: object) -> str:
        """`dsh_host.canonical_json` of *arguments* (by `canonical`), once per call.

        The guard and the count share it.

        The snapshot is deep-frozen, so the same object always has the same text.
        """
        last, text = self._last
        if arguments is not last or arguments is None:
            text = canonical(arguments)
            self._last = (arguments, text)
        return text

    def _count(self, execution: ToolExecution) -> int:
        """Count *execution* in its scope's run of identical calls; return the run's length."""
        arguments = self._canonical(execution.arguments)
        scope = execution.scope
        streak = self._global_streak if scope is None else self._streaks.get(scope)
        if streak is not None and streak.tool == execution.name and streak.arguments == arguments:
            streak.count += 1
            return streak.count
        streak = _Streak(execution.name, arguments, 1)
        if scope is None:
            self._global_streak = streak
        else:
            self._streaks[scope] = streak
        return 1
