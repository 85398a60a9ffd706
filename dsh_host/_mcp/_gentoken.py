"""The bearer token ``dsh mcp serve --http`` makes for itself when no ``--token-file`` is given.

Every HTTP client must authenticate, loopback included: any local user can reach a loopback
port. So without ``--token-file`` a random token (``secrets.token_urlsafe(32)``) is written to
``<state>/mcp-http/<port>.token``, where ``<state>`` is dsh's state directory
(``$XDG_STATE_HOME/dsh`` or ``~/.local/state/dsh``, which the sandbox plugin hides from the
commands it confines). The ``mcp-http`` directory must be the user's own with mode 0700; the
file is created with ``O_EXCL | O_NOFOLLOW`` and mode 0600 under a fresh name, then renamed
over the previous start's file (atomically), and read back through the same checks as a
``--token-file``. It is written only once the port is bound (``<port>`` is the port bound,
the one picked for port 0), and removed when the server ends if it still holds this run's
token (`dsh_host._mcp._listen`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from ._auth import TokenFileError, Tokens, read_token_file

__all__ = ["DIRECTORY", "generate_token_file", "remove_token_file"]

DIRECTORY = "mcp-http"
"""The private subdirectory of dsh's state directory the generated tokens are written in."""


def _state_dir() -> Path:
    import platformdirs  # the rule dsh_host._host._statedir spells out, without importing it

    return platformdirs.user_state_path("dsh")


def _private_dir(path: Path) -> int:
    """An open descriptor of directory *path* (made 0700 if missing): the user's own, 0700,
    not a symbolic link; `TokenFileError` otherwise."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenFileError(
            f"cannot make the token directory {path} ({exc}); pass --token-file PATH"
        ) from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise TokenFileError(
            f"the token directory {path} must be yours with mode 0700 (it is "
            f"{stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid}): chmod 700 {path}"
        )
    return fd


def generate_token_file(port: int, state: Path | None = None) -> tuple[str, Tokens]:
    """A new random token, written to ``<state>/mcp-http/<port>.token``: its path and `Tokens`.

    *state* is dsh's state directory unless given. `TokenFileError` says what went wrong.
    """
    directory = (state if state is not None else _state_dir()) / DIRECTORY
    dir_fd = _private_dir(directory)
    name = f"{port}.token"
    scratch = f".{name}.{secrets.token_hex(8)}"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(scratch, flags, 0o600, dir_fd=dir_fd)
        with open(fd, "w", encoding="ascii") as file:
            file.write(secrets.token_urlsafe(32) + "\n")
            file.flush()
            os.fsync(fd)
        os.replace(scratch, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(scratch, dir_fd=dir_fd)
        raise TokenFileError(f"cannot write a token to {directory / name} ({exc})") from None
    finally:
        os.close(dir_fd)
    path = str(directory / name)
    return path, read_token_file(path)


def remove_token_file(path: str, tokens: Tokens) -> None:
    """Remove the token file at *path* if it still holds a token of *tokens* (the one this server
    wrote, not a later start's); a file that is gone, or not a regular file, is left alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return
    with open(fd, encoding="ascii", errors="replace") as file:
        info = os.fstat(file.fileno())
        text = file.read(4096).strip() if stat.S_ISREG(info.st_mode) else ""
    if text and tokens.find(text) is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)
