"""Every hook a dsh plugin can implement: the plugin author's reference.

A plugin is any object (usually a module) with functions marked ``@dsh_host.hookimpl`` whose names
are the hook names below. An implementation may accept any *subset* of a hook's arguments, by name.

Per-call hooks (``dsh_tool_*``) may be plain functions or ``async def``, called in pluggy's
order: ``tryfirst`` ones, then the most recently registered first, ``trylast`` ones last. Entry
points are registered in a fixed order (the ``enable`` list, else sorted names), never in the
order pip installed them.

Phases, in the order one call meets them::

    dsh_tool_pre_execute -> dsh_tool_approve (on Ask) -> dsh_tool_guard
        -> dsh_tool_execute (wrappers around the body) -> dsh_tool_post_execute
        -> dsh_tool_result (observers)

A plugin that raises in any of them never crashes the host: the call ends with a
``PLUGIN_FAILED`` error result that names the plugin, the hook and the exception, and
``result.decided_by`` names the plugin. So does one that does not answer in time: a pre-execute
link, a guard, an execute wrapper or a post-execute link has ``[host] hook_timeout`` seconds
(default 30) of its own time (not counting time in ``call_next``); approvers and observers have
their own bounds, below. A synchronous implementation must not block: it cannot be interrupted,
and one that runs past the bound is reported on stderr and fails its call.

A plugin can set ``self.dsh_idle_hooks = {"dsh_tool_post_execute", ...}`` in
`dsh_host_started` for hooks its configuration leaves idle: the host then never calls them.
Guides: ``docs/guides/plugin-authors.md``, ``pipeline.md``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from ._registry._markers import hookspec

if TYPE_CHECKING:
    from ._model._content import ToolExecutionResult
    from ._model._decisions import Accept, Allow, ApprovalOutcome, Ask, Block, Deny
    from ._model._values import ApprovalRequest, Scope, ToolExecution
    from ._model._views import CallView, ResultView
    from ._schema._tool import ToolDefinition

    Host: TypeAlias = Any  # `dsh_host.Host`, named, not imported (docs/architecture.md)
    Register = Callable[[ToolDefinition, Scope | None], Callable[[], None]]

__all__ = [
    "dsh_config_files", "dsh_host_started", "dsh_host_stopping", "dsh_path_denied", "dsh_plugin_config",
    "dsh_plugin_status", "dsh_present_call", "dsh_present_result", "dsh_register_tools",
    "dsh_tool_approve", "dsh_tool_execute", "dsh_tool_guard", "dsh_tool_post_execute",
    "dsh_tool_pre_execute", "dsh_tool_result",
]  # fmt: skip


@hookspec
def dsh_register_tools(register: Register) -> None:
    """Register this plugin's tools.

    Called once for every plugin, after its configuration was applied.

    Args:
        register: ``register(tool, scope=None)`` adds a `ToolDefinition` (from `define_tool` or
            `tool`) and returns a function that removes it. A name another plugin already
            registered in the same scope is an error naming both plugins.

    Example::

        @hookimpl
        def dsh_register_tools(register):
            register(read_file)
    """


@hookspec(firstresult=True)
def dsh_plugin_config() -> type | None:
    """Return the attrs class this plugin's ``[plugin.<name>]`` TOML table is structured into.

    Optional; first non-None result wins: implement it on your own plugin object only. The host
    structures the table with its cattrs converter (an unknown key, a wrong type or a missing
    value is a `ConfigError` naming the file, plugin and key; no table: the defaults). Read it
    with ``host.config_for(plugin)``, usually in `dsh_host_started`.

    Example::

        @attrs.frozen
        class Config:
            greeting: str = "hello"

        @hookimpl
        def dsh_plugin_config():
            return Config
    """


@hookspec
def dsh_config_files(host: Host) -> Iterable[str | os.PathLike[str]] | None:
    """Name the files this plugin reads because its configuration names them.

    **Chaining: each plugin's own files**, asked of each plugin once, after every plugin is
    configured and before any `dsh_host_started`. Return paths (absolute, or relative to
    ``host.workspace``), missing ones included, or ``None``. Name every file whose content
    decides what your plugin allows or runs: a policy file it imports, a settings file whose
    hooks it runs. What a config file refers to is part of the config:

    - when dsh found the config in the working directory, it starts only while each named
      file holds what it held when the user trusted the config (``dsh config trust`` records
      them, and prints them);
    - the sandbox keeps them read-only to every tool and command (``protect_config``).

    Read them with ``host.read_config_file(path)``, which gives the bytes the trust check
    read, not whatever the file holds a moment later. ``host.config_files`` lists what every
    plugin named. Must not raise (a `ConfigError` stops the host; another exception takes
    the plugin out).

    Example::

        @hookimpl
        def dsh_config_files(self, host):
            return [host.workspace / name for name in host.config_for(self).policy_files]
    """


@hookspec
def dsh_plugin_status() -> list[str] | None:
    """Describe what this plugin is doing now, for ``dsh plugins`` (and ``--json``).

    **Chaining: each plugin's own lines**, asked of each plugin separately, each time the host
    lists its plugins (after start-up). Return short lines of text (``"server git: running, 12
    tools"``, ``"server web: failed: ...; its stderr ends: ..."``) or ``None``. A plugin whose
    state can go wrong after it loaded (a mounted server that crashed, a database it cannot
    write) says so here, so that the one command users run to see what is installed also shows
    what is broken. Must be quick and must not raise (a raising implementation is shown as a
    status line saying so).

    Example::

        @hookimpl
        def dsh_plugin_status(self):
            return [f"cache: {len(self.cache)} entries"]
    """


@hookspec
def dsh_host_started(host: Host) -> None:
    """Called once for every plugin after all plugins are registered and configured.

    Args:
        host: the `Host`: ``host.config_for(self_or_module)`` reads your configuration,
            ``host.registry`` takes guards, ``host.services`` long-lived tasks (`HostServices`).

    Example::

        class GreeterPlugin:
            name = "greeter"

            @hookimpl
            def dsh_host_started(self, host):
                self.config = host.config_for(self)  # state lives on the plugin object
    """


@hookspec
def dsh_host_stopping(host: Host) -> Awaitable[None] | None:
    """Called once for every plugin when the host closes (`Host.aclose`, the end of
    ``async with dsh_host.open_host() as host``).

    Release what `dsh_host_started` acquired: commit queued records, stop worker threads, end
    child processes and wait for them. Plain or ``async def``; each implementation is isolated
    (one that raises is logged and stops no other). No call runs after it.

    Example::

        class SpoolPlugin:
            @hookimpl
            async def dsh_host_stopping(self, host):
                await trio.to_thread.run_sync(self.spool.close)
    """


@hookspec(firstresult=True)
def dsh_tool_pre_execute(
    execution: ToolExecution, call_next: Callable[[], Awaitable[Allow | Deny | Ask]]
) -> Allow | Deny | Ask | Awaitable[Allow | Deny | Ask | None] | None:
    """Decide whether a call may run: `Allow`, `Deny` (with a reason), or `Ask` a human.

    Runs for every call the model made, before its arguments are validated (so policy sees
    malformed calls too). ``execution.arguments`` is a deep-frozen JSON snapshot.

    **Chaining: firstresult.** The first implementation in call order that returns a decision wins;
    return ``None`` to abstain. With no decision the call is allowed. An implementation that also
    accepts ``call_next`` is a *waterfall link*: ``await call_next()`` runs the rest of the chain
    (at most once) and returns its decision, which the link may return as is or replace. A plain
    (non-``async``) link with nothing to add returns ``call_next()`` unawaited (a tail call): the
    links after it decide, at no cost of a coroutine. In every chain, ``call_next()`` returns an
    awaitable, not necessarily a coroutine.

    ``Deny`` and an unanswered or rejected ``Ask`` end the call with a ``DENIED`` error result
    (post-execute still sees it); ``result.decided_by`` names the plugin that decided, and the
    decision's ``detail`` becomes ``result.decision_detail``. A link that returns the downstream
    decision unchanged leaves it credited downstream. An ``Ask`` for a tool the call's scope does
    not have is never put to an approver: the call ends ``UNKNOWN_TOOL``.

    **How decisions combine:** deny > ask > allow, whatever the plugin order; a link returns the
    stricter of its own decision and the downstream one. An early ``Allow`` skips the plugins
    after it, so never return one from a ``tryfirst`` implementation: a rule that must hold is
    checked again in a guard (`dsh_tool_guard`, after any allow), which no plugin can undo. An
    ask is honoured only when the call was put to the approvers.

    Args:
        execution: the call (``name``, ``arguments``, ``call_id``, ``scope``, ``signal``).
        call_next: only for waterfall links; takes no arguments.

    Example::

        @hookimpl
        def dsh_tool_pre_execute(execution):
            if execution.name == "bash" and "rm -rf" in execution.arguments.get("command", ""):
                return Deny("rm -rf is not allowed here")
            return None
    """


@hookspec(firstresult=True)
def dsh_tool_approve(
    request: ApprovalRequest,
) -> ApprovalOutcome | Awaitable[ApprovalOutcome | None] | None:
    """Answer an `Ask`: may this call run?

    **Chaining: firstresult.** The first answer that is not ``None`` wins. If nobody answers, the
    outcome is ``unavailable`` and the call is denied (fail closed). Only
    ``ApprovalOutcome.ALLOWED_ONCE`` lets the call go on to the guards; ``rejected``,
    ``cancelled`` and ``unavailable`` deny it. When an approver rejects, ``decided_by`` names
    the approver; when nobody answers, it names the plugin that asked.

    An approver has ``[host] approval_timeout`` seconds (default 900) to answer, since it usually
    waits for a person; past that the call ends ``PLUGIN_FAILED``, naming it. An abort of the
    call cuts the asking short (``cancelled``, ``ABORTED_BEFORE_DISPATCH``), heeded or not.

    Args:
        request: the call (``request.execution``), the asker's ``reason``, and ``asked_by``.
            Honour ``request.signal``: return ``cancelled`` if it aborts while you wait.

    Example::

        @hookimpl
        def dsh_tool_approve(request):
            if request.tool == "read_file":
                return ApprovalOutcome.ALLOWED_ONCE
            return None
    """


@hookspec
def dsh_tool_guard(execution: ToolExecution) -> str | Awaitable[str | None] | None:
    """A last, monotonic check after the call was allowed: return a reason to deny it.

    **Chaining: every guard, first reason wins.** Registry guards (``registry.add_guard``) run
    first. Guards cannot allow anything, so no ordering of plugins can undo a guard's denial:
    this is where policy that must not depend on plugin order goes (``permissions`` enforces its
    deny and ask rules here as well as in pre-execute, ``hook_commands`` a ``PreToolUse`` hook's
    deny). They run after *every* allowed call, allowed by a pre-execute plugin or once by an
    approver. A denial is a ``DENIED`` result with ``decided_by`` naming the guard's plugin.
    ``execution.approved_by`` names the approver that allowed the call once, or is ``None`` when
    no approver did (a plugin's ``Allow`` never sets it): a rule a person must answer holds
    unless it is set.

    Example::

        @hookimpl
        def dsh_tool_guard(execution):
            if len(json.dumps(execution.arguments)) > 100_000:
                return "arguments larger than 100 kB"
            return None
    """


@hookspec
def dsh_tool_execute(
    execution: ToolExecution, call_next: Callable[..., Awaitable[ToolExecutionResult]]
) -> ToolExecutionResult | Awaitable[ToolExecutionResult]:
    """Wrap the tool body: time it out, sandbox it, retry it, measure it, or answer instead of it.

    **Chaining: wrapper order.** The first implementation in call order is the outermost.
    ``await call_next()`` runs the inner wrappers and the body and returns their result (never
    raises for a tool failure); call it once, several times (retries) or not at all
    (short-circuit), or return it unawaited (a tail call, as in `dsh_tool_pre_execute`:
    ``timeout`` does this for a tool with no budget). Return a `ToolExecutionResult`.

    ``await call_next(signal=deadline)`` installs a replacement `AbortSignal` for the delegated
    lifetime: the body's signal is fused from the caller's and yours, so aborting yours cancels
    the body without aborting the caller. A body stopped by your signal comes back as
    ``ABORTED``; replace it with your own error (the ``timeout`` plugin returns ``TOOL_TIMEOUT``).
    Raising here is a pipeline failure: the call ends ``PLUGIN_FAILED`` and post-execute is skipped.

    Example::

        @hookimpl
        async def dsh_tool_execute(execution, call_next):
            started = time.perf_counter()
            result = await call_next()
            metrics.observe(execution.name, time.perf_counter() - started)
            return result
    """


@hookspec(firstresult=True)
def dsh_tool_post_execute(
    execution: ToolExecution,
    result: ToolExecutionResult,
    call_next: Callable[[], Awaitable[Accept | Block]],
) -> Accept | Block | Awaitable[Accept | Block | None] | None:
    """Inspect a result: keep it (`Accept`), replace its content, add context, or `Block` it.

    Runs for successes, tool failures, unknown tools and denials; not for pipeline failures.

    **Chaining: firstresult, like `dsh_tool_pre_execute`**, including ``call_next`` waterfall
    links: a link that wants to add a context *and* let the others decide does
    ``decision = await call_next()`` and returns it with its own context added.
    ``Accept(content=...)`` replaces the content; ``Block(feedback)`` turns the result into a
    ``BLOCKED`` error whose content is the feedback, dropping earlier contexts. Contexts are kept
    in order: the body's, the wrappers', then post-execute's.

    Example::

        @hookimpl
        def dsh_tool_post_execute(execution, result):
            if "BEGIN PRIVATE KEY" in result.text:
                return Block("the output contained a private key; it was withheld")
            return None
    """


@hookspec
def dsh_tool_result(
    execution: ToolExecution, result: ToolExecutionResult
) -> Awaitable[None] | None:
    """Observe the final, frozen result of every call (audit, metrics, logs).

    **Chaining: every observer.** Exactly one notification per call, with the result object the
    caller receives (a call whose trio caller is cancelled too: ``ABORTED_BEFORE_DISPATCH`` or
    ``ABORTED``, shielded). An observer that raises, or hangs past the host's observer timeout,
    is logged and stops no other observer; it can never change the result. How the call was
    approved is ``execution.approval`` and ``execution.approver``, never guessed from the result.

    Example::

        @hookimpl
        def dsh_tool_result(execution, result):
            log.info("%s %s -> %s", execution.call_id, execution.name, result.code or "ok")
    """


@hookspec(firstresult=True)
def dsh_path_denied(execution: ToolExecution, path: str, access: str) -> str | None:
    """Say whether policy withholds one file or directory from a tool that is already running.

    A pre-execute hook sees the paths a call names; a search (``grep .``, ``glob **``) meets
    files no argument names. Tools that read or write files they discover call this (through
    `Host.path_denied`) for each one and leave out, counted, every path that gets a reason. It
    must be **synchronous, fast and pure**: it is called from worker threads, once per file a
    search meets. A plugin whose configuration withholds no path lists it in ``dsh_idle_hooks``
    (it is never asked then; while all are idle, the search tools walk no tree for policy).

    **Chaining: firstresult.** The first reason wins; ``None`` from every plugin lets it through.

    Args:
        execution: the call that is running.
        path: the absolute, real path (symlinks resolved) of the file or directory.
        access: ``"read"`` or ``"write"``.

    Returns:
        A reason (``"denied by rule Read(./secrets/**) in dsh.toml"``), or ``None``.

    Example::

        @hookimpl
        def dsh_path_denied(execution, path, access):
            if access == "read" and "/secrets/" in path:
                return "secrets are off limits"
            return None
    """


@hookspec(firstresult=True)
def dsh_present_call(tool: ToolDefinition, args: Any) -> CallView | None:
    """Present a pending call as a card: `GenericCallView`, `TerminalCallView` or `DiffCallView`.

    **Chaining: firstresult.** The first card returned wins; then the tool's own
    ``present_call``; then a generic card (the tool name and the raw arguments). A presenter that
    raises, or returns something that is not a call view, is skipped. Must be pure: UIs call it
    while the call streams in and again when a session is replayed.

    Args:
        tool: the `ToolDefinition` being called.
        args: the arguments as the model sent them (not yet validated; may be malformed).

    Example::

        @hookimpl
        def dsh_present_call(tool, args):
            if tool.name == "deploy":
                return TerminalCallView(title=f"deploy {args.get('env', '?')}")
            return None
    """


@hookspec(firstresult=True)
def dsh_present_result(
    tool: ToolDefinition, args: Any, result: ToolExecutionResult
) -> ResultView | None:
    """Present a finished call as a card: a generic, terminal, diff, read or search view.

    **Chaining: firstresult**, then the tool's own ``present_result``, then a generic card with
    the result's content. Raising presenters are skipped, as for `dsh_present_call`.

    Args:
        tool: the `ToolDefinition` that ran.
        args: the arguments as the model sent them.
        result: the final, frozen `ToolExecutionResult`.

    Example::

        @hookimpl
        def dsh_present_result(tool, args, result):
            if tool.name == "deploy" and not result.is_error:
                return GenericResultView(title="deployed", content=result.content)
            return None
    """
