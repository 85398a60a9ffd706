"""``audit``: record every tool call in an SQLite database, and ``dsh audit`` to read it back.

A `dsh_tool_result` observer: one row per call, whatever its outcome (successes, denials,
timeouts, plugin failures). Secrets in the arguments are redacted before anything is written:
the value of every key whose name contains ``key``, ``token``, ``secret``, ``password``,
``passwd``, ``auth`` or ``credential`` (any case, at any depth) becomes ``"[REDACTED]"``.

Rows go through `~dsh_plugins_builtin._audit._writer.AuditWriter`: a bounded queue and one writer
thread that builds them and commits them in batches (group commit), in WAL journal mode. With
``durability = "async"`` (the default) a call returns once its row is queued: the observer
appends it under an uncontended lock and returns nothing to await (no thread hop); the writer
commits it within about 10 ms, and whatever is queued is committed before the trio run ends, on
`close`, and at interpreter exit. A process killed without running its exit handlers
(``kill -9``) loses the rows still queued. With ``"sync"`` a call returns once its row is
committed, so every returned call is on record, at about 20 times the per-call cost of the
rest of the pipeline; that is why ``"async"`` became the default. A full queue makes calls wait;
no row is dropped for want of room. A
database that cannot be written is reported once per kind of failure; with ``required = true``
calls are refused (``DENIED``, decided by ``audit``) while it fails.

``duration_ms`` is measured from the moment the call reached pre-execute (a ``tryfirst``
`dsh_tool_pre_execute` that abstains) to its result, on the trio clock; it is empty for calls
that never reached pre-execute (arguments that are not JSON, a caller that had already aborted).

The database defaults to the user's state directory. A location inside a writable root of the
sandbox policy is refused at start (a tool could swap it for a symbolic link, or rewrite the
record), unless it lies under one of the sandbox's protected paths.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from dsh_host import (
    Allow,
    ApprovalOutcome,
    Ask,
    ConfigError,
    Deny,
    Host,
    ToolExecution,
    ToolExecutionResult,
    hookimpl,
)

from ._audit._writer import AuditWriter, redact
from ._common._canonical import remembered
from ._common._dirs import audit_path_in, user_data_path, user_state_path

if TYPE_CHECKING:  # loaded with a `url` only (`_postgres_store`)
    from ._audit._postgres import PostgresStore

__all__ = [
    "MAX_LAST",  # noqa: F822  (module `__getattr__`)
    "AuditConfig",
    "AuditPlugin",
    "audit_command",
    "default_audit_path",
    "legacy_audit_path",
    "redact",
]

logger = logging.getLogger("dsh_plugins_builtin.audit")


def __getattr__(name: str) -> Any:  # `MAX_LAST`: `dsh audit`'s module costs a cold start
    if name == "MAX_LAST":
        from ._audit._command import MAX_LAST

        return MAX_LAST
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Decision = Allow | Deny | Ask
Durability = Literal["sync", "async"]


def default_audit_path() -> Path:
    """``audit.sqlite3`` in the user state directory of ``dsh`` (``~/.local/state/dsh`` on Linux).

    Earlier versions kept it in the user data directory (`legacy_audit_path`); while no database
    exists at the new place and one exists at the old, the old one is used, so no record is
    split or lost. Move the file to switch.
    """
    path = user_state_path("dsh") / "audit.sqlite3"
    if not os.path.lexists(path):
        legacy = legacy_audit_path()
        if os.path.lexists(legacy):
            return legacy
    return path


def legacy_audit_path() -> Path:
    """Where earlier versions kept the database: ``~/.local/share/dsh/audit.sqlite3`` on Linux."""
    return user_data_path("dsh") / "audit.sqlite3"


def _not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be zero or more milliseconds, got {value}")


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be 1 or more, got {value}")


def _postgres_url(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("url must start with postgresql:// (a PostgreSQL connection URL)")


@final
@attrs.frozen
class AuditConfig:
    """``[plugin.audit]``.

    Attributes:
        path: the SQLite database; relative to the workspace (``[host] workspace``).
            Default: `default_audit_path`. Must not lie inside a writable root of the sandbox
            (unless under one of its protected paths).
        enabled: ``false`` records nothing and registers no per-call hook.
        busy_timeout_ms: how long a commit waits for another writer's lock before its rows
            are counted lost (and reported).
        durability: ``"async"`` (default): a call returns once its row is queued (committed
            within about 10 ms, and on close, at the end of the trio run and at exit);
            ``"sync"``: once it is committed.
        required: refuse calls (``DENIED``) while rows cannot be written.
        queue_size: rows queued before calls wait for the writer (back-pressure).
        url: ``postgresql://user:password@host:port/database``: record into PostgreSQL instead
            of SQLite (the ``postgres`` extra); exclusive with ``path``.
        reconnect_ms: how long a batch is retried while the PostgreSQL connection is lost
            before its rows are counted lost.
    """

    path: Path | None = None
    enabled: bool = True
    busy_timeout_ms: int = attrs.field(default=5_000, validator=_not_negative)
    durability: Durability = attrs.field(
        default="async", validator=attrs.validators.in_(("sync", "async"))
    )
    required: bool = False
    queue_size: int = attrs.field(default=10_000, validator=_positive)
    url: str | None = attrs.field(default=None, validator=_postgres_url, repr=False)
    reconnect_ms: int = attrs.field(default=30_000, validator=_not_negative)


class AuditPlugin:
    """Record every call; see the module docstring."""

    name = "audit"

    def __init__(self) -> None:
        self.config = AuditConfig()
        self.path = default_audit_path()
        # By call token, from pre-execute to the result: (clock, start), where the clock is the
        # trio run's (read once: `trio.current_time` looks it up on every read).
        self._started: dict[object, tuple[Any, float]] = {}
        self._writer: AuditWriter | None = None
        self._async = False
        self._required = False
        self._warning: str | None = None
        # The root task of the trio run whose end flushes the queue (weakly: a run that is over
        # is not kept alive by it).
        self._flushing: Callable[[], object] = _nobody

    @hookimpl
    def dsh_plugin_config(self) -> type[AuditConfig]:
        return AuditConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = config = host.config_for(self)
        if not config.enabled:
            host.pm.unregister(self)  # no per-call hook left to cost anything
            return
        self._async = config.durability == "async"
        self._required = config.required
        host_id = os.urandom(6).hex()  # 12 random hex digits (uuid costs a cold start)
        store = None if config.url is None else _postgres_store(host, config, host_id)
        if store is None:
            configured = config.path is not None
            path = audit_path_in(host.workspace, config.path) if config.path else None
            self.path = Path(os.path.realpath(path if path is not None else default_audit_path()))
            self._warning = _check_location(
                host, self.path, configured=configured, required=config.required
            )
        self._writer = writer = AuditWriter(
            self.path,
            busy_timeout=config.busy_timeout_ms / 1000,
            capacity=config.queue_size,
            workspace=os.path.realpath(host.workspace),
            host_id=host_id,
            store=store,
        )
        weakref.finalize(self, writer.close)  # also runs at interpreter exit: flushes
        with contextlib.suppress(OSError):  # reported (once) by the first write
            writer.pin()
        if config.required:
            writer.probe()

    @hookimpl
    async def dsh_host_stopping(self) -> None:
        # `Host.aclose`: every queued row committed. An idle writer (no thread, no database
        # open: a `dsh hook` that recorded nothing) closes inline, with no worker thread.
        if self._writer is None or self._writer.idle:
            self.close()
        else:
            await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the database."""
        if self._writer is not None:
            self._writer.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every row queued so far is committed (or failed); ``False`` on timeout."""
        return self._writer.flush(timeout) if self._writer is not None else True

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: ToolExecution) -> Deny | None:
        # A plain function that abstains: the decision the others come to is read back from
        # `execution.pre_decision` by the observer (no link, no coroutine per call).
        writer = self._writer
        if writer is None:
            return None
        if self._required and writer.failing is not None:
            return Deny(
                f"audit is required ([plugin.audit] required = true) but cannot record calls "
                f"in {writer.where} ({writer.failing}); no tool runs until it can. Fix the "
                "database (the error on stderr says how) or set required = false"
            )
        if execution.dry_run:  # a preview has no observer round to take the time back
            return None
        clock = trio.lowlevel.current_clock()
        self._started[execution.token] = (clock, clock.current_time())
        return None

    @hookimpl
    def dsh_tool_result(
        self, execution: ToolExecution, result: ToolExecutionResult
    ) -> Awaitable[None] | None:
        noted = self._started.pop(execution.token, None)
        writer = self._writer
        if writer is None:
            return None
        approved_by = None
        if noted is None:  # ended before pre-execute (A, B): never put to an approver
            duration, rule = None, None
        else:
            clock, started = noted
            duration = (clock.current_time() - started) * 1000
            decision = execution.pre_decision  # the rule that decided (allows too), if any
            rule = None if decision is None else decision.detail
            if type(decision) is Ask and (approval := execution.approval) is not None:
                # As stage D recorded it (only an ask reaches it), never guessed from the
                # result: the approver that allowed or rejected the call, else the outcome.
                approved_by = approval.value
                if approval in _NAMED and execution.approver is not None:
                    approved_by = execution.approver
        if self._warning is not None:  # once, when there is something to record
            logger.warning("%s", self._warning)
            self._warning = None
        known = remembered(execution.arguments)  # encoded already (guards): not again
        if self._async:
            # Queued, not awaited: the row is built and committed by the writer thread.
            root = trio.lowlevel.current_root_task()
            if self._flushing() is not root:  # once per trio run: its end flushes the queue
                self._flushing = weakref.ref(root)
                writer.flush_when_run_ends()
            return writer.enqueue(
                (time.time(), execution, result, duration, rule, approved_by, known), wait=False
            )
        return writer.enqueue(
            (time.time(), execution, result, duration, rule, approved_by, known), wait=True
        )


_NAMED = (ApprovalOutcome.ALLOWED_ONCE, ApprovalOutcome.REJECTED)
"""The outcomes whose approver ``approved_by`` names (the others are recorded as such)."""


def _nobody() -> None:
    return None


def _postgres_store(host: Host, config: AuditConfig, host_id: str) -> PostgresStore:
    """The store for ``[plugin.audit] url``; a `ConfigError` when psycopg is missing."""
    if config.path is not None:
        raise ConfigError(
            "path and url are both set; keep url for PostgreSQL or path for SQLite",
            path=host.config.source, plugin="audit", key="url",
        )  # fmt: skip
    from ._audit._postgres import PostgresStore

    try:
        return PostgresStore(
            config.url or "",
            host_id=host_id,
            reconnect=config.reconnect_ms / 1000,
        )
    except ImportError:
        raise ConfigError(
            "url names a PostgreSQL database, but psycopg is not installed: "
            "pip install 'dsh-host[postgres]'",
            path=host.config.source, plugin="audit", key="url",
        ) from None  # fmt: skip


def _check_location(host: Host, path: Path, *, configured: bool, required: bool) -> str | None:
    """Refuse a database inside a writable root of the sandbox policy (see the module docs).

    Returns the warning to give, before the first row is written, for the default location
    inside a writable root (an error only with ``required``).
    """
    root = _writable_root_holding(host, path.parent)
    if root is None:
        return None
    why = (
        f'the audit database "{path}" lies inside the sandbox\'s writable root "{root}": a tool '
        "could replace it or its directory with a symbolic link and make the host write "
        "elsewhere, or rewrite the record"
    )
    fix = (
        "set [plugin.audit] path to a file outside every writable root (the default is in the "
        "user state directory), or under a protected path of [plugin.sandbox] protected "
        f'(such as "{root}/.dsh/audit.sqlite3")'
    )
    if configured or required:
        key = "path" if configured else None
        raise ConfigError(f"{why}; {fix}", path=host.config.source, plugin="audit", key=key)
    return f"audit: {why}; {fix} (XDG_STATE_HOME moves the default)."


def _writable_root_holding(host: Host, directory: Path) -> Path | None:
    """The writable root of the sandbox policy that holds *directory*, unless protected."""
    from ._sandbox._plugin import SandboxPlugin

    sandbox = host.pm.get_plugin("sandbox")
    if not isinstance(sandbox, SandboxPlugin):
        return None
    try:  # started or not yet: the policy it enforces, built once per start
        policy = sandbox.policy_at_start(host)
    except ConfigError:
        raise
    except Exception:  # the sandbox plugin reports it when it starts; nothing to check
        return None
    from ._sandbox._fence import protected_paths, writable_roots

    roots = writable_roots(policy)
    if roots == (Path("/"),):
        return None  # danger-full-access: nothing is confined, nothing to protect from
    for root in roots:
        if directory == root or root in directory.parents:
            for protected in protected_paths(policy):
                if directory == protected or protected in directory.parents:
                    return None
            return root
    return None


# -- dsh audit ---------------------------------------------------------------------------------


def audit_command(argv: Sequence[str] | None = None) -> int:
    """``dsh audit [filters] [--json] [--last N] [--health] [--db PATH]``: show recorded calls.

    Prints the last *N* calls (default 20) of the current workspace, oldest first, as a table
    (with the rule that decided and the reason of a refusal), or as one JSON object per line
    with ``--json``. Filters: ``--workspace DIR`` (default: the current directory) or ``--all``,
    ``--tool NAME``, ``--outcome CODE`` or ``--denied``, ``--call ID``, ``--since TIME`` and
    ``--until TIME`` (ISO dates and times in UTC, or ages such as ``2h``). ``--health`` says
    how many calls were lost since the database was made, why, and when it was recreated.

    Every character that is not printable (control characters, escape sequences,
    bidirectional overrides, lone surrogates, ...) is shown as a ``\\uXXXX`` escape, so a
    recorded value cannot move the cursor, recolour or hide text on the screen. Returns the exit
    status: 0 (also when the reader of a pipe went away), 1 when the database cannot be read, 2
    for bad arguments.
    """
    from ._audit import _command

    return _command.run(argv, default_audit_path())
