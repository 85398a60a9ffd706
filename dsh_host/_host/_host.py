"""`Host`: the composition root (plugin manager, configuration, registry)."""

from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

import pluggy

from .. import hookspecs
from .._model._signal import AbortSignal
from .._model._trace import Trace
from .._model._values import Scope, ToolExecution, ToolExecutionInput, ToolExecutionResult
from .._pipeline._contain import real_interrupt
from .._pipeline._pipeline import new_call_id
from .._registry._hooks import HookRelay, make_plugin_manager
from ._config import Config, config_converter, config_from, load_config
from ._configfile import find_config, read_named, read_table
from ._lifecycle import SchemaFormat, close_host, closed_error, export_schemas
from ._plugins import PluginInfo
from ._registry import ToolRegistry
from ._roster import Roster
from ._services import HostServices, opening_services

if TYPE_CHECKING:  # provider messages and cards load with their first use (issue 27)
    from .._model._views import CallView, ResultView
    from ._messages import Format

__all__ = ["Host"]


@final
class Host:
    """Plugins, their configuration, and the tool registry they feed.

    Args:
        config: ``None`` (built-in defaults), a path to a TOML file, or a dict of the same
            structure (see the configuration guide).
        plugins: plugin objects (modules or instances) to register after the entry points,
            in this order.
        load_entrypoints: load the plugins installed under the ``dsh.plugins`` entry-point group
            (tests pass ``False``).
        environ: the environment read for ``DSH_PLUGINS``, ``DSH_DISABLE_PLUGINS`` and
            ``DSH_DISABLE_PLUGIN_AUTOLOAD``.
        disable: plugin names (or `fnmatch` patterns) to block for this host, as
            ``dsh --disable NAME`` does.

    Attributes:
        services: where plugins start long-lived trio tasks (`HostServices`) when a trio run
            owns the host (`open_host`); ``None`` for a host made directly.
        warnings: one line each for configuration that names plugins that are not installed
            (a ``disable`` entry, a ``[plugin.X]`` table): harmless, so not errors, but worth
            saying (``dsh`` prints them on stderr).

    Raises:
        ConfigError: the configuration is wrong; the message names the file, plugin and key.

    Example::

        host = Host(plugins=[my_plugin], load_entrypoints=False)
        result = await host.call("read_file", {"path": "README.md"})
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | Config | None = None,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        *,
        environ: Mapping[str, str] | None = None,
        disable: Iterable[str] = (),
    ) -> None:
        registered = self._load(config, plugins, load_entrypoints, environ, disable)
        self._start(registered)

    def _load(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | Config | None,
        plugins: Iterable[object],
        load_entrypoints: bool,
        environ: Mapping[str, str] | None,
        disable: Iterable[str],
    ) -> list[tuple[str, object]]:
        """Load and configure the plugins, without starting them; those registered, in order."""
        self.config = config if isinstance(config, Config) else load_config(config)
        self.pm: pluggy.PluginManager = make_plugin_manager(hookspecs)
        self.hooks = HookRelay(self.pm)
        settings = self.config.host
        self.registry = ToolRegistry(
            hooks=self.hooks,
            observer_timeout=settings.observer_timeout,
            hook_timeout=settings.hook_timeout,
            approval_timeout=settings.approval_timeout,
        )
        self._roster = roster = Roster(self.pm, self.config, self.registry)
        self.warnings: list[str] = roster.warnings
        self._closed = False  # `close_host` ran: calls are refused
        self.services: HostServices | None = opening_services()
        registered = roster.load(
            plugins,
            load_entrypoints=load_entrypoints,
            environ=os.environ if environ is None else environ,
            disable=disable,
        )
        roster.warn_unknown_tables()
        self._named = roster.named_files(registered, self, self.workspace)
        self._read: dict[str, bytes | None] = {}  # real path -> what the trust check read
        return registered

    def _start(
        self,
        registered: list[tuple[str, object]],
        trusted: tuple[pathlib.Path, Mapping[str, str | None], str] | None = None,
    ) -> None:
        """Start the plugins; first, with *trusted* (the config file, the files its record
        holds, how it was found), check that each named file holds what was trusted."""
        if trusted is not None:
            from ._trustfile import check_named

            self._read = check_named(*trusted, self._named)
        self._roster.start(registered, self)

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        cwd: pathlib.Path | None = None,
        environ: Mapping[str, str] | None = None,
        disable: Iterable[str] = (),
        require_trust: bool = False,
    ) -> Host:
        """A host configured from *path*, or from the config file found in *cwd* (see
        `find_config`).

        A file found in *cwd* (``dsh.toml``, or ``[tool.dsh]`` in ``pyproject.toml``) is read
        only while the user trusts what it holds (`TrustedConfigs`, ``dsh config trust``):
        whoever made the directory wrote it. A file the caller names (*path*, or
        ``$DSH_CONFIG``) is the caller's own, unless *require_trust*: then it must be trusted
        too (for a process whose environment someone else may set, as a project's settings
        set a Claude Code hook's).

        Raises:
            ConfigError: the file is wrong, missing or not trusted; the message names it and
                says what to do.
        """
        environ = os.environ if environ is None else environ
        found: pathlib.Path | None
        if path is not None:
            found, how = pathlib.Path(path), "named by the caller, who asked for a trusted one"
        else:
            found = find_config(cwd, environ)
            how = (
                "named by DSH_CONFIG, which this command does not take on trust"
                if environ.get("DSH_CONFIG")
                else "found in the working directory"
            )
        if found is None or not (require_trust or (path is None and not environ.get("DSH_CONFIG"))):
            return cls(
                found, plugins=plugins, load_entrypoints=load_entrypoints, environ=environ,
                disable=disable,
            )  # fmt: skip
        from ._trustfile import require_trust as require_trust_of  # a found file's start only

        table = read_table(found)
        files = require_trust_of(found, table, how)
        host = cls.__new__(cls)
        registered = host._load(
            config_from(table, str(found)), plugins, load_entrypoints, environ, disable
        )
        host._start(registered, (found, files, how))
        return host

    def plugins(self) -> list[PluginInfo]:
        """Every plugin the host knows of, sorted by name: enabled, disabled, blocked or failed.

        An enabled plugin's row carries what its ``dsh_plugin_status`` says now.
        """
        return self._roster.listing()

    def config_for(self, plugin: object | str) -> Any:
        """The structured configuration of *plugin* (its object or name); ``None`` if it has none."""
        name = plugin if isinstance(plugin, str) else self.pm.get_name(plugin)
        if name is None:
            raise KeyError(f"{plugin!r} is not a registered plugin")
        return self._roster.configs.get(name)

    def effective_config(self) -> dict[str, Any]:
        """The configuration in force as plain data, defaults filled in (what ``dsh config check``
        prints): ``{"host": ..., "plugins": ..., "plugin": {name: table}}``, a table for each
        enabled plugin that has a config class, by name."""
        plain = config_converter().unstructure
        tables = {
            name: plain(c) for name, c in sorted(self._roster.configs.items()) if c is not None
        }
        host, plugins = plain(self.config.host), plain(self.config.plugins)
        return {"host": host, "plugins": plugins, "plugin": tables}

    @property
    def config_files(self) -> dict[pathlib.Path, str]:
        """The files the plugins' configuration names (``dsh_config_files``): each absolute
        path, to the name of the plugin that named it."""
        return dict(self._named)

    def read_config_file(self, path: str | os.PathLike[str]) -> bytes:
        """The bytes of *path* (relative to the workspace), a file a plugin's configuration
        names: for a config the user had to trust, those the trust check read and compared
        (a file named in ``dsh_config_files``), so that what a plugin reads is what was trusted.

        Raises:
            FileNotFoundError: there is no such file (or there was none at the check).
            ConfigError: it is not a regular file, cannot be read, or is too large.
        """
        real = os.path.realpath(os.path.join(self.workspace, os.path.expanduser(path)))
        data = self._read[real] if real in self._read else read_named(real)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path))
        return data

    @property
    def workspace(self) -> pathlib.Path:
        """``[host] workspace``: the root every built-in resolves paths against."""
        return self.config.host.workspace

    # -- calls -----------------------------------------------------------------------------

    async def call(
        self,
        name: str,
        arguments: Any,
        *,
        call_id: str | None = None,
        scope: Scope | None = None,
        signal: AbortSignal | None = None,
        trace: Trace | None = None,
    ) -> ToolExecutionResult:
        """Run one call through the whole pipeline and return its frozen result.

        *arguments* is an object, or its JSON text as a model sends it (a text that is not JSON
        ends ``INVALID_ARGS``, saying why). A closed host raises `RuntimeError`."""
        return await self._call(name, arguments, call_id, scope, signal, trace)

    def _call(
        self,
        name: str,
        arguments: Any,
        call_id: str | None,
        scope: Scope | None,
        signal: AbortSignal | None,
        trace: Trace | None,
    ) -> Coroutine[Any, Any, ToolExecutionResult]:
        """`call`, not awaited: its checks now, then the pipeline's coroutine to await. The
        asyncio host (`dsh_host.aio`) steps that coroutine itself, with no `call` frame."""
        if self._closed:
            raise closed_error()
        if isinstance(arguments, str):  # JSON text, as a model sends it
            from ._messages import arguments_of

            arguments = arguments_of(arguments)
        input = ToolExecutionInput(
            call_id=call_id or new_call_id(),
            name=name,
            arguments=arguments,
            scope=scope,
            signal=signal,
        )
        return self.registry.execute(input, trace=trace)

    async def run_tool_calls(
        self, calls: Any, *, format: Format, signal: AbortSignal | None = None
    ) -> list[dict[str, Any]]:
        """Run a provider's tool calls as one step; its result shapes back (see `_messages`)."""
        if self._closed:
            raise closed_error()
        from ._messages import run_tool_calls

        return await run_tool_calls(
            self.registry.execute_batch, calls, format=format, signal=signal
        )

    def schemas(self, scope: Scope | None = None, *, format: SchemaFormat = "mcp") -> list[Any]:
        """The tools' schemas in a provider's ``tools`` format (``openai``, ``anthropic``, ``mcp``)."""
        return export_schemas(self.registry.schemas(scope), format)

    async def aclose(self) -> None:
        """Stop the plugins (``dsh_host_stopping``): flush audit, end child processes. Once;
        calls are refused from then on (they would run without their audit, their servers)."""
        await close_host(self)

    def path_denied(self, execution: ToolExecution, path: str, access: str) -> str | None:
        """Why policy withholds *path* (absolute, real) from the running *execution*, or ``None``.

        Asks each ``dsh_path_denied`` implementation a plugin has not set idle
        (``dsh_idle_hooks``), in call order, until one answers. A plugin that raises denies, so
        a broken policy plugin never lets a path through.
        """
        impls = self.hooks.impls("dsh_path_denied")
        if not impls:
            return None
        reason = None
        try:
            for impl in impls:
                call = impl.positional
                assert call is not None  # a plain hook, never a waterfall link
                if (reason := call(execution, path, access)) is not None:
                    break
        except BaseException as exc:  # any failure withholds; only a real Ctrl-C goes on
            if real_interrupt(exc):
                raise
            return f"the path policy failed ({_describe(exc)}), so the path is withheld"
        return reason if reason is None or isinstance(reason, str) else str(reason)

    def present_call(self, name: str, args: Any, scope: Scope | None = None) -> CallView:
        """A card for a pending call: plugin presenters, then the tool's own, then a generic card."""
        from ._present import present_call  # cards: not for a start that shows none (issue 27)

        return present_call(self.registry, self.hooks, name, args, scope)

    def present_result(
        self, name: str, args: Any, result: ToolExecutionResult, scope: Scope | None = None
    ) -> ResultView:
        """A card for a finished call, with the same fallbacks as `present_call`.

        The last fallback, a generic card, keeps the title of the call's own card and shows the
        result's raw content.
        """
        from ._present import present_result

        return present_result(self.registry, self.hooks, name, args, result, scope)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
