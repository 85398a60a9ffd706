"""CLI output completeness: result titles from presenters, context notes in ``dsh run``."""

from __future__ import annotations

import json
import textwrap

import pytest

from dsh_host._cli._main import main

PLUGIN = textwrap.dedent(
    """
    from dsh_host import GenericCallView, GenericResultView, define_tool, hookimpl

    def present_call(args):
        return GenericCallView(title="Weather for " + args["city"])

    def present_result(args, result):
        return GenericResultView(title="Sunny in " + args["city"], content=result.content)

    async def execute(args, ctx):
        ctx.defer_context("units are Celsius")
        return "21"

    @hookimpl
    def dsh_register_tools(register):
        register(define_tool(
            name="weather", description="", execute=execute,
            parameters={"city": {"type": "string", "required": True}},
            present_call=present_call, present_result=present_result,
        ))
        register(define_tool(
            name="plain", description="", parameters={}, execute=lambda args: "p",
        ))
    """
)


@pytest.fixture
def dsh(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NO_COLOR", "1")
    for name in ("DSH_CONFIG", "DSH_DEBUG", "DSH_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "weather_plugin.py").write_text(PLUGIN)

    def run(*argv: str) -> tuple[int, str]:
        status = main(["--no-entrypoints", "--plugin", "weather_plugin", *argv])
        return status, capsys.readouterr().out

    return run


def test_dsh_call_shows_the_result_title_a_presenter_gave(dsh):
    status, out = dsh("call", "weather", '{"city": "Oslo"}')
    assert status == 0
    lines = out.splitlines()
    assert lines[0].endswith("Weather for Oslo")
    assert lines[2:] == [
        "  Sunny in Oslo",
        "  21",
        "  (context from weather) units are Celsius",
    ]


def test_a_fallback_result_card_does_not_repeat_the_call_title(dsh):
    status, out = dsh("call", "plain")
    assert status == 0
    assert out.splitlines()[2:] == ["  p"]


def test_dsh_run_text_shows_context_notes(dsh, tmp_path):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}\n')
    status, out = dsh("run", str(calls))
    assert status == 0
    assert out.splitlines()[2:] == [
        "    21",
        "    (context from weather) units are Celsius",
        "1 call, 0 failed",
    ]


def test_the_approval_hint_does_not_repeat_an_allow_rule_that_is_there():
    from dsh_host import ToolExecutionResult, ToolFailure
    from dsh_host._cli._hint import approval_hint

    message = 'tool "hello" requires approval, but no approval channel is available.'
    denied = ToolExecutionResult(
        content="x", is_error=True, error=ToolFailure(message, "DENIED"), decided_by="policy"
    )
    hint = "\n".join(approval_hint("hello", denied, "dsh.toml", ("hello",)))
    assert '"hello", "hello"' not in hint
    assert "'hello' already has an allow rule; the ask comes from" in hint
    assert "policy's own configuration" in hint


def test_the_approval_hint_for_a_permissions_rule_that_does_not_cover_the_call(tmp_path, capsys):
    """read_file has an allow rule by default; a path outside the workspace is still asked about,
    and the hint says what rule would cover it instead of adding read_file to the list again."""
    (tmp_path / "ws").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    config = tmp_path / "dsh.toml"
    config.write_text(f'[host]\nworkspace = "{tmp_path / "ws"}"\n', encoding="utf-8")
    code = main(["--config", str(config), "call", "read_file", json.dumps({"path": str(outside)})])
    err = capsys.readouterr().err
    assert code == 1
    assert "'read_file' already has an allow rule, but it does not cover" in err
    assert '"read_file(//etc/hosts)"' in err
    assert '"read_file", "read_file"' not in err
    assert "To let 'read_file' run without asking" not in err


def test_result_cards_show_tabs_as_tabs_and_still_escape_the_rest():
    """Issue 26, row 4: ``dsh call read_file`` showed a tab as a literal ``\\t``."""
    from dsh_host._cli._render import Style, render_result
    from dsh_host._model._views import ReadResultView, SearchResultView

    style = Style(color=False, unicode=False)
    read = ReadResultView(
        path="Makefile", offset=0, lines=((1, "all:\tbuild\x1b[2J"),), total_lines=1
    )
    assert render_result(read, style)[1] == "  1 | all:\tbuild\\x1b[2J"
    found = SearchResultView(
        matches=(("Makefile", 1, "\tgo build"),), paths=(), truncated=False, total=1
    )
    assert render_result(found, style)[0] == "  Makefile:1: \tgo build"


@pytest.mark.parametrize(
    ("command", "rules"),
    [
        ("ls -la", '"bash(ls:*)"'),
        ("git status --short", '"bash(git status:*)"'),
        ("ls && pwd", '"bash(ls:*)", "bash(pwd:*)"'),
    ],
)
def test_the_bash_hint_suggests_the_narrowest_rule_and_that_rule_works(
    tmp_path, capsys, command, rules
):
    """Issue 26, row 10: the hint for bash suggested allowing all of bash."""
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "dsh.toml"
    config.write_text(
        f'[host]\nworkspace = "{ws}"\n[plugin.audit]\nenabled = false\n', encoding="utf-8"
    )
    call = ["--config", str(config), "call", "bash", json.dumps({"command": command})]
    assert main(call) == 1
    err = capsys.readouterr().err
    assert "To let this call of 'bash' run without asking" in err
    [allow] = [line.strip() for line in err.splitlines() if line.strip().startswith("allow = [")]
    assert allow.endswith(f"{rules}]")
    assert '"bash"' not in allow
    with config.open("a", encoding="utf-8") as file:
        file.write(f"[plugin.permissions]\n{allow}\n")
    main(call)
    assert "asked for approval" not in capsys.readouterr().err  # the rule covers the call


def test_config_check_never_prints_a_password_in_a_url(tmp_path, capsys):
    """Issue 26, point 3: ``[plugin.audit] url`` holds a credential; ``dsh config check`` prints
    the effective configuration."""
    config = tmp_path / "dsh.toml"
    config.write_text(
        '[plugin.audit]\nurl = "postgresql://dsh:top%40secret@127.0.0.1:1/x"\n', encoding="utf-8"
    )
    assert main(["--config", str(config), "config", "check"]) == 0
    out = capsys.readouterr().out
    assert 'url = "postgresql://dsh:***@127.0.0.1:1/x"' in out
    assert "secret" not in out
