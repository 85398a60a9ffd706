"""Diagnostics: plugin failures carry the plugin's file and line, and the full traceback."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import textwrap

import attrs
import pytest

from dsh_host import ConfigError, Host, hookimpl
from dsh_host._cli._main import main

from .test_plugins import FakeEntryPoint, ep, installed, rows

__all__ = ["installed"]


def _line_of(function: object, text: str) -> int:
    lines, start = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture
def broken_package(tmp_path, monkeypatch):
    """A package ``brokenpkg`` whose ``boom`` module fails at import, deep inside a helper."""
    pkg = tmp_path / "brokenpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("def explode():\n    return {}['missing']\n")
    (pkg / "boom.py").write_text("from brokenpkg.helper import explode\n\nexplode()\n")
    (pkg / "bad_syntax.py").write_text("x = 1\ndef (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("brokenpkg")]:
        del sys.modules[name]


class ImportingEntryPoint(FakeEntryPoint):
    """An entry point whose value is a real module, imported on load."""

    @property
    def value(self) -> str:
        return self.name

    def load(self) -> object:
        return importlib.import_module(self.name)


def _importing(name: str, module: str) -> FakeEntryPoint:
    return ImportingEntryPoint(module, lambda: None)


def test_an_import_failure_names_the_innermost_line_in_the_plugin(installed, broken_package):
    installed(_importing("boom", "brokenpkg.boom"))
    row = rows(Host(environ={}))["brokenpkg.boom"]
    assert row.error == (
        f"cannot import 'brokenpkg.boom': KeyError: 'missing' (at {broken_package}/helper.py:2)"
    )
    assert row.traceback.startswith("Traceback (most recent call last):")
    assert f'File "{broken_package}/boom.py", line 3' in row.traceback
    assert row.to_json()["traceback"] == row.traceback


def test_a_syntax_error_names_its_file_and_line(installed, broken_package):
    installed(_importing("syntax", "brokenpkg.bad_syntax"))
    row = rows(Host(environ={}))["brokenpkg.bad_syntax"]
    assert row.error.endswith(f"(at {broken_package}/bad_syntax.py:2)")


def test_a_failing_host_started_names_the_plugin_line():
    class Starter:
        name = "starter"

        @hookimpl
        def dsh_host_started(self, host):
            raise ValueError("no")

    row = rows(Host(plugins=[Starter()], load_entrypoints=False))["starter"]
    line = _line_of(Starter.dsh_host_started, "raise ValueError")
    assert row.error == f"dsh_host_started failed: ValueError: no (at {__file__}:{line})"
    assert "raise ValueError" in row.traceback


def test_plugins_check_exits_1_when_a_plugin_failed(installed, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_DEBUG", raising=False)
    installed(ep("good"))
    assert main(["plugins", "--check"]) == 0
    installed(FakeEntryPoint("bad", lambda: 1 / 0))
    assert main(["plugins"]) == 0
    assert main(["plugins", "--check"]) == 1
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out
    assert "Traceback" not in out
    assert main(["plugins", "--json"]) == 0
    [bad] = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "bad"]
    assert "ZeroDivisionError" in bad["traceback"]
    monkeypatch.setenv("DSH_DEBUG", "1")
    assert main(["plugins", "--check"]) == 1
    assert "Traceback (most recent call last):" in capsys.readouterr().out
    assert main(["tools"]) == 0  # any command: the failed plugin's traceback on stderr
    err = capsys.readouterr().err
    assert "dsh: traceback of bad:\n    Traceback (most recent call last):" in err
    assert "ZeroDivisionError" in err


async def test_plugin_failed_results_carry_the_plugin_line_and_traceback(make_host):
    from dsh_host.testing import stub_tool

    def parse(text):
        return json.loads(text)

    class Checker:
        name = "checker"

        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return parse("{not json")

    result = await make_host(Checker(), tools=[stub_tool("t")]).call("t", {})
    assert result.code == "PLUGIN_FAILED"
    line = _line_of(parse, "return json.loads")
    assert result.error.message.endswith(f"(at {__file__}:{line})")
    assert "json/decoder.py" in result.meta["traceback"]
    assert result.decided_by == "checker"


DSH_CALL_PLUGIN = textwrap.dedent(
    """
    from dsh_host import define_tool, hookimpl

    @hookimpl
    def dsh_register_tools(register):
        register(define_tool(name="t", description="", parameters={}, execute=lambda a: "ok"))

    @hookimpl
    def dsh_tool_pre_execute(execution):
        raise RuntimeError("policy broke")
    """
)


@pytest.mark.parametrize("how", ["--trace", "--json", "DSH_DEBUG"])
def test_dsh_call_shows_the_traceback_of_a_plugin_failure(how, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("DSH_DEBUG", raising=False)
    (tmp_path / f"failing_{how.strip('-').lower()}.py").write_text(DSH_CALL_PLUGIN)
    argv = ["--no-entrypoints", "--plugin", f"failing_{how.strip('-').lower()}", "call", "t"]
    assert main(argv) == 1
    plain = capsys.readouterr()
    assert "Traceback" not in plain.out + plain.err
    assert "RuntimeError: policy broke (at " in plain.out
    if how == "DSH_DEBUG":
        monkeypatch.setenv("DSH_DEBUG", "1")
    else:
        argv.append(how)
    assert main(argv) == 1
    captured = capsys.readouterr()
    json_trace = json.loads(captured.out)["meta"]["traceback"] if how == "--json" else ""
    traceback = json_trace or captured.err
    assert "Traceback (most recent call last):" in traceback
    assert 'raise RuntimeError("policy broke")' in traceback


# -- attrs validators in config read like every other config error ---------------------------


@attrs.frozen
class Limits:
    n: int = attrs.field(default=1, validator=attrs.validators.gt(0))
    mode: str = attrs.field(default="a", validator=attrs.validators.in_(["a", "b"]))
    slow_ms: float = attrs.field(default=1.0)

    @slow_ms.validator
    def _positive(self, attribute: object, value: float) -> None:
        if not value > 0:
            raise ValueError(f"must be a positive number of milliseconds, not {value!r}")


class Limited:
    name = "limited"

    @hookimpl
    def dsh_plugin_config(self):
        return Limits


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ({"n": 0}, "n", "invalid value: 'n' must be > 0: 0"),
        ({"mode": "c"}, "mode", "invalid value: 'mode' must be in ['a', 'b'] (got 'c')"),
        (
            {"slow_ms": 0},
            "slow_ms",
            "invalid value: must be a positive number of milliseconds, not 0.0",
        ),
    ],
)
def test_an_attrs_validator_failure_names_file_table_and_key(tmp_path, table, key, message):
    path = tmp_path / "dsh.toml"
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
    path.write_text(f"[plugin.limited]\n{body}\n")
    with pytest.raises(ConfigError) as info:
        Host(path, plugins=[Limited()], load_entrypoints=False)
    assert (info.value.path, info.value.plugin, info.value.key) == (str(path), "limited", key)
    assert str(info.value) == f"{path}, [plugin.limited], key '{key}': {message}"
    assert "Attribute(" not in str(info.value)


HOSTILE_PLUGIN = textwrap.dedent(
    """
    from dsh_host import define_tool, hookimpl

    @hookimpl
    def dsh_register_tools(register):
        register(define_tool(name="t", description="", parameters={}, execute=lambda a: "ok",
                             strict_arguments=False))

    @hookimpl
    def dsh_tool_pre_execute(execution):
        raise ValueError("bad value: " + execution.arguments.get("x", ""))
    """
)


def test_model_text_in_a_plugin_traceback_is_shown_escaped(capsys, monkeypatch, tmp_path):
    # A plugin that puts the model's argument into its exception: the traceback --trace prints
    # must not let the model drive the terminal.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("DSH_DEBUG", raising=False)
    (tmp_path / "hostile_plugin.py").write_text(HOSTILE_PLUGIN)
    argv = ["--no-entrypoints", "--plugin", "hostile_plugin", "call", "t"]
    assert main([*argv, '{"x": "\\u001b[2J\\u202eevil"}', "--trace"]) == 1
    captured = capsys.readouterr()
    assert "\x1b" not in captured.err + captured.out
    assert "\u202e" not in captured.err + captured.out
    assert "ValueError: bad value: \\x1b[2J" in captured.err


def test_disable_names_are_shown_escaped(installed, capsys, monkeypatch, tmp_path):
    installed(ep("hello"))
    monkeypatch.chdir(tmp_path)
    assert main(["tools", "--disable", "\x1b[2Jx", "--json"]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "no installed plugin is named '\\x1b[2Jx'" in err
