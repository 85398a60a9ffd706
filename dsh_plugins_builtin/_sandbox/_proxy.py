"""The host side of ``network = [names]``: an HTTP (CONNECT and plain) and SOCKS5 proxy.

A command's connections arrive as Unix stream sockets handed over by the relay in its network
namespace (`dsh_plugins_builtin._sandbox._relay`) through SCM_RIGHTS on a control socket. Each is
one request for one destination: the proxy checks the name against the `Allowlist`, resolves it
here (never inside the sandbox), connects to that address and then only copies bytes. Whatever a
client sends afterwards (a second request, smuggled headers) goes to that same destination, so
nothing a client writes can reach another host.
"""

from __future__ import annotations

import array
import contextlib
import os
import re
import socket
from typing import Final

import trio

from dsh_plugins_builtin._sandbox._allow import Allowlist, Denied

__all__ = ["HEAD_LIMIT", "HEAD_TIMEOUT", "MAX_CONNECTIONS", "MAX_DENIALS", "Session"]

HEAD_LIMIT: Final = 16 * 1024
HEAD_TIMEOUT: Final = 10.0
CONNECT_TIMEOUT: Final = 10.0
MAX_CONNECTIONS: Final = 256
MAX_DENIALS: Final = 50
_CHUNK: Final = 65536
_TOKEN: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE: Final = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_HOP: Final = frozenset(
    b"connection keep-alive proxy-connection proxy-authorization proxy-authenticate te "
    b"trailer upgrade host".split()
)


class _Reader:
    """Buffered reads from a client stream, within `HEAD_LIMIT`."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buf = bytearray()

    async def exactly(self, count: int) -> bytes:
        while len(self.buf) < count:
            await self._more()
        out = bytes(self.buf[:count])
        del self.buf[:count]
        return out

    async def head(self) -> bytes:
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            if len(self.buf) > HEAD_LIMIT:
                raise Denied(f"request head over {HEAD_LIMIT} bytes")
            await self._more()
        if end + 4 > HEAD_LIMIT:
            raise Denied(f"request head over {HEAD_LIMIT} bytes")
        out = bytes(self.buf[: end + 4])
        del self.buf[: end + 4]
        return out

    async def _more(self) -> None:
        data = await self.stream.receive_some(_CHUNK)
        if not data:
            raise Denied("the client closed the connection before a complete request")
        self.buf += data


class Session:
    """The proxy for one command: its allowlist and the denials to report."""

    def __init__(self, allow: Allowlist) -> None:
        self.allow = allow
        self.counts: dict[str, int] = {}
        self.more = 0  # denials past the `MAX_DENIALS` distinct ones kept
        self.active = 0

    @property
    def denials(self) -> list[str]:
        """Each distinct denial once (``(N times)`` when repeated), at most `MAX_DENIALS`."""
        lines = [f"{text} ({n} times)" if n > 1 else text for text, n in self.counts.items()]
        if self.more:
            lines.append(f"network: blocked {self.more} more requests")
        return lines

    def deny(self, text: str) -> None:
        """Count *text*; past `MAX_DENIALS` distinct texts, only a count is kept (a command
        making up names for as long as it runs costs the host no memory)."""
        if text in self.counts or len(self.counts) < MAX_DENIALS:
            self.counts[text] = self.counts.get(text, 0) + 1
        else:
            self.more += 1

    async def serve(self, control: trio.socket.SocketType) -> None:
        """Take connections from the relay's control socket until it closes."""
        async with trio.open_nursery() as nursery:
            while True:
                fds = await _receive_fds(control)
                if fds is None:
                    nursery.cancel_scope.cancel()
                    return
                for fd in fds:
                    stream = self._accept(fd)
                    if stream is not None:
                        self.active += 1
                        nursery.start_soon(self._counted, stream)

    def _accept(self, fd: int) -> trio.SocketStream | None:
        """A stream for a descriptor the relay sent: only a Unix stream socket, within
        `MAX_CONNECTIONS` (anything else is closed: the relay runs in the sandbox)."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket
            os.close(fd)
            self.deny("network: blocked a connection (the relay sent something else)")
            return None
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            sock.close()
            self.deny("network: blocked a connection (the relay sent something else)")
            return None
        if self.active >= MAX_CONNECTIONS:
            sock.close()
            self.deny(f"network: blocked a connection (over {MAX_CONNECTIONS} open)")
            return None
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

    async def _counted(self, stream: trio.SocketStream) -> None:
        try:
            await self.handle(stream)
        finally:
            self.active -= 1

    async def handle(self, client: trio.abc.HalfCloseableStream) -> None:
        """One connection: read what it asks for, check, connect, then copy bytes."""
        async with client:
            reader = _Reader(client)
            try:
                with trio.fail_after(HEAD_TIMEOUT):
                    first = await reader.exactly(1)
                    reader.buf[0:0] = first
                    serve = {b"\x05": self._socks, b"\x04": _socks4}.get(first, self._http)
                    upstream = await serve(reader)
            except trio.TooSlowError:
                self.deny(f"network: blocked a request (not complete within {HEAD_TIMEOUT:g} s)")
                return
            except Denied as exc:
                self.deny(f"network: blocked {exc}")
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            except Exception as exc:  # a request no check foresaw: refused, the session goes on
                self.deny(f"network: blocked a malformed request ({type(exc).__name__})")
                return
            async with upstream:
                await _splice(client, upstream, bytes(reader.buf))

    async def _connect(self, host: str, port: int) -> trio.SocketStream:
        name = self.allow.check(host, port)
        address = await self.allow.resolve(name, port)
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                return await trio.open_tcp_stream(address, port)
        except (OSError, trio.TooSlowError) as exc:
            raise Denied(f"cannot connect to {address}: {exc}") from None

    async def _http(self, reader: _Reader) -> trio.SocketStream:
        try:
            head = await reader.head()
        except Denied as exc:
            await _answer(reader.stream, b"431 Request Header Fields Too Large")
            raise Denied(f"a request ({exc})") from None
        try:
            method, target, version, headers = _parse(head)
            if method == b"CONNECT":
                host, port = _authority(target, default=None)
            elif target[:7].lower() == b"http://":
                host, port = _authority(target[7:].partition(b"/")[0], default=80)
            else:
                raise Denied("a plain HTTP request needs an absolute http:// URL")
        except Denied as exc:
            await _answer(reader.stream, b"400 Bad Request", str(exc).encode())
            raise Denied(f"a request ({exc})") from None
        try:
            upstream = await self._connect(host, port)
        except Denied as exc:
            await _answer(reader.stream, b"403 Forbidden", str(exc).encode())
            raise Denied(f"{_shown(host)}:{port} ({exc})") from None
        if method == b"CONNECT":
            await reader.stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            path = b"/" + target[7:].partition(b"/")[2]
            await upstream.send_all(_origin_head(method, path, version, headers, target))
        return upstream

    async def _socks(self, reader: _Reader) -> trio.SocketStream:
        _, count = await reader.exactly(2)
        if 0 not in await reader.exactly(count):
            await reader.stream.send_all(b"\x05\xff")
            raise Denied("a request (SOCKS5 without the no-authentication method)")
        await reader.stream.send_all(b"\x05\x00")
        version, command, _, kind = await reader.exactly(4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.exactly(4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, await reader.exactly(16))
        elif kind == 3:
            host = (await reader.exactly((await reader.exactly(1))[0])).decode("latin-1")
        else:
            raise Denied("a request (SOCKS5 address type unknown)")
        port = int.from_bytes(await reader.exactly(2), "big")
        try:
            if version != 5 or command != 1:
                raise Denied("only SOCKS5 CONNECT is supported")
            upstream = await self._connect(host, port)
        except Denied as exc:
            await reader.stream.send_all(b"\x05\x02\x00\x01\0\0\0\0\0\0")
            raise Denied(f"{_shown(host)}:{port} ({exc})") from None
        await reader.stream.send_all(b"\x05\x00\x00\x01\0\0\0\0\0\0")
        return upstream


async def _socks4(reader: _Reader) -> trio.SocketStream:
    """SOCKS4 (and 4a) is refused at once, with its own "request rejected" reply: a client
    waiting for that answer would otherwise wait out `HEAD_TIMEOUT` (it names no port or name
    worth reporting before the refusal, so none is read)."""
    with contextlib.suppress(trio.BrokenResourceError):
        await reader.stream.send_all(b"\x00\x5b" + bytes(6))
    raise Denied("a request (SOCKS4: only SOCKS5 and HTTP proxying are served)")


def _shown(host: str) -> str:
    """*host* as the result may show it: ASCII, no control character (the model wrote it), and
    at most 100 characters."""
    text = ascii(host)[1:-1]
    return text if len(text) <= 100 else text[:100] + "..."


def _parse(head: bytes) -> tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]]:
    """The request line and headers; refuses anything ambiguous (bare CR or LF, folded
    lines, malformed names, conflicting body lengths)."""
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise Denied("bare CR or LF in the request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in (
        b"HTTP/1.1", b"HTTP/1.0"
    ):  # fmt: skip
        raise Denied("malformed request line")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
            raise Denied("malformed header line")
        headers.append((name.lower(), value.strip()))
    names = [name for name, _ in headers]
    if names.count(b"content-length") > 1 or (
        b"content-length" in names and b"transfer-encoding" in names
    ):
        raise Denied("conflicting Content-Length / Transfer-Encoding")
    return parts[0], parts[1], parts[2], headers


def _authority(text: bytes, default: int | None) -> tuple[str, int]:
    host_text = text.decode("latin-1")
    if "@" in host_text:
        raise Denied("credentials in the URL")
    host, sep, port_text = host_text.rpartition(":")
    if not sep or (host.count(":") and not host.endswith("]")):
        if default is None:
            raise Denied("CONNECT needs host:port")
        host, port_text = host_text, str(default)
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise Denied("bad port")
    return host, int(port_text)


def _origin_head(
    method: bytes, path: bytes, version: bytes, headers: list[tuple[bytes, bytes]], target: bytes
) -> bytes:
    authority = target[7:].partition(b"/")[0]
    out = [b"%s %s %s" % (method, path, version), b"host: " + authority]
    out += [b"%s: %s" % (name, value) for name, value in headers if name not in _HOP]
    out.append(b"connection: close")
    return b"\r\n".join(out) + b"\r\n\r\n"


async def _answer(stream: trio.abc.Stream, status: bytes, body: bytes = b"") -> None:
    text = b"HTTP/1.1 %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
    with contextlib.suppress(trio.BrokenResourceError):
        await stream.send_all(text % (status, len(body), body))


async def _splice(
    client: trio.abc.HalfCloseableStream, upstream: trio.SocketStream, early: bytes
) -> None:
    async def copy(src: trio.abc.Stream, dst: trio.abc.HalfCloseableStream) -> None:
        try:
            while data := await src.receive_some(_CHUNK):
                await dst.send_all(data)
            await dst.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    try:
        if early:
            await upstream.send_all(early)
    except trio.BrokenResourceError:
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(copy, client, upstream)
        nursery.start_soon(copy, upstream, client)


async def _receive_fds(control: trio.socket.SocketType) -> list[int] | None:
    """The descriptors of the next message on *control*; ``None`` at its end."""
    fds = array.array("i")
    try:
        data, ancillary, _, _ = await control.recvmsg(1, socket.CMSG_SPACE(fds.itemsize * 4))
    except OSError:
        return None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data and not fds:
        return None
    return list(fds)
