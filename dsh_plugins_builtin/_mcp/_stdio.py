"""The stdio transport of a mounted server: bounded lines, and the whole process group reaped.

The SDK's own stdio client reads a line of any length (a 100 MB result is held, then parsed,
long after the call's budget) and kills the server's process tree only when the server itself
outlives its grace period, so a server that exits at once leaves its children running. This
transport, in the mount loop (asyncio, through anyio):

- starts the server in a session of its own (its process group);
- reads its stdout in chunks and splits lines in linear time; a line longer than
  ``max_line`` bytes is not kept: `Oversized` (with the line's first bytes, to find its id) is
  delivered instead as soon as the bound is crossed, and the rest is skipped to its newline;
- parses each line strictly as JSON (a line that is not is delivered as the `ValueError`);
- at close: stdin is closed, the server has `GRACE` seconds to exit, then its whole process
  group is terminated, whether the server exited or not (its children go with it).

What it delivers is raw: `dict` messages (checked and typed by `_guard`), `Oversized`, or an
exception. What it sends is `SessionMessage` from the SDK session, one JSON line each.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, Protocol

import anyio
import attrs
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["GRACE", "Oversized", "Raw", "stdio_transport"]

GRACE = 2.0
"""Seconds a server has to exit after its stdin closes, before its process group is killed."""
PREFIX = 512
"""Bytes of an oversized line kept, to find the id of the request it answers."""


@attrs.frozen
class Oversized:
    """A line longer than the bound: its first `PREFIX` bytes, and the bound it crossed."""

    prefix: bytes
    limit: int


Raw = dict[str, Any] | Oversized | Exception


@contextlib.asynccontextmanager
async def stdio_transport(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    errlog: IO[str],
    max_line: int,
    pass_fds: list[int] | None = None,
    check: Checker | None = None,
    started: Callable[[int], None] | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Any], MemoryObjectSendStream[Any]]]:
    """Start *argv*; yield (messages from it, `SessionMessage` stream to it); reap it at exit.

    *pass_fds* are inherited by the child, and closed here once it has started. With *check*
    (the `_guard.Guard`), each message read is checked in the reading task and delivered as
    the `SessionMessage` it becomes, and each sent one noted, with no task in between.
    *started* is called with the process's pid once it runs.
    """
    try:
        process = await anyio.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, cwd=cwd,
            env=env, start_new_session=True, pass_fds=pass_fds or (),
        )  # fmt: skip
    finally:
        for fd in pass_fds or ():
            os.close(fd)
    if started is not None:
        started(process.pid)
    to_session, from_server = anyio.create_memory_object_stream[Any](0)
    to_server, from_session = anyio.create_memory_object_stream[Any](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read, process, _Deliver(to_session, check), max_line)
            tasks.start_soon(_write, process, from_session, check)
            try:
                yield from_server, to_server
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (to_session, from_server, to_server, from_session):
                stream.close()


class Checker(Protocol):
    """What `stdio_transport` asks of a checker (`_guard.Guard`)."""

    def check(self, item: Raw) -> list[Any]: ...

    def sent(self, message: Any) -> None: ...


class _Deliver:
    """Sends what is read to the session: raw, or as checked by the `Checker`."""

    def __init__(self, out: MemoryObjectSendStream[Any], check: Checker | None) -> None:
        self.out, self._check = out, check

    async def send(self, item: Raw) -> None:
        if self._check is None:
            await self.out.send(item)
            return
        from mcp.shared.message import SessionMessage

        for message in self._check.check(item):
            await self.out.send(SessionMessage(message))


async def _read(process: Process, deliver: _Deliver, max_line: int) -> None:
    assert process.stdout is not None
    out = deliver
    parts: list[bytes] = []
    size = 0
    skipping = False
    async with deliver.out:
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
            while True:
                chunk = await process.stdout.receive(1 << 16)
                start = 0
                while (end := chunk.find(b"\n", start)) != -1:
                    if not skipping:
                        if size + end - start > max_line:
                            await out.send(Oversized(b"".join(parts)[:PREFIX], max_line))
                        else:
                            parts.append(chunk[start:end])
                            await out.send(_parse(b"".join(parts)))
                    parts.clear()
                    size, skipping, start = 0, False, end + 1
                if skipping or start == len(chunk):
                    continue
                parts.append(chunk[start:])
                size += len(chunk) - start
                if size > max_line:  # said at once, not when the line ends
                    await out.send(Oversized(b"".join(parts)[:PREFIX], max_line))
                    parts.clear()
                    skipping = True


def _parse(line: bytes) -> Raw:
    try:
        message = json.loads(line)
    except ValueError as exc:
        return ValueError(f"a line that is not JSON ({exc}): {line[:80]!r}")
    if not isinstance(message, dict):
        return ValueError(f"a message that is not a JSON object: {line[:80]!r}")
    return message


async def _write(
    process: Process, messages: MemoryObjectReceiveStream[Any], check: Checker | None
) -> None:
    assert process.stdin is not None
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with messages:
            async for item in messages:
                if check is not None:
                    check.sent(item.message)
                text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(text.encode() + b"\n")


async def _stop(process: Process) -> None:
    """Close stdin, give the server `GRACE` seconds, then end its whole process group."""
    from mcp.os.posix.utilities import terminate_posix_process_tree

    assert process.stdin is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(GRACE):
        while process.returncode is None:
            await anyio.sleep(0.01)
    await terminate_posix_process_tree(process, timeout_seconds=GRACE)
    with (
        anyio.move_on_after(GRACE),
        contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError),
    ):
        await process.aclose()
