"""`dsh hook claude`: Claude Code hook payloads in, Claude Code's hook answers out."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from dsh_host._cli._main import main
from tests.trusted import write_config

RULES = """
[plugin.permissions]
allow = ["Bash(git status)", "Read(./src/**)", "Grep", "Glob"]
ask = ["Bash(git push:*)", "Edit", "Write", "mcp__github__*"]
deny = ["Bash(rm:*)", "WebFetch(domain:evil.example)", "Read(./secrets/**)"]

[plugin.audit]
path = "{db}"
"""


def payload(event, tool, tool_input, **extra):
    base = {
        "session_id": "abc123",
        "transcript_path": "/home/u/.claude/projects/p/abc123.jsonl",
        "cwd": os.getcwd(),  # where Claude Code runs the hook: its shell directory
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
    }
    if event != "PermissionRequest":
        base["tool_use_id"] = "toolu_01ABC"
    return {**base, **extra}


@pytest.fixture
def project(tmp_path, monkeypatch):
    db = tmp_path / ".dsh" / "audit.sqlite3"  # a protected path: refused anywhere else in /tmp
    write_config(tmp_path / "dsh.toml", RULES.format(db=db))
    (tmp_path / "src").mkdir()
    (tmp_path / "secrets").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path, db


@pytest.fixture
def pinned(project, tmp_path_factory):
    """The project's rules pinned outside it (``--config``): only then is a Bash call (whose
    writes the hook cannot judge) ever allowed."""
    _, db = project
    path = tmp_path_factory.mktemp("pinned") / "claude.toml"
    path.write_text(RULES.format(db=db))
    return path


def run_hook(data, capsys, monkeypatch, *, config=None):
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    status = main(["hook", "claude", *(["--config", str(config)] if config else [])])
    out, err = capsys.readouterr()
    return status, (json.loads(out) if out.strip() else None), err


def decision(answer):
    return answer["hookSpecificOutput"]["permissionDecision"] if answer else None


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        ("Bash", {"command": "rm -rf build", "description": "clean"}, "deny"),
        ("Bash", {"command": "git status", "description": "status"}, "allow"),
        ("Bash", {"command": "git push origin main"}, "ask"),
        ("Read", {"file_path": "{root}/src/app.py"}, "allow"),
        ("Read", {"file_path": "{root}/secrets/key.pem", "offset": 1, "limit": 20}, "deny"),
        ("Edit", {"file_path": "{root}/src/app.py", "old_string": "a", "new_string": "b"}, "ask"),
        ("Write", {"file_path": "{root}/src/new.py", "content": "print(1)\n"}, "ask"),
        ("Grep", {"pattern": "TODO", "path": "{root}/src", "output_mode": "content"}, "allow"),
        ("Glob", {"pattern": "**/*.py", "path": "{root}/src"}, "allow"),
        ("Glob", {"pattern": "**/*.py", "path": "{root}"}, "ask"),  # secrets/ lies below
        ("WebFetch", {"url": "https://evil.example/x", "prompt": "summarise"}, "deny"),
        ("mcp__github__create_issue", {"owner": "o", "repo": "r", "title": "t"}, "ask"),
    ],
)
def test_pre_tool_use_answers_with_dsh_rules(
    project, pinned, capsys, monkeypatch, tool, tool_input, expected
):
    root, _ = project
    tool_input = json.loads(json.dumps(tool_input).replace("{root}", str(root)))
    data = payload("PreToolUse", tool, tool_input)
    status, answer, err = run_hook(data, capsys, monkeypatch, config=pinned)
    assert (status, err) == (0, "")
    assert answer["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert decision(answer) == expected
    assert answer["hookSpecificOutput"]["permissionDecisionReason"].startswith("dsh")


def test_a_call_no_rule_decides_prints_nothing(project, capsys, monkeypatch):
    write_config(project[0] / "dsh.toml", '[plugins]\ndisable = ["permissions"]\n')
    status, answer, err = run_hook(
        payload("PreToolUse", "Bash", {"command": "ls"}), capsys, monkeypatch
    )
    assert (status, answer, err) == (0, None, "")  # Claude Code's own permission flow goes on


def test_permission_request_answers_allow_or_deny_and_stays_quiet_on_ask(
    project, pinned, capsys, monkeypatch
):
    deny = run_hook(payload("PermissionRequest", "Bash", {"command": "rm x"}), capsys, monkeypatch)
    assert deny[0] == 0
    assert deny[1]["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert "Bash(rm:*)" in deny[1]["hookSpecificOutput"]["decision"]["message"]
    git_status = payload("PermissionRequest", "Bash", {"command": "git status"})
    assert run_hook(git_status, capsys, monkeypatch)[:2] == (0, None)  # the policy is local
    allow = run_hook(git_status, capsys, monkeypatch, config=pinned)
    assert allow[1]["hookSpecificOutput"] == {
        "hookEventName": "PermissionRequest",
        "decision": {
            "behavior": "allow",
            "message": allow[1]["hookSpecificOutput"]["decision"]["message"],
        },
    }
    ask = run_hook(
        payload("PermissionRequest", "Bash", {"command": "git push"}), capsys, monkeypatch
    )
    assert ask[:2] == (0, None)


def test_an_ask_the_guards_refuse_is_denied_not_asked(project, capsys, monkeypatch):
    write_config(
        project[0] / "dsh.toml",
        '[plugin.permissions]\nask = ["Bash"]\n[plugin.guards]\nmax_argument_bytes = 400\n',
    )  # (the guards see the command's cwd too: Claude Code's shell directory)
    short = run_hook(payload("PreToolUse", "Bash", {"command": "ls"}), capsys, monkeypatch)
    assert decision(short[1]) == "ask"
    long = run_hook(payload("PreToolUse", "Bash", {"command": "x" * 500}), capsys, monkeypatch)
    assert decision(long[1]) == "deny"
    assert "guards" in long[1]["hookSpecificOutput"]["permissionDecisionReason"]


def test_denials_and_completed_calls_are_audited(project, capsys, monkeypatch):
    _, db = project
    run_hook(payload("PreToolUse", "Bash", {"command": "rm -rf /"}), capsys, monkeypatch)
    post = payload(
        "PostToolUse", "Bash", {"command": "ls"}, tool_response={"stdout": "a\n", "stderr": ""}
    )
    status, answer, err = run_hook(post, capsys, monkeypatch)
    assert (status, answer, err) == (0, None, "")
    rows = (
        sqlite3.connect(db)
        .execute("SELECT tool, outcome, decided_by FROM calls ORDER BY id")
        .fetchall()
    )
    assert rows == [("bash", "DENIED", "permissions"), ("bash", "ok", None)]  # dsh's Bash


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not valid JSON"),
        (b"nope", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b"[" * 200_000 + b"]" * 200_000, "nested more than"),
        (json.dumps({"hook_event_name": "PreToolUse"}).encode(), "no tool_name"),
        (json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode(), "no tool_input"),
        (json.dumps({"tool_name": "Bash", "tool_input": {}}).encode(), "hook_event_name must be"),
        (json.dumps({"hook_event_name": "Stop", "tool_name": "Bash", "tool_input": {}}).encode(), "hook_event_name must be"),
        (b'{"hook_event_name": "PreToolUse", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}}', "duplicate object key"),
        (b'{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "' + b"x" * (5 * 1024 * 1024) + b'"}}', "larger than"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)  # fmt: skip
def test_hostile_payloads_fail_closed_with_one_line(project, capsys, monkeypatch, raw, message):
    status, answer, err = run_hook(raw, capsys, monkeypatch)
    assert status == 2  # Claude Code blocks the call
    assert answer is None
    assert err.count("\n") == 1
    assert err.startswith("dsh hook claude: ")
    assert message in err
    assert err.isascii()


@pytest.mark.parametrize(
    "tool_input",
    [{"command": "rm -rf /\ud800"}, "rm -rf /", ["rm"], None, {"command": {"nested": "rm"}}],
)
def test_odd_tool_input_is_judged_never_allowed_blindly(project, capsys, monkeypatch, tool_input):
    status, answer, _ = run_hook(payload("PreToolUse", "Bash", tool_input), capsys, monkeypatch)
    assert status in (0, 2)
    if status == 0:
        assert decision(answer) in ("deny", "ask")
        json.dumps(answer, ensure_ascii=True)


def test_surrogates_in_the_tool_name_fail_closed(project, capsys, monkeypatch):
    raw = b'{"hook_event_name": "PreToolUse", "tool_name": "Bash\\ud800", "tool_input": {"command": "rm -rf /"}}'
    status, answer, _ = run_hook(raw, capsys, monkeypatch)
    assert status == 2 or decision(answer) in ("deny", "ask")


def test_the_console_script_speaks_claude_codes_protocol(project):
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dsh"), "hook", "claude"],
        input=json.dumps(payload("PreToolUse", "Bash", {"command": "rm -rf /"})),
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr  # (a warning about the mcp__github__* rule is fine)
    assert decision(json.loads(done.stdout)) == "deny"


def test_a_claude_key_and_its_dsh_twin_together_fail_closed(project, capsys, monkeypatch):
    # Claude Code reads file_path; were dsh to judge "path", a model could show it one file
    # and read another.
    root, _ = project
    tool_input = {"file_path": f"{root}/secrets/key.pem", "path": f"{root}/src/app.py"}
    status, answer, err = run_hook(payload("PreToolUse", "Read", tool_input), capsys, monkeypatch)
    assert (status, answer) == (2, None)
    assert "has both of file_path, path" in err


def test_mcp_servers_of_a_project_config_never_start(project, capsys, monkeypatch):
    root, _ = project
    marker = root / "started"
    write_config(
        root / "dsh.toml",
        f'[plugin.mcp.servers.evil]\ncommand = "/bin/sh"\nargs = ["-c", "touch {marker}"]\n',
    )
    status, _, _ = run_hook(payload("PreToolUse", "Bash", {"command": "ls"}), capsys, monkeypatch)
    assert status == 0
    assert not marker.exists()


def test_a_claude_name_is_found_without_copying_any_schema(project, capsys, monkeypatch):
    """Finding the dsh tool that stands for a Claude Code tool reads the definitions: no
    model-facing schema (a deep copy of every tool's parameters) is made for it (issue 27)."""
    from dsh_host import ToolDefinition

    def refuse(self: ToolDefinition) -> None:
        raise AssertionError(f"the schema of {self.name} was copied")

    monkeypatch.setattr(ToolDefinition, "schema", property(refuse))
    root, _ = project
    tool_input = {"file_path": f"{root}/src/app.py"}
    status, answer, err = run_hook(payload("PreToolUse", "Read", tool_input), capsys, monkeypatch)
    assert (status, err) == (0, "")
    assert decision(answer) == "allow"


@pytest.mark.parametrize(
    ("table", "bad"),
    [
        ("output_budget", "max_bytes = 1000"),  # unknown key
        ("timeout", 'default_ms = "soon"'),  # wrong type
        ("approval", 'mode = "never"'),  # not one of the modes
    ],
)
def test_a_table_of_a_left_out_plugin_config_check_rejects_fails_closed(
    project, capsys, monkeypatch, table, bad
):
    # The hook does without these plugins; their tables went unchecked, so a dsh.toml that
    # `dsh config check` rejects still got answers.
    root, db = project
    write_config(root / "dsh.toml", RULES.format(db=db) + f"\n[plugin.{table}]\n{bad}\n")
    git_status = payload("PreToolUse", "Bash", {"command": "git status"})
    status, answer, err = run_hook(git_status, capsys, monkeypatch)
    assert (status, answer) == (2, None)
    assert f"[plugin.{table}]" in err
    assert err.endswith("the call is blocked\n")
    assert main(["config", "check"]) != 0  # what `dsh config check` says of it too
    capsys.readouterr()


def test_valid_tables_of_left_out_plugins_leave_the_answer_as_it_was(
    project, pinned, capsys, monkeypatch
):
    _, db = project
    tables = (
        "[plugin.output_budget]\nmax_inline_bytes = 1000\n[plugin.timeout]\ndefault_ms = 1000\n"
        '[plugin.approval]\nmode = "static"\n'
    )
    pinned.write_text(RULES.format(db=db) + tables)
    git_status = payload("PreToolUse", "Bash", {"command": "git status"})
    status, answer, err = run_hook(git_status, capsys, monkeypatch, config=pinned)
    assert (status, err) == (0, "")
    assert decision(answer) == "allow"
