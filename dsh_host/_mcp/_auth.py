"""Bearer tokens for ``dsh mcp serve --http``: who may connect, and which tools each one sees.

``--token-file PATH`` names a file of one token a line, optionally followed by a scope name and
that scope's tool restriction::

    # token                              scope      restriction (optional)
    3f1c0a5e9b7d4c2a8e6f0b1d3c5a7e9f
    9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a     reviewers  allow=read_file,grep,glob
    0a1b2c3d4e5f60718293a4b5c6d7e8f9     ci         deny=bash,write_file

A token alone sees every tool; a token with a scope name runs its calls in that `Scope` (what
plugins registered for it) and, with ``allow=`` / ``deny=``, under that `ToolRestriction`.
Tokens are compared in constant time (each presented token is hashed and compared with every
known hash). The SDK's bearer middleware answers a missing or unknown token with ``401`` and
``WWW-Authenticate: Bearer``, and binds each session to the token that opened it (another token
gets ``404``, as for a session that does not exist).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from typing import TYPE_CHECKING, Any

import attrs

from dsh_host import Scope, ToolRestriction

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

__all__ = ["MIN_TOKEN_CHARS", "Grant", "TokenFileError", "Tokens", "read_token_file"]

MIN_TOKEN_CHARS = 16
"""The shortest token accepted: anything shorter is guessable."""


class TokenFileError(ValueError):
    """A token file that cannot be used (the message names the file and line)."""


@attrs.frozen
class Grant:
    """What one token may do: its principal id, scope and restriction (both optional)."""

    client_id: str
    scope: Scope | None = None
    restriction: ToolRestriction | None = None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _restriction(words: list[str], where: str) -> ToolRestriction | None:
    options: dict[str, frozenset[str]] = {}
    for word in words:
        key, sep, names = word.partition("=")
        if not sep or key not in ("allow", "deny") or key in options:
            raise TokenFileError(f"{where}: {word!r} is not allow=TOOL,... or deny=TOOL,...")
        options[key] = frozenset(n for n in names.split(",") if n)
    if not options:
        return None
    return ToolRestriction(allow=options.get("allow"), deny=options.get("deny"))


def _parse_line(line: str, where: str, n: int) -> tuple[bytes, Grant]:
    words = line.split()
    token = words[0]
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(f"{where}: a token must be at least {MIN_TOKEN_CHARS} characters")
    if len(words) == 1:
        return _digest(token), Grant(client_id=f"token-{n}")
    name = words[1]
    if "=" in name:
        raise TokenFileError(f"{where}: give a scope name before {name!r}")
    grant = Grant(f"{name}-{n}", Scope(name), _restriction(words[2:], where))
    return _digest(token), grant


def _read_private(path: str) -> str:
    """The text of *path*, a regular file only its owner may read or write (never a symlink):
    a token others can read is no secret, and a link could point anywhere."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if os.path.islink(path):
            raise TokenFileError(
                f"--token-file {path}: is a symbolic link; name the file itself"
            ) from None
        raise TokenFileError(f"--token-file {path}: cannot read it ({exc})") from None
    with open(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"--token-file {path}: is not a regular file")
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"--token-file {path}: others may read or write it (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); make it private: chmod 600 {path}"
            )
        try:
            return file.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"--token-file {path}: cannot read it ({exc})") from None


def read_token_file(path: str) -> Tokens:
    """The tokens of *path*; `TokenFileError` naming the file and line for a bad one, or for a
    file that is a symbolic link, not a regular file, or open to others (mode beyond 0600)."""
    text = _read_private(path)
    entries: list[tuple[bytes, Grant]] = []
    restricted: dict[str, ToolRestriction | None] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        digest, grant = _parse_line(line, f"{path}:{n}", n)
        if any(hmac.compare_digest(digest, known) for known, _ in entries):
            raise TokenFileError(f"{path}:{n}: this token is already on an earlier line")
        if grant.scope is not None:
            name = grant.scope.name
            if name in restricted and restricted[name] != grant.restriction:
                raise TokenFileError(
                    f"{path}:{n}: scope {name!r} is given another restriction than on an "
                    "earlier line; give every token of one scope the same allow=/deny="
                )
            restricted[name] = grant.restriction
        entries.append((digest, grant))
    if not entries:
        raise TokenFileError(f"--token-file {path}: no token in it (one token a line)")
    return Tokens(entries)


class Tokens:
    """The known tokens (as hashes) and their grants; a `TokenVerifier` for the SDK."""

    def __init__(self, entries: list[tuple[bytes, Grant]]) -> None:
        self._entries = entries

    @classmethod
    def single(cls, token: str) -> Tokens:
        """One token that sees every tool (as a token file of that one line)."""
        return cls([(_digest(token), Grant(client_id="token-1"))])

    def grants(self) -> list[Grant]:
        return [grant for _, grant in self._entries]

    def find(self, token: str) -> Grant | None:
        """The grant of *token*, compared with every known token in constant time."""
        digest = _digest(token)
        found: Grant | None = None
        for known, grant in self._entries:  # no early exit: the time says nothing
            if hmac.compare_digest(digest, known):
                found = grant
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        grant = self.find(token)
        if grant is None:
            return None
        return AccessToken(token=token, client_id=grant.client_id, scopes=[])


def grant_of(request: Any, tokens: Tokens | None) -> Grant | None:
    """The grant of the token an HTTP request came with (``None``: no auth, or not HTTP)."""
    if tokens is None or request is None:
        return None
    user = getattr(request, "scope", {}).get("user")
    access = getattr(user, "access_token", None)
    token = getattr(access, "token", None)
    return tokens.find(token) if isinstance(token, str) else None
