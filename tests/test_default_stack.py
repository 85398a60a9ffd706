"""The built-in plugins together, loaded through their entry points as a user gets them.

Each denial source shows up in ``dsh call`` output naming who decided; ``dsh run --dry-run``
over 50 mixed calls prints exactly the decisions in ``tests/golden/dry_run.txt``
(regenerate with ``DSH_UPDATE_GOLDEN=1`` and review the diff).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import textwrap

import pytest

from dsh_host._cli._main import main
from tests.trusted import write_config

GOLDEN = pathlib.Path(__file__).parent / "golden"
BUILTINS = '["tools", "sandbox", "permissions", "approval", "timeout", "guards", "output_budget", "audit", "hook_commands"]'


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A workspace with a dsh.toml enabling exactly the built-ins (whatever else is installed)."""
    (tmp_path / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("hunter2\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def main():\n    return 1\n")
    hook = tmp_path / ".claude" / "hooks" / "no_forbidden.py"  # protected: tools cannot rewrite it
    hook.parent.mkdir(parents=True)
    hook.write_text(
        textwrap.dedent(
            """
            import json, sys
            call = json.load(sys.stdin)
            if "forbidden" in json.dumps(call["tool_input"]):
                print("the word 'forbidden' is not allowed", file=sys.stderr)
                sys.exit(2)
            """
        )
    )
    hooks = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "write_file",
                    "hooks": [{"type": "command", "command": f"{sys.executable} {hook}"}],
                }
            ]
        }
    }
    (tmp_path / "hooks.json").write_text(json.dumps(hooks))
    monkeypatch.chdir(tmp_path)
    for name in ("DSH_CONFIG", "DSH_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def configure(ws: pathlib.Path, **overrides: str) -> None:
    tables = {
        "permissions": textwrap.dedent(
            """
            allow = ["read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "bash(echo:*)", "bash(git status:*)"]
            ask = ["bash(git push:*)"]
            deny = ["bash(rm:*)", "read_file(./secrets/**)"]
            """
        ),
        "guards": "max_argument_bytes = 2000\nmax_calls_per_tool = {grep = 2}\n",
        "hook_commands": 'settings = ["hooks.json"]\n',
        # Only the workspace is writable, so the interpreter the hook runs with (this checkout's
        # venv, which may itself lie under /tmp) is outside every writable root.
        "sandbox": 'writable_roots = ["."]\n',
        "audit": f'path = "{ws / ".dsh" / "audit.db"}"\n',
    }
    tables.update(overrides)
    body = "".join(f"[plugin.{name}]\n{text}\n" for name, text in tables.items())
    write_config(ws / "dsh.toml", f"[plugins]\nenable = {BUILTINS}\n\n{body}")


def dsh(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    ("tool", "arguments", "status", "decision"),
    [
        ("read_file", {"path": "notes.txt"}, 0, "allowed by permissions: rule read_file in"),
        ("bash", {"command": "echo hi"}, 0, "allowed by permissions: rule bash(echo:*) in"),
        ("bash", {"command": "rm -rf src"}, 1, "denied by permissions (rule bash(rm:*) in"),
        (
            "read_file",
            {"path": "secrets/key.txt"},
            1,
            "denied by permissions (rule read_file(./secrets/**) in",
        ),
        ("bash", {"command": "git push"}, 1, "denied by permissions (rule bash(git push:*) in"),
        ("write_file", {"path": "big.txt", "content": "x" * 3000}, 1, "denied by guards"),
        ("write_file", {"path": "f.txt", "content": "forbidden"}, 1, "denied by hook_commands"),
    ],
)
def test_each_denial_source_shows_who_decided(ws, capsys, tool, arguments, status, decision):
    configure(ws)
    code, out, err = dsh(capsys, "call", tool, json.dumps(arguments))
    assert code == status, out + err
    assert decision in out
    if tool == "write_file":
        assert not (ws / arguments["path"]).exists()
    if arguments.get("command") == "rm -rf src":
        assert (ws / "src" / "app.py").exists()


def test_an_ask_nobody_can_answer_says_how_to_allow_it(ws, capsys):
    configure(ws)
    code, out, err = dsh(capsys, "call", "bash", '{"command": "git push"}')
    assert code == 1
    assert "no approval channel is available" in out
    assert "hint:" in err
    assert '"bash(git push:*)"' not in err or "allow = [" in err


def test_a_static_approval_rejection_names_the_approver(ws, capsys):
    configure(ws, approval='mode = "static"\nanswer = "deny"\n')
    code, out, _ = dsh(capsys, "call", "bash", '{"command": "git push"}')
    assert code == 1
    assert "denied by approval" in out
    assert 'tool "bash" was rejected by approval' in out


def test_a_sandbox_denial_names_the_sandbox(ws, capsys):
    configure(ws, sandbox='mode = "read-only"\n')
    code, out, _ = dsh(capsys, "call", "write_file", '{"path": "new.txt", "content": "x"}')
    assert code == 1
    assert "then failed (SANDBOX_DENIED from sandbox: read-only mode)" in out
    assert not (ws / "new.txt").exists()


def test_a_call_budget_denial_comes_from_guards(ws, capsys):
    configure(ws)
    lines = [
        json.dumps({"id": f"g{i}", "name": "grep", "arguments": {"pattern": "alpha"}})
        for i in range(3)
    ]
    (ws / "calls.jsonl").write_text("\n".join(lines) + "\n")
    code, out, _ = dsh(capsys, "run", "calls.jsonl", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["decided_by"] for r in records] == [None, None, "guards"]
    assert code == 1


def mixed_calls() -> list[dict[str, object]]:
    """50 calls a model might make in one session: reads, writes, shell, mistakes."""
    calls: list[dict[str, object]] = []

    def add(name: str, **arguments: object) -> None:
        calls.append({"id": f"c{len(calls) + 1:02d}", "name": name, "arguments": arguments})

    for path in ("notes.txt", "src/app.py", "./notes.txt", "src/../notes.txt", "secrets/key.txt",
                 "secrets/../secrets/key.txt", "/etc/passwd", "../outside.txt", "missing.txt"):  # fmt: skip
        add("read_file", path=path)
    for path in (".", "src", "secrets", "/etc"):
        add("list_dir", path=path)
    add("glob", pattern="**/*.py")
    add("glob", pattern="*", path="/")
    add("grep", pattern="alpha")
    add("grep", pattern="def", path="src")
    add("grep", pattern="x", path="/etc")
    for command in ("echo hello", "echo a && echo b", "echo a; rm -rf /", "echo $(rm x)",
                    "git status", "git status && git push", "git push origin main", "rm -rf src",
                    "ls", "cat notes.txt", "echo hi > out.txt", "echo `whoami`", "sudo rm x",
                    "git status | head", "FOO=1 echo hi", "rm", "echo 'rm -rf /'"):  # fmt: skip
        add("bash", command=command)
    add("write_file", path="out.txt", content="hello")
    add("write_file", path="../escape.txt", content="x")
    add("write_file", path="big.txt", content="y" * 3000)
    add("write_file", path="f.txt", content="forbidden words")
    add("write_file", path="src/new.py", content="print(1)\n")
    add("edit_file", path="src/app.py", old_text="return 1", new_text="return 2")
    add("edit_file", path="secrets/key.txt", old_text="a", new_text="b")
    add("read_file", limit=5)
    add("read_file", path=7)
    add("unknown_tool", x=1)
    add("bash")
    add("grep", pattern="beta")
    add("grep", pattern="gamma")
    add("list_dir", path="src/..")
    add("read_file", path="notes.txt", offset=2, limit=1)
    assert len(calls) == 50, len(calls)
    return calls


def test_dry_run_over_50_mixed_calls_matches_the_golden_file(ws, capsys):
    configure(ws)
    calls = mixed_calls()
    (ws / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    code, out, _ = dsh(capsys, "run", "calls.jsonl", "--dry-run")
    assert code == 1  # some calls would fail
    text = out.replace(sys.executable, "<python>")
    text = text.replace(str(ws), "<ws>").replace(str(ws.parent), "<tmp>")
    golden = GOLDEN / "dry_run.txt"
    if os.environ.get("DSH_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()
    # a dry run runs nothing
    assert not (ws / "out.txt").exists()
    assert (ws / "src" / "app.py").read_text() == "def main():\n    return 1\n"
