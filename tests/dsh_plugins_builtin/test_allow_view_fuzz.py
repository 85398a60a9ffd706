"""Fuzz: a line the allow rules accept changes no file, checked against a real ``bash``.

Lines are built (by hypothesis) from words the allow rules cover, separators, quotes, escapes,
redirections and fragments that run code when bash reads them a certain way (``$(touch P)``,
``'a[$(touch P)]'``, ``-v``, ``-exec touch``, ``-delete``, ``GIT_*`` ...). The allow rules name
only commands that write nothing (``echo``, ``printf``, ``test``, ``ls``, wrappers around
them ...). Whenever the rules allow a line, bash runs it in a scratch directory holding a
canary file, and the directory must come out exactly as it went in: nothing created, deleted or
modified. (Issue #23: a line the allow view accepts does only what the allowed commands do.)
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_plugins_builtin._rules._rules import Anchors, RuleSet, parse_rule
from tests.conftest import soak_size

ALLOW = [
    "bash(echo:*)", "bash(printf:*)", "bash(test:*)", "bash(true:*)", "bash(ls:*)",
    "bash(timeout:*)", "bash(nice:*)", "bash(env:*)", "bash(xargs:*)", "bash(find:*)",
    "bash(read:*)", "bash(declare:*)", "bash(mapfile:*)", "bash(let:*)", "bash(trap:*)",
    "bash(git status:*)", "bash(cat:*)",
]  # fmt: skip
HEADS = [
    "echo", "printf", "test", "true", "ls", "timeout 5", "nice -n 1", "env", "xargs", "find .",
    "read", "declare", "mapfile", "let", "trap", "cat", "[", "printf -v", "test -v", "env X=1",
    "find . -exec", "find . -delete", "git status", "git -c core.pager=touch", "ec'ho'",
    "'tim'\\eout 5", "a=()x",
]  # fmt: skip
PIECES = [
    "x", "P", "a", "-n", "-v", "-C", "-c", "1", " ", " ", "'", '"', "\\", "$", "(", ")", "`",
    "[", "]", "{", "}", ";", "&&", "||", "|", "&", "\n", "#", "~", "*", "=", ">", "<", ">&",
    "2>/dev/null", "0>/dev/null", ">/dev/null", "2>&1", "'a[$(touch P)]'", "$(touch P)",
    "`touch P`", "'$(touch P)'", "\"$(touch P)\"", "touch P", "rm -f canary", "';'", "'{}'",
    "-exec touch P ';'", "-delete", "GIT_PAGER=touch", "$'\\x74ouch' P", "\\\n", "\r", "\t",
    "'touch P'", "%s", "P=()", "x[$(touch P)]", ">P", ">>P",
]  # fmt: skip

BASH = shutil.which("bash")


def _ruleset(ws: Path) -> RuleSet:
    anchors = Anchors(workspace=str(ws), project=str(ws), home="/nonexistent")
    allow = [parse_rule(text, "allow", anchors, "fuzz") for text in ALLOW]
    return RuleSet(allow=allow, default="deny", workspace=ws)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


lines = st.builds(
    lambda head, rest, tail: head + " " + "".join(rest) + tail,
    st.sampled_from(HEADS),
    st.lists(st.sampled_from(PIECES), min_size=0, max_size=7),
    st.sampled_from(["", "", "; echo done", " | cat", " && ls", "\nls"]),
)


@pytest.mark.soak
@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@settings(
    max_examples=soak_size(300, 20_000), deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(line=lines)
def test_a_line_the_allow_rules_accept_changes_no_file(tmp_path: Path, line: str) -> None:
    rules = _ruleset(tmp_path)
    if rules.decide("bash", None, {"command": line}).effect != "allow":
        return
    scratch = tmp_path / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    (scratch / "canary").write_text("canary")
    before = _snapshot(scratch)
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            [BASH, "--norc", "--noprofile", "-c", line], cwd=scratch, stdin=subprocess.DEVNULL,
            capture_output=True, timeout=5, check=False, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
    assert _snapshot(scratch) == before, f"allowed line changed files: {line!r}"


def test_the_fuzz_reaches_allowed_lines_and_refuses_the_attacks(tmp_path: Path) -> None:
    """The fuzz is not vacuous: lines of its grammar are allowed, and its attacks are not."""
    rules = _ruleset(tmp_path)
    for line in ("echo x; ls", "timeout 5 echo x | cat", "find . -exec ls '{}' ';'"):
        assert rules.decide("bash", None, {"command": line}).effect == "allow", line
    for line in (
        "printf -v 'a[$(touch P)]' x",
        "timeout 5 touch P",
        "find . -exec touch P ';'",
        "find . -delete",
        "'tim'\\eout 5 touch P",
        "echo x >P",
        "git -c core.pager=touch status",
    ):
        assert rules.decide("bash", None, {"command": line}).effect != "allow", line
