"""The configuration ``dsh audit`` runs under: where it records calls, and why none, if none.

``dsh audit`` reads a database; it does not start a host. When it finds nothing, the reason is
often not an idle workspace but a configuration in which the ``audit`` plugin is off: blocked by
``[plugins] disable`` (or ``DSH_DISABLE_PLUGINS``), left out of ``[plugins] enable`` (or
``DSH_PLUGINS``, or by ``DSH_DISABLE_PLUGIN_AUTOLOAD``), or ``[plugin.audit] enabled = false``.
`audit_off` reads the configuration found here (as ``dsh`` would, or the one ``--config``
names) without loading any plugin, and says which, so "no calls recorded" is not taken for
"nothing ran". `configured_store` is the database that configuration records into
(``[plugin.audit] url`` or ``path``), which ``dsh audit`` reads by default.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dsh_plugins_builtin._common._dirs import audit_path_in

if TYPE_CHECKING:
    from dsh_host import Host

__all__ = ["audit_off", "configured_store", "found_host"]


def found_host(path: str | None, environ: Mapping[str, str] | None = None) -> Host:
    """A host, never started, of the configuration at *path*, else of the one ``dsh`` finds in
    the working directory (the defaults when there is none), made without loading any plugin.

    Raises:
        ConfigError: it cannot be read.
    """
    from dsh_host import Host

    environ = os.environ if environ is None else environ
    return Host.from_config(path, load_entrypoints=False, environ=environ)


def configured_store(host: Host) -> Path | str | None:
    """``[plugin.audit] url``, else ``path`` (relative to ``[host] workspace``, ``~`` expanded,
    as the plugin takes it), else ``None`` (the default database)."""
    config = host.config
    table = config.tables.get("audit", {})  # a table: `load_config` checked it
    url, path = table.get("url"), table.get("path")
    if isinstance(url, str) and url:
        return url
    if isinstance(path, str) and path:
        return audit_path_in(config.host.workspace, path)
    return None


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def _matches(patterns: object) -> bool:
    return isinstance(patterns, list | tuple) and any(
        isinstance(p, str) and fnmatch.fnmatchcase("audit", p) for p in patterns
    )


def audit_off(environ: Mapping[str, str] | None = None, host: Host | None = None) -> str | None:
    """Why the ``audit`` plugin is off in *host*'s configuration (default: the one found in the
    working directory) (``"[plugin.audit] enabled = false in dsh.toml"``), or ``None`` (it is
    on, or the configuration cannot be read: ``dsh`` itself then says why)."""
    environ = os.environ if environ is None else environ
    if host is None:
        try:
            host = found_host(None, environ)
        except Exception:
            return None
    config = host.config
    where = config.describe()
    if _matches(config.plugins.disable):
        return f"it is blocked by [plugins] disable in {where}"
    if _matches(_names(environ.get("DSH_DISABLE_PLUGINS"))):
        return "it is blocked by DSH_DISABLE_PLUGINS"
    env_enable = _names(environ.get("DSH_PLUGINS"))
    if environ.get("DSH_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0") and not _matches(env_enable):
        return "DSH_DISABLE_PLUGIN_AUTOLOAD is set"
    if env_enable is not None and not _matches(env_enable):
        return "it is not listed in DSH_PLUGINS"
    if config.plugins.enable is not None and not _matches(config.plugins.enable):
        return f"it is not listed in [plugins] enable in {where}"
    table = config.tables.get("audit", {})
    if isinstance(table, Mapping) and table.get("enabled") is False:
        return f"[plugin.audit] enabled = false in {where}"
    return None
