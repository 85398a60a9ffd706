"""`dsh hook claude` puts a Claude Code file tool's path to the sandbox's fence: Claude Code runs
the tool itself, so what ``dsh call`` would refuse (``deny_read``, protected paths, outside the
roots) is denied whatever the rules allow, and a search over a ``deny_read`` entry is asked."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from tests.loops.test_hook_claude import decision, payload, run_hook
from tests.trusted import write_config

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
    write_config(tmp_path / "dsh.toml", RULES.format(db=db))
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
    write_config(root / "dsh.toml", '[plugins]\ndisable = ["sandbox"]\n' + text)
    tool_input = {"file_path": "{root}/pyproject.toml", "content": "x"}
    assert judged(project, capsys, monkeypatch, "Write", tool_input)[0] == "allow"


# -- a review of the fence in the hook --------------------------------------------------------


def test_a_link_then_dotdot_is_judged_as_claude_code_resolves_it(project, capsys, monkeypatch):
    # Node's path.resolve takes ".." lexically: X/../.env is .env, wherever X links
    root, _ = project
    (root / "a" / "b").mkdir(parents=True)
    (root / "X").symlink_to(root / "a" / "b")
    for path in (f"{root}/X/../.env", "X/../.env", f"{root}/X/../keys/deploy.pem"):
        assert judged(project, capsys, monkeypatch, "Read", {"file_path": path})[0] == "deny"


def test_a_link_in_the_hosts_tmp_is_judged_where_it_leads(project, capsys, monkeypatch, tmp_path):
    # the fence takes /tmp for its private tmp; Claude Code reads the host's
    root, _ = project
    outside = Path(tempfile.mkdtemp(prefix="dsh-hook-", dir="/tmp"))
    try:
        (outside / "l").symlink_to(root / ".env")
        (outside / "w").symlink_to(root / "dsh.toml")
        assert (
            judged(project, capsys, monkeypatch, "Read", {"file_path": str(outside / "l")})[0]
            == "deny"
        )
        write = {"file_path": str(outside / "w"), "content": "x"}
        assert judged(project, capsys, monkeypatch, "Write", write)[0] == "deny"
    finally:
        shutil.rmtree(outside)


def test_a_search_through_a_linked_directory_is_asked(project, capsys, monkeypatch):
    root, _ = project
    (root / "src" / "up").symlink_to(root)
    for tool in ("Grep", "Glob", "LS"):
        tool_input = {"pattern": "x", "path": f"{root}/src/up"}
        assert judged(project, capsys, monkeypatch, tool, tool_input)[0] == "ask"
    # a null path is the working directory, the project root here: it holds .env
    assert judged(project, capsys, monkeypatch, "Grep", {"pattern": "x", "path": None})[0] == "ask"


def test_dsh_s_own_key_for_a_path_is_judged_too(project, capsys, monkeypatch):
    root, _ = project
    assert judged(project, capsys, monkeypatch, "Read", {"path": f"{root}/.env"})[0] == "deny"


@pytest.mark.parametrize(
    "name", ["sub/dsh.toml", "sub/pyproject.toml", "sub/.claude/settings.json"]
)
def test_a_config_file_deeper_in_the_project_is_asked_before_it_is_written(
    project, capsys, monkeypatch, name
):
    # Claude Code runs the hook where its shell cd-ed to: a sub/dsh.toml would be the next policy
    root, _ = project
    write = {"file_path": f"{root}/{name}", "content": "[plugins]\ndisable = ['sandbox']\n"}
    assert judged(project, capsys, monkeypatch, "Write", write)[0] == "ask"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DSH_DISABLE_PLUGINS", "sandbox"),
        ("DSH_DISABLE_PLUGIN_AUTOLOAD", "1"),
        ("DSH_PLUGINS", "x"),
    ],
)
def test_the_environment_cannot_switch_the_hooks_plugins_off(
    project, capsys, monkeypatch, name, value
):
    # a project's .claude/settings.json "env" reaches the hook process
    root, _ = project
    monkeypatch.setenv(name, value)
    assert judged(project, capsys, monkeypatch, "Read", {"file_path": f"{root}/.env"})[0] == "deny"


def test_a_workspace_under_a_protected_name_is_no_config_file_itself(tmp_path, capsys, monkeypatch):
    # only what lies below the workspace counts: a project kept in ~/.dsh/proj writes freely
    ws = tmp_path / ".dsh" / "proj"
    (ws / "src").mkdir(parents=True)
    write_config(ws / "dsh.toml", '[plugin.permissions]\nallow = ["Write"]\n')
    monkeypatch.chdir(ws)
    write = {"file_path": f"{ws}/src/app.py", "content": "x"}
    status, answer, err = run_hook(payload("PreToolUse", "Write", write), capsys, monkeypatch)
    assert (status, err, decision(answer)) == (0, "", "allow")
