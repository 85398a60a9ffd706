"""The narrowest allow rules for one call (issue 26, rows 10 and 14), checked against the rule
engine: they cover the call, and they do not cover a different one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_plugins_builtin._rules._rules import Anchors, RuleSet, parse_rule
from dsh_plugins_builtin._rules._suggest import narrowest_rules


def allowing(ws: Path, rules: tuple[str, ...]) -> RuleSet:
    anchors = Anchors(workspace=str(ws), project=str(ws), home="/home/u")
    parsed = [parse_rule(text, "allow", anchors, "dsh.toml") for text in rules]
    return RuleSet(allow=parsed, workspace=ws)


@pytest.mark.parametrize(
    ("command", "rules", "not_covered"),
    [
        ("ls -la", ("bash(ls:*)",), "lsof"),
        ("git status --short", ("bash(git status:*)",), "git push"),
        ("ls && pwd", ("bash(ls:*)", "bash(pwd:*)"), "rm x"),
        ("sudo ls", ("bash(sudo ls)", "bash(ls)"), "sudo rm -rf /"),
        ("env LANG=C make", ("bash(env LANG=C make)", "bash(make)"), "env sh"),
        ("python3 -m pytest", ("bash(python3 -m pytest)",), "python3 -c x"),
        ("/usr/bin/sudo ls", ("bash(/usr/bin/sudo ls)", "bash(ls)"), "/usr/bin/sudo id"),
    ],
)
def test_a_bash_rule_covers_the_call_and_not_another(tmp_path, command, rules, not_covered):
    assert narrowest_rules("bash", {"command": command}) == rules
    ruleset = allowing(tmp_path, rules)
    assert ruleset.decide("bash", None, {"command": command}).effect == "allow"
    assert ruleset.decide("bash", None, {"command": not_covered}).effect == "ask"


@pytest.mark.parametrize(
    "command",
    [
        "echo $(id)",
        "cat <x",
        "FOO=1 make test",
        "env FOO=1 make",  # make reads FOO (CC=..., SHELL=...): no rule allows it
        "$SHELL",
        "sudo 'a b'",
        "",
        "git -c core.pager=x log",  # git options naming programs: never allowed by a rule
        "xargs rm",  # the words xargs reads from stdin: no rule spells them
    ],
)
def test_no_rule_narrower_than_the_tool(command):
    assert narrowest_rules("bash", {"command": command}) is None


def test_path_rules_name_the_path(tmp_path):
    assert narrowest_rules("read_file", {"path": "src/a.py"}) == ("read_file(./src/a.py)",)
    assert narrowest_rules("grep", {"path": "/etc"}) == ("grep(//etc)",)
    assert narrowest_rules("list_dir", {}) == ("list_dir(./**)",)
    for bad in ("../x", "a*b", "~/x", "a\nb"):
        assert narrowest_rules("read_file", {"path": bad}) is None
    assert narrowest_rules("weather", {"city": "x"}) == ("weather",)
