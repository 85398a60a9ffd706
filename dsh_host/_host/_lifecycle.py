"""A host's lifetime: `open_host` starts one, `close_host` (``Host.aclose``) ends it.

Starting is what ``Host(...)`` does (plugins registered and configured, ``dsh_host_started``:
mounted MCP servers launched, the audit writer opened). Ending calls every plugin's
``dsh_host_stopping`` once, each isolated from the others: the audit plugin commits its queued
rows and stops its writer, the ``mcp`` plugin says goodbye to its servers and reaps them. A
plugin that raises there is logged and stops no other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._pipeline._contain import real_interrupt
from .._schema._tool import ToolSchema
from ._config import Config, load_config

if TYPE_CHECKING:
    from ._host import Host

__all__ = ["SchemaFormat", "close_host", "export_schemas", "host_config", "is_closed", "open_host"]

SchemaFormat = Literal["openai", "anthropic", "mcp"]

logger = logging.getLogger("dsh_host")

_closed: weakref.WeakSet[Host] = weakref.WeakSet()

ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | Config | None


def host_config(config: ConfigSource, workspace: str | os.PathLike[str] | None) -> Config:
    """*config* loaded (``None``: the defaults), with ``[host] workspace`` set to *workspace*."""
    loaded = config if isinstance(config, Config) else load_config(config)
    if workspace is None:
        return loaded
    root = pathlib.Path(workspace).expanduser().resolve()
    return attrs.evolve(loaded, host=attrs.evolve(loaded.host, workspace=root))


@contextlib.asynccontextmanager
async def open_host(
    config: ConfigSource = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    plugins: Iterable[object] = (),
    entry_points: bool = True,
) -> AsyncIterator[Host]:
    """``async with open_host(...) as host:`` a started `Host`, closed (`Host.aclose`) on exit.

    Args:
        config: ``None`` (defaults), a TOML path, a dict of the same structure, or a `Config`.
        workspace: overrides ``[host] workspace``.
        plugins: plugin objects registered after the entry points, in this order.
        entry_points: load the plugins installed under ``dsh.plugins`` (tests pass ``False``).
    """
    from ._host import Host

    host = Host(host_config(config, workspace), plugins=plugins, load_entrypoints=entry_points)
    try:
        yield host
    finally:
        with trio.CancelScope(shield=True):  # a cancelled body still flushes and reaps
            await close_host(host)


async def close_host(host: Host) -> None:
    """Stop *host*'s plugins once (later calls do nothing); see the module docstring."""
    if host in _closed:
        return
    _closed.add(host)
    for impl in host.hooks.impls("dsh_host_stopping"):
        try:
            await impl(host=host)
        except BaseException as exc:  # contained: one plugin's failure stops no other
            if real_interrupt(exc):
                raise
            logger.warning(
                "dsh: plugin %r: dsh_host_stopping failed: %s: %s",
                impl.plugin, type(exc).__name__, exc,
            )  # fmt: skip


def is_closed(host: Host) -> bool:
    """Whether `close_host` ran for *host*."""
    return host in _closed


def export_schemas(schemas: Iterable[ToolSchema], format: SchemaFormat) -> list[Any]:
    """*schemas* as a provider's ``tools`` entries."""
    exports = {
        "openai": ToolSchema.to_openai,
        "anthropic": ToolSchema.to_anthropic,
        "mcp": ToolSchema.to_mcp,
    }
    if format not in exports:
        raise ValueError(f'format must be "openai", "anthropic" or "mcp", not {format!r}')
    return [exports[format](schema) for schema in schemas]
