"""Config that survives change: uninstalled plugins warn, per-run switches, wildcards."""

from __future__ import annotations

import json

import pytest

from dsh_host import ConfigError, Host
from dsh_host._cli._main import main
from dsh_host._host._plugins import PluginStatus
from tests.trusted import write_config

from .test_plugins import ep, installed, rows

__all__ = ["installed"]


def test_a_disable_entry_for_an_uninstalled_plugin_is_a_warning_naming_the_file(
    installed, tmp_path
):
    installed(ep("hello"))
    path = tmp_path / "dsh.toml"
    path.write_text('[plugins]\ndisable = ["timing"]\n')
    host = Host(path, environ={})
    assert host.warnings == [
        f"plugins.disable in {path}: no installed plugin is named 'timing'; installed: hello; "
        "ignored"
    ]
    assert rows(host)["hello"].status is PluginStatus.ENABLED


def test_a_leftover_table_is_a_warning_and_the_host_runs(installed, tmp_path):
    installed(ep("hello"))
    path = tmp_path / "dsh.toml"
    path.write_text("[plugin.weather]\ncity = 'Oslo'\n")
    host = Host(path, environ={})
    [warning] = host.warnings
    assert warning.startswith(f"{path}, [plugin.weather]: no plugin of this name is installed")
    assert host.registry.get("hello_tool") is not None


def test_enable_naming_a_missing_plugin_stays_an_error(installed):
    installed(ep("hello"))
    with pytest.raises(ConfigError, match="no installed plugin is named 'hel\\*x'"):
        Host({"plugins": {"enable": ["hel*x"]}}, environ={})


def test_disable_patterns_from_config_environment_and_argument(installed):
    installed(ep("hook_a"), ep("hook_b"), ep("audit"), ep("tools"), ep("timeout"))
    host = Host(
        {"plugins": {"disable": ["hook_*"]}},
        environ={"DSH_DISABLE_PLUGINS": "aud?t, nope"}, disable=["ti*"],
    )  # fmt: skip
    status = {name: row.status for name, row in rows(host).items()}
    assert status == {
        "hook_a": PluginStatus.BLOCKED, "hook_b": PluginStatus.BLOCKED,
        "audit": PluginStatus.BLOCKED, "timeout": PluginStatus.BLOCKED,
        "tools": PluginStatus.ENABLED,
    }  # fmt: skip
    assert "DSH_DISABLE_PLUGINS" in (rows(host)["audit"].error or "")
    assert rows(host)["timeout"].error == "blocked by --disable"
    [warning] = host.warnings
    assert warning.startswith("the DSH_DISABLE_PLUGINS environment variable: no installed plugin")


def test_enable_patterns_keep_list_order_and_sort_within_a_pattern(installed):
    installed(ep("b2"), ep("b1"), ep("a"), ep("c"))
    host = Host({"plugins": {"enable": ["b*", "a"]}}, environ={})
    order = {name: row.order for name, row in rows(host).items()}
    assert order == {"b1": 1, "b2": 2, "a": 3, "c": None}
    host = Host(environ={"DSH_PLUGINS": "?"})
    assert sorted(n for n, r in rows(host).items() if r.status is PluginStatus.ENABLED) == [
        "a", "c",
    ]  # fmt: skip


def test_dsh_disable_on_any_command_and_the_warning_on_stderr(
    installed, capsys, monkeypatch, tmp_path
):
    installed(ep("hello"), ep("audit"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    monkeypatch.delenv("DSH_DISABLE_PLUGINS", raising=False)
    assert main(["--disable", "hello", "tools", "--json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["audit_tool"]
    assert main(["tools", "--disable", "a*", "--disable", "gone", "--json"]) == 0
    captured = capsys.readouterr()
    assert "hello_tool" in captured.out
    assert "audit_tool" not in captured.out
    assert captured.err == (
        "dsh: warning: --disable: no installed plugin is named 'gone'; installed: audit, hello; "
        "ignored\n"
    )


def test_dsh_plugins_shows_the_warnings_too(installed, capsys, monkeypatch, tmp_path):
    installed(ep("hello"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_DISABLE_PLUGINS", raising=False)
    write_config(tmp_path / "dsh.toml", '[plugins]\ndisable = ["timing"]\n')
    assert main(["plugins", "--check"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"dsh: warning: plugins.disable in {tmp_path / 'dsh.toml'}: no installed plugin is named 'timing'; "
        "installed: hello; ignored\n"
    )
    assert "hello  enabled" in captured.out
