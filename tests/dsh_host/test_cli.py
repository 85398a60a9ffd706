"""The ``dsh`` command line, run in-process through ``dsh_host._cli._main.main`` (issue #3 §4).

Plugins come from a helper module written into ``tmp_path`` and passed with ``--plugin``; no
installed entry point is loaded (``--no-entrypoints``).
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
import textwrap
import tomllib
from typing import Any

import pytest

from dsh_host._cli._main import main
from tests.trusted import write_config

HELPERS = '''
"""Plugins for the dsh CLI tests."""

from __future__ import annotations

import attrs

from dsh_host import (
    Ask, Deny, DiffCallView, DiffResultView, FileDiff, TerminalCallView, TerminalResultView,
    define_tool, hookimpl,
)
from tests.trusted import write_config

RAN: list[str] = []


def _echo(args, ctx):
    RAN.append("echo")
    ctx.defer_context("echo was here")
    return args["text"]


echo = define_tool(
    name="echo",
    description="Echo text back.\\nMore words.",
    parameters={
        "text": {"type": "string", "required": True, "description": "What to say"},
        "times": {"type": "integer", "default": 1},
        "mode": {"type": "string", "enum": ["plain", "loud"]},
    },
    execute=_echo,
    is_concurrency_safe=lambda args: True,
)


def _diff(args):
    return [FileDiff(args["path"], args["old"], args["new"])]


def _edit(args):
    RAN.append("edit")
    return "edited"


edit = define_tool(
    name="edit",
    description="Edit a file.",
    parameters={
        "path": {"type": "string", "required": True},
        "old": {"type": "string", "required": True},
        "new": {"type": "string", "required": True},
    },
    execute=_edit,
    present_call=lambda a: DiffCallView(title=f"Edit {a['path']}", diffs=_diff(a)),
    present_result=lambda a, r: DiffResultView(title=f"Edited {a['path']}", diffs=_diff(a)),
)


def _sh(args):
    RAN.append("sh")
    return "line one\\nline two"


sh = define_tool(
    name="sh",
    description="Run a command.",
    parameters={"command": {"type": "string", "required": True}},
    execute=_sh,
    present_call=lambda a: TerminalCallView(title=a["command"], description="a test command"),
    present_result=lambda a, r: TerminalResultView(output=r.text, exit_code=3),
)


def _fail(args):
    RAN.append("fail")
    raise RuntimeError("kaput")


fail = define_tool(name="fail", description="Always fails.", parameters={}, execute=_fail)


@hookimpl
def dsh_register_tools(register):
    for tool in (echo, edit, sh, fail):
        register(tool)


@attrs.frozen
class PolicyConfig:
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()


class Policy:
    name = "policy"

    def __init__(self):
        self.config = PolicyConfig()

    @hookimpl
    def dsh_plugin_config(self):
        return PolicyConfig

    @hookimpl
    def dsh_host_started(self, host):
        self.config = host.config_for(self)

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        if execution.name in self.config.deny:
            return Deny(f"{execution.name} is denied by policy")
        if execution.name in self.config.ask:
            return Ask("policy wants a human")
        return None


policy = Policy()


class Misspelt:
    name = "misspelt"

    @hookimpl
    def dsh_tool_pre_exec(self, execution):
        return None


misspelt = Misspelt()
'''

PLUGINS = ["--no-entrypoints", "--plugin", "cli_helpers", "--plugin", "cli_helpers:policy"]


class TTY(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    (tmp_path / "cli_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_helpers", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("DSH_CONFIG", "DSH_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    real = importlib.metadata.entry_points  # hide installed plugins from messages

    def entry_points(**selection: Any) -> Any:
        return [] if selection == {"group": "dsh.plugins"} else real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    yield tmp_path
    sys.modules.pop("cli_helpers", None)


@pytest.fixture
def dsh(capsys):
    def run(*argv: str, plugins: bool = True) -> tuple[int, str, str]:
        status = main([*PLUGINS, *argv] if plugins else list(argv))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return status, captured.out, captured.err

    return run


def ran() -> list[str]:
    return sys.modules["cli_helpers"].RAN  # type: ignore[no-any-return]


def config(workdir: Any, text: str) -> None:
    write_config(workdir / "dsh.toml", textwrap.dedent(text))


# -- dsh plugins -----------------------------------------------------------------------------


def test_plugins_json_lists_status_hooks_and_config_class(dsh):
    status, out, _ = dsh("plugins", "--json")
    assert status == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["policy"]["status"] == "enabled"
    assert rows["policy"]["hooks"] == [
        "dsh_host_started",
        "dsh_plugin_config",
        "dsh_tool_pre_execute",
    ]
    assert rows["policy"]["config_class"] == "cli_helpers.PolicyConfig"
    assert rows["cli_helpers"]["hooks"] == ["dsh_register_tools"]
    assert rows["cli_helpers"]["order"] == 1
    assert rows["policy"]["order"] == 2


def test_plugins_text_shows_failed_ones_with_their_error(dsh):
    status, out, err = dsh("plugins", "--plugin", "cli_helpers:misspelt")
    assert status == 0
    assert "misspelt  failed" in out
    assert "error: implements unknown hook 'dsh_tool_pre_exec'" in out
    assert "config: cli_helpers.PolicyConfig  [plugin.policy]" in out
    assert "2 enabled, 1 failed" in out
    assert err == ""


def test_failed_plugins_are_announced_on_other_commands(dsh):
    status, _, err = dsh("call", "echo", '{"text": "x"}', "--plugin", "cli_helpers:misspelt")
    assert status == 0
    assert "not running 1 plugin(s) that failed to load: misspelt" in err


# -- dsh tools -------------------------------------------------------------------------------


def test_tools_text(dsh):
    status, out, _ = dsh("tools")
    assert status == 0
    assert "echo  (plugin cli_helpers)" in out
    assert "    Echo text back." in out
    assert "More words." not in out
    assert "text (string, required)  What to say" in out
    assert "times (integer, default 1)" in out
    assert 'mode (string, one of "plain", "loud")' in out


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (["--json"], lambda t: set(t) == {"name", "description", "parameters"}),
        (
            ["--format", "openai"],
            lambda t: t["type"] == "function" and "parameters" in t["function"],
        ),
        (["--format", "anthropic"], lambda t: "input_schema" in t),
        (["--format", "mcp"], lambda t: "inputSchema" in t),
    ],
)
def test_tools_json_formats(dsh, argv, check):
    status, out, _ = dsh("tools", *argv)
    assert status == 0
    tools = json.loads(out)
    assert len(tools) == 4
    assert all(check(tool) for tool in tools)


def test_tools_format_must_be_known(dsh):
    status, _, err = dsh("tools", "--format", "gemini")
    assert status == 2
    assert "invalid choice: 'gemini'" in err


# -- dsh call --------------------------------------------------------------------------------


def test_call_shows_card_decision_and_result(dsh):
    status, out, err = dsh("call", "echo", '{"text": "hi there"}')
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "* echo" or lines[0] == "● echo"
    assert '"text": "hi there"' in out
    assert "allowed" in out
    assert "  hi there" in lines
    assert "(context from echo) echo was here" in out
    assert err == ""


def test_call_json_prints_the_result_object(dsh):
    status, out, _ = dsh("call", "echo", '{"text": "hi"}', "--json")
    assert status == 0
    result = json.loads(out)
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["is_error"] is False
    assert result["decided_by"] is None
    assert result["additional_contexts"][0]["source"] == "echo"


def test_call_denied_names_who_and_exits_1(dsh, workdir):
    config(workdir, '[plugin.policy]\ndeny = ["echo"]\n')
    status, out, err = dsh("call", "echo", '{"text": "hi"}')
    assert status == 1
    assert "denied by policy" in out
    assert "Error: echo is denied by policy" in out
    assert "error code: DENIED" in out
    assert ran() == []
    assert "hint" not in err
    status, out, _ = dsh("call", "echo", '{"text": "hi"}', "--json")
    assert json.loads(out)["decided_by"] == "policy"


def test_an_unanswered_ask_is_denied_with_a_hint(dsh, workdir):
    config(workdir, '[plugin.policy]\nask = ["sh"]\n')
    status, out, err = dsh("call", "sh", '{"command": "ls"}')
    assert status == 1
    assert "requires approval" in out
    assert "hint: plugin 'policy' asked for approval" in err
    assert "[plugin.permissions]" in err
    assert 'allow = ["sh"]' in err
    assert str(workdir / "dsh.toml") in err
    assert "After a change, trust the file again (`dsh config trust`)" in err  # found here
    assert ran() == []
    named = workdir / "mine.toml"  # named, never trusted: read whatever it holds
    named.write_text('[plugin.policy]\nask = ["sh"]\n')
    status, _, err = dsh("--config", str(named), "call", "sh", '{"command": "ls"}')
    assert "hint: plugin 'policy' asked for approval" in err
    assert "dsh config trust" not in err


def test_a_failing_tool_shows_its_error_code(dsh):
    status, out, _ = dsh("call", "fail")
    assert status == 1
    assert "allowed, then failed" in out
    assert "RuntimeError: kaput" in out
    assert "error code: TOOL_FAILED" in out


def test_terminal_card_shows_command_output_and_exit_status(dsh):
    status, out, _ = dsh("call", "sh", '{"command": "make test"}')
    assert status == 0
    assert "$ make test" in out
    assert "# a test command" in out
    assert "  line two" in out
    assert "exit status 3" in out


def test_diff_card_is_a_unified_diff_without_colour_when_piped(dsh):
    status, out, _ = dsh("call", "edit", '{"path": "a.txt", "old": "x\\ny\\n", "new": "x\\nz\\n"}')
    assert status == 0
    assert "--- a/a.txt" in out
    assert "-y" in out
    assert "+z" in out
    assert "\x1b[" not in out


def test_diff_is_coloured_on_a_terminal_unless_no_color(dsh, monkeypatch):
    argv = ["call", "edit", '{"path": "a.txt", "old": "y\\n", "new": "z\\n"}']
    terminal = TTY()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert dsh(*argv)[0] == 0
    assert "\x1b[32m+z\x1b[0m" in terminal.getvalue()
    assert "\x1b[31m-y\x1b[0m" in terminal.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = TTY()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert dsh(*argv)[0] == 0
    assert "+z" in terminal.getvalue()
    assert "\x1b[" not in terminal.getvalue()


def test_trace_prints_each_stage_plugin_outcome_and_time(dsh, workdir):
    config(workdir, '[plugin.policy]\ndeny = ["echo"]\n')
    status, _, err = dsh("call", "echo", '{"text": "x"}', "--trace")
    assert status == 1
    assert "dsh_tool_pre_execute policy: deny: echo is denied by policy (" in err
    assert " ms)" in err
    status, _, err = dsh("call", "sh", '{"command": "x"}', "--trace")
    assert "body -: ok (" in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"text": ', "the arguments are not valid JSON (Expecting value"),
        ("[1, 2]", "the arguments must be a JSON object"),
        ('"text"', "not a string"),
    ],
)
def test_bad_arguments_are_usage_errors(dsh, arguments, message):
    status, out, err = dsh("call", "echo", arguments)
    assert status == 2
    assert message in err
    assert out == ""


def test_an_unknown_tool_is_a_usage_error_with_a_suggestion(dsh):
    status, _, err = dsh("call", "ecko", "{}")
    assert status == 2
    assert "no tool named 'ecko' (did you mean 'echo'?)" in err
    assert "available: echo, edit, sh, fail" in err


def test_invalid_arguments_reach_the_pipeline(dsh):
    status, out, _ = dsh("call", "echo", '{"txt": 1}', "--json")
    assert status == 1
    assert json.loads(out)["error"]["code"] == "INVALID_ARGS"


# -- usage -----------------------------------------------------------------------------------


def test_unknown_subcommand_and_no_subcommand(dsh):
    status, _, err = dsh("frobnicate")
    assert status == 2
    assert "invalid choice: 'frobnicate'" in err
    status, _, err = dsh(plugins=False)
    assert status == 2
    assert "usage: dsh" in err


def test_help_and_version(dsh):
    status, out, _ = dsh("--help", plugins=False)
    assert status == 0
    assert "Exit status: 0 success" in out
    status, out, _ = dsh("--version", plugins=False)
    assert status == 0
    assert out.startswith("dsh-host ")


def test_a_plugin_that_cannot_be_imported_is_a_usage_error(dsh):
    status, _, err = dsh("tools", "--plugin", "no_such_module_here")
    assert status == 2
    assert "--plugin 'no_such_module_here': cannot import" in err


def test_host_options_work_after_the_command_and_merge(dsh, workdir):
    (workdir / "other.toml").write_text('[plugin.policy]\ndeny = ["echo"]\n')
    argv = ["call", "echo", '{"text": "x"}', "--config", "other.toml", "--no-entrypoints"]
    status, out, _ = dsh(*argv, "--plugin", "cli_helpers:policy", plugins=False)
    assert status == 2  # the echo tool comes from the other plugin
    status, out, _ = dsh("--plugin", "cli_helpers", *argv, "--plugin", "cli_helpers:policy",
                         plugins=False)  # fmt: skip
    assert status == 1
    assert "denied by policy" in out


def test_python_dash_m():
    # A subprocess: pytest rewrites dsh_host (its pytest11 plugin's distribution) for
    # assertions, and its import hook cannot serve runpy.
    done = subprocess.run(
        [sys.executable, "-m", "dsh_host", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert done.stdout.startswith("dsh-host ")


# -- config errors ---------------------------------------------------------------------------


def test_a_config_error_is_one_message_naming_file_plugin_and_key(dsh, workdir):
    config(workdir, '[plugin.policy]\ndeny = "echo"\n')
    status, out, err = dsh("call", "echo", '{"text": "x"}')
    assert status == 2
    assert out == ""
    assert err.startswith("dsh: config error: ")
    assert "dsh.toml, [plugin.policy], key 'deny': expected a list of strings" in err


def test_a_toml_syntax_error_names_line_and_column(dsh, workdir):
    (workdir / "dsh.toml").write_text('[plugin.policy]\ndeny = ["a" "b"]\n')  # nothing to trust
    status, _, err = dsh("tools")
    assert status == 2
    assert "is not valid TOML" in err
    assert "line 2, column" in err


def test_a_table_for_an_unknown_plugin_is_a_warning(dsh, workdir):
    config(workdir, "[plugin.polcy]\ndeny = []\n")
    status, _, err = dsh("tools")
    assert status == 0
    assert err.startswith("dsh: warning: ")
    assert (
        "dsh.toml, [plugin.polcy]: no plugin of this name is installed (did you mean "
        "[plugin.policy]?); the table is ignored" in err
    )


# -- dsh config check ------------------------------------------------------------------------


def test_config_check_prints_the_file_and_the_effective_config(dsh, workdir):
    config(workdir, '[plugin.policy]\ndeny = ["echo"]\n')
    status, out, _ = dsh("config", "check")
    assert status == 0
    assert out.startswith(f"# config: {workdir / 'dsh.toml'} (valid)")
    effective = tomllib.loads(out)
    assert effective["plugin"]["policy"] == {"deny": ["echo"], "ask": []}
    assert effective["host"]["workspace"] == str(workdir)
    assert effective["host"]["observer_timeout"] == 10.0


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_config_check_refuses_a_workspace_that_is_not_a_directory(dsh, workdir, kind):
    if kind == "file":
        (workdir / "notes.txt").write_text("x\n")
    spelled, problem = {"missing": ("/nonexistent", "does not exist"),
                        "file": ("notes.txt", "is not a directory")}[kind]  # fmt: skip
    config(workdir, f'[host]\nworkspace = "{spelled}"\n')
    for argv in (("config", "check"), ("call", "echo", '{"text": "x"}')):
        status, out, err = dsh(*argv)
        assert status == 2, argv
        assert "(valid)" not in out
        assert f"{workdir / 'dsh.toml'}, key 'host.workspace': [host] workspace" in err
        assert f"{problem}; set it to an existing directory" in err


def test_config_check_with_no_file_uses_defaults(dsh):
    status, out, _ = dsh("config", "check")
    assert status == 0
    assert "# no config file: built-in defaults" in out
    assert tomllib.loads(out)["plugin"]["policy"] == {"deny": [], "ask": []}


def test_config_check_path_argument_wins(dsh, workdir, monkeypatch):
    config(workdir, "")
    (workdir / "env.toml").write_text("")
    (workdir / "given.toml").write_text("[host]\nobserver_timeout = 3\n")
    monkeypatch.setenv("DSH_CONFIG", str(workdir / "env.toml"))
    status, out, _ = dsh("config", "check", "--json")
    assert json.loads(out)["source"] == str(workdir / "env.toml")
    assert json.loads(out)["environment"] == {"DSH_CONFIG": str(workdir / "env.toml")}
    status, out, _ = dsh("config", "check", "given.toml", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["source"] == "given.toml"
    assert report["config"]["host"]["observer_timeout"] == 3


def test_config_check_reports_errors(dsh, workdir):
    (workdir / "bad.toml").write_text("[plugin.policy]\nask = [1]\n")
    status, out, err = dsh("config", "check", "bad.toml")
    assert status == 2
    assert out == ""
    assert "bad.toml, [plugin.policy], key 'ask[0]': expected a string, got the integer 1" in err


# -- dsh run ---------------------------------------------------------------------------------


def write_calls(workdir: Any, *lines: str) -> str:
    (workdir / "calls.jsonl").write_text("\n".join(lines) + "\n")
    return "calls.jsonl"


def test_run_reports_a_bad_line_by_number_and_runs_the_rest(dsh, workdir):
    calls = write_calls(
        workdir,
        '{"id": "a", "name": "echo", "arguments": "{\\"text\\": \\"one\\"}"}',
        "this is not json",
        "",
        '{"id": "b", "type": "function", "function": {"name": "echo", "arguments": "{\\"text\\": \\"two\\"}"}}',
        '{"id": "c", "name": "echo", "argumnets": {}}',
        '{"id": "a", "name": "echo", "arguments": {"text": "again"}}',
        '{"id": "d", "type": "tool_use", "name": "echo", "input": {"text": "three"}}',
        '["read_file", {"path": "README.md"}]',
    )
    status, out, err = dsh("run", calls)
    assert status == 2
    assert "calls.jsonl:2: the line is not valid JSON" in err
    assert (
        'calls.jsonl:8: the line must be a JSON object such as {"id": "1", "name": "read_file", '
        '"arguments": {"path": "README.md"}}, not an array'
    ) in err
    assert "calls.jsonl:5: unknown key 'argumnets' (did you mean 'arguments'?)" in err
    assert "calls.jsonl:6: duplicate id 'a' (first on line 1)" in err
    assert ran() == ["echo", "echo", "echo"]
    assert "    one" in out
    assert "    two" in out
    assert "    three" in out
    assert "3 calls, 0 failed, 4 bad lines" in out
    # Each bad line's error is said once (on stderr, as file:line:), not again on stdout.
    assert "✗ line 2: not run (bad line)" in out
    assert "not valid JSON" not in out
    assert err.count("the line is not valid JSON") == 1


def test_run_json_is_one_result_per_line_with_ids(dsh, workdir, monkeypatch):
    calls = write_calls(
        workdir,
        '{"id": "a", "name": "echo", "arguments": {"text": "one"}}',
        '{"id": "b", "name": "fail", "arguments": {}}',
        '{"id": "c", "name": "echo", "arguments": "[1]"}',
    )
    status, out, _ = dsh("run", calls, "--json")
    assert status == 2
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["line"], r["is_error"]) for r in records] == [
        ("a", 1, False),
        ("b", 2, True),
        ("c", 3, True),
    ]
    assert records[0]["content"] == [{"type": "text", "text": "one"}]
    assert records[1]["error"]["code"] == "TOOL_FAILED"
    assert records[2]["error"]["code"] == "INVALID_CALL"
    assert "'arguments' must be a JSON object" in records[2]["error"]["message"]


def test_run_exit_status(dsh, workdir):
    ok = write_calls(workdir, '{"id": "a", "name": "echo", "arguments": {"text": "x"}}')
    assert dsh("run", ok)[0] == 0
    failing = write_calls(workdir, '{"id": "a", "name": "nope", "arguments": {}}')
    status, out, _ = dsh("run", failing, "--json")
    assert status == 1
    assert json.loads(out)["error"]["code"] == "UNKNOWN_TOOL"


def test_run_a_missing_file(dsh):
    status, _, err = dsh("run", "missing.jsonl")
    assert status == 2
    assert "cannot read missing.jsonl" in err


def test_run_reads_stdin(dsh, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"name": "echo", "arguments": {"text": "s"}}\n'))
    status, out, _ = dsh("run", "-", "--json")
    assert status == 0
    assert json.loads(out)["id"] == "line-1"


def test_run_dry_run_runs_no_tool_and_names_who_decided(dsh, workdir):
    config(workdir, '[plugin.policy]\ndeny = ["sh"]\nask = ["edit"]\n')
    calls = write_calls(
        workdir,
        '{"id": "a", "name": "echo", "arguments": {"text": "x"}}',
        '{"id": "b", "name": "sh", "arguments": {"command": "rm"}}',
        '{"id": "c", "name": "edit", "arguments": {"path": "p", "old": "", "new": ""}}',
        '{"id": "d", "name": "echo", "arguments": {}}',
        '{"id": "e", "name": "ecko", "arguments": {}}',
    )
    status, out, _ = dsh("run", calls, "--dry-run")
    assert status == 1
    assert ran() == []
    assert "would run" in out
    assert "denied by policy" in out
    assert 'dispatch would fail: INVALID_ARGS: missing required property "text"' in out
    assert "dispatch would fail: UNKNOWN_TOOL: no tool named 'ecko' (did you mean 'echo'?)" in out
    assert "5 calls, 4 would fail" in out
    status, out, _ = dsh("run", calls, "--dry-run", "--json")
    records = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert records["a"]["decision"] == "allow"
    assert records["b"]["decision"] == "deny"
    assert records["b"]["decided_by"] == "policy"
    assert records["c"]["error"]["code"] == "DENIED"
    assert "requires approval" in records["c"]["error"]["message"]
    assert records["d"]["dispatch"].startswith("INVALID_ARGS")
    assert ran() == []


def test_run_shows_progress_on_a_terminal(dsh, workdir, monkeypatch):
    calls = write_calls(
        workdir,
        '{"id": "a", "name": "echo", "arguments": {"text": "x"}}',
        '{"id": "b", "name": "echo", "arguments": {"text": "y"}}',
    )
    captured = sys.stderr
    terminal = TTY()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert dsh("run", calls)[0] == 0
    assert "\r[1/2] calls finished" in terminal.getvalue()
    assert "\r[2/2] calls finished" in terminal.getvalue()
    monkeypatch.setattr(sys, "stderr", captured)
    status, _, err = dsh("run", calls)  # not a terminal: no progress
    assert status == 0
    assert "calls finished" not in err


def test_run_trace_and_max_parallel(dsh, workdir):
    calls = write_calls(workdir, '{"id": "a", "name": "echo", "arguments": {"text": "x"}}')
    status, _, err = dsh("run", calls, "--trace", "--max-parallel", "1")
    assert status == 0
    assert "trace a body -: ok" in err
    status, _, err = dsh("run", calls, "--max-parallel", "0")
    assert status == 2
    assert "--max-parallel: must be from 1 to 10000, not 0" in err


# -- odds and ends ---------------------------------------------------------------------------


def test_a_plugin_module_in_the_working_directory(dsh, workdir, monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(workdir))])
    (workdir / "proj").mkdir()
    (workdir / "proj" / "localplug.py").write_text(
        "from dsh_host import hookimpl\nname = 'local'\n\n"
        "@hookimpl\ndef dsh_host_started():\n    pass\n"
    )
    monkeypatch.chdir(workdir / "proj")
    monkeypatch.delitem(sys.modules, "localplug", raising=False)
    status, out, _ = dsh("plugins", "--no-entrypoints", "--plugin", "localplug", plugins=False)
    assert status == 0
    assert "local  enabled" in out
    assert sys.path[-1] == str(workdir / "proj")  # appended: it shadows nothing


@pytest.mark.parametrize("spec", ["os:sep", "json"])
def test_a_plugin_that_implements_no_hook_is_refused_saying_why(dsh, spec):
    _, out, _ = dsh("plugins", "--no-entrypoints", "--plugin", spec, plugins=False)
    name = {"os:sep": "str", "json": "json"}[spec]
    assert f"{name}  failed  [object]" in out
    assert "error: implements no dsh hook (no @hookimpl method), so it would do nothing" in out
    assert "enabled" not in out


def test_no_plugins_and_no_tools(dsh):
    status, out, _ = dsh("--no-entrypoints", "plugins", plugins=False)
    assert status == 0
    assert "no plugins (install one, or pass --plugin MODULE)" in out
    status, out, _ = dsh("--no-entrypoints", "tools", plugins=False)
    assert status == 0
    assert "no tools" in out


def test_config_check_notes_tables_of_plugins_that_did_not_load(dsh, workdir, monkeypatch):
    real = importlib.metadata.entry_points
    ghost = importlib.metadata.EntryPoint("ghost", "ghost_module_never_imported", "dsh.plugins")

    def entry_points(**selection: Any) -> Any:
        return [ghost] if selection == {"group": "dsh.plugins"} else real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    config(workdir, '[plugins]\ndisable = ["ghost"]\n[plugin.ghost]\nlevel = 1\n')
    plugins = ["--plugin", "cli_helpers", "--plugin", "cli_helpers:policy"]
    status, out, _ = dsh("config", "check", *plugins, plugins=False)
    assert status == 0
    assert "# [plugin.ghost] not checked: the plugin is blocked" in out
    assert "ghost" not in tomllib.loads(out).get("plugin", {})
    status, out, _ = dsh("config", "check", "--json")  # with --no-entrypoints
    assert json.loads(out)["notes"] == [
        "[plugin.ghost] not checked: the plugin is not loaded (--no-entrypoints)"
    ]


def test_interrupted(dsh, monkeypatch):
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("dsh_host._cli._common.Host.from_config", interrupted)
    status, _, err = dsh("tools")
    assert status == 130
    assert "interrupted" in err


def test_ascii_terminals_get_ascii_marks(dsh, monkeypatch):
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stream)
    assert dsh("call", "echo", '{"text": "x"}')[0] == 0
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert text.startswith("* echo")
    assert "ok allowed" in text


# -- rendering -------------------------------------------------------------------------------


def test_the_approval_hint_extends_the_permissions_allow_list():
    from dsh_host._cli._hint import approval_hint
    from dsh_host._model._outcomes import failure

    denied = failure(
        'tool "bash" requires approval, but no approval channel is available',
        "DENIED",
        decided_by="permissions",
        decision_detail="default ask",
    )
    hint = approval_hint("bash", denied, None, ("read_file", "grep(*)"))
    assert hint[0].startswith("hint: plugin 'permissions' (default ask) asked for approval")
    assert "      to dsh.toml:" in hint
    assert '          allow = ["read_file", "grep(*)", "bash"]' in hint
    other = failure("no", "DENIED", decided_by="permissions")
    assert approval_hint("bash", other, None, None) == []


def test_render_read_search_and_terminal_cards():
    from dsh_host import ReadResultView, SearchResultView, TerminalResultView
    from dsh_host._cli._render import Style, render_result

    plain = Style(color=False)
    read = ReadResultView(
        path="a.py", offset=9, lines=[(9, "x = 1"), (10, "y = 2")], total_lines=40
    )
    assert render_result(read, plain) == [
        "  a.py",
        "   9 │ x = 1",
        "  10 │ y = 2",
        "  (lines 9-10 of 40)",
    ]
    search = SearchResultView(matches=[("a.py", 3, "hit")], paths=["b.py"], truncated=True, total=9)
    assert render_result(search, plain) == ["  a.py:3: hit", "  b.py", "  (truncated; 9 in all)"]
    killed = TerminalResultView(output="partial", signal="SIGKILL")
    assert render_result(killed, plain) == ["  partial", "  killed by signal SIGKILL"]


def test_render_generic_call_card_with_kind_locations_and_images():
    from dsh_host import FileLocation, GenericCallView, ImageBlock, ToolCallKind
    from dsh_host._cli._render import Style, render_call

    view = GenericCallView(
        title="Read a.py",
        kind=ToolCallKind.READ,
        content=[
            ImageBlock(data="iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", mime_type="image/png")
        ],
        locations=[FileLocation("a.py", 3), FileLocation("b.py")],
        raw_input={"path": "a.py"},
    )
    assert render_call(view, Style(unicode=False)) == [
        "* Read a.py (read)",
        "  [image: image/png, 44 base64 characters]",
        "  @ a.py:3",
        "  @ b.py",
        "  {",
        '    "path": "a.py"',
        "  }",
    ]


def test_render_diff_of_a_new_file_and_of_no_change():
    from dsh_host import FileDiff
    from dsh_host._cli._render import Style, render_diff

    assert render_diff(FileDiff("n.txt", None, "hello\n"), Style())[:3] == [
        "--- /dev/null",
        "+++ b/n.txt",
        "@@ -0,0 +1 @@",
    ]
    assert render_diff(FileDiff("s.txt", "same", "same"), Style()) == ["s.txt: no changes"]


@pytest.mark.parametrize(
    ("result", "events", "line"),
    [
        ({"code": "BLOCKED", "decided_by": "redact"}, [], "x ran, then blocked by redact"),
        ({"code": "PLUGIN_FAILED", "decided_by": "p"}, [], "x stopped: plugin p failed"),
        ({"code": "ABORTED"}, [], "x aborted"),
        ({"decided_by": "budget"}, [], "ok allowed; result replaced by budget"),
        (
            {},
            [
                ("dsh_tool_pre_execute", "perm", "allow"),
                ("dsh_tool_approve", "tty", "allowed-once"),
            ],
            "ok allowed by perm; approved by tty",
        ),
    ],
)
def test_decision_line_names_who_decided(result, events, line):
    from dsh_host import TraceEvent
    from dsh_host._cli._render import Style, decision_line
    from dsh_host._model._outcomes import failure
    from dsh_host._model._values import ToolExecutionResult

    if "code" in result:
        made = failure("m", result["code"], decided_by=result.get("decided_by"))
    else:
        made = ToolExecutionResult(content="x", decided_by=result.get("decided_by"))
    trace = [TraceEvent("c", stage, plugin, outcome, 0.0) for stage, plugin, outcome in events]
    assert decision_line(made, trace, Style(unicode=False)) == line


def test_toml_values():
    from dsh_host._cli._toml import dump_toml

    text = "\n".join(
        dump_toml({("t",): {"inf": float("inf"), "s": {1, 2}, "d": {"a b": True}, "n": None}})
    )
    assert tomllib.loads(text) == {"t": {"inf": float("inf"), "s": [1, 2], "d": {"a b": True}}}


def test_run_shows_at_most_ten_lines_of_each_result(dsh, workdir):
    text = "\\n".join(f"row {i}" for i in range(12))
    calls = write_calls(
        workdir, f'{{"id": "a", "name": "echo", "arguments": {{"text": "{text}"}}}}'
    )
    status, out, _ = dsh("run", calls)
    assert status == 0
    assert "    row 9" in out
    assert "    row 10" not in out
    assert "... (2 more lines)" in out


def test_run_summary_counts_in_words(dsh, workdir):
    (workdir / "one.jsonl").write_text(
        '{"id": "a", "name": "echo", "arguments": {"text": "x"}}\nnope\n'
    )
    status, out, _ = dsh("run", "one.jsonl")
    assert status == 2
    assert "1 call, 0 failed, 1 bad line" in out


def test_run_reports_a_line_that_is_not_utf8_by_number_and_runs_the_rest(dsh, workdir):
    """Issue 26, row 9: one non-UTF-8 line refused the whole file, by byte offset."""
    (workdir / "calls.jsonl").write_bytes(
        b'{"id": "a", "name": "echo", "arguments": {"text": "one"}}\n'
        b'{"id": "b", "name": "echo", "arguments": {"text": "\xff"}}\n'
        b'{"id": "c", "name": "echo", "arguments": {"text": "three"}}\r\n'
    )
    status, out, err = dsh("run", "calls.jsonl")
    assert status == 2
    assert "calls.jsonl:2: not UTF-8 text (byte 52 of the line)" in err
    assert ran() == ["echo", "echo"]
    assert "2 calls, 0 failed, 1 bad line" in out


def test_run_and_call_show_a_tab_as_a_tab(dsh, workdir):
    """Issue 26, row 4: tabs printed as a literal ``\\t``."""
    calls = write_calls(workdir, '{"id": "a", "name": "echo", "arguments": {"text": "a\\tb"}}')
    assert dsh("run", calls)[1].count("a\tb") == 1
    status, out, _ = dsh("call", "echo", '{"text": "x\\ty\\u001b[2J"}')
    assert status == 0
    assert "x\ty\\x1b[2J" in out  # a tab stays a tab; an escape sequence is still shown escaped
