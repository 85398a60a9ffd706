"""Configuration: where it is found, its top-level shape, and per-plugin tables.

A config file has three tables, all optional::

    [host]
    workspace = "."          # the root every built-in resolves paths against
    hook_timeout = 30        # seconds each per-call hook may take (outside the tool body)
    approval_timeout = 900   # seconds an approver (a person) may take to answer
    observer_timeout = 10    # seconds an async dsh_tool_result observer may take

    [plugins]
    enable = ["tools", "permissions"]   # an allow-list, in registration order (omit: all)
    disable = ["audit"]                 # blocked before import

    [plugin.permissions]                # one table per plugin, structured into its config class
    default = "ask"

In ``pyproject.toml`` the same tables live under ``[tool.dsh]``. Lookup order: an explicit path
(``--config`` or ``Host.from_config(path)``), then ``$DSH_CONFIG``, then ``dsh.toml`` in the
working directory, then ``[tool.dsh]`` in ``pyproject.toml`` there; none at all is fine.

Every table is checked against its attrs class before cattrs structures it, strictly: TOML
``"5"`` is not an integer, ``"false"`` is not a boolean and ``"abc"`` is not a list. Each problem
names its key and what was expected.
"""

from __future__ import annotations

import math
import os
import pathlib
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from .._model._errors import ConfigError, PluginLoadError
from .._model._text import printable

if TYPE_CHECKING:  # imported on the first table to structure: an empty one needs none
    import cattrs
from .._schema._convert import is_structure_error, shared_converter
from ._checking import check_value, describe_type, did_you_mean, got, table_at, typed_fields
from ._configfile import read_table

__all__ = [
    "Config",
    "HostSettings",
    "PluginSelection",
    "config_converter",
    "config_from",
    "describe_type",
    "load_config",
    "structure_plugin_config",
]

_TOP_KEYS = ("host", "plugins", "plugin")


def _seconds(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"[host] {attribute.name} must be a finite number of seconds greater than 0, "
            f"got {value!r}"
        )


@final
@attrs.frozen
class HostSettings:
    """The ``[host]`` table.

    Attributes:
        workspace: the root every built-in resolves paths against.
        hook_timeout: seconds each per-call hook (pre-execute, guard, post-execute, the part of an
            execute wrapper outside ``call_next``) may take before the call ends
            ``PLUGIN_FAILED``.
        approval_timeout: seconds a ``dsh_tool_approve`` answerer (usually a person) may take.
        observer_timeout: seconds an async ``dsh_tool_result`` observer may take; one cut off
            is reported.
    """

    workspace: pathlib.Path = attrs.field(factory=pathlib.Path.cwd)
    hook_timeout: float = attrs.field(default=30.0, validator=_seconds)
    approval_timeout: float = attrs.field(default=900.0, validator=_seconds)
    observer_timeout: float = attrs.field(default=10.0, validator=_seconds)


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
    given: bool = False
    """Whether it was given as a dict rather than read from a file (or left at the defaults)."""

    def describe(self) -> str:
        """Where this configuration came from, for messages."""
        if self.source is not None:
            return self.source
        return "the configuration given to Host" if self.given else "the built-in defaults"


def config_converter() -> cattrs.Converter:
    """The one converter every config table is structured (and unstructured) with."""
    return shared_converter()


# -- reading ---------------------------------------------------------------------------------


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | None) -> Config:
    """Load and check a config file (or a dict of the same structure); ``None`` gives defaults.

    Raises:
        ConfigError: naming the file, the table and the key, and what was expected.
    """
    if source is None:
        return Config()
    if isinstance(source, Mapping):
        return config_from(source, None)
    path = pathlib.Path(source)
    return config_from(read_table(path), str(path))


def config_from(data: Mapping[str, Any], where: str | None) -> Config:
    """The configuration *data* holds, read from the file *where* (``None``: given as a dict).

    Raises:
        ConfigError: naming the file, the table and the key, and what was expected.
    """
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        hint = did_you_mean(unknown[0], _TOP_KEYS)
        raise ConfigError(
            f"unknown top-level table [{unknown[0]}]{hint}; "
            "a dsh config has [host], [plugins] and [plugin.<name>] tables",
            path=where, key=unknown[0],
        )  # fmt: skip
    host = _structure(data.get("host", {}), HostSettings, where=where, table="host")
    if where is not None and not host.workspace.expanduser().is_absolute():
        base = pathlib.Path(where).resolve().parent
        host = attrs.evolve(host, workspace=(base / host.workspace).resolve())
    elif where is not None:  # ``~`` and ``~user`` as every other path of a dsh config
        host = attrs.evolve(host, workspace=host.workspace.expanduser().resolve())
    if where is not None and "workspace" in data.get("host", {}):
        _check_workspace(host.workspace, where)
    plugins = _structure(data.get("plugins", {}), PluginSelection, where=where, table="plugins")
    tables = data.get("plugin", {})
    if not isinstance(tables, Mapping):
        raise ConfigError("[plugin] must hold one table per plugin: [plugin.<name>]", path=where)
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(
                f"must be a table ([plugin.{name}] with keys under it), not {got(table)}",
                path=where, plugin=name,
            )  # fmt: skip
    given = where is None
    return Config(source=where, host=host, plugins=plugins, tables=dict(tables), given=given)


def directory_problem(path: pathlib.Path) -> str | None:
    """Why *path* cannot be a workspace (``"does not exist"``, ``"is not a directory"``, ...),
    or ``None`` when it is a directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be used ({exc.strerror or exc})"
    return None if stat.S_ISDIR(st.st_mode) else "is not a directory"


def _check_workspace(workspace: pathlib.Path, where: str) -> None:
    """A config file's ``[host] workspace`` must be a directory: every tool call resolves its
    paths against it, and would otherwise fail, each in its own confusing way."""
    problem = directory_problem(workspace)
    if problem is not None:
        raise ConfigError(
            f"[host] workspace {printable(str(workspace))!r} {problem}; set it to an existing "
            "directory (a relative path is taken from the config file's directory), or leave "
            "it out to use the directory dsh starts in",
            path=where, key="host.workspace",
        )  # fmt: skip


# -- structuring -----------------------------------------------------------------------------


def _checked(data: Mapping[str, Any], cls: type[Any], fail: Callable[..., ConfigError]) -> Any:
    """Check *data* strictly against *cls*, then structure it; ``fail(message, key)`` on error."""
    if not data and _all_defaulted(cls):
        try:  # what structuring {} comes to, without building the class's converter code
            return cls()
        except (TypeError, ValueError):
            pass  # a default its own validator rejects: the full path names it
    try:
        problems = check_value(dict(data), cls)
    except RecursionError:
        raise fail("a value is nested too deeply (hundreds of levels); use a few", None) from None
    if problems:
        key, message = _summarise(problems, cls)
        raise fail(message, key)
    data = dict(data)
    for f in attrs.fields(cls):  # a key that is a Python keyword: metadata={"key": "import"}
        if f.metadata.get("key", f.name) in data and f.metadata.get("key", f.name) != f.name:
            data[f.name] = data.pop(f.metadata["key"])
    try:
        return shared_converter().structure(data, cls)
    except RecursionError:
        raise fail("a value is nested too deeply (hundreds of levels); use a few", None) from None
    except Exception as exc:
        import cattrs  # imported by the converter already

        if isinstance(exc, cattrs.StructureHandlerNotFoundError):  # the class's fault
            raise PluginLoadError(
                cls.__qualname__, f"its config class cannot be structured: {exc}"
            ) from exc
        if not isinstance(exc, TypeError | ValueError) and not is_structure_error(exc):
            raise
        found = _validator_failure(data, cls)
        if found is None:
            raise fail(f"invalid value: {_leaves(exc)}", None) from None
        raise fail(f"invalid value: {found[1]}", found[0]) from None


def _all_defaulted(cls: type[Any]) -> bool:
    """Whether every field ``cls()`` takes has a default (then an empty table is ``cls()``)."""
    return attrs.has(cls) and all(
        f.default is not attrs.NOTHING for f in attrs.fields(cls) if f.init
    )


def _validator_failure(data: Mapping[str, Any], cls: type[Any]) -> tuple[str, str] | None:
    """The key and message of the first field whose own validator rejects its value.

    attrs runs validators inside ``__init__``, and a custom validator's exception need not say
    which field it was checking; so each given field's validators are run again, alone, on
    the value cattrs makes of it. ``None`` if none of them fails that way.
    """
    hints = {name: tp for name, tp, _ in typed_fields(cls)}
    for field in attrs.fields(cls):
        key = field.name if field.name in data else field.alias if field.alias in data else None
        if field.validator is None or key is None:
            continue
        try:
            value = shared_converter().structure(data[key], hints.get(field.name, field.type))
            field.validator(None, field, value)
        except (TypeError, ValueError) as exc:
            return field.name, _leaves(exc)
        except Exception:  # a validator that needs the instance: leave it to the full message
            continue
    return None


def _structure(data: Any, cls: type[Any], *, where: str | None, table: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{table}] must be a table, not {got(data)}", path=where, key=table)

    def fail(message: str, key: str | None) -> ConfigError:
        return ConfigError(message, path=where, key=f"{table}.{key}" if key else table)

    return _checked(data, cls, fail)


def structure_plugin_config(
    data: Mapping[str, Any], cls: type[Any], *, plugin: str, where: str | None
) -> Any:
    """Structure one ``[plugin.<name>]`` table into *cls*; every problem named, with its key.

    Raises:
        ConfigError: an unknown key, a value of the wrong type, a missing required key, or a
            value the class's own validators reject.
        PluginLoadError: *cls* has a field type the converter cannot structure.
    """

    def fail(message: str, key: str | None) -> ConfigError:
        return ConfigError(message, path=where, plugin=plugin, key=key or None)

    return _checked(data, cls, fail)


def _leaves(exc: BaseException) -> str:
    """The messages of the exceptions inside cattrs' exception groups (a validator's words)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_leaves(inner) for inner in exc.exceptions)
    if len(exc.args) > 1 and isinstance(exc.args[1], attrs.Attribute) and exc.args[0]:
        return str(exc.args[0])  # attrs' own validators: (message, attribute, expected, value)
    return str(exc) or type(exc).__name__


def _summarise(problems: list[tuple[str, str]], cls: type[Any]) -> tuple[str, str]:
    """The first problem's key, and one message naming every problem."""
    key, first = problems[0]
    rest = "".join(f"; key {k!r}: {m}" for k, m in problems[1:])
    table, inner = table_at(cls, key)
    keys = ", ".join(f"{name} ({describe_type(tp)})" for name, tp, _ in typed_fields(inner))
    where = f" of {table}" if table else ""
    return key, f"{first}{rest}. Valid keys{where}: {keys or '(none)'}"
