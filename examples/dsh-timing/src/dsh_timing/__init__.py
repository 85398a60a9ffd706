"""The ``timing`` plugin: an execute wrapper with its own configuration.

Wrappers form a chain around the tool body: the first in call order is outermost. Each gets the
call and ``call_next``; it may run code before and after ``await call_next()``, return its own
result instead (short-circuit), or change the result it passes back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from dsh_host import (
    DshError,
    HookContext,
    Host,
    TextBlock,
    ToolExecution,
    ToolExecutionResult,
    ToolFailure,
    hookimpl,
)

__all__ = ["TimingConfig", "TimingPlugin"]


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"must be a positive number of milliseconds, not {value!r}")


@attrs.frozen
class TimingConfig:
    """The ``[plugin.timing]`` table."""

    slow_ms: float = attrs.field(default=1000.0, validator=_positive)
    """A call slower than this gets a context note telling the model how long it took."""
    skip: tuple[str, ...] = ()
    """Tools this plugin refuses to run at all (an example of short-circuiting)."""


class TimingPlugin:
    """Times every call with trio's clock (so tests can use a mock clock)."""

    name = "timing"

    def __init__(self) -> None:
        self.config = TimingConfig()

    @hookimpl
    def dsh_plugin_config(self) -> type[TimingConfig]:
        return TimingConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)

    @hookimpl
    async def dsh_tool_execute(
        self,
        execution: ToolExecution,
        call_next: Callable[[], Awaitable[ToolExecutionResult]],
    ) -> ToolExecutionResult:
        if execution.name in self.config.skip:
            message = f"the timing plugin is configured to skip {execution.name}"
            return ToolExecutionResult(
                content=(TextBlock(f"Error: {message}"),),
                is_error=True,
                error=ToolFailure(message, "SKIPPED", DshError.__name__),
            )
        started = trio.current_time()
        result = await call_next()
        ms = (trio.current_time() - started) * 1000
        if ms < self.config.slow_ms:
            return result
        note = HookContext(f"{execution.name} took {ms:.0f} ms", source=self.name)
        return attrs.evolve(result, additional_contexts=(*result.additional_contexts, note))
