"""The rule grammar, the shell splitter and the path globs, on their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh_plugins_builtin._rules import (
    RuleError,
    RuleSet,
    SimpleCommand,
    Workspace,
    parse_command,
    parse_rule,
)

# -- the grammar ---------------------------------------------------------------------------


def test_a_plain_name_is_a_rule_without_specifier():
    rule = parse_rule("  web_fetch ")
    assert (rule.text, rule.tool, rule.command, rule.path) == ("web_fetch", "web_fetch", None, None)


def test_bash_prefix_and_exact_specifiers():
    prefix = parse_rule("bash(git status:*)").command
    assert prefix is not None
    assert (prefix.words, prefix.prefix) == (("git", "status"), True)
    assert parse_rule("bash(ls *)").command == prefix.__class__(("ls",), True)
    exact = parse_rule("bash(npm  run 'my test')").command
    assert exact is not None
    assert (exact.words, exact.prefix) == (("npm", "run", "my test"), False)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("bash(", "the ( is not closed"),
        ("bash(git status:*", "the ( is not closed"),
        ("Bad Name(x)", "'Bad Name' is not a tool name"),
        ("(x)", "'' is not a tool name"),
        ("bash(x)y", "there is text after the closing )"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("bash()", "empty specifier; write bash alone"),
        ("bash(:*)", "names no command"),
        ("bash(ls *.py)", "a * is only understood at the end"),
        ("bash(git status && rm:*)", "must name one simple command"),
        ("bash(echo $(id))", "must name one simple command"),
        ("bash(make > log)", "must name one simple command"),
        ("bash(echo 'x)", "must name one simple command"),
        ("web_fetch(example.com)", "specifiers are understood only for bash"),
        ("read_file(../x)", "empty, . or .. path segment"),
        ("read_file(src//x)", "empty, . or .. path segment"),
        ("read_file(./)", "names no path"),
    ],
)
def test_rules_that_do_not_parse_say_why(text, why):
    with pytest.raises(RuleError, match=r".") as info:
        parse_rule(text)
    assert why in str(info.value)


def test_allow_rules_cannot_name_paths_outside_the_workspace():
    assert parse_rule("read_file(//etc/**)", "deny").path is not None
    assert parse_rule("read_file(~/.ssh/**)", "ask", home="/home/u").path is not None
    for text in ("read_file(//etc/**)", "read_file(~/.ssh/**)"):
        with pytest.raises(RuleError, match="allow rules never apply outside it"):
            parse_rule(text, "allow", home="/home/u")


def test_home_must_be_known_for_a_tilde_rule():
    with pytest.raises(RuleError, match="home directory is unknown"):
        parse_rule("read_file(~/.ssh/**)", "deny", home="~")


# -- the shell splitter --------------------------------------------------------------------


def words(command: str) -> list[tuple[str, ...]]:
    return [part.words for part in parse_command(command).parts]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", [("git", "status")]),
        ("a && b || c; d | e |& f & g", [("a",), ("b",), ("c",), ("d",), ("e",), ("f",), ("g",)]),
        ("a\nb", [("a",), ("b",)]),
        ("(cd x; make)", [("cd", "x"), ("make",)]),
        ("a;(b)", [("a",), ("b",)]),
        ("echo $(rm -rf x)", [("echo", "\ue100"), ("rm", "-rf", "x")]),
        ('echo "$(id) and `whoami`"', [("echo", "\ue100 and \ue100"), ("id",), ("whoami",)]),
        ("echo $(echo $(id))", [("echo", "\ue100"), ("echo", "\ue100"), ("id",)]),
        ("diff <(ls a) >(cat)", [("diff", "\ue100", "\ue100"), ("ls", "a"), ("cat",)]),
        ("echo '$(id)' \"a;b\" c\\;d", [("echo", "$(id)", "a;b", "c;d")]),
        ("echo ';' '&&' x", [("echo", ";", "&&", "x")]),
        ("a#b; rm x", [("a#b",), ("rm", "x")]),  # no comments: bash would run rm
        ("git \\\nstatus", [("git", "status")]),  # a line continuation
        ("ls 2>/dev/null >&2", [("ls", "2")]),
        ("", []),
        (";;", []),
    ],
)
def test_commands_split_into_simple_commands(command, expected):
    parsed = parse_command(command)
    assert words(command) == expected
    assert parsed.complete, parsed.problem


@pytest.mark.parametrize(
    ("command", "writes"),
    [
        ("ls > out", True),
        ("ls >> out", True),
        ("ls &> out", True),
        ("ls >| out", True),
        ("ls >&out", True),
        ("cat <> file", True),
        ("ls > /dev/null", False),
        ("ls 2>&1", False),
        ("ls >&-", False),
        ("cat < in", False),
        ("cat <<< word", False),
    ],
)
def test_output_redirections_into_files_are_writes(command, writes):
    parsed = parse_command(command)
    assert parsed.complete
    assert [p.writes for p in parsed.parts] == [writes]


def test_a_bare_redirection_is_a_command_of_its_own():
    assert parse_command("ls; > important.txt").parts == (
        SimpleCommand(("ls",)),
        SimpleCommand((), writes=True),
    )
    assert parse_command("> x").parts == (SimpleCommand((), writes=True),)
    assert parse_command("< x").parts == ()


def test_a_carriage_return_is_part_of_a_word_as_in_bash():
    assert words("ls\rrm") == [("ls\rrm",)]


@pytest.mark.parametrize(
    ("command", "problem", "rough"),
    [
        ('echo "open', "an unterminated quote", [("echo", "open")]),
        ("echo 'open; rm -rf /", "an unterminated quote", [("echo", "open"), ("rm", "-rf", "/")]),
        ("echo $(rm -rf /", "an unclosed $(", [("echo",), ("rm", "-rf", "/")]),
        ("echo `id", "an unclosed backtick", [("echo",), ("id",)]),
        ("cat <<EOF\nrm x\nEOF", "a here-document", [("cat",), ("rm", "x"), ("EOF",)]),
        ("ls >", "a > redirection without a target", [("ls",)]),
        ("ls > ; rm x", "a > redirection without a target", [("ls",), ("rm", "x")]),
        ("echo \ue000", "private-use", [("echo", "\ue000")]),
        ("echo x\\", "no escaped character", [("echo", "x")]),
    ],
)
def test_commands_that_cannot_be_split_for_certain_are_incomplete(command, problem, rough):
    parsed = parse_command(command)
    assert not parsed.complete
    assert problem in (parsed.problem or "")
    assert [p.words for p in parsed.parts] == rough


def test_substitutions_nested_too_deeply_are_incomplete():
    command = "echo " + "$(" * 12 + "id" + ")" * 12
    parsed = parse_command(command)
    assert not parsed.complete
    assert parsed.problem == "substitutions nested too deeply"


def test_command_patterns_allow_as_written_and_catch_through_disguises():
    prefix = parse_rule("bash(rm:*)").command
    assert prefix is not None
    assert prefix.allows(SimpleCommand(("rm", "-rf", "x")))
    assert not prefix.allows(SimpleCommand(("rm", "x"), writes=True))
    assert not prefix.allows(SimpleCommand(("FOO=1", "rm", "x")))
    assert not prefix.allows(SimpleCommand(("/bin/rm", "x")))
    assert prefix.catches(SimpleCommand(("FOO=1", "BAR+=2", "rm", "x")))
    assert prefix.catches(SimpleCommand(("/usr/bin/rm", "x")))
    assert not prefix.catches(SimpleCommand(("rmdir", "x")))
    assert not prefix.catches(SimpleCommand(("FOO=1",)))
    exact = parse_rule("bash(git status)").command
    assert exact is not None
    assert exact.allows(SimpleCommand(("git", "status")))
    assert not exact.allows(SimpleCommand(("git", "status", "-s")))
    assert not exact.allows(SimpleCommand(("git",)))


# -- path globs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "matches"),
    [
        ("./secrets/**", "secrets/key.pem", True),
        ("./secrets/**", "secrets/a/b/c", True),
        ("./secrets/**", "secrets", False),
        ("./secrets/**", "app/secrets/key", False),
        ("secrets/", "secrets/key", True),  # a directory covers what is under it
        ("secrets/", "app/secrets/key", True),  # no slash inside: any depth
        ("/secrets", "app/secrets", False),  # a leading slash anchors
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/a/b/c.py", True),
        ("src/**/*.py", "src/a.pyc", False),
        ("src/**/*.py", "lib/src/a.py", False),  # a slash inside anchors
        ("*.env", "prod.env", True),
        ("*.env", "config/prod.env", True),
        ("*.env", "config/prod.env.example", False),
        ("**/node_modules", "a/b/node_modules/x/y.js", True),
        ("doc?.md", "docs.md", True),
        ("doc?.md", "doc/.md", False),
        ("[abc].txt", "b.txt", True),
        ("[!abc].txt", "d.txt", True),
        ("[!abc].txt", "a.txt", False),
        ("a\\*b", "a*b", True),
        ("a\\*b", "axb", False),
        ("a**b", "axxb", True),
        ("a**b", "ax/b", False),
        ("[oops", "[oops", True),
        ("**", "", True),
        ("*.py", "", False),
        ("//etc/shadow", "etc/shadow", True),
    ],
)
def test_gitignore_style_globs(spec, path, matches):
    pattern = parse_rule(f"read_file({spec})").path
    assert pattern is not None
    assert pattern.matches(path) is matches


# -- rule sets -----------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "src").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(root / "secrets", root / "src" / "link")
    os.symlink(tmp_path / "outside", root / "escape")
    return root


def rules(ws: Path, *, allow=(), ask=(), deny=(), default="ask") -> RuleSet:
    def parsed(texts, effect):
        return [parse_rule(t, effect, home="/home/u") for t in texts]

    return RuleSet(
        allow=parsed(allow, "allow"),
        ask=parsed(ask, "ask"),
        deny=parsed(deny, "deny"),
        default=default,
        workspace=Workspace.at(ws),
    )


def test_a_file_allow_rule_needs_every_spelling_of_the_path_to_match(ws):
    rs = rules(ws, allow=["read_file(src/**)"])
    assert rs.decide("read_file", {"path": "src/a.py"}).effect == "allow"
    # src/link -> secrets: as spelled it is under src, really it is not
    assert rs.decide("read_file", {"path": "src/link/key"}).effect == "ask"


def test_a_path_outside_the_workspace_is_never_allowed_and_says_so(ws):
    rs = rules(ws, allow=["read_file"])
    verdict = rs.decide("read_file", {"path": "escape/x"})
    assert (verdict.effect, verdict.defaulted) == ("ask", True)
    assert verdict.note is not None
    assert "it is outside the workspace" in verdict.note
    assert str(ws.parent / "outside" / "x") in verdict.note
    assert rs.decide("read_file", {"path": "~/x"}).effect == "ask"  # the tool may expand ~


def test_deny_and_ask_rules_catch_any_spelling(ws):
    rs = rules(ws, deny=["read_file(./secrets/**)", "read_file(~/.ssh/**)"])
    assert rs.decide("read_file", {"path": "src/link/key"}).effect == "deny"
    assert rs.decide("read_file", {"path": "/home/u/.ssh/id_rsa"}).effect == "deny"


def test_a_path_that_is_not_a_string_matches_no_path_rule(ws):
    rs = rules(ws, allow=["read_file"], deny=["read_file(**)"])
    verdict = rs.decide("read_file", {"path": 3})
    assert verdict.effect == "ask"
    assert verdict.note == "the path argument is not a string, so allow rules do not apply"
    assert rs.decide("read_file", {"path": "a\x00b"}).effect == "ask"
    assert rs.decide("read_file", ["not", "an", "object"]).effect == "deny"  # path defaults to .
    assert rules(ws, allow=["read_file"]).decide("read_file", None).effect == "allow"


def test_bash_notes_say_why_an_allow_rule_did_not_apply(ws):
    rs = rules(ws, allow=["bash(ls:*)"])
    assert rs.decide("bash", {"command": "ls > x"}).note == (
        "allow rules never apply to a command that redirects output into a file"
    )
    assert rs.decide("bash", {"command": "ls 'x"}).note == (
        "the command could not be split safely (an unterminated quote), so allow rules do not apply"
    )
    assert rs.decide("bash", {"command": "cat x"}).note is None
    assert rs.decide("bash", {"command": 7}).effect == "ask"
    assert rules(ws).decide("bash", {"command": "ls > x"}).note is None  # no allow rule for bash


def test_a_plain_allow_rule_for_bash_allows_anything(ws):
    rs = rules(ws, allow=["bash", "bash(ls:*)"])
    assert rs.decide("bash", {"command": "rm -rf / > x; 'unterminated"}).effect == "allow"
    assert rules(ws, allow=["bash(ls:*)"]).decide("bash", {"command": ""}).effect == "ask"
