"""``dsh mcp serve``: the host's gated tools as a Model Context Protocol server.

Built on the official ``mcp`` SDK's lowlevel server (`dsh_host._mcp._server`), which runs on
anyio and so on trio. Over stdio, a validating wire layer (`dsh_host._mcp._wire`) sits in front
of the SDK session, because the SDK's own stdio transport does not survive hostile input; over
streamable HTTP (``--http HOST:PORT``) the SDK's ASGI app is served by hypercorn's trio worker.
Nothing but protocol messages is written to stdout: while serving, fd 1 points at stderr and fd 0
at the null device, so a tool or child process that prints cannot corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import trio
from mcp.server.lowlevel import NotificationOptions

from ._auth import TokenFileError, Tokens, read_token_file
from ._limits import HttpLimits, SessionCaps
from ._listen import bound_port, hypercorn_config, listen, made_token
from ._server import CALL_GROUP, CallGroup, McpService, annotations_for, content_to_mcp
from ._wire import DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_DEPTH, DEFAULT_MAX_LINE, Wire

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from hypercorn.config import Sockets
    from mcp.server.transport_security import TransportSecuritySettings

    from .. import Host

__all__ = [
    "McpService",
    "annotations_for",
    "content_to_mcp",
    "parse_bind",
    "run_serve_command",
    "serve",
    "serve_http",
    "serve_stdio",
]


async def serve(
    host: Host,
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
    *,
    list_all: bool = False,
    max_line: int = DEFAULT_MAX_LINE,
    max_depth: int = DEFAULT_MAX_DEPTH,
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    service: McpService | None = None,
) -> None:
    """Serve one MCP session over a byte stream pair until *receive* reaches end of file.

    At end of file the client is gone: calls still running are aborted at once (they end
    ``ABORTED``, in their answer and in the audit); other requests already read are answered,
    for up to *drain_timeout* seconds.
    """
    service = service or McpService(host, list_all=list_all)
    server = service.server
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    group = CallGroup()
    wire = Wire(
        receive, send, max_line=max_line, max_depth=max_depth, drain_timeout=drain_timeout,
        on_end_of_input=lambda: group.abort_all("the MCP client closed its input"),
    )  # fmt: skip

    async def session(read: Any, write: Any) -> None:
        token = CALL_GROUP.set(group)  # the SDK's request tasks inherit it
        try:
            await server.run(read, write, options)
        finally:
            CALL_GROUP.reset(token)

    async with _on_tool_changes(host, lambda: wire.notify("notifications/tools/list_changed")):
        await wire.run(session)


@contextmanager
def _claim_stdio() -> Iterator[tuple[int, int]]:
    """Private copies of fds 0 and 1 for the protocol; fd 0 -> /dev/null, fd 1 -> stderr meanwhile."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        os.close(null)
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


async def serve_stdio(
    host: Host,
    *,
    list_all: bool = False,
    max_line: int = DEFAULT_MAX_LINE,
    service: McpService | None = None,
) -> None:
    """Serve MCP on this process's stdin and stdout until stdin ends."""
    with _claim_stdio() as (fd_in, fd_out):
        receive = trio.lowlevel.FdStream(fd_in)
        send = trio.lowlevel.FdStream(fd_out)
        async with receive, send:
            await serve(host, receive, send, list_all=list_all, max_line=max_line, service=service)


def parse_bind(text: str, public: bool = False, *, token_file: bool = True) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as a pair; `ValueError` saying what is wrong.

    A HOST that is not a loopback address is refused unless *public*, and *public* needs a
    *token_file* of the operator's (not a generated token): a server other machines can reach
    is handed out on purpose.
    """
    where, sep, port = text.rpartition(":")
    if (
        not sep
        or not where
        or not (port.isascii() and port.isdigit())
        or not 0 <= int(port) <= 65535
    ):
        raise ValueError(f"--http takes HOST:PORT such as 127.0.0.1:8765, not {text!r}")
    address = where.strip("[]")
    if not public and not _loopback(address):
        raise ValueError(
            f"--http {text}: {address!r} is not a loopback address: anyone who can reach it "
            "and holds a token could run tools under this policy. Bind 127.0.0.1, [::1] or "
            "localhost, or pass --public with --token-file to serve it to other machines"
        )
    if public and not token_file:
        raise ValueError(
            "--public needs --token-file: the tokens of a server other machines can reach are "
            "the operator's to give out (one bearer token a line; see dsh mcp serve --help)"
        )
    return address, int(port)


def _loopback(address: str) -> bool:
    """Whether *address* (an IP literal, or ``localhost``) names this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def _transport_security(address: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for a loopback *address*: only requests whose Host (and Origin,
    if any) name a loopback spelling are served. The SDK turns it on by itself for three exact
    spellings only (``127.0.0.1``, ``localhost``, ``::1``), not for ``127.0.0.2``, say."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not _loopback(address):
        return None  # --public: no host list could be right
    spelled = f"[{address}]" if ":" in address else address
    hosts = dict.fromkeys([spelled, "127.0.0.1", "localhost", "[::1]"])
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{host}:*" for host in hosts],
        allowed_origins=[f"http://{host}:*" for host in hosts],
    )


async def serve_http(
    host: Host,
    bind: str,
    *,
    tokens: Tokens,
    list_all: bool = False,
    max_body: int = DEFAULT_MAX_LINE,
    public: bool = False,
    limits: HttpLimits | None = None,
    service: McpService | None = None,
    sockets: Sockets | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over streamable HTTP at *bind* (``HOST:PORT``), path ``/mcp``, until cancelled.

    Every request must carry one of *tokens* (``Authorization: Bearer``), loopback included:
    any local user can reach a loopback port. POST bodies are validated first (`ValidatingApp`);
    *limits* caps each token's sessions and calls and the bodies being read (`HttpLimits`).
    ``task_status.started`` receives the bound addresses (port 0 picks a free port). A loopback
    *bind* serves only requests whose Host and Origin name this machine (DNS-rebinding
    protection); any other is refused unless *public* (see `parse_bind`). *sockets* already
    listening at *bind* (`listen`) are served, else *bind* is bound first (`ValueError` if it
    cannot be: the address is in use, say).
    """
    from hypercorn.trio.run import worker_serve
    from hypercorn.utils import wrap_app
    from mcp.server.auth.settings import AuthSettings
    from pydantic import AnyHttpUrl

    from ._http import ValidatingApp

    address, port = parse_bind(bind, public)
    config = hypercorn_config(address, port)
    sockets = sockets if sockets is not None else listen(address, port)
    port = bound_port(sockets)
    service = service or McpService(host, list_all=list_all, tokens=tokens, limits=limits)
    limits = service.limits
    spelled = f"[{address}]" if ":" in address else address
    sdk_app = service.server.streamable_http_app(
        host=address,
        max_request_body_size=max_body,
        transport_security=_transport_security(address),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(f"http://{spelled}:{port or 1}"), resource_server_url=None
        ),
        token_verifier=tokens,
    )
    capped = SessionCaps(sdk_app, tokens, limits)
    app = ValidatingApp(
        capped, max_body=max_body, tokens=tokens, body_timeout=limits.body_timeout,
        body_bytes=limits.body_bytes, token_body_bytes=limits.token_body_bytes,
        token_bodies=limits.token_bodies,
    )  # fmt: skip
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    try:
        async with _on_tool_changes(host, service.http_sessions.tools_changed):
            await worker_serve(wrapped, config, sockets=sockets, task_status=task_status)
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()


@contextlib.asynccontextmanager
async def _on_tool_changes(
    host: Host, tell: Callable[[], Awaitable[object]]
) -> AsyncIterator[None]:
    """While open, each change of *host*'s tools (coalesced: changes made while *tell* runs
    are told once more after it) awaits *tell*: the stdio client's notification, or the open
    HTTP sessions'."""
    changed = trio.Event()
    trio_token = trio.lowlevel.current_trio_token()

    def on_change() -> None:  # the registry changed (on the host's thread)
        with contextlib.suppress(trio.RunFinishedError):
            trio_token.run_sync_soon(changed.set)

    async def telling() -> None:
        nonlocal changed
        while True:
            await changed.wait()
            changed = trio.Event()
            await tell()

    host.registry.listeners.append(on_change)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(telling)
            yield
            nursery.cancel_scope.cancel()
    finally:
        host.registry.listeners.remove(on_change)


async def _until_interrupt(serving: Callable[[], Awaitable[None]]) -> bool:
    """Run *serving*; ``True`` if SIGINT (Ctrl-C) stopped it, ``False`` if it ended by itself."""
    interrupted = False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    nursery.cancel_scope.cancel()

            async def serve_then_stop() -> None:
                await serving()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(serve_then_stop)
    return interrupted


async def _serve_http_telling(
    host: Host, args: argparse.Namespace, service: McpService, made: str | None, sockets: Sockets
) -> None:
    """`serve_http` as ``args`` say; once it listens, one line on stderr says where, and how a
    client sends the token made in *made* (if one was)."""
    from functools import partial

    assert service.tokens is not None  # every --http client authenticates
    serving = partial(
        serve_http, host, args.http, max_body=args.max_message_bytes, public=args.public,
        tokens=service.tokens, service=service, sockets=sockets,
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serving)
        how = (
            f'send "Authorization: Bearer $(cat {made})" (a token made for this run)'
            if made is not None
            else f"send a bearer token of {args.token_file}"
        )
        sys.stderr.write(f"dsh mcp serve: serving {bound[0]}/mcp; clients {how}\n")
        sys.stderr.flush()


def run_serve_command(
    args: argparse.Namespace,
    build_host: Callable[[argparse.Namespace], Host],
    usage_error: type[Exception],
) -> int:
    """``dsh mcp serve``: 0 when the client closes stdin, 130 (one line on stderr) on Ctrl-C.

    With ``--http`` and no ``--token-file``, a token is made first (`generate_token_file`)."""
    if args.max_message_bytes < 1024:
        raise usage_error(
            f"--max-message-bytes must be at least 1024, not {args.max_message_bytes}"
        )
    tokens: Tokens | None = None
    bind: tuple[str, int] | None = None
    if args.token_file is not None and args.http is None:
        raise usage_error("--token-file authenticates --http clients: give --http HOST:PORT")
    if args.http is not None:
        try:
            bind = parse_bind(args.http, args.public, token_file=args.token_file is not None)
            if args.token_file is not None:
                tokens = read_token_file(args.token_file)
        except (ValueError, TokenFileError) as exc:
            raise usage_error(str(exc)) from None
    if args.workspace is not None:
        try:
            os.chdir(args.workspace)
        except OSError as exc:
            raise usage_error(
                f"--workspace {args.workspace!r}: {exc.strerror}; pass an existing directory"
            ) from None

    async def serve() -> bool:
        from .. import own_host

        # Made in this run, which owns it: mounted stdio servers' sessions are its tasks.
        async with own_host(lambda: build_host(args)) as host:
            try:
                service = McpService(host, list_all=args.list_all, tokens=tokens)
            except ValueError as exc:  # a token's allow=/deny= names a tool that does not exist
                raise usage_error(f"--token-file {args.token_file}: {exc}") from None

            async def serving() -> None:
                if sockets is not None:
                    await _serve_http_telling(host, args, service, made, sockets)
                else:
                    await serve_stdio(host, max_line=args.max_message_bytes, service=service)

            return await _until_interrupt(serving)

    with _listening(args, bind, usage_error) as (sockets, made, made_tokens):
        tokens = tokens or made_tokens
        if trio.run(serve):
            sys.stderr.write("dsh mcp serve: interrupted\n")
            return 130
    return 0


@contextmanager
def _listening(
    args: argparse.Namespace, bind: tuple[str, int] | None, usage_error: type[Exception]
) -> Iterator[tuple[Sockets | None, str | None, Tokens | None]]:
    """With ``--http`` (*bind*): the sockets listening there and, without ``--token-file``, the
    file and tokens of a token made for the port bound (the file is removed at exit). The port
    is bound first: a failure is a usage error that touches no token file."""
    if bind is None:
        yield None, None, None
        return
    try:
        sockets = listen(*bind)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    with contextlib.ExitStack() as stack:
        for sock in sockets.insecure_sockets:
            stack.callback(sock.close)
        if args.token_file is not None:
            yield sockets, None, None
            return
        try:
            made, tokens = stack.enter_context(made_token(bound_port(sockets)))
        except TokenFileError as exc:
            raise usage_error(str(exc)) from None
        yield sockets, made, tokens
