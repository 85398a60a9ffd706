"""The MCP client as the approver: an ``Ask`` under ``dsh mcp serve`` goes to the person there.

When the client declared elicitation, the question is an elicitation form whose message shows
the tool, the asker's reason and every argument in full, as the terminal prompt of the built-in
``approval`` plugin does: one ``key: value`` per line, wrapped, never cut, control characters
escaped and long runs of spaces counted (``⟨230 spaces⟩``). Past `SCREEN_LINES` lines the rest
is summarised, and accepting that form never runs the call: it shows the whole arguments in a
second question, which is the one answered (nothing is allowed unseen). A client without
elicitation cannot be asked: the call is denied, and the answer says how to allow it.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio

from dsh_host import ApprovalOutcome, ApprovalRequest, arguments_lines, hookimpl, printable

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

__all__ = ["APPROVER_NAME", "REQUEST", "SCREEN_LINES", "ClientApprover"]

APPROVER_NAME = "mcp_client"
"""The name the elicitation approver is registered under (``decided_by`` when the person declines)."""

SCREEN_LINES = 20
"""Lines of arguments shown before the rest is summarised (*view all* shows them)."""
WIDTH = 100
"""The column arguments are wrapped at (a client's dialog wraps again; nothing is cut)."""

REQUEST: contextvars.ContextVar[ServerRequestContext[Any] | None] = contextvars.ContextVar(
    "dsh_mcp_request", default=None
)
"""The MCP request a tool call serves (set by the service around ``host.call``)."""


def _question(request: ApprovalRequest, shown: list[str], full: bool) -> str:
    lines = [f"Allow the tool {printable(request.tool)!r} to run once?"]
    if request.reason:
        asker = printable(request.asked_by or "policy")
        lines.append(f"Why it asks ({asker}): {printable(request.reason)}")
    lines.append("Arguments:")
    if full:
        lines.extend(shown)
    else:
        lines.extend(shown[:SCREEN_LINES])
        rest = sum(len(line) for line in shown[SCREEN_LINES:])
        lines.append(
            f"… {rest} more characters: accept to see them all first (nothing runs until you "
            "accept the whole arguments)"
        )
    return "\n".join(lines)


def _schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ClientApprover:
    """Puts an ``Ask`` to the person at the MCP client, through elicitation (module docstring).

    ``trylast``; the built-in ``approval`` plugin yields to it under ``dsh mcp serve`` (its
    terminal prompt cannot work while stdin carries the protocol). Outside an MCP request it
    abstains. ``unelicitable`` holds the call ids it could not ask about (no elicitation), so
    their answer can say how to allow the call.
    """

    name = APPROVER_NAME

    def __init__(self) -> None:
        self.unelicitable: set[str] = set()

    @hookimpl(trylast=True)
    async def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome | None:
        ctx = REQUEST.get()
        if ctx is None:
            return None
        if request.execution.dry_run:  # the tools/list probe: nobody is asked
            return ApprovalOutcome.CANCELLED
        capability = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        if not ctx.session.check_client_capability(capability):
            self.unelicitable.add(request.call_id)
            return ApprovalOutcome.UNAVAILABLE
        shown = arguments_lines(request.arguments, WIDTH)
        full = len(shown) <= SCREEN_LINES
        while not request.signal.aborted:
            answer = await self._elicit(ctx, request, _question(request, shown, full))
            if answer is None:
                break
            if answer.action == "accept" and not full:
                full = True  # never allowed unseen: asked again, with everything shown
                continue
            return {
                "accept": ApprovalOutcome.ALLOWED_ONCE,
                "decline": ApprovalOutcome.REJECTED,
            }.get(answer.action, ApprovalOutcome.CANCELLED)
        return ApprovalOutcome.CANCELLED

    async def _elicit(
        self, ctx: ServerRequestContext[Any], request: ApprovalRequest, message: str
    ) -> types.ElicitResult | None:
        """One elicitation, given up (``None``) if the call is aborted meanwhile."""
        answer: list[types.ElicitResult] = []
        async with trio.open_nursery() as nursery:

            async def elicit() -> None:
                answer.append(
                    await ctx.session.elicit_form(
                        message=message,
                        requested_schema=_schema(),
                        related_request_id=ctx.request_id,
                    )
                )
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                await request.signal.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(elicit)
            nursery.start_soon(watch)
        return answer[0] if answer else None


def how_to_allow(tool: str, config: str | None) -> str:
    """What a client without elicitation is told when a call needed approval."""
    where = f" in {config}" if config else " in dsh.toml"
    return (
        f"This MCP client does not support elicitation, so nobody could be asked to approve "
        f"{tool!r}. To let it run, add an allow rule for it{where} ([plugin.permissions] "
        f'allow = ["{tool}"], or a narrower rule), or use a client that supports elicitation.'
    )
