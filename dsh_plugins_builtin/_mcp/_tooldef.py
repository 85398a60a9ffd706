"""A mounted server's tool as a dsh tool (`mounted_tool`)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, NoReturn

from dsh_host import DshError, TextBlock, ToolDefinition, define_tool

from ._content import content_blocks
from ._mount import BAD_RESULT, Link
from ._text import printable, printable_schema

if TYPE_CHECKING:
    import mcp_types as types

    from ._watch import Watch

__all__ = ["mounted_tool"]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""What a mounted server may call a tool (the MCP spec's recommended names): nothing that could
smuggle control characters, spaces or a very long name to the model, a prompt or a rule."""


def mounted_tool(link: Link, tool: types.Tool, name: str) -> ToolDefinition:
    """*link*'s *tool* as the dsh tool *name* (``mcp__server__tool``): its arguments checked
    against the server's schema, the call sent through the session's runner, the answer as
    dsh content; a failure of the server, the guard or the tool as one `DshError`. What the
    server wrote that dsh shows (descriptions, schema titles, error messages) is `printable`."""
    server, remote = link.name, tool.name
    if not _TOOL_NAME.fullmatch(remote):
        raise DshError("its name is not 1 to 128 letters, digits, '_', '-' or '.'", "MCP_BAD_TOOL")
    annotations = tool.annotations
    read_only = bool(annotations is not None and annotations.read_only_hint)
    timeout = link.config.timeout_ms / 1000

    from mcp_types import TextContent

    async def execute(args: Any) -> Any:
        runner = link.runner
        watch = await _checked(link)
        session = link.session
        if session is None or runner is None:
            raise DshError(
                link.describe_failure(f"MCP server {server!r} is not running: {link.error}"),
                "MCP_SERVER_UNAVAILABLE",
            )

        async def call() -> types.CallToolResult:
            return await session.call_tool(remote, args, read_timeout_seconds=timeout)

        restarts = len(link.restarts)
        try:
            result = await runner.run(call)
        except DshError:
            raise
        except Exception as exc:
            if len(link.restarts) > restarts:  # killed meanwhile: its sandbox moved
                _cut_off(link, remote)
            if getattr(exc, "code", None) == BAD_RESULT:  # refused by the guard: one line
                detail = getattr(exc, "data", None)  # what the server sent, for --trace
                detail = detail if isinstance(detail, str) else None
                raise DshError(printable(str(exc)), "MCP_BAD_RESULT", detail=detail) from None
            what = f"MCP server {server!r} failed on {remote!r}: {type(exc).__name__}: {exc}"
            raise DshError(link.describe_failure(what), "MCP_SERVER_FAILED") from None
        if watch is not None and (why := await _moved(watch)) is not None:
            await _withheld(link, remote, why, watch)
        content = result.content
        if len(content) == 1 and type(content[0]) is TextContent and not result.is_error:
            return content[0].text  # one text block: the pipeline's quickest result
        blocks = content_blocks(result, server)
        if result.is_error:
            text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
            raise DshError(printable(text) or f"{remote} failed", "MCP_TOOL_ERROR")
        return blocks

    return define_tool(
        name=name,
        description=printable(tool.description or f"{remote} (MCP server {server})"),
        parameters=printable_schema(dict(tool.input_schema)),
        execute=execute,
        timeout_ms=link.config.timeout_ms,
        is_concurrency_safe=(lambda args: True) if read_only else None,
    )


async def _checked(link: Link) -> Watch | None:
    """Before anything is sent: the sandbox of *link*'s server checked (`_watch`), the server
    restarted when it moved (one restart for the calls that find it so at once; a call made
    meanwhile waits for it, as for one the watch's sentinel began); the watch the call is sent
    under, checked in turn (a new server's sandbox may have moved too: the answer's own check
    then withholds it)."""
    for _ in range(3):
        watch, runner = link.watch, link.runner
        why = await _moved(watch) if watch is not None else None
        if runner is None or (why is None and not link.restarting):
            return watch
        await runner.run(functools.partial(link.restart, why, watch))
    return link.watch


async def _moved(watch: Watch) -> str | None:
    """What moved in the sandbox `watch` holds: its mount table and missing entries (a poll,
    here), then what the ``deny_read`` globs cover (a walk, in a worker thread: never on the
    host's event loop, which every other call shares)."""
    why = watch.moved()
    if why is None and watch.hiding.patterns:
        import trio

        why = await trio.to_thread.run_sync(watch.hiding.new_match)
    return why


def _cut_off(link: Link, remote: str) -> NoReturn:
    """*link*'s server was killed while it worked on a call of *remote*: its sandbox moved
    (`_mount.Link.restart`)."""
    raise DshError(
        f"MCP server {link.name!r} was stopped while it worked on {remote!r} "
        f"({link.restarts[-1]}), and is started again in a new sandbox: the call may have run "
        "in part. Call the tool again.",
        "MCP_SERVER_RESTARTED",
    )


async def _withheld(link: Link, remote: str, why: str, watch: Watch) -> NoReturn:
    """The answer to a call of *remote* came after *link*'s sandbox moved (*why*, as *watch*
    found): restart the server, and withhold the answer."""
    await link.runner.run(functools.partial(link.restart, why, watch))
    raise DshError(
        f"MCP server {link.name!r} was restarted in a new sandbox while it answered "
        f"{remote!r} ({why}), so its answer was withheld: it could hold what the sandbox "
        "hides. Call the tool again.",
        "MCP_SERVER_RESTARTED",
    )
