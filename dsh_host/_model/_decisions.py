"""What a hook decides: pre-execute (Allow, Deny, Ask), post-execute (Accept, Block), approval."""

from __future__ import annotations

import enum
from typing import TypeAlias, final

import attrs

from ._content import ContentBlock, HookContext, _to_contexts, to_content

__all__ = [
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "Ask",
    "Block",
    "Deny",
    "ExecutionMode",
    "PreDecision",
]

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
