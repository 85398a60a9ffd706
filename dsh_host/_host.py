"""`Host`: the composition root (plugin manager, configuration, registry)."""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any, final

import pluggy

from ._config import Config, find_config, load_config, structure_plugin_config
from ._errors import ConfigError, PluginLoadError
from ._hooks import HookRelay, make_plugin_manager
from ._pipeline import Trace, new_call_id
from ._plugins import PluginInfo, PluginStatus, check_hooks, plugin_name, select_entry_points
from ._presentation import (
    CALL_VIEWS,
    RESULT_VIEWS,
    CallView,
    GenericCallView,
    GenericResultView,
    ResultView,
)
from ._registry import ToolRegistry
from ._signal import AbortSignal
from ._tool import ToolDefinition
from ._values import Scope, ToolExecutionInput, ToolExecutionResult

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
        environ: the environment read for ``DSH_PLUGINS`` and ``DSH_DISABLE_PLUGIN_AUTOLOAD``.

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
    ) -> None:
        self.config = config if isinstance(config, Config) else load_config(config)
        self.pm: pluggy.PluginManager = make_plugin_manager()
        self.hooks = HookRelay(self.pm)
        self.registry = ToolRegistry(
            hooks=self.hooks, observer_timeout=self.config.host.observer_timeout
        )
        self._rows: list[PluginInfo] = []
        self._configs: dict[str, Any] = {}
        environ = os.environ if environ is None else environ
        loaded: list[tuple[str, object, PluginInfo]] = []
        if load_entrypoints:
            chosen, left_out = select_entry_points(self.config, environ)
            self._rows.extend(left_out)
            for ep in chosen:
                dist = ep.dist.name if ep.dist is not None else None
                version = ep.dist.version if ep.dist is not None else None
                row = PluginInfo(
                    name=ep.name, status=PluginStatus.ENABLED, distribution=dist, version=version
                )
                try:
                    plugin = ep.load()
                except Exception as exc:
                    self._fail(row, f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}")
                    continue
                loaded.append((ep.name, plugin, row))
        for plugin in plugins:
            name = plugin_name(plugin)
            loaded.append((name, plugin, PluginInfo(name=name, status=PluginStatus.ENABLED, source="object")))
        for name, plugin, row in loaded:
            self._register(name, plugin, row)
        known = {row.name for row in self._rows}
        for table in sorted(set(self.config.tables) - known):
            listed = ", ".join(sorted(known)) or "(none)"
            raise ConfigError(
                f"configures plugin {table!r}, which is not registered; registered: {listed}",
                path=self.config.source, plugin=table,
            )  # fmt: skip
        for name, plugin, row in loaded:
            if self.pm.is_registered(plugin) and (hook := self._impl_of(plugin, "dsh_register_tools")):
                register = functools.partial(self._register_tool, owner=name)
                try:
                    hook(register=register)
                except Exception as exc:
                    self._unregister(plugin, name, f"dsh_register_tools failed: {type(exc).__name__}: {exc}")
        for name, plugin, _row in loaded:
            if self.pm.is_registered(plugin) and (hook := self._impl_of(plugin, "dsh_host_started")):
                try:
                    hook(host=self)
                except ConfigError:
                    raise
                except Exception as exc:
                    self._unregister(plugin, name, f"dsh_host_started failed: {type(exc).__name__}: {exc}")

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        cwd: pathlib.Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Host:
        """A host configured from *path*, or from the config file found in *cwd* (see `find_config`)."""
        environ = os.environ if environ is None else environ
        found = pathlib.Path(path) if path is not None else find_config(cwd, environ)
        return cls(found, plugins=plugins, load_entrypoints=load_entrypoints, environ=environ)

    # -- plugins ---------------------------------------------------------------------------

    def _fail(self, row: PluginInfo, error: str) -> None:
        self._rows.append(
            PluginInfo(
                name=row.name, status=PluginStatus.FAILED, distribution=row.distribution,
                version=row.version, error=error, source=row.source,
            )
        )  # fmt: skip

    def _register(self, name: str, plugin: object, row: PluginInfo) -> None:
        try:
            if self.pm.get_plugin(name) is not None:
                raise PluginLoadError(name, "another plugin is already registered under this name")
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            self._fail(row, f"invalid hook implementation: {exc}")
            return
        except (ValueError, PluginLoadError) as exc:
            self._fail(row, str(exc))
            return
        try:
            hooks = check_hooks(self.pm, plugin, name)
        except PluginLoadError as exc:
            self.pm.unregister(plugin)
            self._fail(row, str(exc))
            return
        config_class = None
        impl = self._impl_of(plugin, "dsh_plugin_config")
        if impl is not None:
            try:
                config_class = impl()
            except Exception as exc:
                self.pm.unregister(plugin)
                self._fail(row, f"dsh_plugin_config failed: {type(exc).__name__}: {exc}")
                return
        if config_class is not None:
            table = self.config.tables.get(name, {})
            self._configs[name] = structure_plugin_config(
                table, config_class, plugin=name, where=self.config.source
            )
        elif name in self.config.tables:
            raise ConfigError(
                "this plugin takes no configuration; remove its table",
                path=self.config.source, plugin=name,
            )  # fmt: skip
        self._rows.append(
            PluginInfo(
                name=name, status=PluginStatus.ENABLED, distribution=row.distribution,
                version=row.version, hooks=hooks, source=row.source,
                config_class=None if config_class is None else
                f"{config_class.__module__}.{config_class.__qualname__}",
            )
        )  # fmt: skip

    def _unregister(self, plugin: object, name: str, error: str) -> None:
        self.pm.unregister(plugin)
        for i, row in enumerate(self._rows):
            if row.name == name and row.status is PluginStatus.ENABLED:
                self._rows[i] = PluginInfo(
                    name=name, status=PluginStatus.FAILED, distribution=row.distribution,
                    version=row.version, hooks=row.hooks, config_class=row.config_class,
                    error=error, source=row.source,
                )  # fmt: skip

    def _impl_of(self, plugin: object, hook: str) -> Any:
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                return functools.partial(_call_subset, impl.function, impl.argnames)
        return None

    def _register_tool(self, tool: ToolDefinition, scope: Scope | None = None, *, owner: str) -> Any:
        return self.registry.register(tool, scope, owner=owner)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin the host knows of, sorted by name: enabled, disabled, blocked or failed."""
        return sorted(self._rows, key=lambda row: row.name)

    def config_for(self, plugin: object | str) -> Any:
        """The structured configuration of *plugin* (its object or name); ``None`` if it has none."""
        name = plugin if isinstance(plugin, str) else self.pm.get_name(plugin)
        if name is None:
            raise KeyError(f"{plugin!r} is not a registered plugin")
        return self._configs.get(name)

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
        """Run one call through the whole pipeline and return its frozen result."""
        input = ToolExecutionInput(
            call_id=call_id or new_call_id(), name=name, arguments=arguments, scope=scope,
            signal=signal,
        )  # fmt: skip
        return await self.registry.execute(input, trace=trace)

    def present_call(self, name: str, args: Any, scope: Scope | None = None) -> CallView:
        """A card for a pending call: plugin presenters, then the tool's own, then a generic card."""
        tool = self.registry.get(name, scope)
        if tool is not None:
            for impl in self.hooks.impls("dsh_present_call"):
                view = _safe(impl.function, CALL_VIEWS, tool=tool, args=args)
                if view is not None:
                    return view
            if tool.present_call is not None:
                typed = tool.args_or_none(args)
                if typed is not None:
                    view = _safe(tool.present_call, CALL_VIEWS, typed)
                    if view is not None:
                        return view
        try:
            from ._json import freeze

            raw = freeze(args)
        except ValueError:
            raw = repr(args)
        return GenericCallView(title=name, raw_input=raw)

    def present_result(
        self, name: str, args: Any, result: ToolExecutionResult, scope: Scope | None = None
    ) -> ResultView:
        """A card for a finished call, with the same fallbacks as `present_call`."""
        tool = self.registry.get(name, scope)
        if tool is not None:
            for impl in self.hooks.impls("dsh_present_result"):
                view = _safe(impl.function, RESULT_VIEWS, tool=tool, args=args, result=result)
                if view is not None:
                    return view
            if tool.present_result is not None:
                typed = tool.args_or_none(args)
                if typed is not None:
                    view = _safe(tool.present_result, RESULT_VIEWS, typed, result)
                    if view is not None:
                        return view
        return GenericResultView(title=name, content=result.content)


def _call_subset(function: Any, argnames: tuple[str, ...], **kwargs: Any) -> Any:
    return function(**{name: kwargs[name] for name in argnames})


def _safe(function: Any, kinds: tuple[type, ...], *args: Any, **kwargs: Any) -> Any:
    try:
        if kwargs:
            names = getattr(function, "__code__", None)
            if names is not None:
                wanted = names.co_varnames[: names.co_argcount]
                kwargs = {k: v for k, v in kwargs.items() if k in wanted}
        view = function(*args, **kwargs)
    except Exception:
        return None
    return view if isinstance(view, kinds) else None
