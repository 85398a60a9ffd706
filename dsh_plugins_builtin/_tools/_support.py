"""What the built-in tools share: the sandbox seam, argument helpers, errors, text and diffs.

The tools never touch a path or start a process except through a `Sandbox`: the ``sandbox``
plugin when it is enabled, else `FailClosedSandbox` (reads fenced to the workspace, writes and
commands refused with ``SANDBOX_UNAVAILABLE``).
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dsh_host import DshError, ToolArgsError, ToolExecution, ToolExecutionResult, ToolFailure
from dsh_plugins_builtin._sandbox._confine import ProcessResult
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
    stamp,
)

__all__ = [
    "BINARY_SNIFF_BYTES",
    "PATH_DESCRIPTION",
    "FailClosedSandbox",
    "Sandbox",
    "ToolEnv",
    "bool_arg",
    "concurrency_safe",
    "diff_hunks",
    "display_path",
    "guarded",
    "guarded_async",
    "int_arg",
    "open_file",
    "open_regular",
    "open_regular_file",
    "os_failure",
    "read_text_exact",
    "str_arg",
]

BINARY_SNIFF_BYTES = 8192
META_DIFF_MAX_CHARS = 256 * 1024  # larger diffs are left out of result.meta (the card falls back)
_DIFF_WORK_MAX = 25_000_000  # line pairs SequenceMatcher may compare before we give up on hunks


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
        self, command: str, cwd: str | None = None, timeout: float | None = None
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
        self, command: str, cwd: str | None = None, timeout: float | None = None
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


def concurrency_safe(args: Any) -> bool:
    """For ``is_concurrency_safe``: every call of the tool may run alongside others."""
    return True


def str_arg(args: Mapping[str, Any], name: str, default: str | None = None) -> str:
    """A string argument (the schema already checked its type)."""
    value = args.get(name, default)
    if not isinstance(value, str):
        raise ToolArgsError([f'"{name}" is required and must be a string'])
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


# -- paths, files and errors ---------------------------------------------------------------------


_BASES: dict[str, str] = {}  # workspace -> its real path, without a trailing slash


def display_path(real: Path | str, workspace: Path) -> str:
    """``real`` relative to the workspace when it lies under it, else absolute.

    The workspace's real path is taken once per workspace (it is a pinned root).
    """
    text = os.fspath(real)
    key = os.fspath(workspace)
    base = _BASES.get(key)
    if base is None:
        if len(_BASES) > 64:
            _BASES.clear()
        base = _BASES[key] = os.path.realpath(key).rstrip("/")
    if text == base or (not base and text == "/"):
        return "."
    if text.startswith(base + "/"):
        return text[len(base) + 1 :]
    return text


def os_failure(exc: OSError, spelled: str, action: str) -> DshError:
    """Turn an `OSError` into a tool error the model can act on."""
    shown = f'"{spelled}"'
    if not os.path.isabs(spelled):
        shown += " (relative to the workspace)"
    if isinstance(exc, FileNotFoundError):
        return DshError(f"no such file or directory: {shown}", "FILE_NOT_FOUND")
    if isinstance(exc, IsADirectoryError):
        return DshError(f"{shown} is a directory, not a file", "NOT_A_FILE")
    if isinstance(exc, NotADirectoryError):
        return DshError(f"{shown}: a component of the path is not a directory", "FILE_NOT_FOUND")
    if isinstance(exc, PermissionError):
        return DshError(f"permission denied: cannot {action} {shown}", "PERMISSION_DENIED")
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return SandboxDeniedError(
            f"cannot {action} {shown}: a symlink appeared on the path after the sandbox check "
            "(it kept changing while the call ran); nothing outside the sandbox was touched"
        )
    return DshError(f"cannot {action} {shown}: {exc.strerror or exc}", "IO_ERROR")


def _checked_regular(fd: int, spelled: str) -> os.stat_result:
    """The ``fstat`` of an open descriptor, which must be a regular file (closed otherwise)."""
    try:
        st = os.fstat(fd)
    except OSError as exc:  # pragma: no cover - fstat of an open fd does not fail
        os.close(fd)
        raise os_failure(exc, spelled, "read") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        hint = "; use list_dir to see what it holds" if stat.S_ISDIR(st.st_mode) else ""
        raise DshError(f'"{spelled}" is {kind}{hint}', "NOT_A_FILE")
    return st


def open_regular(real: Path, spelled: str) -> int:
    """Open a fenced, real path for reading without following a symlink; regular files only."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise os_failure(exc, spelled, "read") from None
    _checked_regular(fd, spelled)
    return fd


def open_file(sandbox: Sandbox, spelled: str, *, directory: bool = False) -> tuple[int, Path]:
    """Fence and open ``spelled`` for reading through the sandbox, race-free where it can.

    A sandbox with ``open_read`` (the ``sandbox`` plugin, `FailClosedSandbox`) opens the path
    beneath its root following no symlink; any other is asked for ``check_read`` and the path
    opened ``O_NOFOLLOW``. Files must be regular files (``NOT_A_FILE`` otherwise).

    Returns:
        A descriptor (the caller closes it) and the real path.
    """
    fd, real, _ = _open_checked(sandbox, spelled, directory=directory)
    return fd, Path(real)


def open_regular_file(sandbox: Sandbox, spelled: str) -> tuple[int, str, os.stat_result]:
    """`open_file` for a regular file: its real path as text, and the ``fstat`` it was
    checked by (for its size)."""
    fd, real, st = _open_checked(sandbox, spelled, directory=False)
    assert st is not None
    return fd, real, st


def _open_checked(
    sandbox: Sandbox, spelled: str, *, directory: bool
) -> tuple[int, str, os.stat_result | None]:
    opener = getattr(sandbox, "open_read", None)
    if opener is None:
        checked = sandbox.check_read(spelled)
        if directory:
            try:
                fd = os.open(checked, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise os_failure(exc, spelled, "list") from None
            return fd, os.fspath(checked), None
        fd = open_regular(checked, spelled)
        return fd, os.fspath(checked), os.fstat(fd)
    try:
        fd, real = opener(spelled, directory=directory)
    except NotADirectoryError:
        if directory:
            raise DshError(
                f'"{spelled}" is a file, not a directory; use read_file to read it',
                "NOT_A_DIRECTORY",
            ) from None
        raise os_failure(NotADirectoryError(), spelled, "read") from None
    except OSError as exc:
        raise os_failure(exc, spelled, "list" if directory else "read") from None
    if directory:
        return fd, os.fspath(real), None
    return fd, os.fspath(real), _checked_regular(fd, spelled)


def binary_error(spelled: str, why: str) -> DshError:
    """The ``BINARY_FILE`` refusal."""
    return DshError(
        f'"{spelled}" looks like a binary file ({why}); only UTF-8 text files can be read or edited',
        "BINARY_FILE",
    )


def read_text_exact(fd: int, spelled: str, max_bytes: int) -> tuple[str, FileStamp]:
    """A whole UTF-8 text file from an open descriptor (closed here), line endings untouched.

    Returns:
        The text and the `FileStamp` of the file it was read from.

    Raises:
        DshError: ``BINARY_FILE`` or ``FILE_TOO_LARGE`` (or an I/O error).
    """
    try:
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            # Read what the file holds (a read(max_bytes) would allocate max_bytes every time).
            data = handle.read(max_bytes + 1) if st.st_size > max_bytes else handle.read()
    except OSError as exc:
        raise os_failure(exc, spelled, "read") from None
    if len(data) > max_bytes:
        raise DshError(
            f'"{spelled}" is larger than {max_bytes} bytes; too large to edit here',
            "FILE_TOO_LARGE",
        )
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise binary_error(spelled, "it contains NUL bytes")
    try:
        return data.decode("utf-8"), stamp(st)
    except UnicodeDecodeError as exc:
        raise binary_error(spelled, f"not valid UTF-8 at byte {exc.start}") from None


# -- diffs ---------------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` ends a line."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


Opcode = tuple[str, int, int, int, int]


def _opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    limit = min(len(a), len(b))
    p = 0
    while p < limit and a[p] == b[p]:
        p += 1
    s = 0
    while s < limit - p and a[-1 - s] == b[-1 - s]:
        s += 1
    ma, mb = a[p : len(a) - s], b[p : len(b) - s]
    codes: list[Opcode] = [("equal", 0, p, 0, p)] if p else []
    if len(ma) * len(mb) > _DIFF_WORK_MAX:
        codes.append(("replace", p, p + len(ma), p, p + len(mb)))
    else:
        matcher = difflib.SequenceMatcher(None, ma, mb, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, i1 + p, i2 + p, j1 + p, j2 + p))
    if s:
        codes.append(("equal", len(a) - s, len(a), len(b) - s, len(b)))
    return codes


def _groups(codes: list[Opcode], n: int) -> Iterator[list[Opcode]]:
    """difflib's ``get_grouped_opcodes`` over precomputed opcodes."""
    if not codes:
        return
    if codes[0][0] == "equal":
        _, i1, i2, j1, j2 = codes[0]
        codes[0] = ("equal", max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes[-1][0] == "equal":
        _, i1, i2, j1, j2 = codes[-1]
        codes[-1] = ("equal", i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def diff_hunks(path: str, old: str, new: str, context: int = 3) -> list[dict[str, Any]] | None:
    """The changed hunks of ``old -> new`` with ``context`` lines around each, for a diff card.

    Returns:
        ``[{"path", "old_text", "new_text", "old_start", "new_start"}, ...]`` (1-based starts), or
        ``None`` when the hunks are too large to keep in ``result.meta``.
    """
    a, b = split_lines(old), split_lines(new)
    hunks: list[dict[str, Any]] = []
    size = 0
    for group in _groups(_opcodes(a, b), context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        old_text, new_text = "".join(a[i1:i2]), "".join(b[j1:j2])
        size += len(old_text) + len(new_text)
        if size > META_DIFF_MAX_CHARS:
            return None
        hunks.append(
            {
                "path": path,
                "old_text": old_text,
                "new_text": new_text,
                "old_start": i1 + 1,
                "new_start": j1 + 1,
            }
        )
    return hunks
