"""The exception hierarchy.

::

    DshError(code)                  every error dsh raises or maps to a result code
    ├── ToolArgsError               INVALID_ARGS        arguments a model sent do not fit the schema
    ├── ToolNotFoundError           UNKNOWN_TOOL        no tool by that name is visible in the scope
    ├── ToolOutputError             INVALID_TOOL_OUTPUT a tool returned something that is not JSON-safe
    ├── JsonSchemaError             UNSUPPORTED_SCHEMA  a schema outside what dsh compiles or validates
    ├── ConfigError                 CONFIG_ERROR        a config file, table or key is wrong
    └── PluginLoadError             PLUGIN_LOAD_ERROR   a plugin could not be imported or registered

A tool body may raise any `DshError` (or a subclass with its own ``code``); the pipeline turns it
into an error result carrying that code. Anything else a body raises becomes ``TOOL_FAILED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._text import named

__all__ = [
    "ConfigError",
    "DshError",
    "JsonSchemaError",
    "PluginFailure",
    "PluginLoadError",
    "ToolArgsError",
    "ToolNotFoundError",
    "ToolOutputError",
]


class DshError(Exception):
    """Base of every dsh error; ``code`` is the machine-readable outcome code.

    ``detail`` (optional) is for the operator, never the model: raised by a tool body, it is
    kept in the error result's ``meta["detail"]`` and shown in the body's ``--trace`` line
    (what a server actually sent, say). Keep it bounded; it is shown escaped.
    """

    code: str = "DSH_ERROR"
    detail: str | None = None

    def __init__(
        self, message: str = "", code: str | None = None, *, detail: str | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if detail is not None:
            self.detail = detail

    @property
    def message(self) -> str:
        """The message without any ``Error:`` prefix."""
        return str(self.args[0]) if self.args else ""


_VIOLATION_SHOWN = 500  # characters of one violation (it repeats the model's keys)
_VIOLATIONS_LISTED = 20  # violations the message lists; the rest are counted


class _ViolationsError(DshError):
    """Each violation is escaped and cut (`named`): it repeats what the model sent (a key of
    90 KB, an escape sequence in a key); the message lists the first 20 and counts the rest
    (5,000 undeclared keys made a 340 KB message). ``violations`` keeps every one."""

    _prefix = ""

    def __init__(self, violations: Iterable[str], *, prefix: str | None = None) -> None:
        self.violations: tuple[str, ...] = tuple(named(v, _VIOLATION_SHOWN) for v in violations)
        head = self._prefix if prefix is None else prefix
        listed = "; ".join(self.violations[:_VIOLATIONS_LISTED])
        more = len(self.violations) - _VIOLATIONS_LISTED
        super().__init__(f"{head}{listed}" + (f"; and {more:,} more" if more > 0 else ""))


class ToolArgsError(_ViolationsError):
    """The arguments of a call violate the tool's parameter schema; ``violations`` lists them all."""

    code = "INVALID_ARGS"
    _prefix = "invalid arguments: "


class ToolNotFoundError(DshError):
    """No tool of that name is visible from the call's scope."""

    code = "UNKNOWN_TOOL"

    def __init__(self, name: str) -> None:
        self.name = name  # whole; the message shows it escaped and cut (`named`)
        super().__init__(f'unknown tool "{named(name)}"')


class ToolOutputError(_ViolationsError):
    """A tool body returned a value that cannot become a JSON-safe result."""

    code = "INVALID_TOOL_OUTPUT"

    def __init__(self, tool: str, violations: Iterable[str]) -> None:
        self.tool = tool
        super().__init__(violations, prefix=f'tool "{tool}" returned invalid output: ')


class JsonSchemaError(_ViolationsError):
    """A schema uses something dsh does not support; ``violations`` lists every problem."""

    code = "UNSUPPORTED_SCHEMA"
    _prefix = "unsupported JSON schema: "


class ConfigError(DshError):
    """A configuration problem, naming the file, plugin and key involved and what to do."""

    code = "CONFIG_ERROR"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        plugin: str | None = None,
        key: str | None = None,
    ) -> None:
        self.path = path
        self.plugin = plugin
        self.key = key
        where = ", ".join(
            part
            for part in (
                path,
                f"[plugin.{plugin}]" if plugin else None,
                f"key {key!r}" if key else None,
            )
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class PluginLoadError(DshError):
    """A plugin failed to import, register or validate its hook implementations."""

    code = "PLUGIN_LOAD_ERROR"

    def __init__(self, plugin: str, message: str, *, hints: Sequence[str] = ()) -> None:
        self.plugin = plugin
        self.hints = tuple(hints)
        super().__init__(f"plugin {plugin!r}: {message}")


class PluginFailure(Exception):
    """A plugin raised inside a hook; carries who, where and the original exception.

    Not a `DshError`: it never reaches a user as itself; the pipeline turns it into a
    ``PLUGIN_FAILED`` result (`dsh_host._model._outcomes.plugin_failed`).
    """

    def __init__(self, plugin: str, hook: str, error: BaseException) -> None:
        self.plugin = plugin
        self.hook = hook
        self.error = error
        super().__init__(f"plugin {plugin!r} failed in {hook}: {type(error).__name__}: {error}")
