"""``hook_commands``: run the command hooks of Claude Code ``settings.json`` files.

``PreToolUse`` hooks become a `dsh_tool_pre_execute` implementation (deny, ask or allow a call);
``PostToolUse`` hooks become a `dsh_tool_post_execute` waterfall link (block a result or add
context for the model). Each hook is ``/bin/sh -c <command>`` run in the workspace, fed the call
as JSON on stdin, in its own process group, killed as a group when it outlives its timeout.

Outcomes of one hook run:

* exit 2: deny (pre) or block (post); the reason is the hook's stderr;
* exit 0 with stdout starting with ``{``: Claude Code's JSON output (``decision``,
  ``hookSpecificOutput.permissionDecision``, ``continue``, ``additionalContext``);
* exit 0 with other stdout: no decision;
* anything else (another exit code, death by a signal, a timeout, JSON that does not parse, a
  command that cannot start) is a *failure*: logged, and with ``fail_closed`` (the default) it
  denies the call or blocks the result.

Settings files are read once, when the host starts; one that is missing or malformed is a
`ConfigError` (fail closed at load).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs
import trio

from dsh_host import (
    AbortSignal,
    Accept,
    Allow,
    Ask,
    Block,
    ConfigError,
    Deny,
    HookContext,
    Host,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
    thaw,
)

__all__ = ["HookCommand", "HookCommandsConfig", "HookCommandsPlugin", "load_settings"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")

NAME = "hook_commands"
Event: TypeAlias = Literal["PreToolUse", "PostToolUse"]
EVENTS: tuple[Event, ...] = ("PreToolUse", "PostToolUse")
_SUMMARY_MAX = 500  # characters of a failing hook's stderr quoted in a reason


@attrs.frozen
class HookCommandsConfig:
    """The ``[plugin.hook_commands]`` table.

    Attributes:
        settings: Claude Code settings files (JSON, with a ``hooks`` key), relative to the
            workspace; their hooks run in list order. Empty: the plugin does nothing.
        timeout_ms: how long a hook may run when it sets no ``timeout`` (seconds) of its own.
        fail_closed: a hook that fails (times out, crashes, prints malformed JSON) denies the
            call or blocks the result; ``false`` logs the failure and ignores the hook.
    """

    settings: tuple[str, ...] = ()
    timeout_ms: int = attrs.field(default=60_000, validator=attrs.validators.gt(0))
    fail_closed: bool = True


@attrs.frozen
class HookCommand:
    """One ``{"type": "command"}`` hook of one matcher group of one settings file."""

    event: Event
    matcher: str
    command: str
    timeout: float | None  # seconds; None: the plugin's timeout_ms
    source: str  # the settings file, as configured
    pattern: re.Pattern[str] | None = attrs.field(default=None, eq=False)  # None: every tool

    def matches(self, tool: str) -> bool:
        """Whether this hook runs for *tool*: its matcher regex matches the whole name."""
        return self.pattern is None or self.pattern.fullmatch(tool) is not None

    def describe(self) -> str:
        command = self.command if len(self.command) <= 200 else self.command[:199] + "…"
        return f"{self.event} hook {command!r} (from {self.source})"


class SettingsError(Exception):
    """A settings file is missing or malformed; the message says where and what."""


def load_settings(path: Path, source: str) -> list[HookCommand]:
    """Read the ``PreToolUse`` and ``PostToolUse`` command hooks of one settings file.

    A file without a ``hooks`` key may be a bare event map (``{"PreToolUse": [...]}``). Other
    events are ignored; hooks of another ``type`` than ``command`` are skipped with a warning.

    Raises:
        SettingsError: the file is missing, unreadable, not JSON, or not shaped like settings.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"no such file ({path})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SettingsError(f"is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"must hold a JSON object, not {_kind(data)}")
    events = data.get("hooks") if "hooks" in data else {e: data[e] for e in EVENTS if e in data}
    if not isinstance(events, dict):
        raise SettingsError(f"'hooks' must be an object, not {_kind(events)}")
    hooks: list[HookCommand] = []
    for event in EVENTS:
        groups = events.get(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"hooks.{event} must be a list, not {_kind(groups)}")
        for i, group in enumerate(groups):
            hooks.extend(_parse_group(group, event, f"hooks.{event}[{i}]", source))
    return hooks


def _parse_group(group: Any, event: Event, where: str, source: str) -> list[HookCommand]:
    if not isinstance(group, dict):
        raise SettingsError(f"{where} must be an object, not {_kind(group)}")
    matcher = group.get("matcher", "")
    if matcher is None:
        matcher = ""
    if not isinstance(matcher, str):
        raise SettingsError(f"{where}.matcher must be a string, not {_kind(matcher)}")
    pattern = None
    if matcher not in ("", "*"):
        try:
            pattern = re.compile(matcher)
        except re.error as exc:
            raise SettingsError(
                f"{where}.matcher {matcher!r} is not a valid regex: {exc}"
            ) from None
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise SettingsError(f"{where}.hooks must be a list, not {_kind(entries)}")
    out: list[HookCommand] = []
    for j, entry in enumerate(entries):
        at = f"{where}.hooks[{j}]"
        if not isinstance(entry, dict):
            raise SettingsError(f"{at} must be an object, not {_kind(entry)}")
        kind = entry.get("type", "command")
        if kind != "command":
            log.warning(
                "%s: %s has type %r; only command hooks run here, skipped", source, at, kind
            )
            continue
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise SettingsError(f"{at}.command must be a non-empty string")
        timeout = entry.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise SettingsError(
                f"{at}.timeout must be a positive number of seconds, not {timeout!r}"
            )
        out.append(HookCommand(event, matcher, command, timeout, source, pattern))
    return out


# -- running one hook ----------------------------------------------------------------------------


@attrs.frozen
class Verdict:
    """What one hook run said: a decision, its reason, contexts, or why it failed."""

    decision: Literal["deny", "ask", "allow"] | None = None
    reason: str | None = None
    contexts: tuple[str, ...] = ()
    failure: str | None = None


class _Started(trio.TaskStatus[trio.Process]):
    """Keeps the process `trio.run_process` started, so a timeout can kill its whole group."""

    process: trio.Process | None = None

    def started(self, value: trio.Process | None = None) -> None:
        self.process = value


async def _kill_group(process: trio.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _cancel_on_abort(abort: AbortSignal, scope: trio.CancelScope) -> None:
    await abort.wait()
    scope.cancel()


async def run_hook(
    hook: HookCommand,
    payload: Mapping[str, Any],
    *,
    cwd: Path,
    timeout: float,
    abort: AbortSignal,
) -> Verdict:
    """Run *hook* with *payload* on stdin and interpret what it did. Never raises for the hook."""
    workspace = str(cwd)
    env = {**os.environ, "DSH_PROJECT_DIR": workspace, "CLAUDE_PROJECT_DIR": workspace}
    stdin = (json.dumps(payload) + "\n").encode()
    started = _Started()
    completed: subprocess.CompletedProcess[bytes] | None = None
    error: OSError | None = None
    with trio.move_on_after(timeout) as deadline:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_abort, abort, deadline)
            try:
                completed = await trio.run_process(
                    ["/bin/sh", "-c", hook.command], stdin=stdin, capture_stdout=True,
                    capture_stderr=True, check=False, deliver_cancel=_kill_group,
                    task_status=started, cwd=cwd, env=env, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                error = exc
            nursery.cancel_scope.cancel()
    if completed is None and started.process is not None:
        await _kill_group(started.process)  # a timeout while a child still held a pipe open
    if error is not None:
        return Verdict(failure=f"{hook.describe()} could not start: {error}")
    if completed is None:
        if abort.aborted:
            return Verdict(failure=f"{hook.describe()} was killed: the call was aborted")
        return Verdict(failure=f"{hook.describe()} timed out after {timeout:g} s and was killed")
    stdout = completed.stdout.decode("utf-8", errors="replace")
    stderr = completed.stderr.decode("utf-8", errors="replace").strip()
    code = completed.returncode
    if code == 2:
        return Verdict(decision="deny", reason=stderr or None)
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        said = f": {_summary(stderr)}" if stderr else ""
        return Verdict(failure=f"{hook.describe()} {how}{said}")
    return interpret(hook, stdout)


def interpret(hook: HookCommand, stdout: str) -> Verdict:
    """The verdict of a hook that exited 0 (plain text stdout: no decision)."""
    text = stdout.strip()
    if not text.startswith("{"):
        return Verdict()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Verdict(failure=f"{hook.describe()} printed JSON that does not parse: {exc}")
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
    return text if len(text) <= _SUMMARY_MAX else text[:_SUMMARY_MAX] + "…"


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), repr(value))


# -- the plugin ----------------------------------------------------------------------------------


class HookCommandsPlugin:
    """Runs Claude Code ``PreToolUse`` / ``PostToolUse`` command hooks from settings files."""

    name = NAME

    def __init__(self) -> None:
        self.config = HookCommandsConfig()
        self.workspace = Path.cwd()
        self.hooks: dict[Event, tuple[HookCommand, ...]] = {event: () for event in EVENTS}
        # PreToolUse contexts waiting for their call's post-execute, by ToolExecution.token
        self._pending: dict[object, tuple[str, ...]] = {}

    @hookimpl
    def dsh_plugin_config(self) -> type[HookCommandsConfig]:
        return HookCommandsConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)
        self.workspace = host.workspace
        found: list[HookCommand] = []
        for source in self.config.settings:
            try:
                found.extend(load_settings(self.workspace / source, source))
            except SettingsError as exc:
                raise ConfigError(
                    f"settings file {source!r}: {exc}; fix it or remove it from the list",
                    path=host.config.source, plugin=NAME, key="settings",
                ) from None  # fmt: skip
        self.hooks = {event: tuple(h for h in found if h.event == event) for event in EVENTS}

    async def _run(
        self, hook: HookCommand, payload: Mapping[str, Any], abort: AbortSignal
    ) -> Verdict:
        timeout = hook.timeout if hook.timeout is not None else self.config.timeout_ms / 1000
        verdict = await run_hook(hook, payload, cwd=self.workspace, timeout=timeout, abort=abort)
        if verdict.failure is not None:
            action = "fails closed" if self.config.fail_closed else "ignored (fail_closed = false)"
            log.warning("%s; %s", verdict.failure, action)
        return verdict

    def _payload(self, event: Event, execution: ToolExecution) -> dict[str, Any]:
        return {
            "session_id": None,
            "hook_event_name": event,
            "tool_name": execution.name,
            "tool_input": thaw(execution.arguments),
            "tool_use_id": execution.call_id,
            "cwd": str(self.workspace),
        }

    def _failed(self, failure: str, what: str) -> str:
        return f"{failure}; {what} because [plugin.{NAME}] fail_closed is true"

    @hookimpl
    async def dsh_tool_pre_execute(self, execution: ToolExecution) -> Allow | Deny | Ask | None:
        """Run the matching PreToolUse hooks in order: the first deny wins, then ask, then allow."""
        hooks = [h for h in self.hooks["PreToolUse"] if h.matches(execution.name)]
        if not hooks:
            return None
        payload = self._payload("PreToolUse", execution)
        contexts: list[str] = []
        asks: list[str | None] = []
        allowed = False
        try:
            for hook in hooks:
                verdict = await self._run(hook, payload, execution.signal)
                contexts.extend(verdict.contexts)
                if execution.signal.aborted:
                    return None  # the pipeline ends the call as ABORTED_BEFORE_DISPATCH
                if verdict.failure is not None:
                    if self.config.fail_closed:
                        return Deny(self._failed(verdict.failure, "the call was denied"))
                elif verdict.decision == "deny":
                    return Deny(verdict.reason or "blocked by PreToolUse hook")
                elif verdict.decision == "ask":
                    asks.append(verdict.reason)
                elif verdict.decision == "allow":
                    allowed = True
        finally:
            if contexts:
                self._pending[execution.token] = tuple(contexts)
        if asks:
            return Ask("\n\n".join(r for r in asks if r) or None)
        return Allow() if allowed else None

    @hookimpl
    async def dsh_tool_post_execute(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Accept | Block:
        """Run the matching PostToolUse hooks: block the result, or add their contexts."""
        contexts = list(self._pending.pop(execution.token, ()))
        ran_tool = result.code not in ("DENIED", "ABORTED_BEFORE_DISPATCH")
        hooks = [h for h in self.hooks["PostToolUse"] if ran_tool and h.matches(execution.name)]
        if hooks:
            payload = {
                **self._payload("PostToolUse", execution),
                "tool_response": {"content": result.text, "is_error": result.is_error},
            }
            for hook in hooks:
                verdict = await self._run(hook, payload, execution.signal)
                if execution.signal.aborted:
                    break  # the pipeline turns the result into ABORTED
                contexts.extend(verdict.contexts)
                if verdict.failure is not None and self.config.fail_closed:
                    feedback = self._failed(verdict.failure, "the result was blocked")
                    return Block(feedback, additional_contexts=self._contexts(contexts))
                if verdict.failure is None and verdict.decision == "deny":
                    feedback = verdict.reason or "blocked by PostToolUse hook"
                    return Block(feedback, additional_contexts=self._contexts(contexts))
        decision = await call_next()
        if not contexts:
            return decision
        ours = self._contexts(contexts)
        return attrs.evolve(decision, additional_contexts=(*decision.additional_contexts, *ours))

    @hookimpl
    def dsh_tool_result(self, execution: ToolExecution) -> None:
        """Forget PreToolUse contexts of a call whose post-execute never ran (a pipeline failure)."""
        self._pending.pop(execution.token, None)

    @staticmethod
    def _contexts(texts: list[str]) -> tuple[HookContext, ...]:
        return tuple(HookContext(text, source=NAME) for text in texts)
