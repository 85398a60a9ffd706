"""`ToolDefinition`, its model-facing `ToolSchema`, and the `define_tool` / `@tool` builders."""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, final

import attrs

from .._model._errors import JsonSchemaError
from .._model._json import FrozenDict, freeze, thaw
from ._convert import error_messages, is_structure_error, structure
from ._dsl import to_json_schema
from ._snapshot import compile_snapshot
from ._validators import Validator, compile_accepts, compile_parameters

__all__ = ["ToolDefinition", "ToolSchema", "define_tool", "tool"]


@final
@attrs.frozen
class ToolSchema:
    """What a model is told about a tool: exactly ``name``, ``description`` and ``parameters``."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions ``tools`` entry."""
        return {"type": "function", "function": self.to_json()}

    def to_anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def to_mcp(self) -> dict[str, Any]:
        """The MCP ``tools/list`` entry."""
        return {"name": self.name, "description": self.description, "inputSchema": self.parameters}


def _check_timeout(instance: ToolDefinition, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"tool {instance.name!r}: timeout_ms must be a positive finite number of milliseconds, "
            f"not {value!r}"
        )


PathAccess = Literal["read", "write"]
"""How a tool uses a path argument: ``"read"`` (read rules apply) or ``"write"`` (edit rules)."""


def _freeze_paths(value: Mapping[str, str] | None) -> FrozenDict:
    out = freeze(dict(value or {}), "paths")
    for key, access in out.items():
        if access not in ("read", "write"):
            raise ValueError(
                f"paths[{key!r}] must be 'read' or 'write' (how the tool uses that argument), "
                f"not {access!r}"
            )
    return out  # type: ignore[no-any-return]


def _freeze_keys(value: Mapping[str, str] | None) -> FrozenDict:
    out = freeze(dict(value or {}), "claude_keys")
    for key, other in out.items():
        if not isinstance(other, str) or not other:
            raise ValueError(f"claude_keys[{key!r}] must be a non-empty string, not {other!r}")
    return out  # type: ignore[no-any-return]


def _check_name(instance: ToolDefinition, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"a tool name must be a non-empty string, not {value!r}")


@final
@attrs.frozen(kw_only=True)
class ToolDefinition:
    """A registered tool: its schema plus the body and host-only metadata no model ever sees.

    Build one with `define_tool` or `tool`. ``parameters`` is the compiled JSON Schema;
    ``args_type`` is the attrs class arguments are structured into, when one was given.
    ``paths`` maps each argument that names a file or directory to ``"read"`` or ``"write"``,
    so path rules (``Read(...)``, ``Edit(...)``) reach the tool. ``claude_name`` and
    ``claude_keys`` (dsh argument -> Claude Code key) say how the tool is spelled in Claude
    Code material: permission rules, hook matchers and hook payloads.
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    parameters: FrozenDict = attrs.field(repr=False)
    execute: Callable[..., Any] = attrs.field(repr=False)
    timeout_ms: float | None = attrs.field(default=None, validator=_check_timeout)
    is_concurrency_safe: Callable[[Any], Any] | None = attrs.field(default=None, repr=False)
    present_call: Callable[[Any], Any] | None = attrs.field(default=None, repr=False)
    present_result: Callable[[Any, Any], Any] | None = attrs.field(default=None, repr=False)
    output_schema: FrozenDict | None = attrs.field(default=None, repr=False)
    args_type: type | None = attrs.field(default=None, repr=False)
    paths: FrozenDict = attrs.field(factory=FrozenDict, converter=_freeze_paths, repr=False)
    claude_name: str | None = attrs.field(default=None, repr=False)
    claude_keys: FrozenDict = attrs.field(factory=FrozenDict, converter=_freeze_keys, repr=False)
    # Derived once, here, so no call pays for them.
    validate: Validator = attrs.field(init=False, repr=False, eq=False)
    validate_output: Validator | None = attrs.field(init=False, repr=False, eq=False)
    accepts: Callable[[Any], bool] | None = attrs.field(init=False, repr=False, eq=False)
    """Whether frozen arguments are valid and go to the body as they are (no ``args_type``):
    the pipeline's hot path; ``None`` when only `prepare` can tell."""
    snapshot: Callable[[Any], Any] | None = attrs.field(init=False, repr=False, eq=False)
    """``snapshot(raw)``: the frozen copy of raw arguments that `accepts` holds for, made in one
    walk, or ``None`` when it cannot tell (then ``freeze`` and `accepts`); ``None`` as `accepts`."""
    is_async: bool = attrs.field(init=False, repr=False, eq=False)
    takes_context: bool = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        setattr_ = object.__setattr__
        plain = self.args_type is None
        validate, accepts, snapshot = _compiled(self.parameters, plain)
        setattr_(self, "validate", validate)
        setattr_(self, "accepts", accepts)
        setattr_(self, "snapshot", snapshot)
        setattr_(
            self,
            "validate_output",
            None
            if self.output_schema is None
            else compile_parameters(self.output_schema, root="output"),
        )
        setattr_(self, "is_async", inspect.iscoroutinefunction(self.execute))
        setattr_(self, "takes_context", _positional_count(self.execute) >= 2)

    @property
    def schema(self) -> ToolSchema:
        """A fresh model-facing projection (its ``parameters`` is a new plain dict)."""
        return ToolSchema(self.name, self.description, thaw(self.parameters))

    def prepare(self, arguments: Any) -> tuple[Any, list[str]]:
        """Validate frozen *arguments*; return ``(args for the body, violations)``."""
        violations = self.validate(arguments)
        if violations or self.args_type is None:
            return arguments, violations
        try:
            return structure(arguments, self.args_type), []
        except Exception as exc:  # only cattrs' own reports are violations
            if not is_structure_error(exc):
                raise
            return None, error_messages(exc, path="arguments")

    def args_or_none(self, arguments: Any) -> Any:
        """Arguments ready for a presenter or classifier, or ``None`` when they are invalid."""
        try:
            args, violations = self.prepare(freeze(arguments, "arguments"))
        except ValueError:
            return None
        return None if violations else args


_Compiled = tuple[Validator, Callable[[Any], bool] | None, Callable[[Any], Any] | None]
_last: list[tuple[FrozenDict, bool, _Compiled] | None] = [None]
"""The parameters compiled last (the very object), whether plain, and what they compiled to:
one tuple, read and replaced whole (definitions may be made on several threads)."""


def _compiled(parameters: FrozenDict, plain: bool) -> _Compiled:
    """`validate`, `accepts` and `snapshot` of *parameters*. A definition made from another
    (``attrs.evolve``: a tool under another name, as ``dsh hook``'s stand-ins of Claude Code's
    tools) holds the same frozen parameters object: it takes the same pure functions instead of
    compiling them again (the object, never an equal one: ``1`` equals ``True``)."""
    last = _last[0]
    if last is not None and last[0] is parameters and last[1] is plain:
        return last[2]
    compiled: _Compiled = (
        compile_parameters(parameters),
        compile_accepts(parameters) if plain else None,
        compile_snapshot(parameters) if plain else None,
    )
    _last[0] = (parameters, plain, compiled)
    return compiled


def _positional_count(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def define_tool(
    *,
    name: str,
    description: str,
    parameters: Any,
    execute: Callable[..., Any],
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[Any], Any] | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Any], Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    paths: Mapping[str, PathAccess] | None = None,
    claude_name: str | None = None,
    claude_keys: Mapping[str, str] | None = None,
    strict_arguments: bool = True,
) -> ToolDefinition:
    """Build a `ToolDefinition`.

    Args:
        name: What the model calls the tool.
        description: What the model is told the tool does.
        parameters: The dict DSL (``{"path": {"type": "string", "required": True}}``), an attrs
            class, or a raw JSON Schema object. Compiled here, once.
        execute: ``execute(args, ctx)`` or ``execute(args)``, sync or ``async``. It gets
            validated, frozen arguments (an instance of the attrs class, if one was given) and a
            `ToolRunContext`. It returns a ``str``, content blocks, a JSON value, or a
            `ToolExecutionResult`; it raises `DshError` to fail with a code. Sync bodies run in a
            worker thread.
        timeout_ms: Declared time budget; enforced by an execute wrapper such as ``timeout``.
        is_concurrency_safe: ``f(args) -> bool``; only an exact ``True`` lets a call run in
            parallel with its siblings. Gets validated arguments; invalid ones mean exclusive.
        present_call: ``f(args) -> CallView | None``; pure. Invalid arguments give ``None``.
        present_result: ``f(args, result) -> ResultView | None``; pure.
        output_schema: If given, the body returns a JSON value that must fit it.
        paths: Which arguments are paths, and whether the tool reads or writes them
            (``{"path": "read"}``); read rules and edit rules apply through them.
        claude_name: The tool's name in Claude Code material (``"Read"``), if it has one.
        claude_keys: dsh argument name -> Claude Code key (``{"path": "file_path"}``), for hook
            payloads and rules; unmapped keys keep their names.
        strict_arguments: For DSL and attrs parameters: reject arguments the tool does not
            declare (``additionalProperties: false``, with a "did you mean" in the violation).
            ``False`` keeps the object open. A raw JSON Schema is used as it is.

    Raises:
        JsonSchemaError: *parameters* or *output_schema* cannot be compiled; the message names
            the path (``parameters.path.required must be True``).
        ValueError: *timeout_ms* is not a positive finite number.
    """
    return ToolDefinition(
        name=name, description=description, execute=execute, timeout_ms=timeout_ms,
        parameters=_compiled_parameters(parameters, strict_arguments),
        is_concurrency_safe=is_concurrency_safe, present_call=present_call,
        present_result=present_result, paths=paths, claude_name=claude_name,
        output_schema=None if output_schema is None else _frozen_output(output_schema),
        args_type=parameters if isinstance(parameters, type) else None, claude_keys=claude_keys,
    )  # fmt: skip


def _compiled_parameters(parameters: Any, strict: bool) -> FrozenDict:
    """*parameters* (DSL, attrs class or raw schema) as a frozen JSON Schema object."""
    compiled = to_json_schema(parameters)
    raw = isinstance(parameters, Mapping) and isinstance(parameters.get("type"), str)
    if strict and not raw and "additionalProperties" not in compiled:
        # Parameters from the DSL or an attrs class are closed: an argument the model made up is
        # an INVALID_ARGS violation with a "did you mean", so the model learns the real names.
        compiled["additionalProperties"] = False
    return freeze(compiled, "parameters")  # type: ignore[no-any-return]


def _frozen_output(output_schema: Mapping[str, Any]) -> FrozenDict:
    try:
        return freeze(output_schema, "output_schema")  # type: ignore[no-any-return]
    except ValueError as exc:
        raise JsonSchemaError([str(exc)]) from None


def _parameters_of(body: Callable[..., Any]) -> Any:
    """The attrs class *body*'s first argument is annotated with (``@tool`` without parameters)."""
    params = _first_annotation(body)
    if params is None:
        message = f"@tool {body.__name__}: give parameters=... or annotate the first argument "
        raise JsonSchemaError([message + "with an attrs class"])
    return params


@typing.overload
def tool(fn: Callable[..., Any], /) -> ToolDefinition: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Any = None,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[Any], Any] | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Any], Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    paths: Mapping[str, PathAccess] | None = None,
    claude_name: str | None = None,
    claude_keys: Mapping[str, str] | None = None,
    strict_arguments: bool = True,
) -> Callable[[Callable[..., Any]], ToolDefinition]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Any = None,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[Any], Any] | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Any], Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    paths: Mapping[str, PathAccess] | None = None,
    claude_name: str | None = None,
    claude_keys: Mapping[str, str] | None = None,
    strict_arguments: bool = True,
) -> ToolDefinition | Callable[[Callable[..., Any]], ToolDefinition]:
    """Decorator form of `define_tool`: the function is the body.

    The name defaults to the function's name and the description to its docstring; *parameters*
    defaults to the attrs class the first argument is annotated with.

    Example::

        @attrs.frozen
        class ReadArgs:
            path: str = attrs.field(metadata={"description": "File to read"})

        @tool
        async def read(args: ReadArgs, ctx: ToolRunContext) -> str:
            "Read a file."
            return pathlib.Path(args.path).read_text()
    """

    def build(body: Callable[..., Any]) -> ToolDefinition:
        return define_tool(
            name=name or body.__name__,
            description=description if description is not None else inspect.getdoc(body) or "",
            parameters=parameters if parameters is not None else _parameters_of(body),
            execute=body,
            timeout_ms=timeout_ms,
            is_concurrency_safe=is_concurrency_safe,
            present_call=present_call,
            present_result=present_result,
            output_schema=output_schema,
            paths=paths,
            claude_name=claude_name,
            claude_keys=claude_keys,
            strict_arguments=strict_arguments,
        )

    return build(fn) if fn is not None else build


def _first_annotation(fn: Callable[..., Any]) -> type | None:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    for param in inspect.signature(fn).parameters.values():
        hint = hints.get(param.name)
        return hint if isinstance(hint, type) and attrs.has(hint) else None
    return None
