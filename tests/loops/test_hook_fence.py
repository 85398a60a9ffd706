"""`dsh hook claude` puts a Claude Code file tool's path to the sandbox's fence: Claude Code runs
the tool itself, so what ``dsh call`` would refuse (``deny_read``, protected paths, outside the
roots) is denied whatever the rules allow, and a search over a ``deny_read`` entry is asked."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.loops.test_hook_claude import decision, payload, run_hook

RULES = """
[plugin.permissions]
allow = ["Read", "Grep", "Glob", "LS", "Write", "Edit", "MultiEdit", "NotebookEdit"]

[plugin.sandbox]
deny_read = [".env", "keys/*.pem"]

[plugin.audit]
path = "{db}"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    db = tmp_path / ".dsh" / "audit.sqlite3"
    (tmp_path / "dsh.toml").write_text(RULES.format(db=db))
    (tmp_path / ".env").write_text("SECRET=1\n")
    for name in ("src", "keys", "docs"):
        (tmp_path / name).mkdir()
    (tmp_path / "keys" / "deploy.pem").write_text("KEY\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path, db


def _reason(answer):
    return answer["hookSpecificOutput"]["permissionDecisionReason"]


def judged(project, capsys, monkeypatch, tool, tool_input):
    root = str(project[0])
    tool_input = json.loads(json.dumps(tool_input).replace("{root}", root))
    status, answer, err = run_hook(payload("PreToolUse", tool, tool_input), capsys, monkeypatch)
    assert (status, err) == (0, "")
    return decision(answer), _reason(answer) if answer else None


@pytest.mark.parametrize(
    ("tool", "tool_input", "named"),
    [
        ("Read", {"file_path": "{root}/.env"}, "deny_read"),
        ("Read", {"file_path": "{root}/keys/deploy.pem"}, "deny_read"),
        ("NotebookRead", {"notebook_path": "{root}/.env"}, "deny_read"),
        ("Read", {"file_path": "/proc/self/environ"}, "/proc"),
        ("Write", {"file_path": "{root}/dsh.toml", "content": "[plugins]\n"}, "protected"),
        ("Write", {"file_path": "{root}/pyproject.toml", "content": "[tool.dsh]\n"}, "protected"),
        ("Write", {"file_path": "{root}/.claude/settings.json", "content": "{}"}, "protected"),
        ("Edit", {"file_path": "{root}/.git/hooks/pre-commit", "old_string": "a", "new_string": "b"}, "protected"),
        ("MultiEdit", {"file_path": "{root}/.dsh/x", "edits": []}, "protected"),
        ("NotebookEdit", {"notebook_path": "{root}/.claude/n.ipynb", "new_source": "x"}, "protected"),
        ("Write", {"file_path": "/etc/cron.d/x", "content": "x"}, "outside the writable roots"),
        ("LS", {"path": "/root/.ssh"}, "denied"),
    ],
)  # fmt: skip
def test_what_the_fence_refuses_is_denied_whatever_the_rules_allow(
    project, capsys, monkeypatch, tool, tool_input, named
):
    answer, reason = judged(project, capsys, monkeypatch, tool, tool_input)
    assert answer == "deny", reason
    assert reason.startswith("dsh (sandbox")
    assert named in reason


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Read", {"file_path": "{root}/src/app.py"}),
        ("Write", {"file_path": "{root}/src/new.py", "content": "x"}),
        ("Edit", {"file_path": "{root}/docs/a.md", "old_string": "a", "new_string": "b"}),
        ("Grep", {"pattern": "x", "path": "{root}/src"}),
        ("Glob", {"pattern": "*.md", "path": "{root}/docs"}),
    ],
)
def test_the_rest_is_left_to_the_rules(project, capsys, monkeypatch, tool, tool_input):
    assert judged(project, capsys, monkeypatch, tool, tool_input)[0] == "allow"


@pytest.mark.parametrize(
    ("tool", "tool_input", "held"),
    [
        ("Grep", {"pattern": "SECRET", "output_mode": "content"}, ".env"),  # the working dir
        ("Grep", {"pattern": "KEY", "path": "{root}"}, ".env"),
        ("Glob", {"pattern": "**/*", "path": "{root}/keys"}, "deploy.pem"),
        ("LS", {"path": "{root}"}, ".env"),
    ],
)
def test_a_search_over_a_deny_read_entry_is_asked_never_allowed(
    project, capsys, monkeypatch, tool, tool_input, held
):
    answer, reason = judged(project, capsys, monkeypatch, tool, tool_input)
    assert answer == "ask"
    assert held in reason
    assert "deny_read" in reason


def test_a_refusal_is_audited_as_the_sandbox_s(project, capsys, monkeypatch):
    root, db = project
    judged(project, capsys, monkeypatch, "Read", {"file_path": f"{root}/.env"})
    rows = sqlite3.connect(db).execute("SELECT tool, outcome, decided_by FROM calls").fetchall()
    assert rows == [("read_file", "SANDBOX_DENIED", "sandbox: workspace-write mode")]


def test_without_the_sandbox_plugin_the_rules_alone_decide(project, capsys, monkeypatch):
    root, _ = project
    text = (root / "dsh.toml").read_text()
    (root / "dsh.toml").write_text('[plugins]\ndisable = ["sandbox"]\n' + text)
    tool_input = {"file_path": "{root}/pyproject.toml", "content": "x"}
    assert judged(project, capsys, monkeypatch, "Write", tool_input)[0] == "allow"
