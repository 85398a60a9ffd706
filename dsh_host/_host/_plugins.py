"""Finding plugins through entry points, each loaded and checked in isolation.

pluggy's own ``load_setuptools_entrypoints`` stops at the first plugin that fails to import; here
every entry point is loaded on its own, and one that fails to import, to register, or that
implements a hook dsh does not know (or a known hook with argument names it does not pass), is
reported as *failed* while the host runs on without it.

Which entry points load, and in which order:

* ``[plugins] disable``, ``DSH_DISABLE_PLUGINS=a,b`` and ``dsh --disable NAME`` block names
  before import (status ``blocked``); a name that matches no installed plugin is a warning;
* ``DSH_DISABLE_PLUGIN_AUTOLOAD=1`` loads none, except those ``DSH_PLUGINS`` names;
* ``DSH_PLUGINS=a,b`` and ``[plugins] enable`` are allow-lists (an empty one loads none); a
  name left out of either is ``disabled``; a name in them that matches nothing is an error;
* every name is an `fnmatch` pattern (``hook_*``);
* registration order is the ``enable`` list when given, else the ``DSH_PLUGINS`` list, else the
  sorted entry-point names: never the accident of install order.
"""

from __future__ import annotations

import enum
import fnmatch
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

import attrs
import pluggy

from .._model._errors import ConfigError, PluginLoadError
from .._registry._hooks import ENTRY_POINT_GROUP
from ._config import Config
from ._entrypoints import EntryPointLike, installed_entry_points

__all__ = [
    "PluginInfo",
    "PluginStatus",
    "inspect_hooks",
    "installed_names",
    "plugin_name",
    "select_entry_points",
]

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


class PluginStatus(str, enum.Enum):  # noqa: UP042 - a str enum, like ApprovalOutcome
    """Where a plugin stands: running, switched off in config, blocked, or broken."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    BLOCKED = "blocked"
    FAILED = "failed"


@final
@attrs.frozen(kw_only=True)
class PluginInfo:
    """One row of ``dsh plugins``.

    ``error`` says why a plugin failed, or why it was left out (disabled or blocked); ``order``
    is an enabled plugin's place in registration order (1 = registered first; pluggy asks the
    most recently registered first, unless ``tryfirst``/``trylast`` say otherwise).
    """

    name: str
    status: PluginStatus
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    config_class: str | None = None
    error: str | None = None
    source: str = "entry point"
    order: int | None = None
    traceback: str | None = attrs.field(default=None, repr=False)
    status_lines: tuple[str, ...] = ()
    """The full Python traceback of a failure (``dsh plugins --json``, ``DSH_DEBUG=1``)."""

    def to_json(self) -> dict[str, Any]:
        """A plain JSON object, as ``dsh plugins --json`` prints it."""
        return {
            "name": self.name,
            "status": self.status.value,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "config_class": self.config_class,
            "error": self.error,
            "source": self.source,
            "order": self.order,
            "traceback": self.traceback,
            "status_lines": list(self.status_lines),
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


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _dist(ep: EntryPointLike) -> tuple[str | None, str | None]:
    dist = ep.dist
    if dist is None:
        return None, None
    return dist.name, dist.version


def _not_installed(name: str, installed: Iterable[str]) -> str:
    import difflib  # did-you-mean hints only: not at every start

    names = sorted(installed)
    hint = difflib.get_close_matches(name, names, n=1)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    listed = ", ".join(names) or "(none)"
    return f"no installed plugin is named {name!r}{did_you_mean}; installed: {listed}"


def installed_names() -> set[str]:
    """The names of every installed ``dsh.plugins`` entry point (nothing is imported)."""
    return {ep.name for ep in installed_entry_points(ENTRY_POINT_GROUP)}


def _expand(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The names matching each `fnmatch` pattern, in pattern order (sorted within one pattern)."""
    ordered = sorted(names)
    return _unique(name for p in patterns for name in ordered if fnmatch.fnmatchcase(name, p))


def _unmatched(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    ordered = sorted(names)
    return [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in ordered)]


def select_entry_points(
    config: Config, environ: Mapping[str, str], *, disable: Iterable[str] = ()
) -> tuple[list[EntryPointLike], list[PluginInfo], list[str]]:
    """The entry points to load, in registration order, rows for the ones left out, and
    warnings (one line each) for names that match no installed plugin where that is harmless.

    Every name may be an `fnmatch` pattern (``hook_*``). ``[plugins] disable``,
    ``DSH_DISABLE_PLUGINS`` and *disable* (``--disable``) block before import; one that matches
    nothing is a warning, so uninstalling a plugin never breaks a config that disables it.
    Two distributions offering the same entry-point name are both reported *failed*: which
    one would win depends on install order, and policy must not.

    Raises:
        ConfigError: ``[plugins] enable`` or ``DSH_PLUGINS`` names (or a pattern matches) no
            installed plugin: an allow-list that silently loads less is a broken install.
    """
    by_name: dict[str, list[EntryPointLike]] = {}
    for ep in installed_entry_points(ENTRY_POINT_GROUP):
        by_name.setdefault(ep.name, []).append(ep)
    selection = config.plugins
    env_enable = _env_list(environ.get("DSH_PLUGINS"))
    for name in _unmatched(selection.enable or (), by_name):
        raise ConfigError(_not_installed(name, by_name), path=config.source, key="plugins.enable")
    for name in _unmatched(env_enable or (), by_name):
        raise ConfigError(f"the DSH_PLUGINS environment variable: {_not_installed(name, by_name)}")
    blocked, warnings = _blocked(config, environ, disable, by_name)
    enable = None if selection.enable is None else _expand(selection.enable, by_name)
    env_names = None if env_enable is None else _expand(env_enable, by_name)
    autoload_off = environ.get("DSH_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
    rows: list[PluginInfo] = []
    left_out: set[str] = set()
    for name in sorted(by_name):
        eps = by_name[name]
        why: tuple[PluginStatus, str] | None = None
        if len(eps) > 1:
            owners = ", ".join(sorted(f"{d} {v}" for d, v in map(_dist, eps)))
            why = (
                PluginStatus.FAILED,
                f"entry point {name!r} is provided by several distributions ({owners}); "
                "uninstall all but one",
            )
        elif name in blocked:
            why = (PluginStatus.BLOCKED, blocked[name])
        else:
            why = _not_chosen(name, autoload_off, env_names, enable, config)
        if why is not None:
            left_out.add(name)
            for ep in eps:
                dist, version = _dist(ep)
                rows.append(
                    PluginInfo(
                        name=name, status=why[0], distribution=dist, version=version, error=why[1]
                    )
                )
    order = (
        enable if enable is not None else env_names if env_names is not None else sorted(by_name)
    )
    chosen = [by_name[name][0] for name in order if name not in left_out]
    return chosen, rows, warnings


def _blocked(
    config: Config,
    environ: Mapping[str, str],
    disable: Iterable[str],
    by_name: Mapping[str, list[EntryPointLike]],
) -> tuple[dict[str, str], list[str]]:
    """The plugins blocked before import (name -> by what), and a warning for each blocking
    name or pattern that matches no installed plugin."""
    warnings: list[str] = []
    blockers: list[tuple[str, tuple[str, ...]]] = [
        (f"plugins.disable in {config.describe()}", config.plugins.disable),
        ("the DSH_DISABLE_PLUGINS environment variable",
         _env_list(environ.get("DSH_DISABLE_PLUGINS")) or ()),
        ("--disable", tuple(disable)),
    ]  # fmt: skip
    blocked: dict[str, str] = {}
    for where, patterns in blockers:
        for name in _unmatched(patterns, by_name):
            warnings.append(f"{where}: {_not_installed(name, by_name)}; ignored")
        for name in _expand(patterns, by_name):
            blocked.setdefault(name, f"blocked by {where}")
    return blocked, warnings


def _not_chosen(
    name: str,
    autoload_off: bool,
    env_names: Sequence[str] | None,
    enable: Sequence[str] | None,
    config: Config,
) -> tuple[PluginStatus, str] | None:
    """Why an installed, unblocked plugin is left out (``DISABLED``), or ``None``."""
    if autoload_off and (env_names is None or name not in env_names):
        return PluginStatus.DISABLED, "DSH_DISABLE_PLUGIN_AUTOLOAD is set"
    if env_names is not None and name not in env_names:
        return PluginStatus.DISABLED, "not listed in the DSH_PLUGINS environment variable"
    if enable is not None and name not in enable:
        return PluginStatus.DISABLED, f"not listed in plugins.enable in {config.describe()}"
    return None


def _signature(function: Any, argnames: Iterable[str]) -> str:
    return f"{getattr(function, '__name__', 'hook')}({', '.join(argnames)})"


def inspect_hooks(pm: pluggy.PluginManager, plugin: object, name: str) -> tuple[str, ...]:
    """The hooks *plugin* implements, checked before it is registered.

    Raises:
        PluginLoadError: an implementation of a hook dsh does not know (``did you mean``), one
            taking an argument its hook does not pass, a pluggy wrapper on a hook dsh calls
            itself, or a function named like a hook but not marked ``@hookimpl``.
    """
    known = sorted(h for h, caller in vars(pm.hook).items() if caller.spec is not None)
    hooks: list[str] = []
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            if attr in known and _is_function(plugin, attr):
                raise PluginLoadError(
                    name, f"defines {attr}() without @hookimpl; decorate it with @dsh_host.hookimpl"
                )
            continue
        hook = opts.get("specname") or attr
        caller = getattr(pm.hook, hook, None)
        if caller is None or caller.spec is None:
            import difflib  # did-you-mean hints only: not at every start

            hint = difflib.get_close_matches(hook, known, n=1)
            did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
            listed = "" if hint else f"; dsh's hooks are: {', '.join(known)}"
            raise PluginLoadError(name, f"implements unknown hook {hook!r}{did_you_mean}{listed}")
        function = getattr(plugin, attr)
        impl = pluggy.HookImpl(plugin, name, function, opts)
        offered = (*caller.spec.argnames, *caller.spec.kwargnames)
        extra = [arg for arg in impl.argnames if arg not in offered]
        if extra:
            listed = ", ".join(repr(arg) for arg in extra)
            raise PluginLoadError(
                name,
                f"{_signature(function, impl.argnames)} takes {listed}, which {hook} does not "
                f"pass; its arguments are: {', '.join(caller.spec.argnames)} (accept any subset, "
                "by name)",
            )
        if hook in PER_CALL_HOOKS and (opts.get("wrapper") or opts.get("hookwrapper")):
            raise PluginLoadError(
                name,
                f"{hook} cannot be a pluggy wrapper; dsh calls it itself "
                "(accept call_next to wrap the rest of the chain)",
            )
        hooks.append(hook)
    return tuple(sorted(set(hooks)))


def _is_function(plugin: object, attr: str) -> bool:
    value = inspect.getattr_static(plugin, attr, None)
    return inspect.isfunction(value) or isinstance(value, staticmethod | classmethod)
