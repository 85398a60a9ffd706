"""Issue #23, rows 3-7, through a real ``bash`` (and a real ``git``).

Each example is first run by bash in a scratch directory, to show it really deletes the file
``v`` (or runs the fsmonitor command): the class of attack is real here. Then the rules must not
let it through: an allow rule never covers it, and under ``allow = ["bash"]`` a deny rule on
``rm`` turns into an ask that names the construct.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._rules._rules import Anchors, RuleSet, Verdict, parse_rule

BASH = shutil.which("bash")
GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")  # never on CI

ENV = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def ruleset(ws: Path, **lists: Any) -> RuleSet:
    anchors = Anchors(workspace=str(ws), project=str(ws), home="/nonexistent")
    compiled = {
        effect: [parse_rule(text, effect, anchors, "dsh.toml") for text in lists.get(effect, ())]
        for effect in ("allow", "ask", "deny")
    }
    return RuleSet(**compiled, default=lists.get("default", "ask"), workspace=ws)


def deletes(tmp: Path, line: str) -> bool:
    """Whether bash, running *line* in a fresh directory, deletes the file ``v`` there."""
    scratch = tmp / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    if GIT is not None:
        subprocess.run([GIT, "init", "-q"], cwd=scratch, env=ENV, check=True)
    (scratch / "v").write_text("precious")
    subprocess.run(
        [BASH, "-c", line], cwd=scratch, env=ENV, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20, check=False,
    )  # fmt: skip
    return not (scratch / "v").exists()


def verdict(rules: RuleSet, line: str, **args: Any) -> Verdict:
    return rules.decide("bash", None, {"command": line, **args})


# -- row 3: allow rules on commands that evaluate strings ------------------------------------

EVALUATING = [
    ("printf", "printf -v 'a[$(rm v)]' x"),
    ("test", "test -v 'a[$(rm v)]'"),
    ("read", "echo x | read 'a[$(rm v)]'"),
    ("mapfile", "echo x | mapfile -C 'rm v' -c 1"),
    ("let", "let 'a[$(rm v)]=1'"),
    ("declare", "declare -a a; a['$(rm v)']=1"),
    ("compgen", "compgen -W '$(rm v)'"),
    ("trap", "trap 'rm v' EXIT"),
]


@pytest.mark.parametrize(("command", "line"), EVALUATING)
def test_row3_commands_that_evaluate_strings_are_never_allowed_by_a_prefix_rule(
    tmp_path: Path, command: str, line: str
) -> None:
    assert deletes(tmp_path, line), "the example must really run code in bash"
    rules = ruleset(tmp_path, allow=[f"bash({command}:*)", "bash(echo:*)", "bash(declare:*)"])
    assert verdict(rules, line).effect != "allow"


# -- row 5: deny and ask rules see code in strings, or ask ------------------------------------

HIDDEN = [
    *(line for _, line in EVALUATING),
    "x='$(rm v)'; echo ${x@P}",
    "declare -n r='a[$(rm v)]'; r=1",
    "shopt -s expand_aliases\nalias y='rm v'\ny",
    "git -c alias.x='!rm v' x",
    "git -c core.sshCommand='rm v' fetch ssh://h/x",
    "GIT_SSH_COMMAND='rm v' git fetch ssh://h/x",
    "env GIT_SSH_COMMAND='rm v' git fetch ssh://h/x",
]


@pytest.mark.parametrize("line", HIDDEN)
def test_row5_a_deny_rule_turns_into_an_ask_naming_the_construct(tmp_path: Path, line: str) -> None:
    if "git" in line and GIT is None:
        pytest.skip("git is not installed")
    assert deletes(tmp_path, line), "the example must really delete the file in bash"
    found = verdict(ruleset(tmp_path, allow=["bash"], deny=["bash(rm:*)"]), line)
    assert found.effect in ("ask", "deny"), found
    assert found.rule is not None
    assert found.rule.text == "bash(rm:*)"
    if found.effect == "ask":
        assert "applies as an ask" in (found.note or "")


# -- row 4: words tree-sitter reads differently from bash -----------------------------------


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("a=()x rm v", "bash(a:*)"),
        ("'ec'\\ho x; rm v", "bash(ec:*)"),
        ("git 0>/dev/null push; rm v", "bash(git 0:*)"),
    ],
)
def test_row4_words_read_two_ways_are_never_allowed(tmp_path: Path, line: str, rule: str) -> None:
    assert deletes(tmp_path, line)
    found = verdict(ruleset(tmp_path, allow=[rule, "bash(echo:*)"]), line)
    assert found.effect != "allow"


@pytest.mark.parametrize(
    ("line", "deny"),
    [
        ("'tim'\\eout 5 rm v", "bash(timeout:*)"),  # one word to bash, two to tree-sitter
        ("''\\rm v", "bash(rm:*)"),  # empty quotes joined to an escape
        ("git 0>/dev/null clean -f", "bash(git clean:*)"),  # git 0 clean to tree-sitter
    ],
)
def test_row4_words_read_two_ways_never_hide_a_command_from_a_deny_rule(
    tmp_path: Path, line: str, deny: str
) -> None:
    assert deletes(tmp_path, line)
    found = verdict(ruleset(tmp_path, allow=["bash"], deny=[deny], default="allow"), line)
    assert found.effect in ("ask", "deny"), found


# -- row 7: wrappers -------------------------------------------------------------------------

WRAPPED = [
    "env -S 'rm v'",  # a string env splits and runs
    "env --split-string='rm v'",
    "env -C .. rm scratch/v",  # another directory
    "timeout 5 rm v",
    "nice -n 1 rm v",
    "nohup rm v",
    "env rm v",
    "xargs rm v",
    "find . -maxdepth 1 -name v -delete",
    "find . -maxdepth 1 -name v -exec rm {} ';'",
    "find . -maxdepth 1 -name v -execdir rm {} +",
]


@pytest.mark.parametrize("line", WRAPPED)
def test_row7_a_wrapper_is_allowed_only_with_what_it_wraps(tmp_path: Path, line: str) -> None:
    assert deletes(tmp_path, line)
    wrappers = ["bash(timeout:*)", "bash(nice:*)", "bash(nohup:*)", "bash(env:*)"]
    rules = ruleset(tmp_path, allow=[*wrappers, "bash(xargs:*)", "bash(find:*)", "bash(ls:*)"])
    assert verdict(rules, line).effect != "allow"


@pytest.mark.parametrize(
    "line", ["timeout 5 ls", "nice -n 1 ls -l", "find . -name x -exec ls {} ';'"]
)
def test_row7_a_wrapper_around_an_allowed_command_is_allowed(tmp_path: Path, line: str) -> None:
    rules = ruleset(
        tmp_path, allow=["bash(timeout:*)", "bash(nice:*)", "bash(find:*)", "bash(ls:*)"]
    )
    assert verdict(rules, line).effect == "allow"


# -- row 6: the bash tool's cwd, and git in a repository the agent could write -----------------


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_row6_git_in_a_nested_repository_is_never_allowed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    nested = ws / "src" / "r"
    nested.mkdir(parents=True)
    subprocess.run([GIT, "init", "-q"], cwd=ws, env=ENV, check=True)
    subprocess.run([GIT, "init", "-q"], cwd=nested, env=ENV, check=True)
    hit = tmp_path / "hit"
    # what the agent wrote through edit_file(src/**)
    with (nested / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = touch {hit}\n")
    subprocess.run([GIT, "status"], cwd=nested, env=ENV, capture_output=True, check=False)
    assert hit.exists(), "git status must really run the fsmonitor command"
    rules = ruleset(ws, allow=["bash(git status:*)", "bash(cd:*)"])
    assert verdict(rules, "git status").effect == "allow"  # the workspace's own repository
    refused = verdict(rules, "git status", cwd="src/r")
    assert refused.effect != "allow"
    assert "repository other than the workspace's own" in (refused.note or "")
    assert verdict(rules, "cd src/r && git status").effect != "allow"
    assert verdict(rules, "git -C src/r status").effect != "allow"
    assert verdict(rules, "git status", cwd="/").effect != "allow"  # outside the workspace
    assert verdict(rules, "git status", cwd=".").effect == "allow"


# -- row 10: runners that run agent code, and their path-writing options -----------------------

PYTEST = shutil.which("pytest") or str(Path(sys.executable).with_name("pytest"))


def test_row10_pytest_basetemp_really_deletes_the_directory(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "keep").mkdir(parents=True)
    (ws / "keep" / "precious").write_text("x")
    (ws / "test_t.py").write_text("def test_t(tmp_path):\n    pass\n")
    env = {**ENV, "PATH": f"{Path(PYTEST).parent}:{ENV['PATH']}"}
    subprocess.run(
        [BASH, "-c", "pytest -q -p no:cacheprovider -p no:randomly --basetemp=keep"],
        cwd=ws, env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert not (ws / "keep" / "precious").exists(), "--basetemp must really delete the directory"
    rules = ruleset(ws, allow=["bash(pytest:*)", "bash(python -m pytest:*)"])
    for line in (
        "pytest --basetemp=keep",
        "pytest --basetemp keep",
        "python -m pytest --junitxml=src/a.py",
        "pytest -o cache_dir=keep",
        "pytest --rootdir=/etc",
        "timeout 60 pytest --result-log=x",
    ):
        found = verdict(rules, line)
        assert found.effect != "allow", line
        assert "writes" in (found.note or ""), (line, found)


def test_row10_runner_writes_are_checked_as_writes(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, allow=["bash(pytest:*)", "Edit(build/**)"])
    assert verdict(rules, "pytest --junitxml=build/r.xml").effect == "allow"
    assert verdict(rules, "pytest --junitxml=r.xml").effect != "allow"
    assert verdict(rules, "pytest --junitxml=r.xml", cwd="build").effect == "allow"
    rules.fence = lambda path: "write outside the writable roots" if "build" in path else None
    assert verdict(rules, "pytest --junitxml=build/r.xml").effect != "allow"
    denying = ruleset(tmp_path, allow=["bash"], deny=["Edit(src/**)"], ask=["Write(docs/**)"])
    found = verdict(denying, "pytest -q --basetemp=src")
    assert (found.effect, found.rule and found.rule.text) == ("deny", "Edit(src/**)")
    found = verdict(denying, "python3 -m pytest --junit-xml docs/r.xml")
    assert (found.effect, found.rule and found.rule.text) == ("ask", "Write(docs/**)")


def test_row6_the_cwd_goes_through_the_read_rules(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    rules = ruleset(tmp_path, allow=["bash"], deny=["Read(./secrets/**)"], ask=["Read(./vault)"])
    assert verdict(rules, "ls").effect == "allow"
    found = verdict(rules, "ls", cwd="secrets")
    assert (found.effect, found.rule and found.rule.text) == ("deny", "Read(./secrets/**)")
    assert verdict(rules, "ls", cwd="vault").effect == "ask"
    assert verdict(rules, "ls", cwd=7).effect == "deny"  # not a path: fails closed


@pytest.mark.parametrize(
    "line",
    [
        "echo \"-c 'alias.x=!rm v' x\" | xargs git",  # stdin supplies git's global options
        "echo rm v | xargs env",  # stdin supplies the wrapped command
        "echo rm v | xargs timeout 5",
        "echo v | xargs -I X rm X",
        "echo v | xargs -IX rm X",
    ],
)
def test_row7_xargs_appends_stdin_words_no_rule_saw(tmp_path: Path, line: str) -> None:
    assert deletes(tmp_path, line)
    rules = ruleset(
        tmp_path,
        allow=["bash(echo:*)", "bash(xargs:*)", "bash(git:*)", "bash(env:*)", "bash(timeout:*)"],
    )
    assert verdict(rules, line).effect != "allow"
    allowed = ruleset(tmp_path, allow=["bash(echo:*)", "bash(xargs:*)", "bash(git status:*)"])
    assert verdict(allowed, "echo a | xargs git status").effect == "allow"


@pytest.mark.parametrize(
    "line", ["prlimit rm v", "taskset 1 rm v", "chrt -o 0 rm v", "setpriv rm v"]
)  # (flock is read as a wrapper now: `flock lockfile rm v` is denied outright)
def test_row5_a_program_no_wrapper_table_knows_still_turns_a_deny_rule_into_an_ask(
    tmp_path: Path, line: str
) -> None:
    """The class, not the examples: a denied command name as an argument of any program."""
    if shutil.which(line.split()[0]) is None:
        pytest.skip(f"{line.split()[0]} is not installed")
    assert deletes(tmp_path, line)
    found = verdict(ruleset(tmp_path, allow=["bash"], deny=["bash(rm:*)"]), line)
    assert found.effect == "ask"
    assert "may run it as a command" in (found.note or "")
