"""Approval under ``dsh mcp serve`` with the default plugins (issue 23 point 6, row 9).

The official SDK client drives a real ``dsh mcp serve`` subprocess that loads every built-in
plugin from its entry points: the MCP client is the approver, it sees the whole arguments, and a
client without elicitation is told how to allow the call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
import trio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from dsh_host._mcp._approve import APPROVER_NAME
from dsh_plugins_builtin.approval import MCP_CLIENT
from tests.trusted import write_config

DSH = str(Path(sys.executable).parent / "dsh")
HIDDEN = "x" * 40 + " " * 300 + "; and then the tail nobody saw"


def _workspace(tmp_path: Path, approval: str = "") -> Path:
    write_config(
        tmp_path / "dsh.toml",
        '[plugin.permissions]\nask = ["write_file"]\n' + approval,
    )
    return tmp_path


def _call(workspace: Path, arguments: dict[str, str], answers: list[dict[str, object]] | None):
    """Call write_file once through `dsh mcp serve`; the elicitation messages and the result."""
    messages: list[str] = []

    async def elicit(context, params):
        messages.append(params.message)
        answer = answers.pop(0) if answers else {"action": "decline"}
        return types.ElicitResult(**answer)

    async def client():
        params = StdioServerParameters(
            command=DSH, args=["mcp", "serve", "--workspace", str(workspace)], env=dict(os.environ)
        )
        kwargs = {"elicitation_callback": elicit} if answers is not None else {}
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **kwargs) as session,
        ):
            await session.initialize()
            return await session.call_tool("write_file", arguments)

    result = anyio.run(client)
    return messages, result


def test_the_approval_plugin_yields_to_the_name_the_service_registers():
    assert MCP_CLIENT == APPROVER_NAME


async def test_the_client_is_asked_and_sees_the_whole_arguments(tmp_path):
    workspace = _workspace(tmp_path)
    args = {"path": "out.txt", "content": HIDDEN}
    accept = [{"action": "accept", "content": {}}]
    messages, result = await trio.to_thread.run_sync(_call, workspace, args, accept)
    assert result.is_error is False, result
    assert (workspace / "out.txt").read_text() == HIDDEN
    [message] = messages
    assert "⟨300 spaces⟩" in message  # the run of spaces is counted, not a blank
    assert "; and then the tail nobody saw" in message  # nothing is cut
    assert "write_file" in message


async def test_a_static_allow_in_auto_mode_does_not_answer_for_the_client(tmp_path):
    """`answer = "allow"` used to run asks under MCP without asking anyone."""
    workspace = _workspace(tmp_path, '[plugin.approval]\nanswer = "allow"\n')
    messages, result = await trio.to_thread.run_sync(
        _call, workspace, {"path": "out.txt", "content": "x"}, [{"action": "decline"}]
    )
    assert len(messages) == 1
    assert result.is_error is True
    assert result.meta["dsh/decided_by"] == "mcp_client"
    assert not (workspace / "out.txt").exists()


async def test_long_arguments_are_summarised_and_accepting_shows_them_all(tmp_path):
    workspace = _workspace(tmp_path)
    content = "\n".join(f"line {n}" for n in range(60)) + "\nrm -rf ~ # the last line"
    answers = [{"action": "accept", "content": {}}, {"action": "decline"}]
    messages, result = await trio.to_thread.run_sync(
        _call, workspace, {"path": "out.txt", "content": content}, answers
    )
    first, second = messages
    assert "more characters" in first
    assert "accept to see them all first" in first
    assert "rm -rf ~ # the last line" not in first
    assert "rm -rf ~ # the last line" in second  # the whole arguments, before deciding
    assert result.is_error is True  # declined after viewing
    assert not (workspace / "out.txt").exists()


async def test_accepting_the_summary_never_runs_the_call(tmp_path):
    # A review accepted the 20-line form without ticking "view all": the call ran, with the
    # `touch` below the fold nobody saw. Accepting a summary only shows the whole arguments.
    workspace = _workspace(tmp_path)
    content = "\n".join(f"# comment {n}" for n in range(25)) + "\ntouch PWNED"
    for first_answer in ({"action": "accept", "content": {}}, {"action": "accept"}):
        answers = [first_answer, {"action": "cancel"}]
        messages, result = await trio.to_thread.run_sync(
            _call, workspace, {"path": "out.txt", "content": content}, answers
        )
        assert len(messages) == 2, messages
        assert "touch PWNED" in messages[1]
        assert result.is_error is True
        assert not (workspace / "out.txt").exists()
    answers = [{"action": "accept", "content": {}}, {"action": "accept", "content": {}}]
    messages, result = await trio.to_thread.run_sync(
        _call, workspace, {"path": "out.txt", "content": content}, answers
    )
    assert result.is_error is False, result  # accepted once everything was shown
    assert (workspace / "out.txt").read_text() == content


async def test_a_client_without_elicitation_is_told_how_to_allow_the_call(tmp_path):
    workspace = _workspace(tmp_path)
    messages, result = await trio.to_thread.run_sync(
        _call, workspace, {"path": "out.txt", "content": "x"}, None
    )
    assert messages == []
    assert result.is_error is True
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert "does not support elicitation" in text
    assert 'allow = ["write_file"]' in text
    assert str(workspace / "dsh.toml") in text
    assert not (workspace / "out.txt").exists()
