"""`dsh hook claude` after a review that attacked it as a prompt-injected model would: where
its policy is read from, which tools path rules reach, searches over what rules withhold, URLs
read two ways, calls that failed, and Bash set loose from Claude Code's sandbox."""

from __future__ import annotations

import json
import sqlite3

import pytest

from dsh_host._cli._main import main
from tests.loops.test_hook_claude import decision, payload, run_hook
from tests.trusted import write_config

RULES = """
[plugin.permissions]
allow = ["Grep", "Glob", "LS", "Bash(git status)", "MultiEdit", "NotebookEdit", "NotebookRead"]
deny = ["Read(credentials.json)", "Read(./secrets/**)", "Edit(./secrets/**)", "Bash(rm:*)",
        "WebFetch(domain:evil.test)"]

[plugin.audit]
path = "{db}"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    db = root / ".dsh" / "audit.sqlite3"
    for name in ("src", "secrets", "docs"):
        (root / name).mkdir(parents=True)
    write_config(root / "dsh.toml", RULES.format(db=db))
    (root / "secrets" / "key").write_text("KEY\n")
    (root / "src" / "credentials.json").write_text("{}\n")
    (root / "docs" / "a.md").write_text("# a\n")
    monkeypatch.chdir(root)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(root))
    return root, db


@pytest.fixture
def pinned(project, tmp_path):
    """The project's rules pinned outside it (``--config``): only then is a Bash call (whose
    writes the hook cannot judge) ever allowed."""
    root, _ = project
    path = tmp_path / "pinned.toml"
    path.write_text((root / "dsh.toml").read_text())
    return path


def answer_of(capsys, monkeypatch, event, tool, tool_input, *, config=None, **extra):
    data = payload(event, tool, tool_input, **extra)
    status, answer, err = run_hook(data, capsys, monkeypatch, config=config)
    assert (status, err) == (0, "")
    return answer


def test_the_projects_policy_decides_wherever_claude_codes_shell_went(project, capsys, monkeypatch):
    root, db = project
    monkeypatch.chdir(root / "src")  # the model ran `cd src`; Claude Code runs the hook there
    for tool_input in (
        {"file_path": str(root / "src" / "credentials.json")},
        {"file_path": "credentials.json"},  # relative: where Claude Code runs, src/
        {"file_path": "../secrets/key"},
    ):
        answer = answer_of(capsys, monkeypatch, "PreToolUse", "Read", tool_input)
        assert decision(answer) == "deny", tool_input
    rm = answer_of(capsys, monkeypatch, "PreToolUse", "Bash", {"command": "rm -rf x"})
    assert decision(rm) == "deny"
    assert sqlite3.connect(db).execute("SELECT count(*) FROM calls").fetchone()[0] == 4


def test_a_pinned_config_takes_its_workspace_from_the_project(
    project, capsys, monkeypatch, tmp_path
):
    root, _ = project
    pinned = tmp_path / "claude.toml"
    pinned.write_text('[plugin.permissions]\ndeny = ["Read(./secrets/**)"]\ndefault = "allow"\n')
    monkeypatch.chdir(root / "src")
    monkeypatch.setattr("sys.stdin", None)
    data = payload("PreToolUse", "Read", {"file_path": "../secrets/key"})
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(data).encode())))
    assert main(["hook", "claude", "--config", str(pinned)]) == 0
    assert decision(json.loads(capsys.readouterr().out)) == "deny"


def test_a_project_dir_that_cannot_be_entered_fails_closed(project, capsys, monkeypatch):
    root, _ = project
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(root / "missing"))
    data = payload("PreToolUse", "Bash", {"command": "git status"})
    status, answer, err = run_hook(data, capsys, monkeypatch)
    assert (status, answer) == (2, None)
    assert "CLAUDE_PROJECT_DIR" in err
    assert "the call is blocked" in err


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Grep", {"pattern": "K", "glob": "secrets/**", "output_mode": "content"}),
        ("Grep", {"pattern": "K"}),
        ("Grep", {"pattern": "K", "path": None}),
        ("Glob", {"pattern": "**/*"}),
        ("LS", {"path": "{root}"}),
        ("Grep", {"pattern": "K", "path": "{root}/docs"}),  # docs/link leads to secrets/
    ],
)
def test_a_search_over_what_a_rule_withholds_is_never_allowed(
    project, capsys, monkeypatch, tool, tool_input
):
    root, _ = project
    (root / "docs" / "link").symlink_to(root / "secrets")
    tool_input = json.loads(json.dumps(tool_input).replace("{root}", str(root)))
    answer = answer_of(capsys, monkeypatch, "PreToolUse", tool, tool_input)
    assert decision(answer) == "ask"
    reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
    assert "Read(./secrets/**)" in reason
    assert answer_of(capsys, monkeypatch, "PermissionRequest", tool, tool_input) is None


def test_a_search_beside_what_rules_withhold_is_allowed(project, capsys, monkeypatch):
    root, _ = project
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "a", "path": "docs"})
    assert decision(answer) == "allow"
    write_config(root / "dsh.toml", '[plugin.permissions]\nallow = ["Grep"]\n')  # nothing withheld
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "K"})
    assert decision(answer) == "allow"


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("MultiEdit", {"file_path": "{root}/secrets/key", "edits": [{"old_string": "K", "new_string": "X"}]}),
        ("NotebookEdit", {"notebook_path": "{root}/secrets/key", "new_source": "x"}),
        ("NotebookRead", {"notebook_path": "{root}/secrets/key"}),
        ("MultiEdit", {"file_path": "secrets/key", "edits": []}),
    ],
)  # fmt: skip
def test_read_and_edit_rules_reach_every_claude_file_tool(
    project, capsys, monkeypatch, tool, tool_input
):
    root, _ = project
    tool_input = json.loads(json.dumps(tool_input).replace("{root}", str(root)))
    answer = answer_of(capsys, monkeypatch, "PreToolUse", tool, tool_input)
    assert decision(answer) == "deny"
    assert "secrets/**" in answer["hookSpecificOutput"]["permissionDecisionReason"]


@pytest.mark.parametrize(
    "url",
    ["https://evil.test\\@example.com/", "https:evil.test/", "https://ev%69l.test/", "HTTPS://evil\u3002test/"],
)  # fmt: skip
def test_a_url_node_reads_as_a_denied_host_is_denied(project, capsys, monkeypatch, url):
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "WebFetch", {"url": url, "prompt": "p"})
    assert decision(answer) == "deny"


def test_a_call_that_failed_is_audited_as_an_error(project, capsys, monkeypatch):
    _, db = project
    failed = payload("PostToolUseFailure", "Bash", {"command": "touch x; false"}, error="exit 1")
    status, answer, err = run_hook(failed, capsys, monkeypatch)
    assert (status, answer, err) == (0, None, "")
    row = sqlite3.connect(db).execute("SELECT tool, outcome, is_error FROM calls").fetchone()
    assert row == ("bash", "error", 1)


def test_bash_outside_claude_codes_sandbox_is_never_allowed(project, pinned, capsys, monkeypatch):
    loose = {"command": "git status", "dangerouslyDisableSandbox": True}
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Bash", loose, config=pinned)
    assert decision(answer) == "ask"
    assert "dangerouslyDisableSandbox" in answer["hookSpecificOutput"]["permissionDecisionReason"]
    assert answer_of(capsys, monkeypatch, "PermissionRequest", "Bash", loose, config=pinned) is None
    kept = {"command": "git status", "dangerouslyDisableSandbox": False}
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Bash", kept, config=pinned)
    assert decision(answer) == "allow"
    denied = {"command": "rm x", "dangerouslyDisableSandbox": True}
    assert decision(answer_of(capsys, monkeypatch, "PreToolUse", "Bash", denied)) == "deny"


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Read", {"file_path": " {root}/secrets/key"}),
        ("Read", {"file_path": "{root}/secrets/key\t"}),
        ("Read", {"file_path": "\u3000credentials.json"}),
        ("MultiEdit", {"file_path": " secrets/key", "edits": []}),
    ],
)
def test_a_path_is_judged_as_claude_code_resolves_it(
    project, capsys, monkeypatch, tool, tool_input
):
    # Claude Code trims a path (as JavaScript trims) before it resolves it: " secrets/key"
    # was judged as a file named with a space, and allowed.
    root, _ = project
    monkeypatch.chdir(root / "src")
    tool_input = json.loads(json.dumps(tool_input).replace("{root}", str(root)))
    if tool == "MultiEdit":
        monkeypatch.chdir(root)
    answer = answer_of(capsys, monkeypatch, "PreToolUse", tool, tool_input)
    assert decision(answer) == "deny", answer


def test_a_path_spelled_otherwise_than_it_resolves_is_never_allowed(project, capsys, monkeypatch):
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "a", "path": " docs"})
    assert decision(answer) == "ask"
    plain = answer_of(capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "a", "path": "docs"})
    assert decision(plain) == "allow"  # the control


def test_a_search_root_under_home_is_walked_where_it_leads(project, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # the project is ~/project
    answer = answer_of(
        capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "K", "path": "~/project"}
    )
    assert decision(answer) == "ask"


def test_an_absolute_glob_pattern_is_walked_where_claude_code_searches(
    project, capsys, monkeypatch
):
    root, _ = project
    tool_input = {"pattern": f"{root}/secrets/*", "path": str(root / "docs")}
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Glob", tool_input)
    assert decision(answer) == "ask"


@pytest.mark.parametrize(
    "pattern",
    ["{root}/{{secrets,x}}/*", "{root}/secrets/key", "{root}/docs/../secrets/key", "{root}/*"],
)
def test_an_absolute_glob_is_judged_where_claude_code_searches_it(
    project, capsys, monkeypatch, pattern
):
    # Claude Code's Glob searches the pattern's directory: up to its first * ? [ {, or the
    # directory of a pattern with none; both the rules and deny_read judge that directory.
    root, _ = project
    (root / ".env").write_text("SECRET=1\n")
    text = (root / "dsh.toml").read_text()
    write_config(root / "dsh.toml", text + '\n[plugin.sandbox]\ndeny_read = [".env"]\n')
    tool_input = {
        "pattern": pattern.replace("{root}", str(root)).replace("{{", "{").replace("}}", "}"),
        "path": "docs",
    }
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Glob", tool_input)
    assert decision(answer) in ("ask", "deny"), answer
    assert answer_of(capsys, monkeypatch, "PermissionRequest", "Glob", tool_input) is None or (
        answer_of(capsys, monkeypatch, "PermissionRequest", "Glob", tool_input)[
            "hookSpecificOutput"
        ]["decision"]["behavior"]
        == "deny"
    )


def test_a_link_in_a_searched_tree_to_what_deny_read_hides_is_asked(project, capsys, monkeypatch):
    root, _ = project
    (root / ".env").write_text("SECRET=1\n")
    text = (root / "dsh.toml").read_text()
    write_config(root / "dsh.toml", text + '\n[plugin.sandbox]\ndeny_read = [".env"]\n')
    (root / "docs" / "e").symlink_to(root / ".env")
    answer = answer_of(capsys, monkeypatch, "PreToolUse", "Grep", {"pattern": "S", "path": "docs"})
    assert decision(answer) == "ask", answer


def test_a_character_node_may_compose_differently_is_never_allowed(project, capsys, monkeypatch):
    # U+16D63 U+16D67 compose in Node's Unicode 17 NFC, not in this Python's: unknown code
    # points make a path unusual, so never allowed.
    answer = answer_of(
        capsys,
        monkeypatch,
        "PreToolUse",
        "Grep",
        {"pattern": "a", "path": "docs\U00016d63\U00016d67"},
    )
    assert decision(answer) != "allow", answer


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Grep", {"pattern": "a", "path": "docs\x00x"}),
        ("Grep", {"pattern": "a", "path": "\ud800"}),
        ("Read", {"file_path": "\ud800/x"}),
        ("Glob", {"pattern": "/tmp/\x00/*"}),
        ("Glob", {"pattern": "*", "path": "docs\u2028"}),
    ],
)
def test_a_hostile_path_is_never_allowed(project, capsys, monkeypatch, tool, tool_input):
    # a NUL, a lone surrogate or a line separator: resolved as Claude Code would, or refused
    status, answer, _ = run_hook(payload("PreToolUse", tool, tool_input), capsys, monkeypatch)
    assert status == 2 or decision(answer) != "allow", answer
