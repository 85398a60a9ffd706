"""What every bridge shares: calls through either host, deferred approval, bodies in asyncio.

*Deferred approval.* A framework that can pause a run for a person's approval (pydantic-ai's
``ApprovalRequired``, the Agents SDK's ``needs_approval``) should get dsh's ``Ask`` that no
approver answered as that pause, not as a denial. A `Deferral` plugin per framework (``tryfirst``,
added to the host once, named after the framework's approval: ``pydantic-ai approval``) watches
approvals of the calls its bridge made: it notes the request and lets the host's approvers
answer as usual. When none did (the call ends ``DENIED``, decided by the asker, as the contract
words it), the bridge remembers the call (`Deferral.remember`: its id, tool, exact arguments and
scope) and raises the framework's pause.

An approval given for one call is never honoured for another: when the framework resumes with an
approval for that id, the bridge takes the remembered call (once: a replay asks anew) and passes
its fingerprint only if the tool, the arguments (as canonical JSON) and the scope are exactly the
remembered ones; `Deferral` then answers ``allowed-once`` for that one request, and the executed
call's ``approved_by`` names the framework's approval. Anything else (arguments changed in the
history or by ``override_args``, an id dsh never deferred) is asked about anew, never run. When
the person rejects a remembered call, the bridge puts it through the pipeline once more as a
rejection (`record_rejection`): `Deferral` answers ``rejected`` (and, should policy no longer ask,
its guard denies), so the audit has a ``DENIED`` row decided by the framework's approval, and
the body never runs.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import OrderedDict
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
    ToolExecution,
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
    "Deferred",
    "PathDeclarations",
    "call",
    "check_paths",
    "plain_host",
    "record_rejection",
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

    by: str = ""
    """The name of the `Deferral` of the bridge that makes the call."""
    approved: tuple[str, str] | None = None
    """Approved once, for exactly this tool and canonical arguments; consumed when used."""
    asked: ApprovalRequest | None = None
    extra: Any = None
    preview: bool = False
    """A dry run that only asks whether dsh would ask: no approver is put to it."""
    rejected: bool = False
    """The person rejected it in the framework: recorded, never run."""

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


@attrs.frozen
class Deferred:
    """A call dsh deferred to the framework: what exactly the person is asked to approve."""

    tool: str
    arguments: str
    """Canonical JSON."""
    scope: Scope | None

    def matches(self, tool: str, arguments: Any, scope: Scope | None) -> bool:
        """Whether a call of *tool* with *arguments* in *scope* is exactly this one."""
        try:
            canonical = canonical_json(arguments_of(arguments))
        except (TypeError, ValueError):
            return False
        return (self.tool, self.arguments, self.scope) == (tool, canonical, scope)


_KEPT = 4096
"""Deferred calls remembered per host and framework; the oldest beyond are forgotten (asked anew)."""


class Deferral:
    """One framework's deferred approvals in one host; see the module docstring."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._deferred: OrderedDict[str, Deferred] = OrderedDict()

    def remember(self, call_id: str, tool: str, arguments: Any, scope: Scope | None) -> None:
        """Note that dsh deferred call *call_id* (*tool*, *arguments*, *scope*) to the person."""
        self._deferred.pop(call_id, None)
        self._deferred[call_id] = Deferred(tool, canonical_json(arguments_of(arguments)), scope)
        while len(self._deferred) > _KEPT:
            self._deferred.popitem(last=False)

    def take(self, call_id: str | None) -> Deferred | None:
        """The deferred call *call_id*, forgotten: each approval is used once."""
        return None if call_id is None else self._deferred.pop(call_id, None)

    def waiting(self) -> bool:
        """Whether any deferred call waits for the person."""
        return bool(self._deferred)

    def peek(self, call_id: str) -> Deferred | None:
        """The deferred call *call_id*, still remembered."""
        return self._deferred.get(call_id)

    def pending(self, tool: str, scope: Scope | None) -> list[tuple[str, Deferred]]:
        """The deferred calls of *tool* in *scope* still waiting for the person."""
        return [
            (call_id, deferred)
            for call_id, deferred in self._deferred.items()
            if deferred.tool == tool and deferred.scope == scope
        ]

    def _current(self) -> BridgeCall | None:
        current = CURRENT.get()
        return current if current is not None and current.by == self.name else None

    @hookimpl(tryfirst=True)
    def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome | None:
        current = self._current()
        if current is None:
            return None
        if current.rejected:
            return ApprovalOutcome.REJECTED
        if current.approved == (request.tool, canonical_json(request.arguments)):
            current.approved = None  # once: a nested call just like it is asked anew
            return ApprovalOutcome.ALLOWED_ONCE
        current.asked = request
        return ApprovalOutcome.UNAVAILABLE if current.preview else None

    @hookimpl(tryfirst=True)
    def dsh_tool_guard(self, execution: ToolExecution) -> str | None:
        current = self._current()
        if current is not None and current.rejected:
            return f"{self.name}: rejected by the person"  # policy no longer asked: still never run
        return None


def plain_host(host: AnyHost, by: str) -> Host:
    """The `Host` behind *host*; the `Deferral` plugin named *by* added to it once."""
    deferral_of(host, by)
    return host.host


def deferral_of(host: AnyHost, by: str) -> Deferral:
    """The `Deferral` named *by* in *host*, added to it the first time."""
    if not isinstance(host, AsyncioHost):
        raise TypeError(
            f"the framework runs on asyncio: pass the host of `dsh_host.aio.open_host()`, "
            f"not {type(host).__name__}"
        )
    plain = host.host
    plugin = plain.pm.get_plugin(by)
    if plugin is None:
        plugin = Deferral(by)
        plain.pm.register(plugin, name=by)
    if not isinstance(plugin, Deferral):
        raise TypeError(f"a plugin named {by!r} is in the host already: dsh's bridges use it")
    return plugin


async def call(
    host: AnyHost,
    name: str,
    arguments: Any,
    *,
    call_id: str | None = None,
    scope: Scope | None = None,
    approved: Deferred | None = None,
    by: str,
    extra: Any = None,
    rejected: bool = False,
) -> tuple[ToolExecutionResult, BridgeCall]:
    """One call through *host*, the asyncio host, by the bridge whose `Deferral` is named *by*.

    *approved*: the deferred call the person approved; the call is allowed once without asking
    only if it is exactly that call (tool, arguments, scope). *rejected*: the person rejected it;
    it only goes through the pipeline to be recorded, and never runs.
    """
    deferral_of(host, by)
    arguments = arguments_of(arguments)  # JSON text as a model sends it: parsed, as dsh will
    fingerprint = None
    if approved is not None and approved.matches(name, arguments, scope):
        fingerprint = (name, approved.arguments)
    state = BridgeCall(by=by, approved=fingerprint, extra=extra, rejected=rejected)
    token = CURRENT.set(state)
    try:
        result = await host.call(name, arguments, call_id, scope=scope)
    finally:
        CURRENT.reset(token)
    return result, state


async def record_rejection(host: AnyHost, call_id: str, deferred: Deferred, by: str) -> None:
    """Put *deferred*, which the person rejected, through the pipeline so the audit records it:
    ``DENIED``, decided by the framework's approval (*by*); it never runs."""
    arguments = arguments_of(deferred.arguments)
    await call(host, deferred.tool, arguments, call_id=call_id, scope=deferred.scope, by=by,
               rejected=True)  # fmt: skip


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
