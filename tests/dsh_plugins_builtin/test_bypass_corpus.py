"""The bypass corpus of issue 9, run through a real ``bash`` tool: no attempt may run its payload.

Each attempt goes through the whole pipeline with the permissions plugin, the real tools and an
approver that records every ask and rejects it. An attempt must end *asked* or *denied*; the ones
an allow rule could have let through also prove on disk that their payload did not run. The
controls must keep running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_host import ApprovalOutcome, Host, hookimpl
from dsh_plugins_builtin.permissions import PermissionsPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


class Rejecter:
    """An approver that writes down what it was asked, and says no."""

    name = "rejecter"

    def __init__(self) -> None:
        self.asked: list[Any] = []

    @hookimpl
    def dsh_tool_approve(self, request: Any) -> ApprovalOutcome:
        self.asked.append(request)
        return ApprovalOutcome.REJECTED


async def attempt(ws: Path, permissions: dict[str, Any], name: str, arguments: Any) -> str:
    """``allowed``, ``asked`` or ``denied``: how the call ended."""
    rejecter = Rejecter()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"mode": "danger-full-access", "backend": "none"},
            "permissions": permissions,
        },
    }
    host = Host(
        config=config,
        plugins=[ToolsPlugin(), SandboxPlugin(), PermissionsPlugin(), rejecter],
        load_entrypoints=False,
    )
    result = await host.call(name, arguments)
    if rejecter.asked:
        assert result.code == "DENIED"
        return "asked"
    if result.is_error and result.code == "DENIED":
        return "denied"
    assert not result.is_error, result.text
    return "allowed"


ALLOW_BYPASSES = [
    ("bash(echo:*)", "echo $'\\' '; touch pwned #'"),
    ("bash(echo:*)", "echo hi #'\ntouch pwned\n#'"),
    ("bash(git status:*)", "git status $'\\' '; touch pwned #'"),
    ("bash(git status:*)", "git status #'\ntouch pwned\n#'"),
    ("Bash(echo:*)", "echo $'\\x27'; touch pwned"),
    ("bash(echo:*)", "echo hi\rtouch pwned"),
    ("bash(echo:*)", "echo $(touch pwned)"),
    ("bash(echo:*)", "echo `touch pwned`"),
    ("bash(echo:*)", "echo hi > pwned"),
    ("bash(echo:*)", "echo hi & touch pwned"),
    ("bash(echo:*)", "echo hi; (touch pwned)"),
    ("bash(echo:*)", "echo {x,>pwned}"),
    ("bash(echo:*)", "echo hi\\\n; touch pwned"),
    ("bash(echo:*)", "f() { touch pwned; }; echo; f"),
    ("bash(git status:*)", "git -c core.pager='touch pwned' status"),
    # tree-sitter-bash reads a newline before a backslash as a blank: bash runs `touch pwned`
    ("bash(echo:*)", "echo hi \n\\touch pwned"),
    ("bash(echo:*)", "echo hi \n\\\ntouch pwned"),
]


@pytest.mark.parametrize(("allow", "command"), ALLOW_BYPASSES)
async def test_an_allow_rule_cannot_be_stretched_over_a_payload(tmp_path, allow, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    outcome = await attempt(ws, {"allow": [allow], "default": "ask"}, "bash", {"command": command})
    assert outcome == "asked"
    assert not (ws / "pwned").exists()


DENY_BYPASSES = [
    "git -C repo push",
    "git --no-pager push",
    "git -c k=v push",
    "git --git-dir=.git --work-tree=. push origin",
    "time rm victim",
    "! rm victim",
    "if true; then rm victim; fi",
    "while true; do rm victim; break; done",
    "case a in a) rm victim;; esac",
    "f() { rm victim; }; f",
    "coproc rm victim",
    "2>/dev/null rm victim",
    "env rm victim",
    "env -i PATH=/usr/bin:/bin rm victim",
    "command rm victim",
    "exec rm victim",
    "nice -n 1 rm victim",
    "nohup rm victim",
    "timeout 5 rm victim",
    "echo victim | xargs rm",
    "sudo rm victim",
    "sh -c 'rm victim'",
    "bash -c 'rm victim'",
    "bash -c \"sh -c 'rm victim'\"",
    "find . -name victim -exec rm {} \\;",
    "find . -name victim -execdir rm {} +",
    "echo $(rm victim)",
    "(rm victim)",
    "/bin/rm victim",
    "r\\m victim",
    "$'\\x72m' victim",
    "X=1 rm victim",
    "eval 'rm victim'",
    # the grammar files words after a redirection under it; bash passes them on
    "git 2>&1 push --force",
    "git >/dev/null push",
    "ls | git >/dev/null push | cat",
    # bash reads `>&-rm` as closing stdout and a command word `rm`
    ">&-rm victim",
    "true >&-rm victim; >&-rm victim",
]


@pytest.mark.parametrize("command", DENY_BYPASSES)
async def test_deny_rules_see_every_spelling(tmp_path, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim").write_text("x")
    rules = {"allow": ["bash"], "deny": ["bash(rm:*)", "bash(git push:*)"], "default": "allow"}
    assert await attempt(ws, rules, "bash", {"command": command}) == "denied"
    assert (ws / "victim").exists()


DYNAMIC = [
    "x=rm; $x victim",
    "$(echo rm) victim",
    "`echo rm` victim",
    "echo 'rm victim' | bash",
    'bash -c "$CMD"',
    ". ./script",
    # bash reads \r and \v as parts of a word, the grammar as blanks (then `#` hides the rest)
    "echo x\r# ; rm victim",
    "echo x\v# ; rm victim",
    # bash joins what only a line continuation separates: r\<newline>m is rm
    "r\\\nm victim",
    # the grammar reads `$  rm` as the expansion of $rm and runs `victim`; bash runs rm
    ">&$  rm victim",
]


@pytest.mark.parametrize("command", DYNAMIC)
async def test_a_dynamic_command_word_asks_when_deny_rules_exist(tmp_path, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim").write_text("x")
    (ws / "script").write_text("rm victim\n")
    rules = {"allow": ["bash(echo:*)"], "deny": ["bash(rm:*)"], "default": "allow"}
    assert await attempt(ws, rules, "bash", {"command": command}) == "asked"
    assert (ws / "victim").exists()


CONTROLS = [
    "echo hi",
    "git status",
    "git status && git diff",
    "ls 2>/dev/null",
    "echo 'quoted arg' \"and another\"",
    "ls >/dev/null 2>&1 | cat",
    "echo a; echo b",
]


@pytest.mark.parametrize("command", CONTROLS)
async def test_controls_keep_running(tmp_path, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    allow = ["bash(echo:*)", "bash(git status:*)", "bash(git diff:*)", "bash(ls:*)", "bash(cat)"]
    rules = {"allow": allow, "deny": ["bash(rm:*)"], "default": "ask"}
    assert await attempt(ws, rules, "bash", {"command": command}) == "allowed"


# -- the README's own example over every reading tool ----------------------------------------

README = {"deny": ["read_file(./secrets/**)"]}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "secrets/key"}),
        ("read_file", {"path": "./secrets/../secrets/key"}),
        ("list_dir", {"path": "secrets"}),
        ("glob", {"pattern": "*", "path": "secrets"}),
        ("grep", {"pattern": "TOKEN", "path": "secrets"}),
        ("grep", {"pattern": "TOKEN", "path": "link"}),  # a symlink into the tree
        ("Read", {"path": "secrets/key"}),  # unknown tool spelled Claude's way: still denied
    ],
)
async def test_the_readme_example_denies_every_tool_aimed_inside_the_tree(
    tmp_path, tool, arguments
):
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key").write_text("TOKEN=hunter2\n")
    (ws / "link").symlink_to(ws / "secrets")
    if tool == "Read":
        rules = {"deny": ["Read(./secrets/**)"], "allow": ["Read"]}
        ruled = await attempt(ws, rules, "read_file", arguments)
        assert ruled == "denied"
        return
    assert await attempt(ws, README, tool, arguments) == "denied"


async def test_the_readme_example_lets_a_search_over_the_root_run(tmp_path):
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key").write_text("TOKEN=hunter2\n")
    (ws / "notes").write_text("TOKEN=public\n")
    # the search runs; leaving out the withheld files is the tool's part (dsh_path_denied)
    assert await attempt(ws, README, "grep", {"pattern": "TOKEN", "path": "."}) == "allowed"
    assert await attempt(ws, README, "grep", {"pattern": "TOKEN"}) == "allowed"
