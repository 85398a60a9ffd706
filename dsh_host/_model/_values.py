"""The frozen values of a call: scopes, inputs, executions, the body's context, approval requests.

Content and results (`._content`), decisions (`._decisions`) and scopes (`._scope`) are
re-exported here, so ``_values`` stays the one place to import a value from."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias, final

import attrs

from ._content import (
    ContentBlock,
    HookContext,
    ImageBlock,
    TextBlock,
    ToolExecutionResult,
    ToolFailure,
)
from ._decisions import Accept, Allow, ApprovalOutcome, Ask, Block, Deny, ExecutionMode
from ._scope import Scope, ToolRestriction
from ._signal import AbortSignal, _inert

__all__ = [
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "ApprovalRequest",
    "Ask",
    "Block",
    "ContentBlock",
    "Deny",
    "ExecutionMode",
    "HookContext",
    "ImageBlock",
    "Scope",
    "TextBlock",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolFailure",
    "ToolLike",
    "ToolRestriction",
    "ToolRunContext",
    "signal_aborted",
]


class ToolLike(Protocol):
    """What the value model knows of a tool: a `dsh_host.ToolDefinition` is one.

    A protocol, not the class: the schema layer that defines tools sits above this one.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def timeout_ms(self) -> float | None: ...


_new = object.__new__


# -- scopes and calls ----------------------------------------------------------------------------


_nested_ids = itertools.count(1)


@final
class CallToken:
    """The opaque identity of one call (``execution.token``): comparable only by ``is``.

    The pipeline notes on it the decision pre-execute came to (stage C), read as
    `ToolExecution.pre_decision`, and how stage D ended: its outcome and the approver that
    answered (`ToolExecution.approval`, `ToolExecution.approver`), and the approver that allowed
    the call once, read by guards as `ToolExecution.approved_by`; nothing else is kept on it.
    """

    __slots__ = ("__weakref__", "_approval", "_approved_by", "_approver", "_decision")
    _approved_by: str  # set by stage D only (private: no public name lets a plugin forge it)
    _approval: ApprovalOutcome  # set by stage D only, likewise
    _approver: str | None  # likewise
    _decision: Any  # set by stage C only, likewise

    def __repr__(self) -> str:
        return f"<call token {id(self):#x}>"


def parent_token(parent: object) -> CallToken | None:
    """The token a ``ToolExecutionInput.parent`` names, or raise `TypeError` saying what to pass."""
    if parent is None or type(parent) is CallToken:
        return parent
    if type(parent) is ToolRunContext or type(parent) is ToolExecution:
        return parent.token  # type: ignore[return-value]
    raise TypeError(
        "ToolExecutionInput.parent must be the outer call's token (ctx.token) or its "
        f"ToolRunContext (ctx), not {type(parent).__name__}; for a nested call from a tool "
        "body, use await ctx.call(name, arguments), which sets it"
    )


@final
@attrs.frozen(kw_only=True)
class ToolExecutionInput:
    """One call as the caller hands it over: the model's ``call_id``, tool ``name`` and ``arguments``."""

    call_id: str
    name: str
    arguments: Any
    scope: Scope | None = None
    parent: object = None
    """For a nested call: the outer call's ``ctx.token`` (or its `ToolRunContext`), else
    ``None``. The pipeline keeps only the token; anything else ends the call ``INVALID_ARGS``."""
    signal: AbortSignal | None = None


@final
@attrs.frozen(kw_only=True, slots=False)  # a dict class: built on every call, 2x faster to make
class ToolExecution:
    """The pipeline's frozen view of one call, shared by every hook of that call.

    ``arguments`` is a deep-frozen JSON snapshot (``None`` when the caller's arguments were not
    JSON); ``token`` identifies the call; ``signal`` is the caller's (a wrapper's replacement
    inside ``dsh_tool_execute``). ``dry_run`` is true when the call is only previewed
    (``dsh run --dry-run``, `ToolRegistry.preview`): a hook must not have side effects then
    (run no command, write no file) and should answer as it would for a real call.
    """

    call_id: str
    name: str
    arguments: Any
    scope: Scope | None = None
    parent: object = attrs.field(default=None, repr=False)
    """The outer call's token for a nested call (identity only, never its arguments or
    signal), else ``None``."""
    signal: AbortSignal = attrs.field(factory=AbortSignal, repr=False)
    token: object = attrs.field(factory=lambda: CallToken(), repr=False, eq=False)
    dry_run: bool = attrs.field(default=False, repr=False)

    @property
    def approved_by(self) -> str | None:
        """The approver that allowed this call once (stage D), or ``None`` when the call was not
        put to an approver or not yet. Guards read it: a policy that must hold unless a person
        (or a configured approver) allowed the call checks it, whatever plugin said ``Allow``."""
        return getattr(self.token, "_approved_by", None)

    @property
    def approval(self) -> ApprovalOutcome | None:
        """How stage D ended: the `ApprovalOutcome` the approvers came to (``unavailable`` when
        none answered; ``cancelled`` when the call was aborted or its caller cancelled while
        asking), as the pipeline acted on it. ``None`` when the call was not put to an approver
        (no `Ask`, a tool that does not exist, not yet) or asking ended without an outcome (an
        approver raised or did not answer in time: the call ends ``PLUGIN_FAILED``). Observers
        (the ``audit`` plugin) read it, with `approver`, instead of guessing from the result."""
        return getattr(self.token, "_approval", None)

    @property
    def approver(self) -> str | None:
        """The approver whose answer is `approval` (whatever it answered), or ``None`` when no
        approver answered (not asked, ``unavailable``, or cut short by an abort)."""
        return getattr(self.token, "_approver", None)

    @property
    def pre_decision(self) -> Allow | Deny | Ask | None:
        """The decision pre-execute came to (stage C): the `Allow`, `Deny` or `Ask` a plugin
        answered, as the rest of the pipeline acts on it; ``None`` before stage C, when no plugin
        decided (the host's default allow), or when a pre-execute hook failed. The ``audit``
        plugin reads it for the rule that decided and whether the call was put to an approver."""
        return getattr(self.token, "_decision", None)

    @classmethod
    def _make(
        cls,
        call_id: str,
        name: str,
        arguments: Any,
        scope: Scope | None,
        parent: object,
        signal: AbortSignal | None,
        dry_run: bool,
    ) -> ToolExecution:
        """``ToolExecution(...)`` with a fresh token, positionally (the pipeline's hot path).

        The token, and the signal when *signal* is ``None`` (the caller passed none), are made
        on first read (`_OnFirstRead`): most calls never read them. Until then no one can hold
        them, so a signal not made yet is not aborted (`signal_aborted`)."""
        self = _new(cls)
        fields = self.__dict__
        fields["call_id"] = call_id
        fields["name"] = name
        fields["arguments"] = arguments
        fields["scope"] = scope
        fields["parent"] = parent
        if signal is not None:
            fields["signal"] = signal
        fields["dry_run"] = dry_run
        return self

    def __copy__(self) -> ToolExecution:
        """A copy sharing the token and signal, as attrs' copy would (made now if not yet)."""
        return attrs.evolve(self)


class _OnFirstRead:
    """A field of `ToolExecution` made on first read (see `ToolExecution._make`), once
    (``setdefault``: two threads reading it first get the same one). A non-data descriptor:
    once made, the instance's own value is read, with no call (a ``__getattr__`` cost a failed
    lookup and its `AttributeError` on every first read)."""

    __slots__ = ("make", "name")

    def __init__(self, name: str, make: Callable[[], object]) -> None:
        self.name, self.make = name, make

    def __get__(self, instance: object, owner: type) -> Any:
        if instance is None:
            return self
        return instance.__dict__.setdefault(self.name, self.make())


type.__setattr__(ToolExecution, "signal", _OnFirstRead("signal", _inert))
type.__setattr__(ToolExecution, "token", _OnFirstRead("token", CallToken))


def signal_aborted(execution: ToolExecution) -> bool:
    """``execution.signal.aborted``, without making a signal nobody asked for (never aborted)."""
    signal = execution.__dict__.get("signal")
    return signal is not None and signal.aborted


@final
@attrs.frozen(slots=False)  # a dict class: built on every call, 2x faster to make
class ToolRunContext:
    """What a tool body receives beside its arguments: the call, its signal, and `defer_context`."""

    execution: ToolExecution
    tool: ToolLike = attrs.field(repr=False)
    _deferred: list[HookContext] | None = attrs.field(init=False, default=None, repr=False)
    _run: Callable[[ToolExecutionInput], Awaitable[ToolExecutionResult]] | None = attrs.field(
        default=None, kw_only=True, repr=False, eq=False, alias="run"
    )

    @classmethod
    def _make(
        cls,
        execution: ToolExecution,
        tool: ToolLike,
        run: Callable[[ToolExecutionInput], Awaitable[ToolExecutionResult]],
    ) -> ToolRunContext:
        """``ToolRunContext(execution, tool, run=run)`` (the pipeline's hot path)."""
        self = _new(cls)
        fields = self.__dict__
        fields["execution"] = execution
        fields["tool"] = tool
        fields["_deferred"] = None
        fields["_run"] = run
        return self

    @classmethod
    def _call(
        cls,
        input: ToolExecutionInput,
        arguments: Any,
        tool: ToolLike,
        run: Callable[[ToolExecutionInput], Awaitable[ToolExecutionResult]],
    ) -> ToolRunContext:
        """The context of a call made from *input* with no parent (the bare path): its
        `execution` (``ToolExecution._make(...)``) is made on first read (`__getattr__`); most
        bodies never read it. Until then nobody holds its signal, if the caller passed none."""
        self = _new(cls)
        fields = self.__dict__
        fields["tool"] = tool
        fields["_deferred"] = None
        fields["_run"] = run
        fields["_input"] = input
        fields["_arguments"] = arguments
        return self

    def __getattr__(self, name: str) -> Any:
        """The execution of a context made by `_call`, made on first read (once: ``setdefault``)."""
        fields = self.__dict__
        if name == "execution" and "_input" in fields:
            input = fields["_input"]
            execution = ToolExecution._make(
                input.call_id,
                input.name,
                fields["_arguments"],
                input.scope,
                None,
                input.signal,
                False,
            )
            return fields.setdefault("execution", execution)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def call_id(self) -> str:
        return self.execution.call_id

    @property
    def name(self) -> str:
        return self.execution.name

    @property
    def arguments(self) -> Any:
        return self.execution.arguments

    @property
    def scope(self) -> Scope | None:
        return self.execution.scope

    @property
    def token(self) -> object:
        """The call's identity token (``execution.token``)."""
        return self.execution.token

    @property
    def parent(self) -> object:
        """The outer call's token, for a nested call (``execution.parent``), else ``None``."""
        return self.execution.parent

    async def call(
        self, name: str, arguments: Any, *, call_id: str | None = None
    ) -> ToolExecutionResult:
        """Make a nested call through the whole pipeline, as a model's call would go.

        The nested call gets this call's scope and signal, and ``parent`` set to this call's
        token, so observers can tie it to the outer call. Never raises for what the tool or a
        plugin did: the outcome is the result.
        """
        if self._run is None:
            raise RuntimeError(
                "this ToolRunContext was not made by a registry; call registry.execute() "
                "with ToolExecutionInput(parent=ctx.token, ...) instead"
            )
        if call_id is None:
            call_id = f"{self.execution.call_id}.{next(_nested_ids)}"
        nested = ToolExecutionInput(
            call_id=call_id, name=name, arguments=arguments, scope=self.scope,
            parent=self.token, signal=self.signal,
        )  # fmt: skip
        return await self._run(nested)

    @property
    def signal(self) -> AbortSignal:
        """Fused from the caller's signal and any a wrapper installed; the body's cancel scope follows it."""
        return self.execution.signal

    def defer_context(self, context: HookContext | str, source: str | None = None) -> None:
        """Attach a context to this call's final result (kept in call order, dropped by a ``Block``)."""
        if not isinstance(context, HookContext):
            context = HookContext(context, source if source is not None else self.tool.name)
        if self._deferred is None:
            object.__setattr__(self, "_deferred", [context])
        else:
            self._deferred.append(context)


@final
@attrs.frozen(kw_only=True)
class ApprovalRequest:
    """What an approver is asked: may this call run?"""

    execution: ToolExecution
    reason: str | None = None
    asked_by: str | None = None

    @property
    def tool(self) -> str:
        return self.execution.name

    @property
    def call_id(self) -> str:
        return self.execution.call_id

    @property
    def arguments(self) -> Any:
        return self.execution.arguments

    @property
    def signal(self) -> AbortSignal:
        return self.execution.signal


Guard: TypeAlias = Callable[[ToolExecution], "str | None"]
