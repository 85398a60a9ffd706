"""Running one hook command and reading what it said: `run_hook`, `interpret`, `Verdict`.

A hook's exit code, stdout and stderr become a `Verdict` (see the outcomes listed in
`dsh_plugins_builtin.hook_commands`); the helpers at the end word the plugin's decisions
(`failed`, `would_run`) and wrap its contexts (`contexts_of`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from dsh_host import AbortSignal, HookContext, printable

from ._process import HookRunner, TreeRun
from ._settings import NAME, HookCommand

__all__ = ["Verdict", "contexts_of", "failed", "interpret", "run_hook", "would_run"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")

_SUMMARY_MAX = 500  # characters of a failing hook's stderr quoted in a reason
# hookSpecificOutput keys that rewrite a call's input or output: not supported, so a failure
_REWRITES = ("updatedInput", "updatedMCPToolOutput", "updatedToolOutput")


@attrs.frozen
class Verdict:
    """What one hook run said: a decision, its reason, contexts, or why it failed."""

    decision: Literal["deny", "ask", "allow"] | None = None
    reason: str | None = None
    contexts: tuple[str, ...] = ()
    failure: str | None = None


async def run_hook(
    hook: HookCommand,
    payload: Mapping[str, Any],
    *,
    runner: HookRunner,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    abort: AbortSignal,
    max_output_bytes: int,
) -> Verdict:
    """Run *hook* with *payload* on stdin and interpret what it did. Never raises for the hook."""
    assert hook.launch is not None, "hooks are planned when the host starts"
    run: TreeRun = await runner.run(
        hook.launch.argv, stdin=(json.dumps(payload) + "\n").encode(), cwd=str(cwd),
        env=env, timeout=timeout, abort=abort, max_output_bytes=max_output_bytes,
    )  # fmt: skip
    stderr = run.stderr.decode("utf-8", errors="replace").strip()
    if run.outcome == "error":
        return Verdict(failure=f"{hook.describe()} could not start: {run.error}")
    if run.outcome == "aborted":
        return Verdict(failure=f"{hook.describe()} was killed: the call was aborted")
    if run.outcome == "timeout":
        return Verdict(failure=f"{hook.describe()} timed out after {timeout:g} s and was killed")
    if run.outcome == "overflow":
        return Verdict(
            failure=f"{hook.describe()} printed more than {max_output_bytes} bytes on "
            f"{run.overflow} and was killed (raise [plugin.{NAME}] max_output_bytes if that "
            "much is expected)"
        )
    code = run.code if run.outcome == "exited" else -run.code
    if code == 2:
        return Verdict(decision="deny", reason=stderr or None)
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        said = f": {_summary(stderr)}" if stderr else ""
        return Verdict(failure=f"{hook.describe()} {how}{said}")
    return interpret(hook, run.stdout.decode("utf-8", errors="replace"))


def interpret(hook: HookCommand, stdout: str) -> Verdict:
    """The verdict of a hook that exited 0 (plain text stdout: no decision)."""
    text = stdout.strip()
    if not text.startswith("{"):
        return Verdict()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Verdict(failure=f"{hook.describe()} printed JSON that does not parse: {exc}")
    if message := _text(data.get("systemMessage")):
        log.warning("%s says: %s", hook.describe(), _summary(message))
    decision: Literal["deny", "ask", "allow"] | None = None
    reason = _text(data.get("reason"))
    contexts = [_text(data.get("additionalContext"))]
    if data.get("decision") == "block":
        decision = "deny"
    elif data.get("decision") == "approve":
        decision = "allow"
    specific = data.get("hookSpecificOutput")
    if isinstance(specific, dict):
        claimed = specific.get("hookEventName")
        if claimed is not None and claimed != hook.event:
            return Verdict(
                failure=f"{hook.describe()} answered for hookEventName {claimed!r}, not {hook.event!r}"
            )
        contexts.append(_text(specific.get("additionalContext")))
        rewrite = next((k for k in _REWRITES if specific.get(k) is not None), None)
        if rewrite is not None:  # ignoring it would run what the hook meant to change
            return Verdict(
                failure=f"{hook.describe()} asked to rewrite the call with {rewrite}, which dsh "
                "does not support"
            )
        permission = specific.get("permissionDecision")
        if hook.event == "PreToolUse" and permission is not None:
            if permission not in ("deny", "ask", "allow"):
                return Verdict(
                    failure=f"{hook.describe()} gave an unknown permissionDecision {permission!r} "
                    "(expected deny, ask or allow)"
                )
            decision, reason = permission, _text(specific.get("permissionDecisionReason"))
    if data.get("continue") is False:
        decision = "deny"
        reason = _text(data.get("stopReason")) or f"stopped by {hook.event} hook (continue: false)"
    return Verdict(decision, reason, tuple(c for c in contexts if c))


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _summary(text: str) -> str:
    """*text* cut to `_SUMMARY_MAX` and escaped: a hook's words can reach a terminal."""
    return printable(text if len(text) <= _SUMMARY_MAX else text[:_SUMMARY_MAX] + "…")


def failed(failure: str, what: str) -> str:
    """The reason of a call denied (or a result blocked) by a failing hook."""
    return f"{failure}; {what} because [plugin.{NAME}] fail_closed is true"


def would_run(hooks: list[HookCommand]) -> str:
    """The detail of a dry run's allow: the hooks that would have run."""
    ran = "; ".join(f"would run hook {h.command!r} from {h.source}" for h in hooks)
    return f"{ran} (not run: dry run)"


def contexts_of(texts: list[str]) -> tuple[HookContext, ...]:
    """Hook contexts for the model, from this plugin."""
    return tuple(HookContext(text, source=NAME) for text in texts)
