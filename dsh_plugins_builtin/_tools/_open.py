"""Opening and reading the files a tool names, and the errors users see when that fails.

`open_file` opens a path beneath the sandbox's roots following no symlink (a regular file, or a
directory); `read_text_exact` reads a whole text file with its stamp; `display_path` spells a
path as the model should see it; `os_failure` and `binary_error` word what went wrong.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from dsh_host import DshError, printable
from dsh_plugins_builtin._sandbox._errors import (
    SandboxDeniedError,
)
from dsh_plugins_builtin._sandbox._fence import (
    FileStamp,
    stamp,
)
from dsh_plugins_builtin._tools._support import Sandbox, ToolEnv

__all__ = [
    "BINARY_SNIFF_BYTES",
    "binary_error",
    "display_path",
    "open_file",
    "open_regular",
    "open_regular_file",
    "os_failure",
    "quoted",
    "read_text_exact",
    "shown_name",
]

BINARY_SNIFF_BYTES = 8192

_BASES: dict[str, str] = {}  # workspace -> its real path, without a trailing slash


def display_path(real: Path | str, env: ToolEnv) -> str:
    """``real`` relative to the workspace when it lies under it; in the commands' private tmp,
    as they see it (``/tmp/...``, which every file tool reads back as the same path); else
    absolute.

    The workspace's real path is taken once per workspace (it is a pinned root).
    """
    text = os.fspath(real)
    key = os.fspath(env.workspace)
    base = _BASES.get(key)
    if base is None:
        if len(_BASES) > 64:
            _BASES.clear()
        base = _BASES[key] = os.path.realpath(key).rstrip("/")
    if text == base or (not base and text == "/"):
        return "."
    if text.startswith(base + "/"):
        return text[len(base) + 1 :]
    tmp = getattr(env.sandbox(), "tmp", None)  # a sandbox plugin need not have one
    if isinstance(tmp, Path):
        tmp_text = str(tmp)
        if text == tmp_text or text.startswith(tmp_text + "/"):
            return "/tmp" + text[len(tmp_text) :]
    return text


def shown_name(name: str) -> str:
    """A file name as a tool lists it: `printable` (a control character, a line break, a byte
    that is not UTF-8 as ``\\udcXX``) with each backslash doubled first, so a name that holds
    ``\\udcff`` as text never prints as one holding the byte: no two names print alike."""
    return printable(name.replace("\\", "\\\\"))


def quoted(spelled: str) -> str:
    """A path a tool names in its output, in double quotes, as `shown_name` shows it, so a
    planted name can neither break the output nor pass for another."""
    return f'"{shown_name(spelled)}"'


def os_failure(exc: OSError, spelled: str, action: str) -> DshError:
    """Turn an `OSError` into a tool error the model can act on."""
    shown = quoted(spelled)
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
        raise DshError(f"{quoted(spelled)} is {kind}{hint}", "NOT_A_FILE")
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
                f"{quoted(spelled)} is a file, not a directory; use read_file to read it",
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
        f"{quoted(spelled)} looks like a binary file ({why}); only UTF-8 text files can be read or edited",
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
            f"{quoted(spelled)} is larger than {max_bytes} bytes; too large to edit here",
            "FILE_TOO_LARGE",
        )
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise binary_error(spelled, "it contains NUL bytes")
    try:
        return data.decode("utf-8"), stamp(st)
    except UnicodeDecodeError as exc:
        raise binary_error(spelled, f"not valid UTF-8 at byte {exc.start}") from None
