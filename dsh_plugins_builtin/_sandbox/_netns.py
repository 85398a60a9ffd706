"""``network = [names]`` under bubblewrap: the command runs in its own network namespace (only
loopback), behind the relay (`dsh_plugins_builtin._sandbox._relay`), whose only way out is the
host's proxy (`dsh_plugins_builtin._sandbox._proxy`) on a socket pair the relay inherits."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import trio

from dsh_plugins_builtin._sandbox._allow import Allowlist
from dsh_plugins_builtin._sandbox._proxy import Session

__all__ = ["PROXY_VARIABLES", "RELAY_PORT", "proxied", "proxy_env", "relay_argv"]

RELAY_PORT: Final = 3128
RELAY_CODE: Final = Path(__file__).with_name("_relay.py").read_text(encoding="utf-8")
"""The relay's source, read once and passed with ``-c``: the file need not be in the command's
view (dsh installed under the host's ``/tmp``, which commands do not see)."""
PROXY_VARIABLES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
_BYPASS: Final = ("NO_PROXY", "no_proxy")
_SYSTEM_PYTHON: Final = "/usr/bin/python3"


def proxy_env(env: Mapping[str, str]) -> dict[str, str]:
    """*env* with every proxy variable (both cases) naming the relay, and no bypass list."""
    out = {k: v for k, v in env.items() if k not in _BYPASS}
    http = f"http://127.0.0.1:{RELAY_PORT}"
    values = {
        "HTTP_PROXY": http,
        "HTTPS_PROXY": http,
        "ALL_PROXY": f"socks5h://127.0.0.1:{RELAY_PORT}",
    }
    for name, value in values.items():
        out[name] = out[name.lower()] = value
    return out


def relay_argv(control_fd: int, argv: Sequence[str], hidden: Sequence[Path] = ()) -> list[str]:
    """*argv* run behind the relay, which inherits *control_fd*; the relay runs on the host's
    interpreter, or on the system's ``python3`` when *hidden* (``deny_read``: ``/root`` for
    a user other than root) covers the former. If neither can run in the sandbox, bwrap fails
    to start it and the command is refused (never run unproxied)."""
    python = os.path.realpath(sys.executable)
    places = (Path(python), Path(sys.base_prefix).resolve())
    if any(place == h or h in place.parents for place in places for h in hidden):
        python = _SYSTEM_PYTHON
    return [python, "-I", "-S", "-c", RELAY_CODE, str(control_fd), str(RELAY_PORT), *argv]


@contextlib.asynccontextmanager
async def proxied(allow: Allowlist) -> AsyncIterator[tuple[int, Session]]:
    """A proxy session for one command: the descriptor its relay inherits, and the session
    (whose ``denials`` go into the result). The session ends with the block."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    session = Session(allow)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.serve, trio.socket.from_stdlib_socket(ours))
            try:
                yield theirs.fileno(), session
            finally:
                nursery.cancel_scope.cancel()
    finally:
        theirs.close()
        ours.close()
