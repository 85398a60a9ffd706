"""The plugins of one `Host`: each checked, registered and configured, or left out with why."""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

import attrs
import pluggy

from .._model._errors import ConfigError, PluginLoadError
from .._model._values import Scope
from .._model._where import format_traceback, plugin_location
from .._pipeline._contain import real_interrupt
from .._schema._tool import ToolDefinition
from ._config import Config, structure_plugin_config
from ._loading import at, load_entry_point
from ._plugins import (
    PluginInfo,
    PluginStatus,
    inspect_hooks,
    installed_names,
    plugin_name,
    select_entry_points,
)
from ._registry import ToolRegistry

__all__ = ["NO_HOOKS", "Roster"]

NO_HOOKS = (
    "implements no dsh hook (no @hookimpl method), so it would do nothing: name the plugin "
    "object itself (--plugin MODULE:ATTR, or the entry point's value), and decorate its hook "
    "methods with @dsh_host.hookimpl"
)


@final
class Roster:
    """A host's plugins: the rows of those registered (`rows`), of those left out (`left_out`),
    their structured configurations (`configs`), the tools each registered, and `warnings`."""

    def __init__(self, pm: pluggy.PluginManager, config: Config, registry: ToolRegistry) -> None:
        self.pm = pm
        self.config = config
        self.registry = registry
        self.rows: dict[str, PluginInfo] = {}
        self.left_out: list[PluginInfo] = []
        self.configs: dict[str, Any] = {}
        self.warnings: list[str] = []
        self._tools: dict[str, list[Callable[[], None]]] = {}

    def load(
        self,
        plugins: Iterable[object],
        *,
        load_entrypoints: bool,
        environ: Mapping[str, str],
        disable: Iterable[str],
    ) -> list[tuple[str, object]]:
        """Load the chosen entry points, then *plugins*; admit each; the registered ones, in order."""
        loaded: list[tuple[str, object, PluginInfo]] = []
        if load_entrypoints:
            chosen, left_out, warnings = select_entry_points(self.config, environ, disable=disable)
            self.left_out.extend(left_out)
            self.warnings.extend(warnings)
            for ep in chosen:
                outcome = load_entry_point(ep)
                if isinstance(outcome, PluginInfo):
                    self.left_out.append(outcome)
                else:
                    loaded.append(outcome)
        for plugin in plugins:
            name = plugin_name(plugin)
            loaded.append(
                (name, plugin, PluginInfo(name=name, status=PluginStatus.ENABLED, source="object"))
            )
        return [(name, plugin) for name, plugin, row in loaded if self.admit(name, plugin, row)]

    def admit(self, name: str, plugin: object, row: PluginInfo) -> bool:
        """Check, register and configure one plugin; ``False`` (and a failed row) if it cannot."""

        def fail(error: str) -> bool:
            self.left_out.append(attrs.evolve(row, status=PluginStatus.FAILED, error=error))
            return False

        if name in self.rows or self.pm.get_plugin(name) is not None:
            return fail(f"another plugin is already registered under the name {name!r}")
        try:
            hooks = inspect_hooks(self.pm, plugin, name)
            if not hooks:
                return fail(NO_HOOKS)
            self.pm.register(plugin, name=name)
        except PluginLoadError as exc:
            return fail(exc.message.removeprefix(f"plugin {name!r}: "))
        except pluggy.PluginValidationError as exc:
            return fail(f"invalid hook implementation: {' '.join(str(exc).split())}")
        except Exception as exc:
            return fail(f"cannot register: {_describe(exc)}")
        config_class = None
        if (impl := self.impl_of(plugin, "dsh_plugin_config")) is not None:
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
                self.configs[name] = structure_plugin_config(
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
        self.rows[name] = attrs.evolve(
            row, hooks=hooks, config_class=config_name, order=len(self.rows) + 1
        )
        return True

    def drop(self, plugin: object, name: str, error: str, exc: BaseException) -> None:
        """Take a plugin out after a set-up hook failed: its hooks, its tools and its config.
        The error gains the plugin's file and line; the row keeps the full traceback."""
        error += at(plugin_location(exc, _package_of(plugin)))
        self.pm.unregister(plugin)
        for unregister in reversed(self._tools.pop(name, [])):
            unregister()
        self.configs.pop(name, None)
        row = self.rows.pop(name)
        self.left_out.append(
            attrs.evolve(
                row,
                status=PluginStatus.FAILED,
                error=error,
                order=None,
                traceback=format_traceback(exc),
            )
        )

    def impl_of(self, plugin: object, hook: str) -> Any:
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

    def warn_unknown_tables(self) -> None:
        """A warning for each ``[plugin.X]`` table no installed plugin answers to."""
        present = {row.name for row in self.listing()}
        if set(self.config.tables) <= present:
            return  # every table has its plugin: no need to read the installed names
        import difflib  # did-you-mean hints only: not at every start

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

    def named_files(
        self, registered: list[tuple[str, object]], host: object, workspace: pathlib.Path
    ) -> dict[pathlib.Path, str]:
        """Each plugin's ``dsh_config_files``: every file named (absolute, normalised), to the
        name of the first plugin that named it. A plugin whose hook fails is taken out."""
        named: dict[pathlib.Path, str] = {}
        for name, plugin in registered:
            if (hook := self.impl_of(plugin, "dsh_config_files")) is None:
                continue
            try:
                paths = [os.fspath(path) for path in hook(host=host) or ()]
            except ConfigError:
                raise
            except BaseException as exc:
                if real_interrupt(exc):
                    raise
                self.drop(plugin, name, f"dsh_config_files failed: {_describe(exc)}", exc)
                continue
            for path in paths:
                full = os.path.normpath(os.path.join(workspace, os.path.expanduser(path)))
                named.setdefault(pathlib.Path(full), name)
        return named

    def start(self, registered: list[tuple[str, object]], host: object) -> None:
        """Each plugin's ``dsh_register_tools``, then each one's ``dsh_host_started``; a plugin
        whose set-up hook fails is taken out (`_drop`)."""
        for name, plugin in registered:
            if (hook := self.impl_of(plugin, "dsh_register_tools")) is not None:
                try:
                    hook(register=functools.partial(self._register_tool, owner=name))
                except BaseException as exc:
                    if real_interrupt(exc):
                        raise
                    self.drop(plugin, name, f"dsh_register_tools failed: {_describe(exc)}", exc)
        for name, plugin in registered:
            if self.pm.is_registered(plugin) and (hook := self.impl_of(plugin, "dsh_host_started")):
                try:
                    hook(host=host)
                except ConfigError:
                    raise
                except BaseException as exc:
                    if real_interrupt(exc):
                        raise
                    self.drop(plugin, name, f"dsh_host_started failed: {_describe(exc)}", exc)

    def listing(self) -> list[PluginInfo]:
        """Every plugin, sorted by name; an enabled one's row with its ``dsh_plugin_status``."""
        rows = [self._with_status(row) for row in self.rows.values()]
        return sorted([*rows, *self.left_out], key=lambda row: row.name)

    def _with_status(self, row: PluginInfo) -> PluginInfo:
        plugin = self.pm.get_plugin(row.name)
        status = self.impl_of(plugin, "dsh_plugin_status") if plugin is not None else None
        if status is None:
            return row
        try:
            lines = status()
            shown = tuple(str(line) for line in lines or ())
        except Exception as exc:  # shown, never raised: a listing must list
            shown = (f"dsh_plugin_status failed: {_describe(exc)}",)
        return attrs.evolve(row, status_lines=shown)


def _package_of(plugin: object) -> str:
    """The top-level package a plugin object's code lives in."""
    module = plugin.__name__ if isinstance(plugin, type(os)) else type(plugin).__module__
    return module.split(".", 1)[0]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _call_subset(function: Any, argnames: tuple[str, ...], **kwargs: Any) -> Any:
    return function(**{name: kwargs[name] for name in argnames})
