"""The command line never prints a traceback for what a user, a model or the environment did
(issue 10 items 7 and 8): hostile JSON, closed pipes, Ctrl-C, odd argv, a pathological config."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dsh_host._cli._main import main

HELPERS = """
import signal

import trio

from dsh_host import define_tool, hookimpl


def _echo(args):
    return args["text"]


async def _interrupt(args):
    signal.raise_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
    await trio.sleep_forever()


echo = define_tool(
    name="echo", description="Echo.", execute=_echo,
    parameters={"text": {"type": "string", "required": True}},
    is_concurrency_safe=lambda args: True,
)
interrupt = define_tool(name="interrupt", description="Ctrl-C.", parameters={}, execute=_interrupt)


@hookimpl
def dsh_register_tools(register):
    register(echo)
    register(interrupt)
"""

PLUGINS = ["--no-entrypoints", "--plugin", "robust_helpers"]


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    (tmp_path / "robust_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "robust_helpers", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("DSH_CONFIG", "DSH_DEBUG", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    sys.modules.pop("robust_helpers", None)


@pytest.fixture
def dsh(capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        status = main([*PLUGINS, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"text": "a", "text": "b"}', 'duplicate object key "text"'),
        ("[" * 60_000 + "]" * 60_000, "nested more than 512 levels deep"),
        ('{"text": ' + "9" * 5000 + "}", "at most 4300 are accepted"),
        ('{"text": NaN}', "NaN is not a JSON value"),
    ],
)
def test_hostile_json_arguments_are_one_clear_error(dsh, arguments, message):
    status, _out, err = dsh("call", "echo", arguments)
    assert status == 2
    assert message in err
    assert "Traceback" not in err


def test_a_lone_surrogate_passes_end_to_end_and_is_shown_escaped(dsh):
    status, out, err = dsh("call", "echo", '{"text": "a\\udcffb\\u001b[2J"}')
    assert (status, err) == (0, "")
    assert "a\\udcffb\\x1b[2J" in out
    assert "\x1b[2J" not in out
    status, out, _ = dsh("call", "echo", '{"text": "\\udcff"}', "--json")
    assert status == 0
    assert json.loads(out)["content"][0]["text"] == "\udcff"


def test_non_utf8_argv_is_reported_not_raised(dsh):
    status, _, err = dsh("call", "ech\udcff", "{}")  # how Python decodes a non-UTF-8 argv byte
    assert status == 2
    assert "no tool named 'ech\\udcff'" in err
    assert "Traceback" not in err
    status, out, err = dsh("call", "echo", '{"text": "\udcfe"}')
    assert status == 0
    assert "\\udcfe" in out


def test_run_reports_bad_lines_by_number_and_runs_the_rest(dsh, workdir):
    lines = [
        '{"id": "a", "name": "echo", "arguments": {"text": "first"}}',
        '{"id": "b", "name": "echo", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"id": "c", "name": "echo", "arguments": {"text": "x", "text": "y"}}',
        '{"id": "d", "name": "echo", "arguments": "{\\"text\\": \\"\\\\udcff\\\\u001b]0;x\\"}"}',
        '{"id": "e", "name": "echo", "arguments": {"text": "last"}}',
    ]
    (workdir / "calls.jsonl").write_text("\n".join(lines) + "\n")
    status, out, err = dsh("run", "calls.jsonl")
    assert status == 2
    assert "calls.jsonl:2: the line is refused: JSON nested more than 512 levels deep" in err
    assert 'calls.jsonl:3: the line is refused: duplicate object key "text"' in err
    assert "first" in out
    assert "last" in out
    assert "\\udcff\\x1b]0;x" in out
    assert "\x1b]0" not in out
    assert "Traceback" not in err


def test_a_closed_pipe_exits_quietly(dsh, monkeypatch, capsys):
    class ClosedPipe:
        encoding = "utf-8"

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    for argv in (["tools"], ["plugins"], ["call", "echo", '{"text": "x"}']):
        assert main([*PLUGINS, *argv]) == 141
        assert capsys.readouterr().err == ""


def dsh_process(workdir, *argv: str) -> subprocess.CompletedProcess[str]:
    """``dsh`` in a process of its own, bounded: a real SIGINT must not be able to hang the
    test session if it is ever lost."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(workdir), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "dsh_host", *PLUGINS, *argv],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_ctrl_c_prints_one_line_and_exits_130(workdir):
    done = dsh_process(workdir, "call", "interrupt", "{}")
    assert done.returncode == 130
    assert done.stderr == "dsh: interrupted\n"


def test_ctrl_c_during_run_exits_130(workdir):
    lines = [
        '{"id": "a", "name": "echo", "arguments": {"text": "one"}}',
        '{"id": "b", "name": "interrupt", "arguments": {}}',
    ]
    (workdir / "calls.jsonl").write_text("\n".join(lines) + "\n")
    done = dsh_process(workdir, "run", "calls.jsonl")
    assert done.returncode == 130
    assert done.stderr.endswith("dsh: interrupted\n")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["0", "-3", "100001", "99999999999999999999999", "x"])
def test_max_parallel_is_range_checked(dsh, workdir, value):
    (workdir / "calls.jsonl").write_text('{"name": "echo", "arguments": {"text": "x"}}\n')
    status, _, err = dsh("run", "calls.jsonl", "--max-parallel", value)
    assert status == 2
    assert "--max-parallel" in err
    assert "Traceback" not in err


def test_a_deeply_nested_toml_config_is_a_config_error(dsh, workdir):
    (workdir / "dsh.toml").write_text("[host]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    status, _, err = dsh("tools")
    assert status == 2
    assert "dsh.toml" in err
    assert "nested too deeply" in err
    assert "Traceback" not in err


def test_an_internal_error_is_one_line_unless_debugging(dsh, monkeypatch):
    import dsh_host._cli._commands as cli

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_cmd_tools", broken)
    status, _, err = dsh("tools")
    assert status == 70
    assert "dsh: internal error: RuntimeError: a bug" in err
    assert "Traceback" not in err
    status, _, err = dsh("--debug", "tools")
    assert status == 70
    assert "Traceback" in err
    monkeypatch.setenv("DSH_DEBUG", "1")
    status, _, err = dsh("tools")
    assert "Traceback" in err


def test_a_real_pipe_closed_early_exits_quietly(workdir):
    import subprocess

    line = '{"name": "echo", "arguments": {"text": "%s"}}\n' % ("x" * 200)
    (workdir / "calls.jsonl").write_text(line * 2000)
    process = subprocess.Popen(
        [sys.executable, "-m", "dsh_host", *PLUGINS, "run", "calls.jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(workdir)},
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline()  # what `| head -1` does, then it exits
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141
    assert err == b""


def test_trace_lines_and_run_output_show_model_text_escaped(dsh, workdir):
    call = {"id": "c\x1b[2J\u202e", "name": "echo", "arguments": {"text": "\x1b]0;pwned\x07"}}
    (workdir / "calls.jsonl").write_text(json.dumps(call) + "\n")
    status, out, err = dsh("run", "calls.jsonl", "--trace")
    assert status == 0, err
    assert "trace c\\x1b[2J\\u202e body -: ok" in err
    assert "\\x1b]0;pwned\\x07" in out
    for text in (out, err):
        assert "\x1b" not in text
        assert "\u202e" not in text
