"""A host's lifetime: `open_host` (in `_open`) starts one, `close_host` (``Host.aclose``) ends it.

Starting is what ``Host(...)`` does (plugins registered and configured, ``dsh_host_started``:
mounted MCP servers launched, the audit writer opened). Ending calls every plugin's
``dsh_host_stopping`` once, each isolated from the others: the audit plugin commits its queued
rows and stops its writer, the ``mcp`` plugin says goodbye to its servers and reaps them. A
plugin that raises there is logged and stops no other.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from .._model._errors import ConfigError
from .._model._text import printable
from .._pipeline._contain import real_interrupt
from .._schema._tool import ToolSchema
from ._config import Config, directory_problem, load_config

if TYPE_CHECKING:
    from .._registry._hooks import HookRelay


class Stoppable(Protocol):
    """What closing needs of a host: its hook relay and its closed flag (`Host` is one)."""

    _closed: bool
    """`close_host` ran (or is running): the host refuses calls (`closed_error`)."""

    @property
    def hooks(self) -> HookRelay: ...


__all__ = [
    "SchemaFormat",
    "Stoppable",
    "close_host",
    "closed_error",
    "export_schemas",
    "host_config",
    "is_closed",
]

SchemaFormat = Literal["openai", "anthropic", "mcp"]

logger = logging.getLogger("dsh_host")

ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | Config | None


def host_config(config: ConfigSource, workspace: str | os.PathLike[str] | None) -> Config:
    """*config* loaded (``None``: the defaults), with ``[host] workspace`` set to *workspace*."""
    loaded = config if isinstance(config, Config) else load_config(config)
    if workspace is None:
        return loaded
    root = pathlib.Path(workspace).expanduser().resolve()
    problem = directory_problem(root)
    if problem is not None:  # as a config file's ``[host] workspace`` (`load_config`)
        raise ConfigError(
            f"the workspace {printable(str(root))!r} given to open_host {problem}; pass an "
            "existing directory, or None to use the config's [host] workspace",
            path=loaded.source, key="host.workspace",
        )  # fmt: skip
    return attrs.evolve(loaded, host=attrs.evolve(loaded.host, workspace=root))


async def close_host(host: Stoppable) -> None:
    """Stop *host*'s plugins once (later calls do nothing); see the module docstring. The host
    refuses calls from the start of its closing."""
    if host._closed:
        return
    host._closed = True
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


def closed_error() -> RuntimeError:
    """What a call to a closed host raises (`Host.call`, `Host.run_tool_calls`)."""
    return RuntimeError(
        "this dsh host is closed (its `async with dsh_host.open_host()` ended, or aclose() "
        "ran): open a new one"
    )


def is_closed(host: Stoppable) -> bool:
    """Whether `close_host` ran for *host*."""
    return host._closed


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
