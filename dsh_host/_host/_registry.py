"""`ToolRegistry`: the tool table with the pipeline handed to it, the entry to a call."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, final

import attrs

from .._model._values import ExecutionMode, ToolExecution, ToolExecutionInput, ToolExecutionResult
from .._pipeline._classify import classify
from .._pipeline._pipeline import Pipeline
from .._registry._hooks import HookRelay
from .._registry._registry import ToolTable

if TYPE_CHECKING:
    from .._model._trace import Trace

__all__ = ["DryRun", "ToolRegistry"]


_run_batch: Callable[..., Coroutine[Any, Any, list[ToolExecutionResult]]] | None = None
"""`run_batch`, once `_scheduler` imported it."""


def _scheduler() -> Callable[..., Coroutine[Any, Any, list[ToolExecutionResult]]]:
    """`run_batch`, imported on the first batch (a batch's scheduler is not for one call: issue
    27) and kept: an ``import`` statement run on every batch cost 40% of a one-call batch."""
    global _run_batch
    from .._pipeline._batch import run_batch

    _run_batch = run_batch
    return run_batch


@attrs.frozen
class DryRun:
    """What policy made of a call without running it: the answer of `ToolRegistry.dry_run`.

    Attributes:
        execution: the frozen call the hooks saw (``dry_run`` set), e.g. for a ``dsh_tool_result``
            observer told of the outcome afterwards.
        result: the result the call ends with before dispatch (a denial, a plugin failure,
            arguments that are not JSON), or ``None`` when policy lets it through.
        allowed_by: the plugin whose ``Allow`` let the call through, when one decided.
        detail: that ``Allow``'s detail, if it gave one.
    """

    execution: ToolExecution
    result: ToolExecutionResult | None = None
    allowed_by: str | None = None
    detail: str | None = None


@final
class ToolRegistry(ToolTable):
    """Tools by name, per scope; `execute` runs one call through the whole pipeline.

    A scope sees the global tools, then its ancestors' (farthest first), then its own, each
    shadowing same-named ones before it. Restrictions on a scope or its ancestors filter what it
    inherits, never its own tools. Guards on a scope apply to it and its descendants.

    ``ToolRegistry()`` on its own runs calls with no plugins; a `Host` builds one wired to its
    plugins.
    """

    def __init__(
        self,
        *,
        hooks: HookRelay | None = None,
        observer_timeout: float = 10.0,
        hook_timeout: float = 30.0,
        approval_timeout: float = 900.0,
    ) -> None:
        super().__init__()
        self.hooks = hooks if hooks is not None else HookRelay(None)
        # The composition: the pipeline is built here, above both, and handed the table.
        self._pipeline = Pipeline(
            self, self.hooks, observer_timeout=observer_timeout, hook_timeout=hook_timeout,
            approval_timeout=approval_timeout,
        )  # fmt: skip

    # -- execution -------------------------------------------------------------------------

    def execution_mode(self, input: ToolExecutionInput) -> ExecutionMode:
        """``PARALLEL`` only when the tool's ``is_concurrency_safe(args)`` returns exactly ``True``."""
        return classify(self, input)[0]

    def execute(
        self, input: ToolExecutionInput, *, trace: Trace | None = None
    ) -> Coroutine[Any, Any, ToolExecutionResult]:
        """Run one call through the pipeline; never raises for anything a tool, plugin or model did.

        ``await registry.execute(input)``. (A plain method returning the pipeline's coroutine:
        one coroutine frame less per call than an ``async def`` that awaits it; `Pipeline.run`'s
        choice of coroutine, inline.)
        """
        pipeline = self._pipeline
        if pipeline._bare_plan is not None and trace is None:
            return pipeline._bare(input) if input.parent is None else pipeline._run(input, None)
        return pipeline._run(input, trace)

    async def preview(
        self, input: ToolExecutionInput, *, trace: Trace | None = None
    ) -> ToolExecutionResult | None:
        """What policy would make of *input*, without running it: a dry run.

        Runs stages A-G (the snapshot, pre-execute, approval, guards); no wrapper, body,
        post-execute or observer runs. Returns the result the call would end with there (a
        denial, a plugin failure, arguments that are not JSON), or ``None`` when policy lets it
        through to dispatch.
        """
        return (await self._pipeline.prepare(input, trace, dry_run=True)).result

    async def dry_run(self, input: ToolExecutionInput, *, trace: Trace | None = None) -> DryRun:
        """`preview` with the reasons: the result, and which plugin allowed the call, and why.

        ``dsh run --dry-run`` and ``dsh hook claude`` show these; nothing runs past the guards.
        """
        prepared = await self._pipeline.prepare(input, trace, dry_run=True)
        return DryRun(prepared.execution, prepared.result, prepared.allowed_by, prepared.detail)

    async def execute_batch(
        self,
        inputs: Iterable[ToolExecutionInput],
        max_parallel: int = 10,
        *,
        signal: Any = None,
        trace: Trace | None = None,
        on_result: Callable[[int, ToolExecutionResult], None] | None = None,
    ) -> list[ToolExecutionResult]:
        """Run one model step's calls; results come back in model order.

        Calls whose tool is concurrency-safe run in a rolling pool of up to *max_parallel*; any
        other call is an exclusive barrier. Pre-execute, approval, guards and post-execute run in
        model order. When *signal* aborts, no new call starts, and the unstarted ones come back
        ``ABORTED_BEFORE_DISPATCH``. *on_result* (e.g. a progress display) is called with the
        index and result of each call as it is finalised, in model order.
        """
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise ValueError(f"max_parallel must be a positive integer, not {max_parallel!r}")
        run_batch = _run_batch if _run_batch is not None else _scheduler()
        batch: list[ToolExecutionInput] = list(inputs)
        return await run_batch(self, self._pipeline, batch, max_parallel, signal, trace, on_result)
