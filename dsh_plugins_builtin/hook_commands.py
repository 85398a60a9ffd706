"""``hook_commands``: run the command hooks of Claude Code ``settings.json`` files.

``PreToolUse`` hooks become a `dsh_tool_pre_execute` waterfall link (deny, ask or allow a call);
``PostToolUse`` hooks become a `dsh_tool_post_execute` waterfall link (block a result or add
context for the model). Each hook reads Claude Code's payload as JSON on stdin
(see `._hooks._payload`: ``tool_name`` ``Bash``/``Read``/... and Claude Code's ``tool_input`` keys
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
tool could rewrite it (see `._hooks._launch`). Each run is a process tree bounded by a subreaper
(see `._hooks._process`): every descendant is killed when the hook ends. During a dry run no hook
runs; the decision's detail says which would have.

Precedence (as in Claude Code, whatever the plugin order): a hook's ``deny`` is final and a
hook's ``ask`` is put to a person (or an approver plugin). Both are checked again in this
plugin's `dsh_tool_guard`, which no other plugin can undo: a call another plugin allowed before
the hooks ran has its hooks run there. A hook's ``allow`` is one more allow: it never beats a
deny or an ask from a rule or another plugin (the stricter decision of the hooks and of the
plugins after this one wins).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from dsh_host import (
    AbortSignal,
    Accept,
    Allow,
    Ask,
    Block,
    ConfigError,
    Deny,
    Host,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
    printable,
)
from dsh_plugins_builtin._hooks._settings import (
    EVENTS,
    NAME,
    Event,
    HookCommand,
    SettingsError,
    load_settings,
)
from dsh_plugins_builtin._rules._final import MISSING, Notes, hook_final

if TYPE_CHECKING:  # what running hooks needs is imported once there are hooks (issue 27)
    from dsh_plugins_builtin._hooks._process import HookRunner
    from dsh_plugins_builtin._hooks._verdict import Verdict
    from dsh_plugins_builtin._sandbox._fence import SandboxPolicy

__all__ = ["HookCommand", "HookCommandsConfig", "HookCommandsPlugin", "load_settings"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")

_MATCHED_KEPT = 1_024  # tools (or unknown names) whose matching hooks are remembered


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
    def dsh_config_files(self, host: Host) -> list[Path]:
        """The settings files: their hooks run, so they are part of the config (its trust)."""
        return [host.workspace / source for source in host.config_for(self).settings]

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        """Read the settings files; resolve and check every hook's executable and scripts."""
        self.config = host.config_for(self)
        self.workspace = host.workspace
        self._host = host
        found: list[HookCommand] = []
        for source in self.config.settings:
            try:
                found.extend(load_settings(self.workspace / source, source, host.read_config_file))
            except SettingsError as exc:
                raise ConfigError(
                    f"settings file {source!r}: {exc}; fix it or remove it from the list",
                    path=host.config.source, plugin=NAME, key="settings",
                ) from None  # fmt: skip
        if found:
            from dsh_plugins_builtin._hooks._plan import plan_hooks, warn_exposed_settings

            planned = plan_hooks(host, found, self.workspace, self.interpreter)
            found = planned.hooks
            self.policy, self.env = planned.policy, planned.env
            self.interpreter, self.runner = planned.interpreter, planned.runner
            warn_exposed_settings(self.policy, self.config.settings, self.workspace)
        self.hooks = {event: tuple(h for h in found if h.event == event) for event in EVENTS}
        self._matched.clear()
        # No hooks configured for an event: its per-call hooks are never called (no cost).
        idle = set()
        if not self.hooks["PreToolUse"]:
            idle |= {"dsh_tool_pre_execute", "dsh_tool_result", "dsh_tool_guard"}
            if not self.hooks["PostToolUse"]:
                idle.add("dsh_tool_post_execute")
        self.dsh_idle_hooks = frozenset(idle)

    async def _run(
        self, hook: HookCommand, payload: Mapping[str, Any], abort: AbortSignal
    ) -> Verdict:
        from dsh_plugins_builtin._hooks._verdict import run_hook
        from dsh_plugins_builtin._sandbox._fence import RootReplaced, check_pinned

        if self.policy is not None:
            try:
                check_pinned(self.policy)  # hooks run in the workspace, by paths inside it
            except RootReplaced as exc:
                from dsh_plugins_builtin._hooks._verdict import Verdict

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
            log.warning("%s; %s", printable(verdict.failure), action)  # (a hook's stderr)
        return verdict

    def _matching(
        self, event: Event, execution: ToolExecution
    ) -> tuple[ToolDefinition | None, tuple[HookCommand, ...]]:
        """The call's tool and the *event* hooks whose matcher names it.

        Matched once per tool definition (or unknown tool name), then looked up.
        """
        host = self._host
        tool = None if host is None else host.registry.get(execution.name, execution.scope)
        key = (event, execution.name if tool is None else id(tool))
        known = self._matched.get(key)
        if known is not None and known[0] is tool:
            return tool, known[1]
        from dsh_plugins_builtin._hooks._payload import hook_names

        names = hook_names(tool, execution.name)
        hooks = tuple(h for h in self.hooks[event] if h.matches(*names))
        if len(self._matched) >= _MATCHED_KEPT:  # unknown names come from the model: bounded
            self._matched.clear()
        self._matched[key] = (tool, hooks)
        return tool, hooks

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
            from dsh_plugins_builtin._hooks._verdict import would_run

            detail = would_run(list(hooks))
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
        from dsh_plugins_builtin._hooks._payload import call_payload
        from dsh_plugins_builtin._hooks._verdict import failed

        payload = call_payload("PreToolUse", execution, tool, self.workspace)
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
                        return Deny(failed(verdict.failure, "the call was denied"))
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
        from dsh_plugins_builtin._hooks._payload import call_payload, tool_response
        from dsh_plugins_builtin._hooks._verdict import contexts_of, failed

        if hooks and not execution.dry_run:
            payload = {
                **call_payload("PostToolUse", execution, tool, self.workspace),
                "tool_response": tool_response(tool, execution.arguments, result, self.workspace),
            }
            for hook in hooks:
                verdict = await self._run(hook, payload, execution.signal)
                if execution.signal.aborted:
                    break  # the pipeline turns the result into ABORTED
                contexts.extend(verdict.contexts)
                if verdict.failure is not None and self.config.fail_closed:
                    feedback = failed(verdict.failure, "the result was blocked")
                    return Block(feedback, additional_contexts=contexts_of(contexts))
                if verdict.failure is None and verdict.decision == "deny":
                    feedback = verdict.reason or "blocked by PostToolUse hook"
                    return Block(feedback, additional_contexts=contexts_of(contexts))
        decision = await call_next()
        if not contexts:
            return decision
        ours = contexts_of(contexts)
        return attrs.evolve(decision, additional_contexts=(*decision.additional_contexts, *ours))

    @hookimpl
    def dsh_tool_result(self, execution: ToolExecution) -> None:
        """Forget PreToolUse contexts of a call whose post-execute never ran (a pipeline failure)."""
        self._pending.pop(execution.token, None)
