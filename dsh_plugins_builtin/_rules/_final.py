"""What makes a user's deny and ask rules final, whatever other plugins return.

The pre-execute chain is first-result: a plugin called before ``permissions`` (``tryfirst``,
registered later, or a waterfall link that overrides its downstream) can answer ``Allow`` and
``permissions`` is never asked. Guards (``dsh_tool_guard``) run after *every* allowed call, have
no allow result and the first reason denies, so a plugin enforcing its rules there as well
cannot be undone by any other plugin (the contract's monotonic guard).

A guard sees the call, and one fact of how it was allowed: ``execution.approved_by``, the
approver that allowed it once (noted by the pipeline at stage D, whatever the order of the
approvers). An ask rule holds unless it is set. `Notes` keeps what an earlier stage of the same
plugin decided, per call token; the memo is bounded (the oldest notes go first), so a model
cannot grow it; a note lost that way fails closed (the call is denied, never allowed).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, final

import pluggy

from dsh_host import Allow, Ask, Deny, Host

__all__ = ["MISSING", "Notes", "ahead_of", "hook_final", "who_allowed"]

_KEPT = 4_096
MISSING: Any = object()
"""What `Notes.take` returns for a call nothing was noted about."""


@final
class Notes:
    """One fact per call (by execution token) kept from an earlier stage for the guard."""

    def __init__(self) -> None:
        self._notes: OrderedDict[object, Any] = OrderedDict()

    def note(self, token: object, value: Any = True) -> None:
        self._notes[token] = value
        if len(self._notes) > _KEPT:
            self._notes.popitem(last=False)

    def take(self, token: object) -> Any:
        """What was noted about the call of *token* (forgetting it), or `MISSING`."""
        return self._notes.pop(token, MISSING)


def ahead_of(pm: pluggy.PluginManager, name: str) -> Sequence[str]:
    """The plugins whose ``dsh_tool_pre_execute`` runs before *name*'s: who may have allowed."""
    impls = pm.hook.dsh_tool_pre_execute.get_hookimpls()  # call order is the reverse
    names = [impl.plugin_name for impl in reversed(impls)]
    if name not in names:
        return names
    return names[: names.index(name)]


def who_allowed(host: Host | None, name: str) -> str:
    """``plugin 'a' or 'b'``: the plugins that could have allowed a call before *name* ran."""
    names = ahead_of(host.pm, name) if host is not None else ()
    return "plugin " + " or ".join(repr(n) for n in names) if names else "a plugin"


def hook_final(
    decision: Allow | Deny | Ask | None, asked: bool, host: Host | None, name: str
) -> str | None:
    """The guard's reason for a ``PreToolUse`` hook's *decision*: a deny always, an ask that
    was never put to the approvers; ``None`` otherwise."""
    if type(decision) is Deny:
        who = who_allowed(host, name)
        return f"{decision.reason} (a PreToolUse hook's deny is final: {who} allowed)"
    if type(decision) is Ask and not asked:
        why = decision.reason or "a PreToolUse hook asks for approval"
        return (
            f"{why} ({who_allowed(host, name)} allowed the call without putting it to an "
            "approver; a hook's ask is answered by a person or a configured approver)"
        )
    return None
