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

import difflib
import enum
import math
import os
import pathlib
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, MutableSequence, Sequence, Set
from typing import Any, Literal, final

import attrs
import cattrs
import cattrs.strategies

from .._model._errors import ConfigError, PluginLoadError
from .._schema._convert import shared_converter

__all__ = [
    "Config",
    "HostSettings",
    "PluginSelection",
    "config_converter",
    "describe_type",
    "find_config",
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


_CONVERTER = shared_converter()


def config_converter() -> cattrs.Converter:
    """The one converter every config table is structured (and unstructured) with."""
    return _CONVERTER


# -- finding and reading ---------------------------------------------------------------------


def find_config(
    cwd: pathlib.Path | None = None, environ: Mapping[str, str] | None = None
) -> pathlib.Path | None:
    """The config file that applies in *cwd*: ``$DSH_CONFIG``, ``dsh.toml``, or a
    ``pyproject.toml`` with a ``[tool.dsh]`` table; ``None`` if there is none.

    Raises:
        ConfigError: ``$DSH_CONFIG`` names a file that does not exist.
    """
    environ = os.environ if environ is None else environ
    cwd = pathlib.Path.cwd() if cwd is None else cwd
    if environ.get("DSH_CONFIG"):
        named = pathlib.Path(environ["DSH_CONFIG"])
        if not named.is_file():
            raise ConfigError(
                "no such config file; it is named by the DSH_CONFIG environment variable "
                "(unset it or point it at a TOML file)",
                path=str(named),
            )
        return named
    candidate = cwd / "dsh.toml"
    if candidate.is_file():
        return candidate
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
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
    except RecursionError:
        raise ConfigError(
            "is nested too deeply (arrays or tables inside one another hundreds of levels "
            "deep); a dsh config needs a few levels at most",
            path=str(path),
        ) from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        dsh = tool.get("dsh", {}) if isinstance(tool, dict) else {}
        if not isinstance(dsh, dict):
            raise ConfigError("[tool.dsh] must be a table", path=str(path), key="tool.dsh")
        return dsh
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
        hint = _did_you_mean(unknown[0], _TOP_KEYS)
        raise ConfigError(
            f"unknown top-level table [{unknown[0]}]{hint}; "
            "a dsh config has [host], [plugins] and [plugin.<name>] tables",
            path=where, key=unknown[0],
        )  # fmt: skip
    host = _structure(data.get("host", {}), HostSettings, where=where, table="host")
    if where is not None and not host.workspace.is_absolute():
        base = pathlib.Path(where).resolve().parent
        host = attrs.evolve(host, workspace=(base / host.workspace).resolve())
    plugins = _structure(data.get("plugins", {}), PluginSelection, where=where, table="plugins")
    tables = data.get("plugin", {})
    if not isinstance(tables, Mapping):
        raise ConfigError("[plugin] must hold one table per plugin: [plugin.<name>]", path=where)
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(
                f"must be a table ([plugin.{name}] with keys under it), not {_got(table)}",
                path=where, plugin=name,
            )  # fmt: skip
    given = where is None
    return Config(source=where, host=host, plugins=plugins, tables=dict(tables), given=given)


# -- structuring -----------------------------------------------------------------------------


_STRUCTURE_ERRORS = (
    cattrs.BaseValidationError,
    cattrs.ForbiddenExtraKeysError,
    TypeError,
    ValueError,
)


def _checked(data: Mapping[str, Any], cls: type[Any], fail: Callable[..., ConfigError]) -> Any:
    """Check *data* strictly against *cls*, then structure it; ``fail(message, key)`` on error."""
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
        return _CONVERTER.structure(data, cls)
    except RecursionError:
        raise fail("a value is nested too deeply (hundreds of levels); use a few", None) from None
    except cattrs.StructureHandlerNotFoundError as exc:  # the class's fault, not the file's
        raise PluginLoadError(
            cls.__qualname__, f"its config class cannot be structured: {exc}"
        ) from exc
    except _STRUCTURE_ERRORS as exc:
        found = _validator_failure(data, cls)
        if found is None:
            raise fail(f"invalid value: {_leaves(exc)}", None) from None
        raise fail(f"invalid value: {found[1]}", found[0]) from None


def _validator_failure(data: Mapping[str, Any], cls: type[Any]) -> tuple[str, str] | None:
    """The key and message of the first field whose own validator rejects its value.

    attrs runs validators inside ``__init__``, and a custom validator's exception need not say
    which field it was checking; so each given field's validators are run again, alone, on
    the value cattrs makes of it. ``None`` if none of them fails that way.
    """
    hints = {name: tp for name, tp, _ in _fields(cls)}
    for field in attrs.fields(cls):
        key = field.name if field.name in data else field.alias if field.alias in data else None
        if field.validator is None or key is None:
            continue
        try:
            value = _CONVERTER.structure(data[key], hints.get(field.name, field.type))
            field.validator(None, field, value)
        except (TypeError, ValueError) as exc:
            return field.name, _leaves(exc)
        except Exception:  # a validator that needs the instance: leave it to the full message
            continue
    return None


def _structure(data: Any, cls: type[Any], *, where: str | None, table: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{table}] must be a table, not {_got(data)}", path=where, key=table)

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
    keys = ", ".join(f"{name} ({describe_type(tp)})" for name, tp, _ in _fields(cls))
    return key, f"{first}{rest}. Valid keys: {keys or '(none)'}"


# -- strict checking -------------------------------------------------------------------------


def _fields(cls: type[Any]) -> list[tuple[str, Any, bool]]:
    """``(key, type, required)`` for every init field of an attrs class."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    return [
        (f.metadata.get("key", f.name), hints.get(f.name, f.type), f.default is attrs.NOTHING)
        for f in attrs.fields(cls)
        if f.init
    ]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _did_you_mean(name: str, choices: Sequence[str] | Set[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_value(value: Any, tp: Any, path: str = "") -> list[tuple[str, str]]:
    """Every way *value* (plain TOML data) fails to be a *tp*: ``(key path, problem)`` pairs."""
    problems: list[tuple[str, str]] = []
    _check(value, tp, path, problems)
    return problems


_SEQUENCES = (list, tuple, set, frozenset, Sequence, MutableSequence, Set)


def _check(value: Any, tp: Any, path: str, out: list[tuple[str, str]]) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    wrong = (path, f"expected {describe_type(tp)}, got {_got(value)}")
    if isinstance(tp, type) and attrs.has(tp):
        if not isinstance(value, Mapping):
            out.append(wrong)
            return
        fields = _fields(tp)
        names = [name for name, _, _ in fields]
        for key in value:
            if key not in names:
                out.append((_join(path, key), f"unknown key{_did_you_mean(key, names)}"))
        for name, field_type, required in fields:
            if name in value:
                _check(value[name], field_type, _join(path, name), out)
            elif required:
                missing = f"required key is missing; expected {describe_type(field_type)}"
                out.append((_join(path, name), missing))
    elif origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:  # TOML has no null: an optional key is simply left out
            _check(value, members[0], path, out)
        elif all(check_value(value, arg) for arg in members):
            out.append(wrong)
    elif origin in _SEQUENCES or tp in (list, tuple, set, frozenset):
        fixed = origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis)
        if not isinstance(value, list | tuple) or (fixed and len(value) != len(args)):
            out.append(wrong)
            return
        for i, item in enumerate(value):
            if args:
                _check(item, args[i] if fixed else args[0], f"{path}[{i}]", out)
    elif origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            out.append(wrong)
            return
        for key, item in value.items():
            if len(args) == 2:
                _check(item, args[1], _join(path, str(key)), out)
    elif not _fits_scalar(value, tp):
        out.append(wrong)


def _fits_scalar(value: Any, tp: Any) -> bool:
    if tp is Any or tp is object:
        return True
    if typing.get_origin(tp) is Literal:
        return any(value == arg and type(value) is type(arg) for arg in typing.get_args(tp))
    if tp is bool:
        return type(value) is bool
    if tp is int:
        return type(value) is int
    if tp is float:
        return type(value) in (int, float)
    if tp is str:
        return type(value) is str
    if isinstance(tp, type) and issubclass(tp, pathlib.PurePath):
        return type(value) is str or isinstance(value, pathlib.PurePath)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or any(
            value == m.value and type(value) is type(m.value) for m in tp
        )
    return True  # anything else is left to cattrs and the class's own validators


_ARTICLE_TYPES: dict[Any, tuple[str, str]] = {
    str: ("a string", "strings"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "booleans"),
}


def describe_type(tp: Any, plural: bool = False) -> str:
    """What a value of *tp* looks like in TOML, in words (``a list of strings``)."""
    if tp in _ARTICLE_TYPES:
        return _ARTICLE_TYPES[tp][1 if plural else 0]
    if tp is Any or tp is object:
        return "values" if plural else "any value"
    if isinstance(tp, type) and issubclass(tp, pathlib.PurePath):
        return "path strings" if plural else "a path string"
    if isinstance(tp, type) and attrs.has(tp):
        return "tables" if plural else "a table"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    choices: list[Any] = []
    if origin is Literal:
        choices = list(args)
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        choices = [m.value for m in tp]
    if choices:
        shown = ", ".join(f'"{c}"' if isinstance(c, str) else repr(c) for c in choices)
        return f"one of {shown}"
    if origin in (typing.Union, types.UnionType):
        members = [describe_type(a, plural) for a in args if a is not type(None)]
        return " or ".join(members)
    if origin in _SEQUENCES or tp in (list, tuple, set, frozenset):
        if args and not (origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)):
            return f"lists of {describe_type(args[0], True)}" if plural else (
                f"a list of {describe_type(args[0], True)}"
            )  # fmt: skip
        return "lists" if plural else "a list"
    if origin in (dict, Mapping) or tp is dict:
        return "tables" if plural else "a table"
    return getattr(tp, "__name__", str(tp))


def _got(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f'the string "{shown}"'
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return f"a {type(value).__name__}"
