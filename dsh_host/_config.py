"""Configuration: where it is found, its top-level shape, and per-plugin tables.

A config file has three tables, all optional::

    [host]
    workspace = "."          # the root every built-in resolves paths against
    observer_timeout = 10    # seconds an async dsh_tool_result observer may take

    [plugins]
    enable = ["tools", "permissions"]   # an allow-list, in registration order (omit: all)
    disable = ["audit"]                 # blocked before import

    [plugin.permissions]                # one table per plugin, structured into its config class
    default = "ask"

In ``pyproject.toml`` the same tables live under ``[tool.dsh]``. Lookup order: an explicit path
(``--config`` or ``Host.from_config(path)``), then ``$DSH_CONFIG``, then ``dsh.toml`` in the
working directory, then ``[tool.dsh]`` in ``pyproject.toml`` there; none at all is fine.
"""

from __future__ import annotations

import os
import pathlib
import tomllib
from collections.abc import Mapping
from typing import Any, final

import attrs
import cattrs

from ._convert import error_messages, make_converter
from ._errors import ConfigError

__all__ = ["Config", "HostSettings", "PluginSelection", "find_config", "load_config"]

_TOP_KEYS = ("host", "plugins", "plugin")


@final
@attrs.frozen
class HostSettings:
    """The ``[host]`` table."""

    workspace: pathlib.Path = attrs.field(factory=pathlib.Path.cwd)
    observer_timeout: float = 10.0


@final
@attrs.frozen
class PluginSelection:
    """The ``[plugins]`` table: which entry-point plugins load, in which order."""

    enable: tuple[str, ...] | None = None
    disable: tuple[str, ...] = ()


@final
@attrs.frozen
class Config:
    """A loaded configuration; ``source`` is the file it came from (``None``: defaults or a dict)."""

    source: str | None = None
    host: HostSettings = attrs.field(factory=HostSettings)
    plugins: PluginSelection = attrs.field(factory=PluginSelection)
    tables: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    def describe(self) -> str:
        return self.source or "the built-in defaults"


def find_config(cwd: pathlib.Path | None = None, environ: Mapping[str, str] | None = None) -> pathlib.Path | None:
    """The config file that applies in *cwd*: ``$DSH_CONFIG``, ``dsh.toml``, or a
    ``pyproject.toml`` with a ``[tool.dsh]`` table; ``None`` if there is none."""
    environ = os.environ if environ is None else environ
    cwd = pathlib.Path.cwd() if cwd is None else cwd
    if environ.get("DSH_CONFIG"):
        return pathlib.Path(environ["DSH_CONFIG"])
    candidate = cwd / "dsh.toml"
    if candidate.is_file():
        return candidate
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        if isinstance(data.get("tool"), dict) and "dsh" in data["tool"]:
            return pyproject
    return None


def _read(path: pathlib.Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "no such config file; check the path given by --config or DSH_CONFIG", path=str(path)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the config file: {exc}", path=str(path)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML: {exc}", path=str(path)) from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        return tool.get("dsh", {}) if isinstance(tool, dict) else {}
    return data


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | None) -> Config:
    """Load and check a config file (or a dict of the same structure); ``None`` gives defaults.

    Raises:
        ConfigError: naming the file, the table and the key, and what was expected.
    """
    if source is None:
        return Config()
    if isinstance(source, Mapping):
        data, where = source, None
    else:
        path = pathlib.Path(source)
        data, where = _read(path), str(path)
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown top-level table {unknown[0]!r}; expected [host], [plugins] and [plugin.<name>]",
            path=where, key=unknown[0],
        )  # fmt: skip
    converter = make_converter()
    host = _structure(converter, data.get("host", {}), HostSettings, where, "host")
    if where is not None and not host.workspace.is_absolute():
        base = pathlib.Path(where).resolve().parent
        host = attrs.evolve(host, workspace=(base / host.workspace).resolve())
    plugins = _structure(converter, data.get("plugins", {}), PluginSelection, where, "plugins")
    tables = data.get("plugin", {})
    if not isinstance(tables, Mapping) or not all(isinstance(t, Mapping) for t in tables.values()):
        raise ConfigError("[plugin] must hold one table per plugin: [plugin.<name>]", path=where)
    return Config(source=where, host=host, plugins=plugins, tables=dict(tables))


def _structure(
    converter: cattrs.Converter, data: Any, cls: type[Any], where: str | None, table: str
) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{table}] must be a table", path=where, key=table)
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        raise ConfigError(_explain(exc, cls), path=where, key=f"{table}") from None


def structure_plugin_config(
    data: Mapping[str, Any], cls: type[Any], *, plugin: str, where: str | None
) -> Any:
    """Structure one ``[plugin.<name>]`` table into *cls*; every problem named, with its key."""
    try:
        return make_converter().structure(dict(data), cls)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        raise ConfigError(_explain(exc, cls), path=where, plugin=plugin) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value: {exc}", path=where, plugin=plugin) from None


def _explain(exc: BaseException, cls: type[Any]) -> str:
    lines = error_messages(exc, path="")
    fields = ", ".join(f"{f.name} ({_type_name(f.type)})" for f in attrs.fields(cls))
    problems = "; ".join(line.lstrip(".") for line in lines)
    return f"{problems}. Expected keys: {fields}"


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")
