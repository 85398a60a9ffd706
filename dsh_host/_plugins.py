"""Finding plugins through entry points, each loaded and checked in isolation.

pluggy's own ``load_setuptools_entrypoints`` stops at the first plugin that fails to import; here
every entry point is loaded on its own, and one that fails to import, to register, or that
implements a hook dsh does not know, is reported as *failed* while the host runs on without it.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import importlib.metadata
import os
from collections.abc import Mapping
from typing import Any, final

import attrs
import pluggy

from ._config import Config
from ._errors import ConfigError, PluginLoadError
from ._hooks import ENTRY_POINT_GROUP

__all__ = ["PluginInfo", "PluginStatus", "check_hooks", "plugin_name", "select_entry_points"]

PER_CALL_HOOKS = frozenset(
    {
        "dsh_tool_pre_execute",
        "dsh_tool_approve",
        "dsh_tool_guard",
        "dsh_tool_execute",
        "dsh_tool_post_execute",
        "dsh_tool_result",
    }
)


class PluginStatus(str, enum.Enum):
    """Where a plugin stands: running, switched off in config, blocked, or broken."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    BLOCKED = "blocked"
    FAILED = "failed"


@final
@attrs.frozen(kw_only=True)
class PluginInfo:
    """One row of ``dsh plugins``."""

    name: str
    status: PluginStatus
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    config_class: str | None = None
    error: str | None = None
    source: str = "entry point"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "config_class": self.config_class,
            "error": self.error,
            "source": self.source,
        }


def plugin_name(plugin: object) -> str:
    """The name a plugin object registers under: its ``name`` attribute, module or class name."""
    name = getattr(plugin, "name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(plugin, type(os)):
        return plugin.__name__
    return type(plugin).__name__


def _env_list(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


def select_entry_points(
    config: Config, environ: Mapping[str, str]
) -> tuple[list[importlib.metadata.EntryPoint], list[PluginInfo]]:
    """The entry points to load, in registration order, and rows for the ones left out.

    Raises:
        ConfigError: config names a plugin that is not installed (the message lists those that are).
    """
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    installed = ", ".join(sorted(found)) or "(none)"
    selection = config.plugins
    for key, names in (("plugins.enable", selection.enable or ()), ("plugins.disable", selection.disable)):
        for name in names:
            if name not in found:
                hint = difflib.get_close_matches(name, found, n=1)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise ConfigError(
                    f"no installed plugin is named {name!r}{did_you_mean}; installed: {installed}",
                    path=config.source, key=key,
                )  # fmt: skip
    for name in config.tables:
        if name not in found:
            raise ConfigError(
                f"configures plugin {name!r}, which is not installed; installed: {installed}",
                path=config.source, plugin=name,
            )  # fmt: skip
    enable = selection.enable
    env_enable = _env_list(environ.get("DSH_PLUGINS"))
    autoload_off = environ.get("DSH_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
    order = list(enable) if enable is not None else sorted(found)
    chosen: list[importlib.metadata.EntryPoint] = []
    rows: list[PluginInfo] = []
    for name in sorted(found):
        ep = found[name]
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        why: tuple[PluginStatus, str] | None = None
        if name in selection.disable:
            why = (PluginStatus.BLOCKED, f"blocked by plugins.disable in {config.describe()}")
        elif autoload_off:
            why = (PluginStatus.DISABLED, "DSH_DISABLE_PLUGIN_AUTOLOAD is set")
        elif env_enable is not None and name not in env_enable:
            why = (PluginStatus.DISABLED, "not listed in DSH_PLUGINS")
        elif enable is not None and name not in enable:
            why = (PluginStatus.DISABLED, f"not listed in plugins.enable in {config.describe()}")
        if why is not None:
            rows.append(
                PluginInfo(name=name, status=why[0], distribution=dist, version=version, error=why[1])
            )
    left_out = {row.name for row in rows}
    for name in order:
        if name in found and name not in left_out:
            chosen.append(found[name])
    return chosen, rows


def check_hooks(pm: pluggy.PluginManager, plugin: object, name: str) -> tuple[str, ...]:
    """The hooks *plugin* implements; raises `PluginLoadError` for unknown or misused ones."""
    hooks: list[str] = []
    for impl_name, caller in vars(pm.hook).items():
        impls = [i for i in caller.get_hookimpls() if i.plugin is plugin]
        if not impls:
            continue
        if caller.spec is None:
            known = [h for h in vars(pm.hook) if getattr(pm.hook, h).spec is not None]
            hint = difflib.get_close_matches(impl_name, known, n=1)
            did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
            raise PluginLoadError(
                name, f"implements unknown hook {impl_name!r}{did_you_mean}"
            )
        if impl_name in PER_CALL_HOOKS and any(i.hookwrapper or i.wrapper for i in impls):
            raise PluginLoadError(
                name,
                f"{impl_name} cannot be a pluggy wrapper; dsh calls it itself "
                "(accept call_next to wrap the rest of the chain)",
            )
        hooks.append(impl_name)
    return tuple(sorted(hooks))


def load_module(spec: str) -> object:
    """Import ``module`` or ``module:attribute`` for ``--plugin``."""
    module_name, _, attribute = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj

