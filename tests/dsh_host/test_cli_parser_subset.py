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
