"""`Host`: the composition root (plugin manager, configuration, registry)."""

from __future__ import annotations

import difflib
import functools
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

import attrs
import pluggy

from .. import hookspecs
from .._model._errors import ConfigError, PluginLoadError
from .._model._signal import AbortSignal
from .._model._trace import Trace
from .._model._values import Scope, ToolExecution, ToolExecutionInput, ToolExecutionResult
from .._model._views import CallView, ResultView
from .._model._where import format_traceback, plugin_location
from .._pipeline._contain import real_interrupt
from .._pipeline._pipeline import new_call_id
from .._registry._hooks import HookRelay, make_plugin_manager
from .._schema._tool import ToolDefinition
from ._config import Config, config_converter, find_config, load_config, structure_plugin_config
from ._lifecycle import SchemaFormat, close_host, closed_error, export_schemas
from ._loading import at, load_entry_point
from ._messages import Format, arguments_of, run_tool_calls
from ._plugins import (
    PluginInfo,
    PluginStatus,
    inspect_hooks,
    installed_names,
    plugin_name,
    select_entry_points,
)
from ._present import present_call, present_result
from ._registry import ToolRegistry

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
        self._rows: dict[str, PluginInfo] = {}
        self._left_out: list[PluginInfo] = []
        self._configs: dict[str, Any] = {}
        self._tools: dict[str, list[Callable[[], None]]] = {}
        self.warnings: list[str] = []
        self._closed = False  # `close_host` ran: calls are refused
        environ = os.environ if environ is None else environ
        loaded: list[tuple[str, object, PluginInfo]] = []
        if load_entrypoints:
            chosen, left_out, warnings = select_entry_points(self.config, environ, disable=disable)
            self._left_out.extend(left_out)
            self.warnings.extend(warnings)
            for ep in chosen:
                outcome = load_entry_point(ep)
                if isinstance(outcome, PluginInfo):
                    self._left_out.append(outcome)
                else:
                    loaded.append(outcome)
        for plugin in plugins:
            name = plugin_name(plugin)
            loaded.append(
                (name, plugin, PluginInfo(name=name, status=PluginStatus.ENABLED, source="object"))
            )
        registered = [
            (name, plugin) for name, plugin, row in loaded if self._add(name, plugin, row)
        ]
        self._warn_unknown_tables()
        self._start(registered)

    def _warn_unknown_tables(self) -> None:
        """A warning for each ``[plugin.X]`` table no installed plugin answers to."""
        present = {row.name for row in self.plugins()}
        if set(self.config.tables) <= present:
            return  # every table has its plugin: no need to read the installed names
        known = sorted(present | installed_names())
        for table in sorted(set(self.config.tables) - set(known)):
            # A leftover table of an uninstalled plugin must not stop every command: a warning.
            hint = difflib.get_close_matches(table, known, n=1)
            did_you_mean = f" (did you mean [plugin.{hint[0]}]?)" if hint else ""
            self.warnings.append(
                f"{self.config.describe()}, [plugin.{table}]: no plugin of this name is "
                f"installed{did_you_mean}; the table is ignored. Installed: "
                f"{', '.join(known) or '(none)'}"
            )

    def _start(self, registered: list[tuple[str, object]]) -> None:
        """Each plugin's ``dsh_register_tools``, then each one's ``dsh_host_started``; a plugin
        whose set-up hook fails is taken out (`_drop`)."""
        for name, plugin in registered:
            if (hook := self._impl_of(plugin, "dsh_register_tools")) is not None:
                try:
                    hook(register=functools.partial(self._register_tool, owner=name))
                except BaseException as exc:
                    if real_interrupt(exc):
                        raise
                    self._drop(plugin, name, f"dsh_register_tools failed: {_describe(exc)}", exc)
        for name, plugin in registered:
            if self.pm.is_registered(plugin) and (
                hook := self._impl_of(plugin, "dsh_host_started")
            ):
                try:
                    hook(host=self)
                except ConfigError:
                    raise
                except BaseException as exc:
                    if real_interrupt(exc):
                        raise
                    self._drop(plugin, name, f"dsh_host_started failed: {_describe(exc)}", exc)

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
    ) -> Host:
        """A host configured from *path*, or from the config file found in *cwd* (see `find_config`)."""
        environ = os.environ if environ is None else environ
        found = pathlib.Path(path) if path is not None else find_config(cwd, environ)
        return cls(
            found,
            plugins=plugins,
            load_entrypoints=load_entrypoints,
            environ=environ,
            disable=disable,
        )

    # -- plugins ---------------------------------------------------------------------------

    def _add(self, name: str, plugin: object, row: PluginInfo) -> bool:
        """Check, register and configure one plugin; ``False`` (and a failed row) if it cannot."""

        def fail(error: str) -> bool:
            self._left_out.append(attrs.evolve(row, status=PluginStatus.FAILED, error=error))
            return False

        if name in self._rows or self.pm.get_plugin(name) is not None:
            return fail(f"another plugin is already registered under the name {name!r}")
        try:
            hooks = inspect_hooks(self.pm, plugin, name)
            self.pm.register(plugin, name=name)
        except PluginLoadError as exc:
            return fail(exc.message.removeprefix(f"plugin {name!r}: "))
        except pluggy.PluginValidationError as exc:
            return fail(f"invalid hook implementation: {' '.join(str(exc).split())}")
        except Exception as exc:
            return fail(f"cannot register: {_describe(exc)}")
        config_class = None
        if (impl := self._impl_of(plugin, "dsh_plugin_config")) is not None:
            try:
                config_class = impl()
            except Exception as exc:
                self.pm.unregister(plugin)
                return fail(f"dsh_plugin_config failed: {_describe(exc)}")
            if config_class is not None and not (
                isinstance(config_class, type) and attrs.has(config_class)
            ):
                self.pm.unregister(plugin)
                return fail(f"dsh_plugin_config returned {config_class!r}; expected an attrs class")
        if config_class is not None:
            table = self.config.tables.get(name, {})
            try:
                self._configs[name] = structure_plugin_config(
                    table, config_class, plugin=name, where=self.config.source
                )
            except PluginLoadError as exc:
                self.pm.unregister(plugin)
                return fail(f"dsh_plugin_config: {exc.message}")
        elif name in self.config.tables:
            raise ConfigError(
                "this plugin takes no configuration (it has no dsh_plugin_config); remove the table",
                path=self.config.source,
                plugin=name,
            )
        config_name = None
        if config_class is not None:
            config_name = f"{config_class.__module__}.{config_class.__qualname__}"
        self._rows[name] = attrs.evolve(
            row, hooks=hooks, config_class=config_name, order=len(self._rows) + 1
        )
        return True

    def _drop(self, plugin: object, name: str, error: str, exc: BaseException) -> None:
        """Take a plugin out after a set-up hook failed: its hooks, its tools and its config.
        The error gains the plugin's file and line; the row keeps the full traceback."""
        error += at(plugin_location(exc, _package_of(plugin)))
        self.pm.unregister(plugin)
        for unregister in reversed(self._tools.pop(name, [])):
            unregister()
        self._configs.pop(name, None)
        row = self._rows.pop(name)
        self._left_out.append(
            attrs.evolve(
                row,
                status=PluginStatus.FAILED,
                error=error,
                order=None,
                traceback=format_traceback(exc),
            )
        )

    def _impl_of(self, plugin: object, hook: str) -> Any:
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                return functools.partial(_call_subset, impl.function, impl.argnames)
        return None

    def _register_tool(
        self, tool: ToolDefinition, scope: Scope | None = None, *, owner: str
    ) -> Callable[[], None]:
        unregister = self.registry.register(tool, scope, owner=owner)
        self._tools.setdefault(owner, []).append(unregister)
        return unregister

    def plugins(self) -> list[PluginInfo]:
        """Every plugin the host knows of, sorted by name: enabled, disabled, blocked or failed.

        An enabled plugin's row carries what its ``dsh_plugin_status`` says now.
        """
        rows = [self._with_status(row) for row in self._rows.values()]
        return sorted([*rows, *self._left_out], key=lambda row: row.name)

    def _with_status(self, row: PluginInfo) -> PluginInfo:
        plugin = self.pm.get_plugin(row.name)
        status = self._impl_of(plugin, "dsh_plugin_status") if plugin is not None else None
        if status is None:
            return row
        try:
            lines = status()
            shown = tuple(str(line) for line in lines or ())
        except Exception as exc:  # shown, never raised: a listing must list
            shown = (f"dsh_plugin_status failed: {_describe(exc)}",)
        return attrs.evolve(row, status_lines=shown)

    def config_for(self, plugin: object | str) -> Any:
        """The structured configuration of *plugin* (its object or name); ``None`` if it has none."""
        name = plugin if isinstance(plugin, str) else self.pm.get_name(plugin)
        if name is None:
            raise KeyError(f"{plugin!r} is not a registered plugin")
        return self._configs.get(name)

    def effective_config(self) -> dict[str, Any]:
        """The configuration in force as plain data, defaults filled in (what ``dsh config check``
        prints): ``{"host": ..., "plugins": ..., "plugin": {name: table}}``, a table for each
        enabled plugin that has a config class, by name."""
        plain = config_converter().unstructure
        tables = {name: plain(c) for name, c in sorted(self._configs.items()) if c is not None}
        host, plugins = plain(self.config.host), plain(self.config.plugins)
        return {"host": host, "plugins": plugins, "plugin": tables}

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
        if self._closed:
            raise closed_error()
        input = ToolExecutionInput(
            call_id=call_id or new_call_id(),
            name=name,
            arguments=arguments_of(arguments) if isinstance(arguments, str) else arguments,
            scope=scope,
            signal=signal,
        )
        return await self.registry.execute(input, trace=trace)

    async def run_tool_calls(
        self, calls: Any, *, format: Format, signal: AbortSignal | None = None
    ) -> list[dict[str, Any]]:
        """Run a provider's tool calls as one step; its result shapes back (see `_messages`)."""
        if self._closed:
            raise closed_error()
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

        Asks every ``dsh_path_denied`` implementation (firstresult). A plugin that raises denies,
        so a broken policy plugin never lets a path through.
        """
        hook = self.pm.hook.dsh_path_denied
        if not hook.get_hookimpls():
            return None
        try:
            reason = hook(execution=execution, path=path, access=access)
        except BaseException as exc:  # any failure withholds; only a real Ctrl-C goes on
            if real_interrupt(exc):
                raise
            return f"the path policy failed ({_describe(exc)}), so the path is withheld"
        return reason if reason is None or isinstance(reason, str) else str(reason)

    def present_call(self, name: str, args: Any, scope: Scope | None = None) -> CallView:
        """A card for a pending call: plugin presenters, then the tool's own, then a generic card."""
        return present_call(self.registry, self.hooks, name, args, scope)

    def present_result(
        self, name: str, args: Any, result: ToolExecutionResult, scope: Scope | None = None
    ) -> ResultView:
        """A card for a finished call, with the same fallbacks as `present_call`.

        The last fallback, a generic card, keeps the title of the call's own card and shows the
        result's raw content.
        """
        return present_result(self.registry, self.hooks, name, args, result, scope)


def _package_of(plugin: object) -> str:
    """The top-level package a plugin object's code lives in."""
    module = plugin.__name__ if isinstance(plugin, type(os)) else type(plugin).__module__
    return module.split(".", 1)[0]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _call_subset(function: Any, argnames: tuple[str, ...], **kwargs: Any) -> Any:
    return function(**{name: kwargs[name] for name in argnames})
