"""What the built-in tools share: the sandbox seam, failures as results, and argument helpers.

The tools never touch a path or start a process except through a `Sandbox`: the ``sandbox``
plugin when it is enabled, else `FailClosedSandbox` (reads fenced to the workspace, writes and
commands refused with ``SANDBOX_UNAVAILABLE``). Opening files lives in `._open`, diffs in
`._diff`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dsh_host import ToolArgsError, ToolExecution, ToolExecutionResult, ToolFailure
from dsh_plugins_builtin._sandbox._errors import (
    SandboxDeniedError,
    SandboxError,
    SandboxUnavailableError,
)
from dsh_plugins_builtin._sandbox._fence import (
    FenceDenied,
    FileStamp,
    RootReplaced,
    SandboxPolicy,
    check_read,
    open_read,
    pin_roots,
)

if TYPE_CHECKING:  # the sandbox's command runner loads with the first command
    from dsh_plugins_builtin._sandbox._confine import ProcessResult

__all__ = [
    "PATH_DESCRIPTION",
    "FailClosedSandbox",
    "Sandbox",
    "ToolEnv",
    "bool_arg",
    "guarded",
    "guarded_async",
    "int_arg",
    "os_arg",
    "str_arg",
]


@runtime_checkable
class Sandbox(Protocol):
    """What the tools need from the ``sandbox`` plugin (see `dsh_plugins_builtin.sandbox`)."""

    @property
    def mode(self) -> str: ...  # pragma: no cover - protocol

    def check_read(self, path: str) -> Path: ...  # pragma: no cover - protocol

    def check_write(self, path: str) -> Path: ...  # pragma: no cover - protocol

    def write_text(
        self,
        path: str,
        content: str,
        *,
        expect: FileStamp | None = None,
        commit: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None: ...  # pragma: no cover - protocol

    async def run(
        self,
        command: str,
        cwd: str | None = None,
        timeout: float | None = None,
        sink: Callable[[bytes], bool] | None = None,
        read_only: bool = False,
    ) -> ProcessResult: ...  # pragma: no cover - protocol


class ToolEnv(Protocol):
    """What a tool body asks its plugin for."""

    @property
    def workspace(self) -> Path: ...  # pragma: no cover - protocol

    def sandbox(self) -> Sandbox: ...  # pragma: no cover - protocol

    def path_lock(self, key: str) -> AbstractContextManager[None]:
        """Serialise the writes to one resolved path inside the host (held in a worker thread)."""
        ...  # pragma: no cover - protocol

    def path_denied(self, execution: ToolExecution, path: str, access: str) -> str | None:
        """Why policy withholds ``path`` from ``execution`` (``Host.path_denied``), or ``None``."""
        ...  # pragma: no cover - protocol

    def has_path_policy(self) -> bool:
        """Whether any plugin implements ``dsh_path_denied`` (else nothing is ever withheld)."""
        ...  # pragma: no cover - protocol


def _unavailable(what: str, why: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"{what} needs the sandbox plugin, but {why}; refusing to run it unconfined. Enable the "
        "`sandbox` plugin (take it out of [plugins] disable), or set [plugin.sandbox] mode = "
        '"danger-full-access" to allow it without confinement',
        by=f"tools: {why}",
    )


class FailClosedSandbox:
    """Stands in when no ``sandbox`` plugin is enabled: reads stay in the workspace, nothing else.

    Args:
        workspace: The workspace; the only root reads are allowed under.
        why: Why there is no sandbox (ends up in every refusal).
    """

    mode = "unavailable"

    def __init__(self, workspace: Path, why: str = "the sandbox plugin is not enabled") -> None:
        """Build the fallback."""
        ws = Path(os.path.abspath(workspace))
        self._policy = pin_roots(SandboxPolicy("read-only", ws, writable_roots=(ws,)))
        self._why = why

    def check_read(self, path: str) -> Path:
        """Fence a read to the workspace only."""
        try:
            return check_read(path, self._policy)
        except FenceDenied as exc:
            reason = exc.reason.replace(
                "under read-only mode", f"({self._why}, so reads stay inside the workspace)"
            )
            raise SandboxDeniedError(reason, by=f"tools: {self._why}") from None

    def open_read(self, path: str, *, directory: bool = False) -> tuple[int, str]:
        """Open a read fenced to the workspace only, race-free (see `_fence.open_read`)."""
        try:
            return open_read(path, self._policy, directory=directory)
        except FenceDenied as exc:
            reason = exc.reason.replace(
                "under read-only mode", f"({self._why}, so reads stay inside the workspace)"
            )
            raise SandboxDeniedError(reason, by=f"tools: {self._why}") from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=f"tools: {self._why}") from None

    def check_write(self, path: str) -> Path:
        """Refuse: writing needs the sandbox plugin."""
        raise _unavailable(f'writing "{path}"', self._why)

    def write_text(self, path: str, content: str, **_: Any) -> None:
        """Refuse: writing needs the sandbox plugin."""
        raise _unavailable(f'writing "{path}"', self._why)

    async def run(
        self,
        command: str,
        cwd: str | None = None,
        timeout: float | None = None,
        sink: Callable[[bytes], bool] | None = None,
        read_only: bool = False,
    ) -> ProcessResult:
        """Refuse: running a command needs the sandbox plugin."""
        raise _unavailable("running a bash command", self._why)


# -- sandbox decisions as results ----------------------------------------------------------------

Body = Callable[[Any, Any], ToolExecutionResult]
AsyncBody = Callable[[Any, Any], Awaitable[ToolExecutionResult]]


def sandbox_failure(exc: SandboxError) -> ToolExecutionResult:
    """The error result of a sandbox decision, with ``decided_by`` naming who decided."""
    message = exc.message
    return ToolExecutionResult(
        content=f"Error: {message}",
        is_error=True,
        error=ToolFailure(message, exc.code, type(exc).__name__),
        decided_by=exc.by,
    )


def guarded(body: Body) -> Body:
    """A sync tool body whose sandbox refusals come back attributed (``result.decided_by``)."""

    def run(args: Any, ctx: Any) -> ToolExecutionResult:
        try:
            return body(args, ctx)
        except SandboxError as exc:
            return sandbox_failure(exc)

    return run


def guarded_async(body: AsyncBody) -> AsyncBody:
    """`guarded` for an async body."""

    async def run(args: Any, ctx: Any) -> ToolExecutionResult:
        try:
            return await body(args, ctx)
        except SandboxError as exc:
            return sandbox_failure(exc)

    return run


# -- arguments -----------------------------------------------------------------------------------

PATH_DESCRIPTION = (
    "Path of the file, relative to the workspace root (absolute paths are allowed but must stay "
    "inside the sandbox's readable roots)."
)
"""The description of a file tool's ``path`` parameter."""


def str_arg(args: Mapping[str, Any], name: str, default: str | None = None) -> str:
    """A string argument (the schema already checked its type)."""
    value = args.get(name, default)
    if not isinstance(value, str):
        raise ToolArgsError([f'"{name}" is required and must be a string'])
    return value


def os_arg(
    args: Mapping[str, Any], name: str, default: str | None = None, *, what: str = "file name"
) -> str:
    """A string argument that reaches the operating system (a path, a command line).

    A NUL, or a lone surrogate that stands for no byte (``os.fsencode`` refuses it; ``\\udc80``
    to ``\\udcff`` stand for the bytes of a name that is not UTF-8, and pass), is
    ``INVALID_ARGS`` naming the argument: no *what* can hold one, and the OS call would fail.
    """
    value = str_arg(args, name, default)
    if "\0" in value:
        raise ToolArgsError(
            [f'"{name}" holds a NUL character (at character {value.index(chr(0))}), which no '
             f"{what} can hold; remove it"]
        )  # fmt: skip
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        raise ToolArgsError(
            [f'"{name}" holds a lone surrogate (U+{ord(value[exc.start]):04X} at character '
             f"{exc.start}), which no {what} can hold; a byte of a name that is not UTF-8 is "
             "written \\udc80 to \\udcff"]
        ) from None  # fmt: skip
    return value


def int_arg(
    args: Mapping[str, Any], name: str, default: int, *, low: int, high: int | None = None
) -> int:
    """An integer argument within ``[low, high]`` (the schema accepts ``2.0`` as an integer)."""
    value = args.get(name)
    if value is None:
        return default
    number = int(value)
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ToolArgsError([f'"{name}" must be {bound}, got {number}'])
    return number


def bool_arg(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """A boolean argument."""
    value = args.get(name)
    return default if value is None else bool(value)
