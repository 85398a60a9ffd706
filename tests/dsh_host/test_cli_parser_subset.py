"""``dsh`` builds only the parser of the command it runs (issue 27): the same parse, less start."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from dsh_host._cli import _main
from dsh_host._cli._main import COMMANDS, command_of, make_parser

DELEGATED = ("audit", "sandbox")


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    [sub] = [a for a in parser._actions if a.dest == "command"]
    return sorted(sub.choices)


def test_commands_lists_every_command_of_the_whole_parser() -> None:
    assert sorted((*COMMANDS, *DELEGATED)) == _choices(make_parser())


@pytest.mark.parametrize(
    "argv",
    [
        ["call", "read_file", '{"path": "a"}', "--json"],
        ["--config", "x.toml", "call", "read_file"],
        ["--conf", "tools", "call", "read_file"],
        ["--config=tools", "--no-entrypoints", "call", "x", "--disable", "audit"],
        ["--plugin", "call", "tools", "--json"],
        ["hook", "claude", "--max-bytes", "5"],
        ["run", "-", "--dry-run", "--max-parallel", "3"],
        ["mcp", "serve", "--http", "127.0.0.1:1", "--list-all"],
        ["config", "check", "dsh.toml"],
        ["plugins", "--check"],
        ["completion", "bash"],
    ],
)
def test_the_subset_parses_as_the_whole_parser(argv: list[str]) -> None:
    command = command_of(argv)
    assert command is not None
    assert _choices(make_parser(command)) == [command]
    assert make_parser(command).parse_args(argv) == make_parser().parse_args(argv)


@pytest.mark.parametrize(
    "argv", [[], ["-h", "call"], ["--help"], ["nope"], ["--", "call"], ["--debug"]]
)
def test_help_and_unknown_commands_get_the_whole_parser(argv: list[str]) -> None:
    assert command_of(argv) is None


def test_dsh_builds_only_the_parser_of_its_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[str | None] = []

    def recording(command: str | None = None) -> Any:
        built.append(command)
        return make_parser(command)

    monkeypatch.setattr(_main, "make_parser", recording)
    assert _main.main(["--no-entrypoints", "tools", "--json"]) == 0
    assert built == ["tools"]
    assert _main.main(["nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    assert built == ["tools", None]


def test_the_plain_hook_command_line_is_parsed_as_the_parser_does() -> None:
    """``dsh hook claude`` (what Claude Code runs for every tool call) skips argparse: its
    arguments are exactly the parser's; any other command line goes to the parser."""
    for argv in (
        ["hook", "claude"],
        ["hook", "claude", "--config", "/home/me/.config/dsh/claude.toml"],  # pinned, as advised
        ["hook", "claude", "--config=/home/me/.config/dsh/claude.toml"],
        ["hook", "claude", "--config", "a=b.toml"],
    ):
        plain = _main._plain_hook(argv)
        assert vars(plain) == vars(make_parser().parse_args(argv)), argv
    for argv in (
        ["hook", "claude", "--max-bytes", "9"],
        ["--debug", "hook", "claude"],
        ["hook"],
        ["hook", "claude", "--config"],
        ["hook", "claude", "--config", "-x"],
        ["hook", "claude", "--config="],
        ["hook", "claude", "--conf", "x.toml"],
        ["hook", "claude", "--config", "x.toml", "--config", "y.toml"],
        ["--config", "x.toml", "hook", "claude"],
    ):
        assert _main._plain_hook(argv) is None, argv


def test_the_plain_hook_answers_as_the_parsed_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same answer, with and without the parser (a payload that fails closed: no host)."""
    import io
    import sys

    answers = []
    for argv in (["hook", "claude"], ["hook", "claude", "--max-bytes", str(4 * 1024 * 1024)]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[]")))
        answers.append((_main.main(argv), capsys.readouterr()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 2
