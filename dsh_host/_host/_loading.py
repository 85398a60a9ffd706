"""Loading one plugin from its entry point: the object to register, or the row of its failure."""

from __future__ import annotations

import attrs

from .._model._where import format_traceback, plugin_location
from ._entrypoints import EntryPointLike
from ._plugins import PluginInfo, PluginStatus

__all__ = ["at", "load_entry_point"]


def load_entry_point(
    ep: EntryPointLike,
) -> tuple[str, object, PluginInfo] | PluginInfo:
    """``(name, plugin, row)`` for a plugin loaded from *ep*, or a ``FAILED`` row saying why not.

    An entry point naming a class gets one instance per host, so plugin state never leaks
    between hosts.
    """
    dist, version = (ep.dist.name, ep.dist.version) if ep.dist else (None, None)
    row = PluginInfo(name=ep.name, status=PluginStatus.ENABLED, distribution=dist, version=version)
    verb = "import"
    try:
        plugin = ep.load()
        if isinstance(plugin, type):
            verb = "instantiate"
            plugin = plugin()
    except (Exception, SystemExit) as exc:
        where = at(plugin_location(exc, ep.value.split(":")[0].split(".")[0]))
        error = f"cannot {verb} {ep.value!r}: {type(exc).__name__}: {exc}{where}"
        failed = PluginStatus.FAILED
        return attrs.evolve(row, status=failed, error=error, traceback=format_traceback(exc))
    return ep.name, plugin, row


def at(where: str | None) -> str:
    """`` (at file:line)`` for an error message, or nothing."""
    return f" (at {where})" if where else ""
