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
    "echo 'rm -rf /'",  # echo prints its arguments, never runs one
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


# -- round two (a review of issue 22's classes): option spellings, braces, hidden arithmetic --

ALLOW_BYPASSES_2 = [
    # a quoted `}` does not end bash's braces: `{'}',a,b}` is three words
    (["bash(find:*)"], "find . -name {'}',-o,-exec,touch,pwned,';'}"),
    (["bash(env:*)"], "env -u {'}',touch,pwned}"),
    (["bash(echo:*)", "bash(xargs:*)"], "echo pwned | xargs -E {'}',touch}"),
    # getopt reads clusters and abbreviations: -iS is -i -S, --spl= is --split-string=
    (["bash(env:*)"], "env -iS'touch pwned'"),
    (["bash(env:*)"], "env --spl='touch pwned' echo echo"),
    # xargs' replace mode in any spelling puts stdin into the command
    (["bash(echo:*)", "bash(xargs:*)", "bash(sh -c foo)"], "echo 'touch pwned' | xargs -ifoo sh -c foo"),
    # git options that run a program named on the line
    (["bash(git grep:*)"], "git grep --no-index -O'touch pwned' hello"),
    (["bash(git grep:*)"], "git grep --no-index --open-files='touch pwned' hello"),
]  # fmt: skip


HIDDEN_2 = [
    "env {'}'=1,rm,-f,victim}",
    "find . -name {'}',-o,-exec,rm,-f,victim,';'}",
    "env -S'rm -f victim'",
    "env --split-string='rm -f victim'",
    "env -vS'rm -f victim'",
    "env -S 'rm\\_-f\\_victim'",
    "printf 'rm -f victim' | xargs -0 sh -c",
    "echo 'rm -f victim' | xargs -0 env -S",
    "echo 'rm -f victim' | xargs -ifoo sh -c foo",
    "echo 'rm -f victim' | xargs --repl=foo sh -c foo",
    # bash evaluates a subscript as arithmetic wherever a name with one ends up
    "sleep 0 & wait -n -p 'a[$(rm -f victim)]'",
    "true {a['$(rm -f victim)']}>/dev/null",
    "OPTIND='a[$(rm -f victim)]'",
    "RANDOM='a[$(rm -f victim)]'",
    "HISTCMD='a[$(rm -f victim)]'",
    "b='a[$(rm -f victim)]'; echo $[b]",
    "b='a[$(rm -f victim)]'; for ((i=0;i<b;i++)); do :; done",
    "p=$(echo 'a[$(rm -f victim)]'); OPTIND=$p",
    "mapfile -tC 'rm -f victim #' -c 1 </dev/null",
    "rbash -c 'rm -f victim'",
    "zsh -c 'rm -f victim'",
    "env - rm victim",
]


def _git(*args: str, cwd: Path) -> None:
    import subprocess

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _planted_config(path: Path, ws: Path, extra: str = "") -> None:
    path.write_text(
        f"[core]\n\trepositoryformatversion = 0\n{extra}\tfsmonitor = touch {ws}/pwned\n"
    )


@pytest.fixture
def planted(tmp_path):
    """A workspace that is no repository, with repositories the agent could have written."""
    ws = tmp_path / "ws"
    for bare in (ws, ws / "evil"):  # git takes a directory with HEAD, objects, refs for one
        (bare / "objects").mkdir(parents=True)
        (bare / "refs").mkdir()
        (bare / "HEAD").write_text("ref: refs/heads/main\n")
        _planted_config(bare / "config", ws, f"\tbare = false\n\tworktree = {bare}\n")
    (ws / "sub").mkdir()
    _git("init", "-q", cwd=ws / "sub")
    _planted_config(ws / "sub" / ".git" / "config", ws)
    home = tmp_path / "ws" / "fakehome"
    home.mkdir()
    _planted_config(home / ".gitconfig", ws)
    return ws


@pytest.mark.parametrize(
    ("allow", "arguments"),
    [
        (["bash(git status:*)"], {"command": "git status"}),  # the workspace root itself
        (["bash(git status:*)"], {"command": "git status", "cwd": "evil"}),
        (["bash(find:*)", "bash(git status:*)"],
         {"command": "find sub/.git -maxdepth 0 -execdir git status ';'"}),
        (["bash(env:*)", "bash(git status:*)"], {"command": "env --ch=sub env git status"}),
        (["bash(env:*)", "bash(git status:*)"], {"command": "env -iCsub env git status"}),
        (["bash(env:*)", "bash(git status:*)"],
         {"command": "env HOME=fakehome git -C sub status"}),
        (["bash(env:*)", "bash(git status:*)"], {"command": "env XDG_CONFIG_HOME=x git status"}),
        (["bash(git status:*)"], {"command": "HOME=fakehome git status"}),
    ],
)  # fmt: skip
async def test_git_never_runs_allowed_in_a_repository_or_config_the_agent_wrote(
    planted, allow, arguments
):
    outcome = await attempt(planted, {"allow": allow, "default": "ask"}, "bash", arguments)
    assert outcome == "asked"
    assert not (planted / "pwned").exists()


async def test_git_output_files_are_writes_an_edit_rule_must_allow(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    rules = {"allow": ["bash(git diff:*)"], "default": "ask"}
    command = f"git diff --no-index --output={tmp_path}/outside /dev/null /dev/null"
    assert await attempt(ws, rules, "bash", {"command": command}) == "asked"
    assert not (tmp_path / "outside").exists()


@pytest.mark.parametrize(
    "command",
    ["env LANG=C ls", "echo a | xargs echo", "find . -name '*.py'", "env -i ls", "env -u HOME ls"],
)
async def test_round_two_controls_keep_running(tmp_path, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    allow = ["bash(env:*)", "bash(ls:*)", "bash(echo:*)", "bash(xargs:*)", "bash(find:*)"]
    rules = {"allow": allow, "deny": ["bash(rm:*)"], "default": "ask"}
    assert await attempt(ws, rules, "bash", {"command": command}) == "allowed"


# -- round three: what a second review of round two found -----------------------------------

ALLOW_BYPASSES_3 = [
    # watch runs its words joined, through `sh -c`
    (["bash(echo:*)", "bash(timeout:*)", "bash(watch:*)"], "timeout 2 watch -n1 echo '$(touch pwned)'"),
    # xargs --process-slot-var sets a variable for its command
    (["bash(echo:*)", "bash(xargs:*)", "bash(git status:*)"],
     "echo . | xargs --process-slot-var=GIT_CONFIG_GLOBAL git status"),
    (["bash(git:*)"], "git --git-dir=evil status"),
    (["bash(git:*)"], "git --bare status"),
    (["bash(git clone:*)"], "git clone -c core.sshCommand='touch pwned' ssh://h/r d"),
    (["bash(git clone:*)"], "git clone --template=tpl . d2"),
    # options xargs appends from stdin skip the checks the same options get on the line
    (["bash(echo:*)", "bash(xargs:*)", "bash(git log:*)"], "echo --output=pwned | xargs git log"),
    (["bash(echo:*)", "bash(xargs:*)", "bash(pytest:*)"], "echo --basetemp=pwned | xargs pytest -q"),
]  # fmt: skip


HIDDEN_3 = [
    "timeout 2 watch -n1 'rm -f victim'",
    "bash -c - 'rm -f victim'",
    'x=b"["\'$(rm -f victim)]\'; : "${*:x}"',
    "x=b\"[\"'$(rm -f victim)]'; a=([x]=1)",
    ': "${GIT_CONFIG_PARAMETERS:="\'alias.x=!rm -f victim\'"}"; export GIT_CONFIG_PARAMETERS; git x',
    "for GIT_CONFIG_PARAMETERS in \"'alias.x=!rm -f victim'\"; do export GIT_CONFIG_PARAMETERS; git x; done",
    "for PATH in /nowhere; do ls; done",
    "mapfile -t PATH </dev/null; ls",
    "rg --pre=rm zzz victim",
    "flock lk -c 'rm -f victim'",
    "tar -cf x.tar victim --checkpoint=1 --checkpoint-action=exec='rm -f victim'",
    "env a.b=1 rm -f victim",
    "sudo -nD/tmp -- rm victim",
]


# -- round four: a third review -------------------------------------------------------------

HIDDEN_4 = [
    # substitutions the grammar reads as text (a pattern, a here-document after a blank line)
    "cat <<EOF\n $(rm -f victim)\nEOF",
    "cat <<EOF\n`rm -f victim`\nEOF",
    "echo ${PWD#$(rm -f victim)}",
    "echo `echo \\`rm -f victim\\``",
    # -o / -O take a value inside a cluster: the code is the next word
    "bash -co posix 'true; rm -f victim'",
    "bash -Oc extglob 'true; rm -f victim'",
    # a startup file read before -c
    "bash --rcfile /dev/stdin -ic true <<< 'rm -f victim'",
    # sh -c behind programs no table knows, and programs that run a string through sh -c
    "taskset 1 sh -c 'true; rm -f victim'",
    "strace -f -o /dev/null sh -c 'true; rm -f victim'",
    "flock lk -c 'true; rm -f victim'",
    "flock lk -c 'r\"\"m -f victim'",
    "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='true;rm -f victim' .",
    "echo 'true;rm -f victim' | xargs -0 flock l -c",
]


def test_nested_shell_strings_are_read_once_within_a_budget():
    """A 60 KB line wrapped in five xargs and sh -c, four times over, took 19 s and 250 MB: each
    string was read again for every spelling of its command. Not a timed test: the budget is
    counted in bytes read, which the line cannot exceed."""
    import shlex

    from dsh_plugins_builtin._rules import _shell

    line = "echo " + "a" * 60_000
    for _ in range(4):
        line = "xargs xargs xargs xargs xargs /bin/sh -c " + shlex.quote(line)
    read: list[int] = []
    real = _shell._walk

    def counting(source, depth, budget):
        read.append(len(source))
        return real(source, depth, budget)

    _shell._walk = counting
    try:
        _shell._parse(line)
    finally:
        _shell._walk = real
    assert sum(read) <= 5 * len(line)


ALLOW_BYPASSES_4 = [
    (["bash(python3 -m pytest:*)"], "python3 -m pytest -o addopts=--junitxml=pwned"),
    (["bash(python3 -m pytest:*)"], "python3 -m pytest --log-file=pwned"),
    (["bash(python3 -m pytest:*)"], "python3 -m pytest --debug pwned"),
    (["bash(python3 -m pytest:*)"], "python3 -m pytest -o=cache_dir=pwned"),
    (["bash(python3 -m pytest:*)"], "python3 -m pytest -o log_file=pwned"),
    (["bash(make:*)"], "make --eval='$(shell touch pwned)'"),
    (["bash(echo:*)", "bash(make:*)"], "echo 'all: ; touch pwned' | make -f -"),
]


# -- round five: a fourth review ------------------------------------------------------------

ALLOW_BYPASSES_5 = [
    (["bash(make:*)"], "make 'X!=touch pwned'"),
    (["bash(make:*)"], "make 'X:=$(shell touch pwned)'"),
    (["bash(make:*)"], "make -sE '$(shell touch pwned)'"),
    (["bash(printf:*)", "bash(make:*)"], "printf 'all:\\n\\ttouch pwned\\n' | make -sf -"),
    (["bash(make:*)"], "make CC='touch pwned'"),
    (["bash(tar:*)"], "tar cIf 'sh -c \"touch pwned\"' b.tar hello"),
    (["bash(tar:*)"], "tar --use='sh -c \"touch pwned\"' -cf c.tar hello"),
    (["bash(tar:*)"], "tar --rsh-command=/usr/bin/touch -cf localhost:pwned hello"),
    (["bash(flock:*)", "bash(ls:*)"], "flock -E 1 ls touch pwned"),
    (["bash(python3 -m pytest:*)"], "python3 -m pytest -qo addopts=--junitxml=pwned"),
]  # fmt: skip


HIDDEN_5 = [
    "git --namespace x -c alias.y='!true;rm -f victim' y",
    "git --namespace x grep -O'rm -f victim' -e foo",
    "git fetch-pack --exec='true;rm -f victim' .",
    "git send-pack --receive-pack='true;rm -f victim' . HEAD",
    "git submodule --quiet foreach 'true;rm -f victim'",
    "x=abc; echo ${x#<(rm -f victim)}; sleep 0",
    'echo "$\\\n(rm -f victim)"',
    "x=1; echo \"${x:+'$(rm -f victim)'}\"",
    "echo \"${x-'`rm -f victim`'}\"",
    "/proc/self/exe -c 'true;rm -f victim'",
    "tar cIf 'sh -c \"true;rm -f victim\"' b.tar victim",
]


ALLOW_BYPASSES_6 = [
    (["bash(npm test:*)"], "npm test --script-shell=/usr/bin/touch"),
    (["bash(npm test:*)"], "npm test --logs-dir=pwned"),
    (["bash(npm test:*)"], "npm test --node-options=--require=./pwned.js"),
    (["bash(npm test:*)"], "npm test -C /elsewhere"),
]  # fmt: skip

HIDDEN_6 = [
    # a pathname pattern as the program behind a wrapper
    "nice /usr/bin/r[m] victim",
    "timeout 5 /bin/r? victim",
    "env /bin/r[m] victim",
    "echo victim | xargs /bin/r[m]",
    "find . -name victim -exec /usr/bin/r[m] {} +",
    # a word known only at run time as the command of a program no table knows
    "taskset 1 $(echo rm) victim",
    "x=rm; taskset 1 $x victim",
    "echo rm victim | xargs taskset 1",
    "find /usr/bin -name 'r[m]' -exec {} victim ';'",
    "runuser root -c 'true;rm victim'",
]

MAYBE = [
    # a deny rule of two words, met by a later word known only at run time
    "x=push; git $x",
    "git {push,}",
    "git $(echo push)",
    "echo push | xargs git",
    "git p[u]sh",
]


@pytest.mark.parametrize("command", MAYBE)
async def test_a_later_word_known_only_at_run_time_cannot_dodge_a_rule_of_several_words(
    tmp_path, command
):
    ws = tmp_path / "ws"
    ws.mkdir()
    rules = {"allow": ["bash"], "deny": ["bash(git push:*)"], "default": "allow"}
    assert await attempt(ws, rules, "bash", {"command": command}) in ("asked", "denied")


HIDDEN_7 = [
    # git's options known only at run time (git takes more than names)
    "x=-Orm; git grep --no-index $x -e x victim",
    "echo -Orm victim | xargs git grep --no-index -e x",
    # test, [ and printf whose first word may be -v
    "x=$(echo LXYgYVskKHJtJHtJRlN9dmljdGltKV0K | base64 -d); test $x",
    "x=$(echo LXYgYVskKHJtJHtJRlN9dmljdGltKV0K | base64 -d); [ $x ]",
]


async def test_git_s_own_programs_are_read_as_git(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    rules = {"allow": ["bash"], "deny": ["bash(git push:*)"], "default": "allow"}
    command = "/usr/lib/git-core/git-push origin HEAD"
    assert await attempt(ws, rules, "bash", {"command": command}) == "denied"


async def test_git_runs_not_allowed_after_a_command_that_may_write_its_repository(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    rules = {"allow": ["bash(echo:*)", "bash(tee:*)", "bash(git status:*)"], "default": "ask"}
    command = (
        "echo 'ref: refs/heads/main' | tee HEAD; echo x | tee refs; echo x | tee objects; "
        f"echo '[core]\n\tfsmonitor = touch {ws}/pwned' | tee config; git status"
    )
    assert await attempt(ws, rules, "bash", {"command": command}) == "asked"
    assert not (ws / "pwned").exists()


async def test_a_link_then_dotdot_is_resolved_as_the_kernel_does(tmp_path):
    ws = tmp_path / "ws"
    (ws / "secrets" / "sub").mkdir(parents=True)
    (ws / "secrets" / "key").write_text("TOKEN=hunter2\n")
    (ws / "l").symlink_to(ws / "secrets" / "sub")
    rules = {"deny": ["read_file(./secrets/**)"]}
    assert await attempt(ws, rules, "read_file", {"path": "l/../key"}) == "denied"


# -- every review round's lines, through one pair of tests ------------------------------------

ALLOW_ROUNDS = [
    *ALLOW_BYPASSES_2,
    *ALLOW_BYPASSES_3,
    *ALLOW_BYPASSES_4,
    *ALLOW_BYPASSES_5,
    *ALLOW_BYPASSES_6,
]
HIDDEN_ROUNDS = HIDDEN_2 + HIDDEN_3 + HIDDEN_4 + HIDDEN_5 + HIDDEN_6 + HIDDEN_7


@pytest.mark.parametrize(("allow", "command"), ALLOW_ROUNDS)
async def test_allow_rules_hold_against_every_review_round(tmp_path, allow, command):
    """Each line an allow rule let through in a review: asked now, its payload not run."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello").write_text("hello\n")
    outcome = await attempt(ws, {"allow": allow, "default": "ask"}, "bash", {"command": command})
    assert outcome == "asked"
    assert not (ws / "pwned").exists()


@pytest.mark.parametrize("command", HIDDEN_ROUNDS)
async def test_deny_rules_hold_against_every_review_round(tmp_path, command):
    """Each line that ran a denied program unseen in a review: asked or denied now."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim").write_text("x")
    rules = {"allow": ["bash"], "deny": ["bash(rm:*)", "bash(curl:*)"], "default": "allow"}
    assert await attempt(ws, rules, "bash", {"command": command}) in ("asked", "denied")
    assert (ws / "victim").exists()
