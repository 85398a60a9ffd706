"""``hook_commands``: run the command hooks of Claude Code ``settings.json`` files.

``PreToolUse`` hooks become a `dsh_tool_pre_execute` waterfall link (deny, ask or allow a call);
``PostToolUse`` hooks become a `dsh_tool_post_execute` waterfall link (block a result or add
context for the model). Each hook reads Claude Code's payload as JSON on stdin
(see `_hook_payload`: ``tool_name`` ``Bash``/``Read``/... and Claude Code's ``tool_input`` keys
for every tool that declares a Claude Code name); matchers match either spelling of the name.

Outcomes of one hook run:

* exit 2: deny (pre) or block (post); the reason is the hook's stderr;
* exit 0 with stdout starting with ``{``: Claude Code's JSON output (``decision``,
  ``hookSpecificOutput.permissionDecision``, ``continue``, ``additionalContext``);
* exit 0 with other stdout: no decision;
* anything else (another exit code, death by a signal, a timeout, output past the cap, JSON
  that does not parse, a command that cannot start) is a *failure*: logged, and with
  ``fail_closed`` (the default) it denies the call or blocks the result. Claude Code instead
  treats exit 1 and other codes as a non-blocking error shown to the user: ``fail_closed =
  false`` gives that behaviour.

Settings files are read once, when the host starts; one that is missing or malformed is a
`ConfigError` (fail closed at load), and so is a hook whose executable or script lies where a
tool could rewrite it (see `_hook_launch`). Each run is a process tree bounded by a subreaper
(see `_hook_process`): every descendant is killed when the hook ends. During a dry run no hook
runs; the decision's detail says which would have.

Precedence (as in Claude Code, whatever the plugin order): a hook's ``deny`` is final and a
hook's ``ask`` is put to a person (or an approver plugin). Both are checked again in this
plugin's `dsh_tool_guard`, which no other plugin can undo: a call another plugin allowed before
the hooks ran has its hooks run there. A hook's ``allow`` is one more allow: it never beats a
deny or an ask from a rule or another plugin (the stricter decision of the hooks and of the
plugins after this one wins).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

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
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
)
from dsh_plugins_builtin._hooks._launch import (
    HookRefused,
    Launch,
    exposure_of,
    plan_launch,
    safe_path_env,
    sandbox_policy,
)
from dsh_plugins_builtin._hooks._payload import hook_names, tool_input, tool_response
from dsh_plugins_builtin._hooks._process import HookRunner, TreeRun, shared_runner
from dsh_plugins_builtin._rules._final import MISSING, Notes, hook_final
from dsh_plugins_builtin._sandbox._fence import (
    RootReplaced,
    SandboxPolicy,
    check_pinned,
)

__all__ = ["HookCommand", "HookCommandsConfig", "HookCommandsPlugin", "load_settings"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")

NAME = "hook_commands"
Event: TypeAlias = Literal["PreToolUse", "PostToolUse"]
EVENTS: tuple[Event, ...] = ("PreToolUse", "PostToolUse")
_SUMMARY_MAX = 500  # characters of a failing hook's stderr quoted in a reason
_MATCHED_KEPT = 1_024  # tools (or unknown names) whose matching hooks are remembered
# hookSpecificOutput keys that rewrite a call's input or output: not supported, so a failure
_REWRITES = ("updatedInput", "updatedMCPToolOutput", "updatedToolOutput")


@attrs.frozen
class HookCommandsConfig:
    """The ``[plugin.hook_commands]`` table.

    Attributes:
        settings: Claude Code settings files (JSON, with a ``hooks`` key), relative to the
            workspace; their hooks run in list order. Empty: the plugin does nothing.
        timeout_ms: how long a hook may run when it sets no ``timeout`` (seconds) of its own.
        fail_closed: a hook that fails (exits 1 or another code but 0 and 2, times out, is
            killed, prints too much or malformed JSON) denies the call or blocks the result;
            ``false`` logs the failure and ignores the hook (Claude Code's behaviour).
        max_output_bytes: the cap on each of a hook's stdout and stderr; more is a failure.
    """

    settings: tuple[str, ...] = ()
    timeout_ms: int = attrs.field(default=60_000, validator=attrs.validators.gt(0))
    fail_closed: bool = True
    max_output_bytes: int = attrs.field(default=1_000_000, validator=attrs.validators.gt(0))


@attrs.frozen
class HookCommand:
    """One ``{"type": "command"}`` hook of one matcher group of one settings file."""

    event: Event
    matcher: str
    command: str
    timeout: float | None  # seconds; None: the plugin's timeout_ms
    source: str  # the settings file, as configured
    pattern: re.Pattern[str] | None = attrs.field(default=None, eq=False)  # None: every tool
    where: str = ""  # hooks.PreToolUse[0].hooks[1]
    launch: Launch | None = attrs.field(default=None, eq=False)  # set when the host starts

    def matches(self, *names: str) -> bool:
        """Whether this hook runs for a tool called any of *names* (dsh's, Claude Code's):
        its matcher regex matches one whole name."""
        return self.pattern is None or any(self.pattern.fullmatch(n) for n in names)

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
        if "\0" in command:
            raise SettingsError(f"{at}.command must not contain a NUL character")
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
        out.append(HookCommand(event, matcher, command, timeout, source, pattern, at))
    return out


# -- running one hook ----------------------------------------------------------------------------


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
        self.env: dict[str, str] = {}
        self.interpreter = os.path.realpath(sys.executable)
        self._host: Host | None = None
        self.policy: SandboxPolicy | None = None
        self.runner: HookRunner | None = None
        # PreToolUse contexts waiting for their call's post-execute, by ToolExecution.token
        self._pending: dict[object, tuple[str, ...]] = {}
        self.dsh_idle_hooks: frozenset[str] = frozenset()
        self._decided = Notes()  # PreToolUse decision per call, for the guard
        # (event, tool definition by id or unknown tool name) -> (the tool, the hooks it matches)
        self._matched: dict[tuple[Event, object], tuple[object, tuple[HookCommand, ...]]] = {}

    @hookimpl
    def dsh_plugin_config(self) -> type[HookCommandsConfig]:
        return HookCommandsConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Read the settings files; resolve and check every hook's executable and scripts."""
        self.config = host.config_for(self)
        self.workspace = host.workspace
        self._host = host
        found: list[HookCommand] = []
        for source in self.config.settings:
            try:
                found.extend(load_settings(self.workspace / source, source))
            except SettingsError as exc:
                raise ConfigError(
                    f"settings file {source!r}: {exc}; fix it or remove it from the list",
                    path=host.config.source, plugin=NAME, key="settings",
                ) from None  # fmt: skip
        if found:
            found = self._plan(host, found)
            self._warn_exposed_settings()
        self.hooks = {event: tuple(h for h in found if h.event == event) for event in EVENTS}
        self._matched.clear()
        # No hooks configured for an event: its per-call hooks are never called (no cost).
        idle = set()
        if not self.hooks["PreToolUse"]:
            idle |= {"dsh_tool_pre_execute", "dsh_tool_result", "dsh_tool_guard"}
            if not self.hooks["PostToolUse"]:
                idle.add("dsh_tool_post_execute")
        self.dsh_idle_hooks = frozenset(idle)

    def _plan(self, host: Host, hooks: list[HookCommand]) -> list[HookCommand]:
        self.policy = sandbox_policy(host)
        exposure = exposure_of(self.policy)
        workspace = str(self.workspace)
        env = {**os.environ, "DSH_PROJECT_DIR": workspace, "CLAUDE_PROJECT_DIR": workspace}
        env["PATH"] = safe_path_env(env.get("PATH", os.defpath), exposure)
        self.env = env
        try:
            shell = plan_launch("/bin/sh", cwd=workspace, env=env, exposure=exposure, shell="")
            runner = plan_launch(
                self.interpreter, cwd=workspace, env=env, exposure=exposure, shell=""
            )
        except HookRefused as exc:
            raise ConfigError(
                f"cannot run hooks safely: the shell or the Python interpreter that runs them "
                f"is exposed: {exc}",
                path=host.config.source, plugin=NAME, key="settings",
            ) from None  # fmt: skip
        self.interpreter = runner.argv[0]
        planned = []
        for hook in hooks:
            try:
                launch = plan_launch(
                    hook.command, cwd=workspace, env=env, exposure=exposure, shell=shell.argv[0]
                )
            except HookRefused as exc:
                raise ConfigError(
                    f"settings file {hook.source!r}: {hook.event} hook {hook.command!r} "
                    f"({hook.where}) is refused: {exc}",
                    path=host.config.source, plugin=NAME, key="settings",
                ) from None  # fmt: skip
            planned.append(attrs.evolve(hook, launch=launch))
        try:
            self.runner = shared_runner(self.interpreter)
        except OSError as exc:
            raise ConfigError(
                f"cannot start the process that runs hooks ({self.interpreter}): {exc}",
                path=host.config.source, plugin=NAME, key="settings",
            ) from None  # fmt: skip
        return planned

    def _warn_exposed_settings(self) -> None:
        exposure = exposure_of(self.policy)
        for source in self.config.settings:
            path = os.path.realpath(self.workspace / source)
            if exposure.exposed(path):
                log.warning(
                    "settings file %r lies in a writable root of the sandbox (%s) and is not "
                    "protected: a tool could rewrite it and change the hooks of the next run; "
                    "keep it under .claude/ or outside the writable roots",
                    source, path,
                )  # fmt: skip

    async def _run(
        self, hook: HookCommand, payload: Mapping[str, Any], abort: AbortSignal
    ) -> Verdict:
        if self.policy is not None:
            try:
                check_pinned(self.policy)  # hooks run in the workspace, by paths inside it
            except RootReplaced as exc:
                return Verdict(decision="deny", reason=f"{hook.describe()} was not run: {exc}")
        timeout = hook.timeout if hook.timeout is not None else self.config.timeout_ms / 1000
        assert self.runner is not None, "the runner starts with the host when there are hooks"
        verdict = await run_hook(
            hook, payload, runner=self.runner, cwd=self.workspace, env=self.env, timeout=timeout,
            abort=abort,
            max_output_bytes=self.config.max_output_bytes,
        )  # fmt: skip
        if verdict.failure is not None:
            action = "fails closed" if self.config.fail_closed else "ignored (fail_closed = false)"
            log.warning("%s; %s", verdict.failure, action)
        return verdict

    def _tool(self, execution: ToolExecution) -> ToolDefinition | None:
        if self._host is None:
            return None
        return self._host.registry.get(execution.name, execution.scope)

    def _matching(
        self, event: Event, execution: ToolExecution
    ) -> tuple[ToolDefinition | None, tuple[HookCommand, ...]]:
        """The call's tool and the *event* hooks whose matcher names it.

        Matched once per tool definition (or unknown tool name), then looked up.
        """
        tool = self._tool(execution)
        key = (event, execution.name if tool is None else id(tool))
        known = self._matched.get(key)
        if known is not None and known[0] is tool:
            return tool, known[1]
        names = hook_names(tool, execution.name)
        hooks = tuple(h for h in self.hooks[event] if h.matches(*names))
        if len(self._matched) >= _MATCHED_KEPT:  # unknown names come from the model: bounded
            self._matched.clear()
        self._matched[key] = (tool, hooks)
        return tool, hooks

    def _payload(
        self, event: Event, execution: ToolExecution, tool: ToolDefinition | None
    ) -> dict[str, Any]:
        return {
            "session_id": None,
            "transcript_path": None,
            "cwd": str(self.workspace),
            "permission_mode": "default",
            "hook_event_name": event,
            "tool_name": hook_names(tool, execution.name)[0],
            "tool_input": tool_input(tool, execution.arguments, self.workspace),
            "tool_use_id": execution.call_id,
        }

    def _failed(self, failure: str, what: str) -> str:
        return f"{failure}; {what} because [plugin.{NAME}] fail_closed is true"

    @staticmethod
    def _would_run(hooks: list[HookCommand]) -> str:
        ran = "; ".join(f"would run hook {h.command!r} from {h.source}" for h in hooks)
        return f"{ran} (not run: dry run)"

    @hookimpl
    def dsh_tool_pre_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[Allow | Deny | Ask]]
    ) -> Awaitable[Allow | Deny | Ask | None] | None:
        """Run the matching PreToolUse hooks in order: the first deny wins, then ask, then allow.

        A call no hook matches is answered at once (abstains), with no coroutine. In a dry run
        no hook runs: the downstream decision is returned, an allow carrying "would run hook
        ..." as its detail.
        """
        tool, hooks = self._matching("PreToolUse", execution)
        if not hooks:
            return None
        return self._pre(execution, tool, hooks, call_next)

    async def _pre(
        self,
        execution: ToolExecution,
        tool: ToolDefinition | None,
        hooks: tuple[HookCommand, ...],
        call_next: Callable[[], Awaitable[Allow | Deny | Ask]],
    ) -> Allow | Deny | Ask | None:
        if execution.dry_run:
            decision = await call_next()
            if not isinstance(decision, Allow):
                return decision
            detail = self._would_run(list(hooks))
            if decision.detail:
                detail = f"{detail}; then {decision.detail}"
            return Allow(detail=detail)
        own = await self._hooks_decide(execution, tool, hooks)
        self._decided.note(execution.token, own)
        if type(own) is Allow:  # one more allow: the stricter downstream decision wins
            downstream = await call_next()
            return own if type(downstream) is Allow else downstream
        return own

    async def _hooks_decide(
        self, execution: ToolExecution, tool: ToolDefinition | None, hooks: tuple[HookCommand, ...]
    ) -> Allow | Deny | Ask | None:
        payload = self._payload("PreToolUse", execution, tool)
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
    def dsh_tool_guard(self, execution: ToolExecution) -> Awaitable[str | None] | str | None:
        """A hook's deny (or unanswered ask) again, after every plugin: final whoever allowed.

        A call whose PreToolUse hooks did not run (another plugin allowed it first) has them
        run here."""
        asked = execution.approved_by is not None
        decided = self._decided.take(execution.token)
        if execution.dry_run:
            return None
        if decided is MISSING:
            tool, hooks = self._matching("PreToolUse", execution)
            if not hooks:
                return None
            return self._guard_late(execution, tool, hooks, asked)
        return hook_final(decided, asked, self._host, NAME)

    async def _guard_late(
        self,
        execution: ToolExecution,
        tool: ToolDefinition | None,
        hooks: tuple[HookCommand, ...],
        asked: bool,
    ) -> str | None:
        decision = await self._hooks_decide(execution, tool, hooks)
        return hook_final(decision, asked, self._host, NAME)

    @hookimpl
    def dsh_tool_post_execute(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Awaitable[Accept | Block]:
        """Run the matching PostToolUse hooks: block the result, or add their contexts.

        A call with no hook to run and no PreToolUse context waiting is handed on as it is.
        """
        contexts = list(self._pending.pop(execution.token, ()))
        ran_tool = result.code not in ("DENIED", "ABORTED_BEFORE_DISPATCH")
        tool, hooks = self._matching("PostToolUse", execution) if ran_tool else (None, ())
        if not hooks and not contexts:
            return call_next()
        return self._post(execution, result, tool, hooks, contexts, call_next)

    async def _post(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        tool: ToolDefinition | None,
        hooks: tuple[HookCommand, ...],
        contexts: list[str],
        call_next: Callable[[], Awaitable[Accept | Block]],
    ) -> Accept | Block:
        if hooks and not execution.dry_run:
            payload = {
                **self._payload("PostToolUse", execution, tool),
                "tool_response": tool_response(tool, execution.arguments, result, self.workspace),
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
