"""What every bridge shares: calls through either host, deferred approval, bodies in asyncio.

*Deferred approval.* A framework that can pause a run for a person's approval (pydantic-ai's
``ApprovalRequired``, the Agents SDK's ``needs_approval``) should get dsh's ``Ask`` that no
approver answered as that pause, not as a denial. The `Deferral` plugin (``tryfirst``, added to
the host once) watches approvals of calls a bridge made: it notes the request and lets the
host's approvers answer as usual. When none did (the call ends ``DENIED``, decided by the
asker, as the contract words it), the bridge raises the framework's pause. The framework's
approved retry runs with the fingerprint of exactly its tool and arguments; `Deferral` answers
``allowed-once`` for a request with that fingerprint, and for no other.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

import attrs
import trio

from dsh_host import (
    ApprovalOutcome,
    ApprovalRequest,
    Host,
    ImageBlock,
    Scope,
    TextBlock,
    ToolExecutionResult,
    arguments_of,
    canonical_json,
    hookimpl,
)

from ..aio import AsyncioHost

__all__ = [
    "AnyHost",
    "BridgeCall",
    "Deferral",
    "PathDeclarations",
    "call",
    "check_paths",
    "plain_host",
    "run_in_asyncio",
    "text_of",
]

T = TypeVar("T")
AnyHost = AsyncioHost
PathDeclarations = Mapping[str, Mapping[str, Literal["read", "write"]]]
"""Per tool name, its path arguments and how it uses each (`define_tool`'s ``paths``)."""


def check_paths(paths: PathDeclarations, tools: Iterable[str]) -> None:
    """Raise `ValueError` when *paths* names a tool that is not among *tools*."""
    names = set(tools)
    unknown = sorted(set(paths) - names)
    if unknown:
        raise ValueError(
            f"paths names tools the toolset does not offer: {', '.join(unknown)} "
            f"(its tools: {', '.join(sorted(names)) or 'none'})"
        )


@attrs.define
class BridgeCall:
    """One call a bridge makes: its approved fingerprint, and the approval asked, if any."""

    approved: tuple[str, str] | None = None
    asked: ApprovalRequest | None = None
    extra: Any = None
    preview: bool = False
    """A dry run that only asks whether dsh would ask: no approver is put to it."""

    def deferred(self, result: ToolExecutionResult) -> bool:
        """Whether *result* is an ``Ask`` that no approver answered (to defer to the framework)."""
        asked = self.asked
        return (
            asked is not None
            and result.error is not None
            and result.error.code == "DENIED"
            and result.decided_by == asked.asked_by
        )


CURRENT: contextvars.ContextVar[BridgeCall | None] = contextvars.ContextVar(
    "dsh_bridge_call", default=None
)


class Deferral:
    """See the module docstring."""

    name = "dsh-bridges"

    @hookimpl(tryfirst=True)
    def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome | None:
        current = CURRENT.get()
        if current is None:
            return None
        if current.approved == (request.tool, canonical_json(request.arguments)):
            return ApprovalOutcome.ALLOWED_ONCE
        current.asked = request
        return ApprovalOutcome.UNAVAILABLE if current.preview else None


def plain_host(host: AnyHost) -> Host:
    """The `Host` behind *host*; the `Deferral` plugin added to it once."""
    if not isinstance(host, AsyncioHost):
        raise TypeError(
            f"the framework runs on asyncio: pass the host of `dsh_host.aio.open_host()`, "
            f"not {type(host).__name__}"
        )
    plain = host.host
    if plain.pm.get_plugin(Deferral.name) is None:
        plain.pm.register(Deferral(), name=Deferral.name)
    return plain


async def call(
    host: AnyHost,
    name: str,
    arguments: Any,
    *,
    call_id: str | None = None,
    scope: Scope | None = None,
    approved: bool = False,
    extra: Any = None,
) -> tuple[ToolExecutionResult, BridgeCall]:
    """One call through *host*, the asyncio host."""
    plain_host(host)
    arguments = arguments_of(arguments)  # JSON text as a model sends it: parsed, as dsh will
    fingerprint = (name, canonical_json(arguments)) if approved else None
    state = BridgeCall(approved=fingerprint, extra=extra)
    token = CURRENT.set(state)
    try:
        result = await host.call(name, arguments, call_id, scope=scope)
    finally:
        CURRENT.reset(token)
    return result, state


async def run_in_asyncio(host: AnyHost, job: Callable[[], Awaitable[T]]) -> T:
    """From a trio task: run *job* (a framework's coroutine) on the asyncio loop hosting the
    guest run, and wait for it; a trio cancellation cancels it and waits for it to end."""
    token = host._guest.token
    done = trio.Event()

    async def wrapped() -> T:
        return await job()

    task = asyncio.get_running_loop().create_task(wrapped())
    task.add_done_callback(lambda _: token.run_sync_soon(done.set))
    try:
        await done.wait()
    except trio.Cancelled:
        task.cancel()
        with trio.CancelScope(shield=True):
            await done.wait()
        raise
    return task.result()


def text_of(result: ToolExecutionResult) -> str:
    """The model-facing text of *result*: its content, then its contexts."""
    content = result.content
    if len(content) == 1 and not result.additional_contexts and type(content[0]) is TextBlock:
        return content[0].text  # the common case, first
    blocks = [*result.content, *(b for ctx in result.additional_contexts for b in ctx.content)]
    return "\n\n".join(_text(block) for block in blocks)


def _text(block: TextBlock | ImageBlock) -> str:
    return block.text if isinstance(block, TextBlock) else f"[image: {block.mime_type}]"
