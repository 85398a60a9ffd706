"""The rule grammar, the shell reading and the path globs, on their own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dsh_host import define_tool
from dsh_plugins_builtin._rules._grammar import spellings_of
from dsh_plugins_builtin._rules._place import Place
from dsh_plugins_builtin._rules._rules import Anchors, RuleError, RuleSet, parse_rule
from dsh_plugins_builtin._rules._shell import MAX_COMMAND, MAX_DEPTH, parse_command

ANCHORS = Anchors(workspace="/ws", project="/ws", home="/home/u")


def rule(text: str, effect: str = "deny", anchors: Anchors = ANCHORS):
    return parse_rule(text, effect, anchors, "dsh.toml")  # type: ignore[arg-type]


# -- the grammar ---------------------------------------------------------------------------


def test_a_plain_name_is_a_rule_without_specifier():
    r = rule("  web_fetch ")
    assert (r.text, r.tool, r.command, r.path, r.domain) == (
        "web_fetch",
        "web_fetch",
        None,
        None,
        None,
    )
    assert r.detail == "rule web_fetch in dsh.toml"


@pytest.mark.parametrize(
    ("text", "matches", "misses"),
    [
        ("bash(git status:*)", ["git status", "git status -s"], ["git statusx", "git", "git log"]),
        ("Bash(git status:*)", ["git status"], ["git stat"]),
        ("Bash(ls *)", ["ls", "ls -l"], ["lsof"]),
        ("Bash(npm run *)", ["npm run test", "npm run"], ["npm install"]),
        ("Bash(git * main)", ["git checkout main", "git push origin main"], ["git checkout dev"]),
        ("bash(pwd)", ["pwd"], ["pwd -P"]),
        (
            "bash(npm  run 'my test')",
            ["npm run 'my test'", 'npm run "my test"'],
            ["npm run my test"],
        ),
        ("Bash(*)", ["anything at all", "x"], []),
    ],
)
def test_command_specifiers_in_both_spellings(text, matches, misses):
    pattern = rule(text).command
    assert pattern is not None
    for command in matches:
        simple = parse_command(command).simple
        assert simple is not None
        assert pattern.fits(simple[0]), command
    for command in misses:
        simple = parse_command(command).simple
        assert simple is not None
        assert not pattern.fits(simple[0]), command


def test_claude_code_rule_spellings_parse():
    assert rule("Read(./.env)").path is not None
    assert rule("Read(~/.zshrc)", "deny").path is not None
    assert rule("Edit(/src/**/*.ts)", "allow").path is not None
    assert rule("WebFetch(domain:example.com)").domain == "example.com"
    for name in (
        "mcp__github__create_issue",
        "mcp__github",
        "mcp__github__*",
        "Glob",
        "Grep",
        "LS",
    ):
        assert rule(name).tool == name


def test_mcp_rules_name_every_tool_of_their_server():
    assert rule("mcp__gh").names("mcp__gh__create_issue", None)
    assert rule("mcp__gh__*").names("mcp__gh__create_issue", None)
    assert rule("mcp__gh__create_issue").names("mcp__gh__create_issue", None)
    assert not rule("mcp__gh").names("mcp__ghost__x", None)
    assert not rule("mcp__gh__create_issue").names("mcp__gh__delete_repo", None)


@pytest.mark.parametrize("effect", ["allow", "ask", "deny"])
def test_mcp_wildcards_match_in_every_list(effect):
    """Issue #23 row 8: ``mcp__*`` and ``mcp__srv__delete_*`` used to match nothing."""
    assert rule("mcp__*", effect).names("mcp__gh__create_issue", None)
    assert not rule("mcp__*", effect).names("bash", None)
    prefix = rule("mcp__srv__delete_*", effect)
    assert prefix.names("mcp__srv__delete_repo", None)
    assert not prefix.names("mcp__srv__create_repo", None)
    assert not prefix.names("mcp__srv2__delete_repo", None)


@pytest.mark.parametrize("text", ["mcp__", "mcp____x", "mcp__srv___"])
def test_an_mcp_name_naming_nothing_is_an_error(text):
    with pytest.raises(RuleError, match="names no MCP server"):
        rule(text)
    assert rule("Read").names("read_file", "Read")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("bash(", "the ( is not closed"),
        ("Bash(git status:*", "the ( is not closed"),
        ("Bad Name(x)", "'Bad Name' is not a tool name"),
        ("(x)", "'' is not a tool name"),
        ("bash(x)y", "there is text after the closing )"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("bash()", "empty specifier; write bash alone"),
        ("bash(:*)", "names no command"),
        ("bash(git status && rm:*)", "must name one simple command"),
        ("bash(echo $(id))", "must name one simple command"),
        ("bash(make > log)", "must name one simple command"),
        ("bash(echo 'x)", "must name one simple command"),
        ("WebFetch(example.com)", "takes domain:HOST"),
        ("Read*", "only MCP tool names may end in *"),
        ("read_file(../x)", "empty, . or .. path segment"),
        ("read_file(src//x)", "empty, . or .. path segment"),
        ("read_file(./)", "names no path"),
    ],
)
def test_rules_that_do_not_parse_say_why(text, why):
    with pytest.raises(RuleError, match=r".") as info:
        rule(text)
    assert why in str(info.value)


def test_allow_rules_may_name_paths_outside_the_workspace_explicitly():
    assert rule("Read(//etc/hosts)", "allow").path is not None
    assert rule("read_file(~/.zshrc)", "allow").path is not None


# -- path globs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "matches"),
    [
        ("./secrets/**", "/ws/secrets/key.pem", True),
        ("./secrets/**", "/ws/secrets/a/b/c", True),
        ("./secrets/**", "/ws/secrets", True),  # the directory itself: list_dir secrets
        ("./secrets/**", "/ws/app/secrets/key", False),
        ("./secrets/**", "/ws/secretsx", False),
        ("secrets/", "/ws/secrets/key", True),  # a directory covers what is under it
        ("secrets/", "/ws/app/secrets/key", True),  # no slash inside: any depth
        ("secrets", "/elsewhere/secrets", False),  # ... but under the workspace
        ("/secrets", "/ws/app/secrets", False),  # a leading slash anchors to the project
        ("/secrets", "/ws/secrets/x", True),
        ("src/**/*.py", "/ws/src/a.py", True),
        ("src/**/*.py", "/ws/src/a/b/c.py", True),
        ("src/**/*.py", "/ws/src/a.pyc", False),
        ("src/**/*.py", "/ws/lib/src/a.py", False),  # a slash inside anchors
        ("*.env", "/ws/prod.env", True),
        ("*.env", "/ws/config/prod.env", True),
        ("*.env", "/ws/config/prod.env.example", False),
        ("**/node_modules", "/ws/a/b/node_modules/x/y.js", True),
        ("doc?.md", "/ws/docs.md", True),
        ("doc?.md", "/ws/doc/.md", False),
        ("[abc].txt", "/ws/b.txt", True),
        ("[!abc].txt", "/ws/d.txt", True),
        ("[!abc].txt", "/ws/a.txt", False),
        ("a\\*b", "/ws/a*b", True),
        ("a\\*b", "/ws/axb", False),
        ("a**b", "/ws/axxb", True),
        ("a**b", "/ws/ax/b", False),
        ("[oops", "/ws/[oops", True),
        ("**", "/ws", True),
        ("**", "/wsx", False),
        ("*.py", "/ws", False),
        ("//etc/shadow", "/etc/shadow", True),
        ("//etc/shadow", "/ws/etc/shadow", False),
        ("~/.ssh/**", "/home/u/.ssh/id_rsa", True),
        ("~/.zshrc", "/home/u/.zshrc", True),
    ],
)
def test_gitignore_style_globs_over_absolute_paths(spec, path, matches):
    pattern = rule(f"read_file({spec})").path
    assert pattern is not None
    assert pattern.matches(path) is matches


def test_a_leading_slash_is_relative_to_the_settings_files_project():
    anchors = Anchors(workspace="/ws", project="/proj", home="/home/u")
    pattern = rule("Read(/src/**)", "deny", anchors).path
    assert pattern is not None
    assert pattern.matches("/proj/src/a")
    assert not pattern.matches("/ws/src/a")


# -- the shell reading: what allow rules see -------------------------------------------------


@pytest.mark.parametrize(
    ("command", "simple"),
    [
        ("echo hi", [("echo", "hi")]),
        ("git status", [("git", "status")]),
        ("git status && git diff", [("git", "status"), ("git", "diff")]),
        ("a && b || c; d | e", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("a\nb", [("a",), ("b",)]),
        ("ls 2>/dev/null", [("ls",)]),
        ("ls >/dev/null 2>&1 | wc -l", [("ls",), ("wc", "-l")]),
        ("echo 'a b' \"c d\" e", [("echo", "a b", "c d", "e")]),
        ("echo a#b", [("echo", "a#b")]),  # not a comment inside a word
        ("git diff HEAD~1", [("git", "diff", "HEAD~1")]),  # no tilde expansion there
        ("LANG=C make", [("LANG=C", "make")]),  # (FOO=1 make is not: make reads FOO)
    ],
)
def test_plain_lists_of_literal_commands_are_readable_for_allow_rules(command, simple):
    parsed = parse_command(command)
    assert parsed.simple == tuple(simple), parsed.problem
    assert parsed.dynamic is None


@pytest.mark.parametrize(
    "command",
    [
        "echo e\\ f",  # any backslash escape
        'echo "a \\"q\\" \\$x \\n"',
        "echo $'a\\tb'",  # ANSI-C strings
        "echo $'ab\\0cd'",
        'echo r"m" \\rm',
        "git \\\nstatus",  # a line continuation
        "echo ok # a comment",
        "echo *.py",  # a pathname pattern
        "echo ~/x",  # a tilde bash expands
        "echo a=~",
        "'tim'\\e x",  # a quoted part glued to an escape: one word to bash
        "git 0>/dev/null push",  # an fd number before a redirection
        "''\\rm x",  # empty quotes glued to an escape
        "a=()x rm x",
        "git 2>/dev/null&push",
    ],
)
def test_the_strict_word_grammar_refuses_every_other_spelling(command):
    """Issue #23 row 4: allow rules hold only for words both readers agree on."""
    assert parse_command(command).simple is None


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("echo $x", "an expansion or substitution"),
        ("echo ${x}", "an expansion or substitution"),
        ("echo $(id)", "an expansion or substitution"),
        ("echo `id`", "an expansion or substitution"),
        ('echo "$(id)"', "an expansion or substitution"),
        ("echo $((1+2))", "an expansion or substitution"),
        ("echo {a,b}", "an expansion or substitution"),
        ("echo ~/x", "an expansion or substitution"),
        ("diff <(ls a) b", "an expansion or substitution"),
        ("ls > out", "a redirection other than to /dev/null"),
        ("ls >&out", "a redirection other than to /dev/null"),
        ("cat < in", "a redirection other than to /dev/null"),
        ("cat <<EOF\nhi\nEOF", "heredoc"),
        ("cat <<< word", "herestring"),
        ("(ls)", "subshell"),
        ("{ ls; }", "compound statement"),
        ("f() { ls; }", "function definition"),
        ("if true; then ls; fi", "if statement"),
        ("while true; do ls; done", "while statement"),
        ("for x in a; do ls; done", "for statement"),
        ("case x in x) ls;; esac", "case statement"),
        ("! ls", "negated command"),
        ("ls &", "the operator '&'"),
        ("ls |& cat", "the operator '|&'"),
        ("[[ -f x ]]", "test command"),
        ("export LANG=C", "declaration command"),
        ("LANG=$(id) ls", "an assignment with an expansion"),
        ("export A=1", "the variable A, which may name"),  # an environment-style name
        ("A=1 ls", "the variable A, which may name"),
        ('echo $"x"', "does not parse reliably"),  # $ glued to a string: bash reads one word
        ("echo hi\rtouch x", "control characters"),
        ("echo 'open", "does not parse"),
        ("", "empty"),
    ],
)
def test_anything_else_is_never_readable_for_allow_rules(command, problem):
    parsed = parse_command(command)
    assert parsed.simple is None
    assert parsed.problem is not None
    assert problem in parsed.problem


# -- the shell reading: what deny and ask rules see ------------------------------------------


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("time rm v", ("rm", "v")),
        ("time -p rm v", ("rm", "v")),
        ("! rm v", ("rm", "v")),
        ("if true; then rm v; fi", ("rm", "v")),
        ("while true; do rm v; done", ("rm", "v")),
        ("case x in x) rm v;; esac", ("rm", "v")),
        ("f() { rm v; }", ("rm", "v")),
        ("(rm v)", ("rm", "v")),
        ("{ rm v; }", ("rm", "v")),
        ("coproc rm v", ("rm", "v")),
        ("2>/dev/null rm v", ("rm", "v")),
        ("echo $(rm v)", ("rm", "v")),
        ('echo "`rm v`"', ("rm", "v")),
        ("cat <(rm v)", ("rm", "v")),
        ("cat <<EOF\n$(rm v)\nEOF", ("rm", "v")),
        ("export A=$(rm v)", ("rm", "v")),
        ("FOO=1 /bin/rm v", ("rm", "v")),
        ("r\\m v", ("rm", "v")),
        ("'r'\"m\" v", ("rm", "v")),
        ("$'\\x72m' v", ("rm", "v")),
        ("env rm v", ("rm", "v")),
        ("env -i A=1 -u B rm v", ("rm", "v")),
        ("env -S 'rm v'", ("rm", "v")),
        ("command rm v", ("rm", "v")),
        ("command -p rm v", ("rm", "v")),
        ("exec -a name rm v", ("rm", "v")),
        ("nice -n 5 rm v", ("rm", "v")),
        ("nohup rm v", ("rm", "v")),
        ("timeout -s KILL 5 rm v", ("rm", "v")),
        ("echo v | xargs -I{} -n 1 rm {}", ("rm", "\ue100")),  # {} is read from stdin
        ("sudo -u root rm v", ("rm", "v")),
        ("sudo -E --preserve-env=X rm v", ("rm", "v")),  # unknown options: read both ways
        ("find . -name v -exec rm {} \\;", ("rm", "{}")),
        ("find . -execdir rm {} +", ("rm", "{}")),
        ("sh -c 'rm v'", ("rm", "v")),
        ("bash -lc 'rm v'", ("rm", "v")),
        ("bash -c \"sh -c 'rm v'\"", ("rm", "v")),
        ("/usr/bin/env bash -c 'timeout 1 rm v'", ("rm", "v")),
        ("sudo nice nohup env -- xargs rm", ("rm",)),
    ],
)
def test_every_command_anywhere_is_seen_by_deny_rules(command, inner):
    assert inner in parse_command(command).commands


@pytest.mark.parametrize(
    "command",
    [
        "$x v",
        "${cmd} v",
        "$(echo rm) v",
        "`echo rm` v",
        '"$c" v',
        "eval rm v",
        "source ./script",
        ". ./script",
        "env $x v",
        'sudo "$@"',
        "echo rm v | bash",
        "echo rm v | sh -s",
        "echo rm v | sudo -s",
        "echo rm v | sudo -u root -i",
        "echo rm v | su",
        "echo rm v | sudo -Es",
        "su -c 'rm v' root",
        'bash -c "$x"',
        "r* v",  # a pathname pattern as the command word
        "echo 'open",  # does not parse
    ],
)
def test_a_dynamic_command_is_flagged(command):
    parsed = parse_command(command)
    assert parsed.dynamic is not None
    assert parsed.simple is None


def test_git_global_options_are_seen_through_by_deny_rules():
    push = rule("bash(git push:*)").command
    assert push is not None
    for command in (
        "git -C repo push",
        "git --no-pager push origin",
        "git -c k=v push",
        "git --git-dir=.git --work-tree . push",
        "git --namespace x -P push",
    ):
        assert any(push.catches(w) for w in parse_command(command).commands), command
        assert not any(push.fits(w) for w in parse_command(command).simple or ()), command
    assert not any(push.catches(w) for w in parse_command("git -C push status").commands)


# -- hostile input -------------------------------------------------------------------------


def test_a_huge_command_fails_closed_quickly():
    started = time.perf_counter()
    parsed = parse_command("echo " + "a" * (1024 * 1024) + "; rm v")
    assert time.perf_counter() - started < 1
    assert parsed.simple is None
    assert parsed.dynamic is not None
    assert f"longer than {MAX_COMMAND}" in parsed.dynamic


def test_ten_thousand_nested_substitutions_fail_closed():
    parsed = parse_command("echo " + "$(" * 10_000 + "rm v" + ")" * 10_000)
    assert parsed.simple is None
    assert ("rm", "v") in parsed.commands or parsed.dynamic is not None


def test_deeply_nested_subshells_and_shell_strings_fail_closed():
    parsed = parse_command("(" * 5000 + "rm v" + ")" * 5000)
    assert parsed.simple is None
    assert ("rm", "v") in parsed.commands or parsed.dynamic is not None
    nested = "rm v"
    for _ in range(MAX_DEPTH + 2):
        nested = "sh -c " + "'" + nested.replace("'", "'\\''") + "'"
    deep = parse_command(nested)
    assert deep.dynamic == "shell strings are nested too deeply"


@pytest.mark.parametrize(
    "command", ["echo \ud800", "\x00rm v", "echo \x1b[2J", "echo a\u2028rm v", "\\"]
)
def test_odd_characters_never_raise_and_never_allow(command):
    parsed = parse_command(command)
    assert parsed.simple is None or "rm" not in {w[0] for w in parsed.simple}


# -- rule sets -----------------------------------------------------------------------------


def tool(name, paths=None, claude_name=None):
    async def execute(args):
        return "ran"

    params = {k: {"type": "string"} for k in ("command", "path", "url", "target")}
    return define_tool(
        name=name, description=name, parameters=params, execute=execute, paths=paths,
        claude_name=claude_name,
    )  # fmt: skip


READ = tool("read_file", {"path": "read"}, "Read")
GREP = tool("grep", {"path": "read"}, "Grep")
EDIT = tool("edit_file", {"path": "write"}, "Edit")
COPY = tool("copy", {"path": "read", "target": "write"})
BASH = tool("bash", claude_name="Bash")


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
    anchors = Anchors(workspace=str(ws), project=str(ws), home="/home/u")

    def parsed(texts, effect):
        return [parse_rule(t, effect, anchors, "dsh.toml") for t in texts]

    return RuleSet(
        allow=parsed(allow, "allow"), ask=parsed(ask, "ask"), deny=parsed(deny, "deny"),
        default=default, workspace=ws,
    )  # fmt: skip


def test_read_rules_reach_every_tool_that_declares_a_read_path(ws):
    rs = rules(ws, deny=["Read(./secrets/**)"])
    assert rs.decide("grep", GREP, {"path": "secrets"}).effect == "deny"
    assert rs.decide("grep", GREP, {"path": "src"}).effect == "ask"
    assert rs.decide("copy", COPY, {"path": "secrets/k", "target": "x"}).effect == "deny"
    assert rs.decide("copy", COPY, {"path": "x", "target": "secrets/k"}).effect == "ask"
    assert rs.decide("edit_file", EDIT, {"path": "secrets/k"}).effect == "ask"


def test_edit_rules_reach_every_tool_that_declares_a_write_path(ws):
    rs = rules(ws, deny=["Edit(./secrets/**)"])
    assert rs.decide("copy", COPY, {"path": "x", "target": "secrets/k"}).effect == "deny"
    assert rs.decide("edit_file", EDIT, {"path": "src/link/k"}).effect == "deny"  # a symlink
    assert rs.decide("read_file", READ, {"path": "secrets/k"}).effect == "ask"


def test_an_absent_path_is_the_workspace_root(ws):
    rs = rules(ws, allow=["grep"], deny=["Read(./**)"])
    assert rs.decide("grep", GREP, {}).effect == "deny"


def test_rules_match_a_tool_by_its_claude_code_name(ws):
    rs = rules(ws, allow=["Read", "Bash(git status:*)"], deny=["Bash(rm:*)"])
    assert rs.decide("read_file", READ, {"path": "x"}).effect == "allow"
    assert rs.decide("bash", BASH, {"command": "git status"}).effect == "allow"
    assert rs.decide("bash", BASH, {"command": "env rm x"}).effect == "deny"


def test_a_file_allow_rule_needs_every_spelling_of_the_path_to_match(ws):
    rs = rules(ws, allow=["read_file(src/**)"])
    assert rs.decide("read_file", READ, {"path": "src/a.py"}).effect == "allow"
    # src/link -> secrets: as spelled it is under src, really it is not
    assert rs.decide("read_file", READ, {"path": "src/link/key"}).effect == "ask"


def test_an_explicit_allow_rule_reaches_outside_the_workspace_but_a_plain_one_does_not(ws):
    rs = rules(ws, allow=["read_file", "Read(~/.zshrc)"])
    assert rs.decide("read_file", READ, {"path": "/home/u/.zshrc"}).effect == "allow"
    # spelled with ~ it may mean ./~/.zshrc too, and an allow rule must cover every reading
    assert rs.decide("read_file", READ, {"path": "~/.zshrc"}).effect == "ask"
    assert rs.decide("read_file", READ, {"path": "/home/u/.bashrc"}).effect == "ask"
    # a relative allow rule never stretches outside: src/** does not cover src/../../x
    assert rules(ws, allow=["Read(**)"]).decide("read_file", READ, {"path": "../x"}).effect == "ask"


def test_a_path_outside_the_workspace_is_never_allowed_and_says_so(ws):
    rs = rules(ws, allow=["read_file"])
    verdict = rs.decide("read_file", READ, {"path": "escape/x"})
    assert (verdict.effect, verdict.defaulted) == ("ask", True)
    assert verdict.note is not None
    assert "it is outside the workspace" in verdict.note
    assert str(ws.parent / "outside" / "x") in verdict.note
    assert rs.decide("read_file", READ, {"path": "~/x"}).effect == "ask"  # the tool may expand ~


def test_a_path_that_is_not_a_string_matches_no_path_rule(ws):
    rs = rules(ws, allow=["read_file"], deny=["read_file(**)"])
    verdict = rs.decide("read_file", READ, {"path": 3})
    assert verdict.effect == "ask"
    assert verdict.note == "the path argument is not a string, so allow rules do not apply"
    # a string that cannot be resolved (NUL, a lone surrogate) is caught by deny rules
    assert rs.decide("read_file", READ, {"path": "a\x00b"}).effect == "deny"
    assert rs.decide("read_file", READ, {"path": "secrets/\ud800"}).effect == "deny"
    assert (
        rules(ws, allow=["read_file"]).decide("read_file", READ, {"path": "a\x00b"}).effect == "ask"
    )
    assert rs.decide("read_file", READ, ["not", "an", "object"]).effect == "deny"  # path = .


def test_a_dynamic_command_turns_shell_deny_rules_into_asks(ws):
    rs = rules(ws, allow=["bash(echo:*)"], deny=["bash(rm:*)"], default="allow")
    verdict = rs.decide("bash", BASH, {"command": "$x v"})
    assert verdict.effect == "ask"
    assert verdict.rule is not None
    assert verdict.rule.text == "bash(rm:*)"
    assert "only known at run time" in (verdict.note or "")
    assert rs.decide("bash", BASH, {"command": "echo $x"}).effect == "allow"  # the default
    strict = rules(ws, deny=["bash(rm:*)"], default="deny")
    assert strict.decide("bash", BASH, {"command": "eval x"}).effect == "deny"
    assert rules(ws, default="allow").decide("bash", BASH, {"command": "$x"}).effect == "allow"


def test_claude_names_of_built_in_tools_name_them_without_a_declaration(ws):
    bare_bash = tool("bash")  # declares no claude_name
    rs = rules(ws, allow=["Bash(git status:*)"], deny=["Bash(rm:*)"])
    assert rs.decide("bash", bare_bash, {"command": "git status"}).effect == "allow"
    assert rs.decide("bash", bare_bash, {"command": "command rm x"}).effect == "deny"
    assert rs.decide("shell", tool("shell"), {"command": "rm x"}).effect == "ask"


def test_web_fetch_domain_rules(ws):
    fetch = tool("web_fetch", claude_name="WebFetch")
    rs = rules(ws, allow=["WebFetch(domain:example.com)"], deny=["WebFetch(domain:evil.test)"])
    assert rs.decide("web_fetch", fetch, {"url": "https://docs.example.com/x"}).effect == "allow"
    assert rs.decide("web_fetch", fetch, {"url": "https://example.com.evil.test/"}).effect == "deny"
    assert rs.decide("web_fetch", fetch, {"url": "https://notexample.com/"}).effect == "ask"
    assert rs.decide("web_fetch", fetch, {"url": "http://[::1"}).effect == "deny"  # unclear
    assert rs.decide("web_fetch", fetch, {"url": "HTTPS://Docs.Example.COM."}).effect == "allow"
    assert (
        rs.decide("web_fetch", fetch, {"url": "http://my_host.example.com:8080"}).effect == "allow"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.test\\@example.com/",  # Node: evil.test (\\ ends the host); urlsplit: example.com
        "https://example.com@evil.test/",
        "https:evil.test/",
        "https:/evil.test/",
        "https:\\\\evil.test/",
        "https://ev%69l.test/",
        "https://evil\u3002test/",  # an ideographic full stop
        "https://\uff45vil.test/",  # a full-width letter
        "https://evi\tl.test/",  # Node drops tabs and newlines
        "https://[::1]/",
        "//evil.test/",
        "http://127.1/",  # IPv4 in other spellings: Node reads each as 127.0.0.1
        "http://0x7f.1/",
        "http://2130706433/",
        "http://0177.0.0.1/",
    ],
)
def test_a_url_not_written_plainly_meets_domain_deny_rules_and_no_allow(ws, url):
    # WHATWG parsers (Node's, for Claude Code's WebFetch) and urlsplit read these hosts apart:
    # none may pass a deny rule for the host Node fetches, nor be allowed by a domain rule.
    fetch = tool("web_fetch", claude_name="WebFetch")
    rs = rules(ws, allow=["WebFetch(domain:example.com)"], deny=["WebFetch(domain:evil.test)"])
    assert rs.decide("web_fetch", fetch, {"url": url}).effect == "deny"
    only_allow = rules(ws, allow=["WebFetch(domain:example.com)", "WebFetch(domain:evil.test)"])
    assert only_allow.decide("web_fetch", fetch, {"url": url}).effect == "ask"


def test_a_plain_allow_rule_for_bash_allows_anything_not_denied(ws):
    rs = rules(ws, allow=["bash", "bash(ls:*)"])
    assert rs.decide("bash", BASH, {"command": "rm -rf / > x; 'unterminated"}).effect == "allow"
    assert rules(ws, allow=["bash(ls:*)"]).decide("bash", BASH, {"command": ""}).effect == "ask"
    assert rules(ws, allow=["bash(ls:*)"]).decide("bash", BASH, {"command": 7}).effect == "ask"


def test_withheld_answers_by_real_path_and_access(ws):
    rs = rules(ws, deny=["Read(./secrets/**)", "Edit(src/generated/**)"], ask=["Read(*.env)"])
    secret = str(ws / "secrets" / "key")
    withheld = rs.withheld("grep", GREP, secret, "read")
    assert withheld is not None
    assert withheld.text == "Read(./secrets/**)"
    assert rs.withheld("grep", GREP, str(ws / "secrets"), "read") is not None
    assert rs.withheld("grep", GREP, str(ws / "src" / "a.py"), "read") is None
    assert rs.withheld("grep", GREP, secret, "write") is None
    assert rs.withheld("grep", GREP, str(ws / "a" / "prod.env"), "read") is not None
    assert rs.withheld("x", None, str(ws / "src/generated/m.py"), "write") is not None
    assert rs.withheld("x", None, str(ws / "src/generated/m.py"), "read") is None


def test_per_tool_views_are_cached_and_bounded(ws):
    rs = rules(ws, deny=["Read(./secrets/**)"])
    first = rs.view("grep", GREP)
    assert rs.view("grep", GREP) is first
    for i in range(1000):
        rs.view(f"t{i}", None)
    assert rs._view.cache_info().currsize <= 256  # type: ignore[attr-defined]


def test_path_targets_resolve_as_realpath_does(tmp_path: Path) -> None:
    """Below the workspace only links and missing parts go to ``os.path.realpath``; every
    answer must be the one ``os.path.realpath`` gives, links anywhere included."""
    real = tmp_path / "real-ws"
    (real / "a" / "b").mkdir(parents=True)
    (real / "a" / "b" / "f.txt").write_text("x")
    (real / "secret").mkdir()
    (real / "secret" / "key").write_text("k")
    outside = tmp_path / "outside"
    outside.mkdir()
    (real / "alias").symlink_to(real / "secret")  # an alias of a denied directory
    (real / "a" / "up").symlink_to("../secret")
    (real / "out").symlink_to(outside)
    (real / "dangling").symlink_to(tmp_path / "nowhere")
    (real / "loop1").symlink_to(real / "loop2")
    (real / "loop2").symlink_to(real / "loop1")
    (real / "a" / "b" / "file-link").symlink_to(real / "secret" / "key")
    (real / "locked" / "inner").mkdir(parents=True)
    (real / "locked" / "inner" / "f").write_text("x")
    (real / "locked").chmod(0)  # an ordinary user cannot look inside; root can
    ws = tmp_path / "ws-link"
    ws.symlink_to(real)  # the workspace as configured is itself a link
    try:
        _compare_with_realpath(real, ws)
    finally:
        (real / "locked").chmod(0o755)


def _compare_with_realpath(real: Path, ws: Path) -> None:
    for workspace in (real, ws):
        place = Place(spellings_of(str(workspace)))
        for text in [
            ".", "a", "a/b/f.txt", "a/b/missing/deeper", "alias/key", "a/up/key", "out",
            "out/x", "dangling", "dangling/x", "loop1", "loop1/x", "a/b/file-link",
            "../outside", "/etc/hostname", "a/../secret/key", "secret", str(real / "a"),
            "a/\udcff", "a/\x1b[2J\n", "a/" + "x" * 300, "a/" * 3000 + "f", "locked/inner/f",
        ]:  # fmt: skip
            lexical = os.path.normpath(os.path.join(str(workspace), text))
            assert place.realpath(lexical) == os.path.realpath(lexical), (workspace, text)
            targets = place.targets(text)
            assert targets is not None
            assert os.path.realpath(lexical) in targets
        for text in ("a/\ud800", "\ud800"):  # no encoding takes it: no target, fail closed
            assert place.targets(text) is None


def test_a_path_tools_verdict_is_looked_up_by_where_its_paths_lead(ws):
    """Matched once per place: the same spelling leading to the same place is the same
    verdict, looked up, not the rules matched again."""
    rs = rules(ws, allow=["read_file"], deny=["Read(./secrets/**)"])
    first = rs.decide("read_file", READ, {"path": "src/a.txt"})
    assert first.effect == "allow"
    assert rs.decide("read_file", READ, {"path": "src/a.txt"}) is first
    assert rs.decide("read_file", READ, {"path": "src/link/k"}).effect == "deny"
    assert rs.decide("read_file", READ, {"path": 7}).effect == "ask"  # not a path: no allow


def test_a_looked_up_verdict_follows_a_symlink_planted_since(ws, tmp_path):
    """The path is resolved on every call: where it leads now is what is looked up."""
    rs = rules(ws, allow=["read_file"], deny=["Read(./secrets/**)"])
    (ws / "src" / "b.txt").write_text("b")
    assert rs.decide("read_file", READ, {"path": "src/b.txt"}).effect == "allow"
    (ws / "src" / "b.txt").unlink()
    os.symlink(ws / "secrets" / "k", ws / "src" / "b.txt")
    assert rs.decide("read_file", READ, {"path": "src/b.txt"}).effect == "deny"
    (ws / "src" / "b.txt").unlink()
    os.symlink(tmp_path / "outside", ws / "src" / "b.txt")
    outside = rs.decide("read_file", READ, {"path": "src/b.txt"})
    assert (outside.effect, outside.defaulted) == ("ask", True)
    assert "outside the workspace" in (outside.note or "")


@pytest.mark.parametrize(
    "command",
    [
        "for f in *.py; do echo $f; done",
        "if [ -f x ]; then cat x; fi",
        "cat > file <<'EOF'\nprint($x)\nEOF",
        'echo "$(date)"',
        "awk '{print $1}' f",
        "jq '.items[0]' f.json",
        "NODE_ENV=test npm test",
        "echo ${arr[0]}",
        "cat <<EOF > f\nhello $USER\nEOF",
        "wc -l $(git ls-files)",
        'echo "a [b] c"',
        "grep -E '^[a-z]+$' f",
        "echo $((1+2))",
        "git commit -m 'fix: x[0] bug'",
        'test -n "$CI" && echo ci',
        "echo 'rm -rf /'",
    ],
)
def test_common_lines_are_not_taken_for_hidden_code(command):
    """The hidden-code checks close classes conservatively; lines agents write every day must
    not fall into them (a deny rule would then ask at each one)."""
    assert parse_command(command).dynamic is None
