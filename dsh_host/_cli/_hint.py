"""The hint ``dsh call`` prints under a call nobody could approve: the rules that allow it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .. import ToolExecutionResult

__all__ = ["approval_hint", "needs_approval_hint"]


def needs_approval_hint(result: ToolExecutionResult) -> bool:
    """Whether *result* is a call denied because nobody could answer its ``ask`` (the only
    result `approval_hint` has lines for)."""
    message = result.error.message if result.error is not None else ""
    return result.code == "DENIED" and "requires approval" in message


def approval_hint(
    name: str,
    result: ToolExecutionResult,
    config: str | None,
    allowed: Sequence[str] | None,
    narrowest: Sequence[str] | None = None,
    covered: Sequence[str] | None = None,
) -> list[str]:
    """How to allow a call denied because nobody could answer its ``ask`` (else no lines).

    *allowed* is the ``allow`` list of the ``permissions`` plugin's effective configuration,
    when there is one: the hint then shows that list with the rules added. *narrowest* are the
    narrowest rules that cover this call (``bash(ls:*)``), when known; else the hint adds the
    whole tool. *covered* is every allow rule in force (the defaults too), when it differs
    from *allowed*.
    """
    covered = allowed if covered is None else covered
    if not needs_approval_hint(result):
        return []
    plugin, detail = result.decided_by or "", result.decision_detail or ""
    asker = f"plugin {plugin!r}" + (f" ({detail})" if detail else "") if plugin else "a plugin"
    if plugin != "permissions" and covered is not None and name in covered:
        # An allow rule is there already: the ask is the other plugin's own, not a missing rule.
        return [
            f"hint: {asker} asked for approval, and no approval plugin could answer here, so",
            f"      the call was denied. {name!r} already has an allow rule; the ask comes from",
            f"      {plugin or 'that plugin'}'s own configuration: change it there, or run on a "
            "terminal",
            "      with an approval plugin enabled, to be asked.",
        ]
    if covered is not None and name in covered:
        # The rule is there and did not cover these arguments (a path outside the workspace, a
        # command it does not fit): adding it again would change nothing.
        return [
            f"hint: {asker} asked for approval, and no approval plugin could answer here,",
            f"      so the call was denied. {name!r} already has an allow rule, but it does not "
            "cover",
            "      these arguments (the reason above says why). A path outside the workspace "
            "needs an",
            f'      absolute path rule, such as "{name}(//etc/hosts)" or "{name}(~/notes/**)", and a',
            "      command a rule that fits its words; add it to [plugin.permissions] allow in",
            f"      {config or 'dsh.toml'}; or run on a terminal with an approval plugin enabled, to be",
            "      asked.",
        ]
    added = tuple(narrowest) if narrowest else (name,)
    rule = ", ".join(json.dumps(rule) for rule in dict.fromkeys((*(allowed or ()), *added)))
    what = f"this call of {name!r}" if narrowest else f"{name!r}"
    return [
        f"hint: {asker} asked for approval, and no approval plugin could answer here,",
        f"      so the call was denied. To let {what} run without asking, add a rule for it",
        f"      to {config or 'dsh.toml'}:",
        "          [plugin.permissions]",
        f"          allow = [{rule}]",
        "      (or change the asking plugin's own table); or run on a terminal with an approval",
        "      plugin enabled, to be asked.",
    ]
