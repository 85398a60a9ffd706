"""``network = [names]``: which destinations the network proxy lets a command reach."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Final

import attrs
import trio

__all__ = ["Allowlist", "Denied", "allowlist", "check_pattern", "normalize"]

_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_NUMERIC: Final = re.compile(r"[0-9a-fx.]+")


class Denied(Exception):
    """The proxy refuses this destination; the message says why (shown in the result)."""


def normalize(host: str) -> str:
    """The host as compared: lower case, no trailing dot, no brackets; IP literals in their
    canonical spelling. Raises `Denied` for anything that is neither a plain ASCII DNS name nor
    an IP literal (IDN in Unicode, ``_``, ``%``, empty labels)."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.removesuffix(".")
    literal = _ip_literal(text)
    if literal is not None:
        return literal
    if not text.isascii() or len(text) > 253 or not _NAME.fullmatch(text):
        raise Denied("not a plain ASCII host name (write IDN names in their xn-- form)")
    return text


def _ip_literal(text: str) -> str | None:
    """The canonical address when *text* is one, in any spelling ``inet_aton`` takes too
    (``127.1``, ``0x7f000001``, ``2130706433``): those reach an address, not a name."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not _NUMERIC.fullmatch(text):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(text))
    except OSError:
        return None


def check_pattern(pattern: str) -> str:
    """A ``network`` entry, normalized: a name, ``*.`` and a name, or an IP literal."""
    rest = pattern[2:] if pattern.startswith("*.") else pattern
    try:
        name = normalize(rest)
    except Denied as exc:
        raise ValueError(f"network entry {pattern!r} is {exc}") from None
    if pattern.startswith("*.") and _ip_literal(rest) is not None:
        raise ValueError(f"network entry {pattern!r}: a wildcard needs a name, not an address")
    return f"*.{name}" if pattern.startswith("*.") else name


@attrs.frozen
class Allowlist:
    """The destinations a command may reach through the proxy.

    Attributes:
        names: Host names (``*.example.com`` matches every name below ``example.com``, not
            ``example.com`` itself) and IP literals, normalized (`check_pattern`).
        ports: The ports a connection may go to.
        hosts: Names pinned to an address (``network_hosts``): resolved to it, even when it
            is loopback or private (an explicit choice, e.g. in tests).
    """

    names: tuple[str, ...]
    ports: tuple[int, ...] = (80, 443)
    hosts: tuple[tuple[str, str], ...] = ()

    def check(self, host: str, port: int) -> str:
        """The normalized host when *host*:*port* is allowed; raises `Denied` otherwise."""
        name = normalize(host)
        if port not in self.ports:
            raise Denied(f"port {port} is not in network_ports")
        if not any(_matches(name, pattern) for pattern in self.names):
            kind = "address" if _ip_literal(name) is not None else "name"
            raise Denied(f"{kind} not in network")
        return name

    async def resolve(self, name: str, port: int) -> str:
        """The address to connect to (on the host side): the pinned one, the listed literal,
        or the first of the name's addresses when every one of them is public."""
        pinned = dict(self.hosts).get(name)
        if pinned is not None:
            return pinned
        if _ip_literal(name) is not None:
            return name
        try:
            infos = await trio.socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Denied(f"cannot resolve: {exc.strerror or exc}") from None
        addresses = [str(info[4][0]) for info in infos]
        private = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_global]
        if not addresses or private:
            raise Denied(f"resolves to a non-public address ({', '.join(private) or 'none'})")
        return addresses[0]


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


def allowlist(names: Sequence[str], ports: Sequence[int], hosts: dict[str, str]) -> Allowlist:
    """The `Allowlist` of a configuration (entries checked and normalized)."""
    pinned = tuple(sorted((normalize(k), str(ipaddress.ip_address(v))) for k, v in hosts.items()))
    return Allowlist(tuple(check_pattern(n) for n in names), tuple(ports), pinned)
