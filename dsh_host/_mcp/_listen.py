"""``dsh mcp serve --http``: the listening socket, bound first, and the token file made for it.

The port is bound before anything else is done with it: a port in use is a usage error that
says so, and touches no token file. Only once the socket listens is a generated token written,
to ``<actual port>.token`` (with port 0, the port picked); the file is removed when the server
ends, if it is still the one this server wrote.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ._auth import Tokens
from ._gentoken import generate_token_file, remove_token_file

if TYPE_CHECKING:
    from hypercorn.config import Config, Sockets

__all__ = ["bound_port", "hypercorn_config", "listen", "made_token"]


def hypercorn_config(address: str, port: int) -> Config:
    """hypercorn's settings for serving *address*:*port* (no logs of its own)."""
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{address}]:{port}" if ":" in address else f"{address}:{port}"]
    config.accesslog = None
    config.errorlog = None
    return config


def listen(address: str, port: int) -> Sockets:
    """Sockets listening at *address*:*port*; `ValueError` saying why not (naming the address)."""
    config = hypercorn_config(address, port)
    where = config.bind[0]
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ValueError(
                f"--http {where}: address in use (another server, perhaps another dsh mcp "
                "serve, listens there): stop it, or pick another port (port 0 picks a free one)"
            ) from None
        raise ValueError(f"--http {where}: cannot listen there ({exc.strerror})") from None
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
    return sockets


def bound_port(sockets: Sockets) -> int:
    """The port *sockets* listen on (with port 0, the one picked)."""
    port: int = sockets.insecure_sockets[0].getsockname()[1]
    return port


@contextmanager
def made_token(port: int, state: Path | None = None) -> Iterator[tuple[str, Tokens]]:
    """A new token in ``<port>.token`` (`generate_token_file`), its path and `Tokens`, while
    open; at exit the file is removed if it still holds this token."""
    path, tokens = generate_token_file(port, state)
    try:
        yield path, tokens
    finally:
        remove_token_file(path, tokens)
