"""hook_commands with real Claude Code material: hook scripts written the way public Claude Code
hooks are written, a settings file in Claude Code's own format, and dsh's built-in tools."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host, ToolExecutionResult, define_tool
from dsh_plugins_builtin.hook_commands import HookCommandsPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

# A PreToolUse guard as public Claude Code hooks write it: JSON on stdin, tool_name and
# tool_input tested, exit 2 with the reason on stderr to block.
GUARD = """\
import json
import os
import re
import sys

data = json.load(sys.stdin)
tool = data.get("tool_name")
tool_input = data.get("tool_input", {})
if tool == "Bash":
    command = tool_input.get("command", "")
    if re.search(r"\\brm\\s+-([a-z]*r[a-z]*f|[a-z]*f[a-z]*r)", command) or re.search(r"git\\s+reset\\s+--hard", command):
        print(f"Blocked dangerous command: {command}", file=sys.stderr)
        sys.exit(2)
if tool in ("Read", "Edit", "Write"):
    path = tool_input.get("file_path", "")
    if os.path.basename(path).startswith(".env"):
        print(f"Access to {path} is not allowed: it holds secrets", file=sys.stderr)
        sys.exit(2)
sys.exit(0)
"""


def record(log: Path) -> str:
    """A hook that appends every payload it is given (one JSON line each) to *log*."""
    return f"cat >> {shlex.quote(str(log))}"


def claude_settings(ws: Path, pre: list[Any], post: list[Any] = ()) -> str:
    """Write ``.claude/settings.json`` in Claude Code's format; return its relative path."""
    (ws / ".claude").mkdir(exist_ok=True)
    data = {
        "permissions": {"allow": ["Bash(git status:*)"]},
        "hooks": {"PreToolUse": list(pre), "PostToolUse": list(post)},
    }
    (ws / ".claude" / "settings.json").write_text(json.dumps(data, indent=2))
    return ".claude/settings.json"


def hook_script(ws: Path, name: str, body: str) -> str:
    """A Python hook in ``.claude/hooks`` (protected), run as Claude Code users spell it."""
    hooks = ws / ".claude" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / name).write_text(body)
    return f'{sys.executable} "$CLAUDE_PROJECT_DIR"/.claude/hooks/{name}'


def matcher(pattern: str, command: str) -> dict[str, Any]:
    return {"matcher": pattern, "hooks": [{"type": "command", "command": command}]}


def tools_hooks_host(make_host: Any, ws: Path, settings: str, **table: Any) -> Host:
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"writable_roots": ["."]},
            "hook_commands": {"settings": [settings], **table},
        },
    }
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), HookCommandsPlugin(), config=config)
    return host


@pytest.fixture
def guarded(make_host: Any, ws: Path) -> Host:
    guard = hook_script(ws, "guard.py", GUARD)
    files = claude_settings(ws, [matcher("Bash", guard), matcher("Read|Edit|Write|Bash", guard)])
    return tools_hooks_host(make_host, ws, files)


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf victim",
        "cd . && rm -rf victim",
        "git reset --hard && rm -r victim",
        "rm -fr victim",
    ],
)
async def test_a_real_guard_blocks_destructive_bash_before_it_runs(guarded, ws, command):
    victim = ws / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    result = await guarded.call("bash", {"command": command})
    assert result.code == "DENIED"
    assert result.decided_by == "hook_commands"
    assert "Blocked dangerous command" in result.text
    assert (victim / "keep.txt").read_text() == "precious"  # the payload never ran


@pytest.mark.parametrize("name", [".env", ".env.local"])
async def test_a_real_guard_blocks_env_reads_and_writes(guarded, ws, name):
    (ws / name).write_text("API_KEY=sk-secret-123\n")
    read = await guarded.call("read_file", {"path": name})
    assert read.code == "DENIED"
    assert "sk-secret-123" not in read.text
    assert f"{ws}/{name} is not allowed" in read.text  # file_path reached the hook, absolute
    write = await guarded.call("write_file", {"path": name, "content": "API_KEY=stolen\n"})
    edit = await guarded.call(
        "edit_file", {"path": name, "old_text": "sk-secret-123", "new_text": "x"}
    )
    assert (write.code, edit.code) == ("DENIED", "DENIED")
    assert (ws / name).read_text() == "API_KEY=sk-secret-123\n"


async def test_the_guard_lets_ordinary_calls_through(guarded, ws):
    (ws / "notes.txt").write_text("hello\n")
    result = await guarded.call("read_file", {"path": "notes.txt"})
    assert (result.is_error, result.text) == (False, "     1\thello")
    result = await guarded.call("write_file", {"path": "out.txt", "content": "x"})
    assert result.is_error is False
    assert (ws / "out.txt").read_text() == "x"


async def test_bash_runs_when_the_guard_allows_it(make_host, ws, backend):
    sandbox: dict[str, Any] = {"writable_roots": ["."], "backend": backend}
    if backend == "landlock":
        # Landlock cannot keep .claude/ read-only inside the workspace (the host refuses the
        # default protected paths there), so the hook lives outside every writable root.
        sandbox["protected"] = []
        sandbox["protect_config"] = False
        outside = ws.parent / "hooks"
        outside.mkdir()
        (outside / "guard.py").write_text(GUARD)
        guard = f'{sys.executable} "{outside / "guard.py"}"'
    else:
        guard = hook_script(ws, "guard.py", GUARD)
    files = claude_settings(ws, [matcher("Bash", guard)])
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": sandbox, "hook_commands": {"settings": [files]}},
    }
    host = make_host(ToolsPlugin(), SandboxPlugin(), HookCommandsPlugin(), config=config)
    result = await host.call("bash", {"command": "echo fine > made.txt && cat made.txt"})
    assert (result.is_error, result.text) == (False, "fine")
    denied = await host.call("bash", {"command": "rm -rf made.txt"})
    assert denied.code == "DENIED"
    assert (ws / "made.txt").exists()


@pytest.mark.parametrize(
    ("pattern", "blocked"),
    [
        ("Bash", {"bash"}),
        ("bash", {"bash"}),
        ("Read|Edit|Write|Bash", {"bash", "read_file", "write_file", "edit_file"}),
        ("read_file|LS", {"read_file", "list_dir"}),
        ("Glob|Grep", {"glob", "grep"}),
        ("mcp__.*", {"mcp__files__read"}),
        ("Ba", set()),  # the whole name must match
        ("*", {"bash", "read_file", "write_file", "edit_file", "list_dir", "glob", "grep",
               "mcp__files__read"}),
    ],
)  # fmt: skip
async def test_matchers_match_either_spelling(make_host, ws, pattern, blocked):
    host = tools_hooks_host(make_host, ws, claude_settings(ws, [matcher(pattern, "exit 2")]))

    async def execute(args: Any, ctx: Any) -> str:
        return "ok"

    host.registry.register(
        define_tool(
            name="mcp__files__read", description="an MCP tool", parameters={}, execute=execute
        )
    )
    calls = {
        "bash": {"command": "true"},
        "read_file": {"path": "a.txt"},
        "write_file": {"path": "a.txt", "content": ""},
        "edit_file": {"path": "a.txt", "old_text": "a", "new_text": "b"},
        "list_dir": {},
        "glob": {"pattern": "*"},
        "grep": {"pattern": "x"},
        "mcp__files__read": {},
    }
    seen = set()
    for name, args in calls.items():
        if (await host.call(name, args)).code == "DENIED":
            seen.add(name)
    assert seen == blocked


async def test_payloads_in_claude_codes_shape_for_every_builtin(make_host, ws):
    log = ws.parent / "payloads.jsonl"
    record_to = record(log)
    files = claude_settings(ws, [matcher("*", record_to)], [matcher("*", record_to)])
    host = tools_hooks_host(make_host, ws, files)
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("one\ntwo = 2\nthree\n")
    calls = [
        ("read_file", {"path": "src/a.py", "offset": 2, "limit": 1}),
        ("write_file", {"path": "new.txt", "content": "made\n"}),
        ("edit_file", {"path": "new.txt", "old_text": "made", "new_text": "changed"}),
        ("list_dir", {"path": "src"}),
        ("glob", {"pattern": "**/*.py", "path": "src"}),
        ("grep", {"pattern": "two", "path": "src", "ignore_case": True}),
    ]
    for index, (name, args) in enumerate(calls):
        result = await host.call(name, args, call_id=f"toolu_{index}")
        assert result.is_error is False, result.text
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2 * len(calls)
    pre = {p["tool_use_id"]: p for p in lines if p["hook_event_name"] == "PreToolUse"}
    post = {p["tool_use_id"]: p for p in lines if p["hook_event_name"] == "PostToolUse"}
    w = str(ws)
    for payload in lines:
        assert payload["cwd"] == w
        assert payload["session_id"] is None
        assert payload["transcript_path"] is None
    assert [pre[f"toolu_{i}"]["tool_name"] for i in range(len(calls))] == [
        "Read", "Write", "Edit", "LS", "Glob", "Grep",
    ]  # fmt: skip
    assert pre["toolu_0"]["tool_input"] == {"file_path": f"{w}/src/a.py", "offset": 2, "limit": 1}
    assert pre["toolu_1"]["tool_input"] == {"file_path": f"{w}/new.txt", "content": "made\n"}
    assert pre["toolu_2"]["tool_input"] == {
        "file_path": f"{w}/new.txt",
        "old_string": "made",
        "new_string": "changed",
    }
    assert pre["toolu_3"]["tool_input"] == {"path": f"{w}/src"}
    assert pre["toolu_4"]["tool_input"] == {"pattern": "**/*.py", "path": f"{w}/src"}
    assert pre["toolu_5"]["tool_input"] == {"pattern": "two", "path": f"{w}/src", "-i": True}
    assert post["toolu_0"]["tool_response"] == {
        "type": "text",
        "file": {
            "filePath": f"{w}/src/a.py",
            "content": "two = 2",
            "numLines": 1,
            "startLine": 2,
            "totalLines": 3,
        },
    }
    assert post["toolu_1"]["tool_response"] == {
        "type": "create",
        "filePath": f"{w}/new.txt",
        "content": "made\n",
        "success": True,
    }
    assert post["toolu_2"]["tool_response"] == {
        "filePath": f"{w}/new.txt",
        "oldString": "made",
        "newString": "changed",
        "replaceAll": False,
        "userModified": False,
        "success": True,
    }
    assert post["toolu_3"]["tool_response"]["entries"] == ["a.py"]
    assert post["toolu_4"]["tool_response"] == {
        "filenames": [f"{w}/src/a.py"],
        "numFiles": 1,
        "truncated": False,
        "durationMs": 0,
    }
    assert post["toolu_5"]["tool_response"] == {
        "mode": "content",
        "content": "src/a.py:2:two = 2",
        "numLines": 1,
        "numFiles": 1,
        "filenames": [f"{w}/src/a.py"],
    }


async def test_bash_payload_and_response(make_host, ws, backend):
    log = ws.parent / "payloads.jsonl"
    record_to = record(log)
    files = claude_settings(ws, [matcher("Bash", record_to)], [matcher("Bash", record_to)])
    sandbox: dict[str, Any] = {"writable_roots": ["."], "backend": backend}
    if backend == "landlock":
        sandbox["protected"] = []  # Landlock cannot keep them read-only inside the workspace
        sandbox["protect_config"] = False
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": sandbox, "hook_commands": {"settings": [files]}},
    }
    host = make_host(ToolsPlugin(), SandboxPlugin(), HookCommandsPlugin(), config=config)
    result = await host.call("bash", {"command": "echo out", "timeout_ms": 5000})
    assert result.text == "out"
    pre, post = (json.loads(line) for line in log.read_text().splitlines())
    assert (pre["tool_name"], pre["tool_input"]) == (
        "Bash",
        {"command": "echo out", "timeout": 5000},
    )
    assert post["tool_response"] == {
        "stdout": "out",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
    }


async def test_a_failed_tool_gets_the_generic_response(make_host, ws):
    log = ws.parent / "payloads.jsonl"
    record_to = record(log)
    host = tools_hooks_host(make_host, ws, claude_settings(ws, [], [matcher("Read", record_to)]))
    result = await host.call("read_file", {"path": "missing.txt"})
    assert result.is_error
    (post,) = (json.loads(line) for line in log.read_text().splitlines())
    assert post["tool_response"] == {"content": result.text, "is_error": True}


async def test_exit_1_fails_closed_by_default_and_is_a_warning_with_fail_closed_false(
    make_host, ws
):
    (ws / "notes.txt").write_text("hello\n")
    crash = hook_script(ws, "crash.py", "import sys\nprint('boom', file=sys.stderr)\nsys.exit(1)\n")
    files = claude_settings(ws, [matcher("Read", crash)])
    closed = await tools_hooks_host(make_host, ws, files).call("read_file", {"path": "notes.txt"})
    assert closed.code == "DENIED"
    assert "exited with code 1: boom" in closed.text
    assert "fail_closed is true" in closed.text
    host = tools_hooks_host(make_host, ws, files, fail_closed=False)
    opened = await host.call("read_file", {"path": "notes.txt"})
    assert (opened.is_error, opened.text) == (False, "     1\thello")


async def test_json_permission_decision_deny_on_a_builtin(make_host, ws):
    (ws / "notes.txt").write_text("hello\n")
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "reads are frozen",
        }
    }
    hook = hook_script(ws, "deny.py", f"import json\nprint(json.dumps({out!r}))\n")
    host = tools_hooks_host(make_host, ws, claude_settings(ws, [matcher("Read", hook)]))
    result = await host.call("read_file", {"path": "notes.txt"})
    assert (result.code, result.text) == ("DENIED", "Error: reads are frozen")


async def test_post_tool_use_block_on_a_builtin_hides_the_output(make_host, ws):
    (ws / "notes.txt").write_text("token=abc\n")
    post = {"decision": "block", "reason": "output held a token"}
    hook = hook_script(
        ws,
        "scan.py",
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "if 'token=' in data['tool_response']['file']['content']:\n"
        f"    print(json.dumps({post!r}))\n",
    )
    host = tools_hooks_host(make_host, ws, claude_settings(ws, [], [matcher("Read", hook)]))
    result = await host.call("read_file", {"path": "notes.txt"})
    assert (result.code, result.text) == ("BLOCKED", "output held a token")


async def test_a_plugin_tool_borrowing_a_claude_name_gets_the_generic_response(make_host, ws):
    log = ws.parent / "payloads.jsonl"
    host = tools_hooks_host(make_host, ws, claude_settings(ws, [], [matcher("Read", record(log))]))

    async def execute(args: Any, ctx: Any) -> Any:
        return ToolExecutionResult(content="odd", meta={"count": "many"})

    tool = define_tool(
        name="my_read", description="reads", parameters={"path": {"type": "string"}},
        execute=execute, claude_name="Read", claude_keys={"path": "file_path"},
    )  # fmt: skip
    host.registry.register(tool)
    result = await host.call("my_read", {"path": "x"})
    assert (result.text, result.is_error) == ("odd", False)
    (post,) = (json.loads(line) for line in log.read_text().splitlines())
    assert post["tool_response"] == {"content": "odd", "is_error": False}
    assert post["tool_input"] == {"file_path": "x"}  # no declared paths: left as given
