"""The frozen values that cross the pipeline: content, contexts, decisions, inputs and results."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, final

import attrs

from ._json import freeze, thaw
from ._signal import AbortSignal

if TYPE_CHECKING:
    from .._schema._tool import ToolDefinition

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
    "ToolRestriction",
    "ToolRunContext",
]


# -- content -------------------------------------------------------------------------------------


@final
@attrs.frozen
class TextBlock:
    """Plain text for the model."""

    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    type: Literal["text"] = attrs.field(default="text", init=False)

    @classmethod
    def _of(cls, text: str) -> TextBlock:
        """A block of *text*, known to be a ``str``: no validator (the hot path)."""
        self = _new(cls)
        _set_text(self, text)
        _set_type(self, "text")
        return self

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


_new = object.__new__
_set_text = TextBlock.__dict__["text"].__set__
_set_type = TextBlock.__dict__["type"].__set__


@final
@attrs.frozen
class ImageBlock:
    """An image for the model: base64 ``data`` of a ``mime_type`` such as ``image/png``."""

    data: str = attrs.field(validator=attrs.validators.instance_of(str))
    mime_type: str = attrs.field(validator=attrs.validators.instance_of(str))
    type: Literal["image"] = attrs.field(default="image", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "image", "data": self.data, "mime_type": self.mime_type}


ContentBlock: TypeAlias = TextBlock | ImageBlock


def to_content(value: Any) -> tuple[ContentBlock, ...]:
    """Normalise ``str``, a block, or an iterable of those into a tuple of blocks."""
    if isinstance(value, str):
        return (TextBlock(value),)
    if isinstance(value, TextBlock | ImageBlock):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, bytes | dict):
        out: list[ContentBlock] = []
        for item in value:
            if isinstance(item, str):
                out.append(TextBlock(item))
            elif isinstance(item, TextBlock | ImageBlock):
                out.append(item)
            else:
                raise TypeError(
                    f"content items must be str, TextBlock or ImageBlock, not {type(item).__name__}"
                )
        return tuple(out)
    raise TypeError(f"content must be str, a content block or a list of them, not {type(value)!r}")


def content_text(content: Iterable[ContentBlock]) -> str:
    """Text blocks joined by newlines; other blocks as ``[<type> content]``."""
    return "\n".join(b.text if isinstance(b, TextBlock) else f"[{b.type} content]" for b in content)


@final
@attrs.frozen
class HookContext:
    """Context for the model's next turn, kept apart from the tool result; ``source`` is a plugin name."""

    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    source: str = ""

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines: ``HookContext("x").text == "x"``."""
        return content_text(self.content)

    def to_json(self) -> dict[str, Any]:
        return {"content": [b.to_json() for b in self.content], "source": self.source}


def _to_contexts(value: Iterable[HookContext | str]) -> tuple[HookContext, ...]:
    return tuple(c if isinstance(c, HookContext) else HookContext(c) for c in value)


# -- results -------------------------------------------------------------------------------------


@final
@attrs.frozen
class ToolFailure:
    """Why a call failed: ``message`` (no ``Error:`` prefix), ``code`` and error class ``name``."""

    message: str
    code: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code, "name": self.name}


def _freeze_meta(value: Any) -> Any:
    return freeze(value, "meta")


@final
@attrs.frozen(kw_only=True, slots=False)  # a dict class: built on every call, 2x faster to make
class ToolExecutionResult:
    """The outcome of one call, as the model and every observer see it.

    ``content`` is what the model reads; an error's text is ``Error: <message>``. ``decided_by``
    is exactly the registered name of the plugin that denied, asked, blocked or replaced the
    result, or ``None``; ``decision_detail`` says which rule or why (``rule bash(rm:*) in
    dsh.toml``), or is ``None``.
    """

    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    is_error: bool = False
    error: ToolFailure | None = None
    additional_contexts: tuple[HookContext, ...] = attrs.field(default=(), converter=_to_contexts)
    meta: Any = attrs.field(default=None, converter=_freeze_meta)
    decided_by: str | None = None
    decision_detail: str | None = None

    @classmethod
    def _success(cls, content: tuple[ContentBlock, ...]) -> ToolExecutionResult:
        """A success from already-normalised content, skipping the converters (the hot path)."""
        self = _new(cls)
        fields = self.__dict__
        fields["content"] = content
        fields["is_error"] = False
        fields["error"] = None
        fields["additional_contexts"] = ()
        fields["meta"] = None
        fields["decided_by"] = None
        fields["decision_detail"] = None
        return self

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines."""
        return content_text(self.content)

    @property
    def code(self) -> str | None:
        """``error.code``, or ``None`` for a success."""
        return self.error.code if self.error is not None else None

    def to_json(self) -> dict[str, Any]:
        """A plain JSON object (dicts and lists) for logs, wire formats and ``--json`` output."""
        return {
            "content": [b.to_json() for b in self.content],
            "is_error": self.is_error,
            "error": self.error.to_json() if self.error is not None else None,
            "additional_contexts": [c.to_json() for c in self.additional_contexts],
            "meta": thaw(self.meta),
            "decided_by": self.decided_by,
            "decision_detail": self.decision_detail,
        }


# -- decisions -----------------------------------------------------------------------------------


@final
@attrs.frozen
class Allow:
    """Pre-execute decision: run the call (guards may still deny it).

    ``detail`` (optional) says why, for ``--trace`` and ``dsh call`` (``rule read_file in
    dsh.toml``); an allowed call's ``decided_by`` stays ``None``.
    """

    detail: str | None = attrs.field(default=None, kw_only=True)


@final
@attrs.frozen
class Deny:
    """Pre-execute decision: refuse the call; the model reads ``Error: <reason>``.

    ``detail`` (optional) becomes ``result.decision_detail`` (``rule bash(rm:*) in dsh.toml``);
    ``result.decided_by`` is the plugin's name.
    """

    reason: str
    detail: str | None = attrs.field(default=None, kw_only=True)


@final
@attrs.frozen
class Ask:
    """Pre-execute decision: run the call only if an approver answers ``allowed-once``.

    ``detail`` (optional) becomes ``result.decision_detail`` if nobody approves. An ``Ask`` for
    a tool that does not exist in the call's scope is never put to an approver: the call ends
    ``UNKNOWN_TOOL``.
    """

    reason: str | None = None
    detail: str | None = attrs.field(default=None, kw_only=True)


@final
@attrs.frozen
class Accept:
    """Post-execute decision: keep the result, or replace its ``content``; add contexts."""

    content: tuple[ContentBlock, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(to_content)
    )
    additional_contexts: tuple[HookContext, ...] = attrs.field(default=(), converter=_to_contexts)
    detail: str | None = attrs.field(default=None, kw_only=True)


@final
@attrs.frozen
class Block:
    """Post-execute decision: turn the result into an error whose content is ``feedback``."""

    feedback: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    additional_contexts: tuple[HookContext, ...] = attrs.field(default=(), converter=_to_contexts)
    detail: str | None = attrs.field(default=None, kw_only=True)


PreDecision: TypeAlias = Allow | Deny | Ask


class ApprovalOutcome(enum.StrEnum):
    """What an approver answered."""

    ALLOWED_ONCE = "allowed-once"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"


class ExecutionMode(enum.StrEnum):
    """How a call may be scheduled beside its siblings in a batch."""

    PARALLEL = "parallel"
    EXCLUSIVE = "exclusive"


# -- scopes and calls ----------------------------------------------------------------------------


_nested_ids = itertools.count(1)


@final
class CallToken:
    """The opaque identity of one call (``execution.token``): comparable only by ``is``."""

    __slots__ = ("__weakref__",)

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
@attrs.frozen
class Scope:
    """An agent's scope key; a scope sees its ancestors' tools, guards and restrictions."""

    name: str
    parent: Scope | None = None

    def chain(self) -> tuple[Scope, ...]:
        """This scope's ancestors, farthest first, then the scope itself."""
        out: list[Scope] = []
        scope: Scope | None = self
        while scope is not None:
            out.append(scope)
            scope = scope.parent
        return tuple(reversed(out))


def _optional_names(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError("ToolRestriction names must be a list of tool names, not a string")
    return frozenset(value)


@final
@attrs.frozen
class ToolRestriction:
    """A per-scope filter over global tools: ``allow`` keeps only those, ``deny`` removes those."""

    allow: frozenset[str] | None = attrs.field(default=None, converter=_optional_names)
    deny: frozenset[str] | None = attrs.field(default=None, converter=_optional_names)

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and (
            self.deny is None or name not in self.deny
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

    @classmethod
    def _make(
        cls,
        call_id: str,
        name: str,
        arguments: Any,
        scope: Scope | None,
        parent: object,
        signal: AbortSignal,
        dry_run: bool,
    ) -> ToolExecution:
        """``ToolExecution(...)`` with a fresh token, positionally (the pipeline's hot path)."""
        self = _new(cls)
        fields = self.__dict__  # in the order attrs' __init__ fills it (shared dict keys)
        fields["call_id"] = call_id
        fields["name"] = name
        fields["arguments"] = arguments
        fields["scope"] = scope
        fields["parent"] = parent
        fields["signal"] = signal
        fields["token"] = CallToken()
        fields["dry_run"] = dry_run
        return self


@final
@attrs.frozen(slots=False)  # a dict class: built on every call, 2x faster to make
class ToolRunContext:
    """What a tool body receives beside its arguments: the call, its signal, and `defer_context`."""

    execution: ToolExecution
    tool: ToolDefinition = attrs.field(repr=False)
    _deferred: list[HookContext] | None = attrs.field(init=False, default=None, repr=False)
    _run: Callable[[ToolExecutionInput], Awaitable[ToolExecutionResult]] | None = attrs.field(
        default=None, kw_only=True, repr=False, eq=False, alias="run"
    )

    @classmethod
    def _make(
        cls,
        execution: ToolExecution,
        tool: ToolDefinition,
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
