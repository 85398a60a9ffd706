"""Real entry points: pip-install ``examples/dsh-hello`` and ``examples/dsh-broken``, drive ``dsh``.

The distributions are installed once per session into the running interpreter's environment and
uninstalled at the end. ``dsh`` runs as a subprocess (``python -m dsh_host``) in a temporary
directory holding its ``dsh.toml``; every config pins ``[plugins] enable`` so whatever else is
installed never changes the outcome.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
HELLO = '"hello", "hello-policy"'
BROKEN = '"broken-import", "broken-misspelt", "broken-args", "broken-fine", "broken-twin"'


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def examples_installed() -> Iterator[None]:
    """Install both example distributions for the session; uninstall them afterwards."""
    pip(
        "install", "--quiet", "--no-deps", str(EXAMPLES / "dsh-hello"), str(EXAMPLES / "dsh-broken")
    )
    try:
        yield
    finally:
        pip("uninstall", "--yes", "--quiet", "dsh-hello", "dsh-broken")


@pytest.fixture
def project(tmp_path: pathlib.Path, examples_installed: None) -> pathlib.Path:
    return tmp_path


def dsh(cwd: pathlib.Path, *argv: str, config: str) -> subprocess.CompletedProcess[str]:
    (cwd / "dsh.toml").write_text(config)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DSH_CONFIG", "DSH_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD")
    }
    env["NO_COLOR"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "dsh_host", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def plugins(cwd: pathlib.Path, config: str) -> dict[str, dict[str, Any]]:
    done = dsh(cwd, "plugins", "--json", config=config)
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def test_installed_plugins_are_listed_with_distribution_version_hooks_and_config(project):
    rows = plugins(project, f"[plugins]\nenable = [{HELLO}]\n")
    hello, policy = rows["hello"], rows["hello-policy"]
    assert (hello["status"], hello["distribution"], hello["version"]) == (
        "enabled",
        "dsh-hello",
        "0.1.0",
    )
    assert hello["hooks"] == ["dsh_register_tools"]
    assert policy["hooks"] == ["dsh_host_started", "dsh_plugin_config", "dsh_tool_pre_execute"]
    assert policy["config_class"] == "dsh_hello.policy.PolicyConfig"
    assert (hello["order"], policy["order"]) == (1, 2)
    assert rows["broken-fine"]["status"] == "disabled"


def test_call_runs_the_installed_tool(project):
    done = dsh(
        project, "call", "hello", '{"name": "Ada"}', config=f"[plugins]\nenable = [{HELLO}]\n"
    )
    assert done.returncode == 0, done.stderr
    assert "Greet Ada" in done.stdout
    assert "Hello, Ada!" in done.stdout


def test_the_policy_reads_its_table_and_denies(project):
    config = f'[plugins]\nenable = [{HELLO}]\n[plugin.hello-policy]\ndeny_names = ["mallory"]\n'
    done = dsh(project, "call", "hello", '{"name": "Mallory"}', "--json", config=config)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["error"]["code"] == "DENIED"
    assert result["decided_by"] == "hello-policy"
    assert "deny_names" in result["error"]["message"]


def test_an_ask_with_no_approver_is_denied_with_a_hint(project):
    config = f'[plugins]\nenable = [{HELLO}]\n[plugin.hello-policy]\nask_names = ["eve"]\n'
    done = dsh(project, "call", "hello", '{"name": "eve"}', config=config)
    assert done.returncode == 1
    assert "requires approval" in done.stdout
    assert 'allow = ["hello"]' in done.stderr


def test_disable_blocks_the_policy(project):
    config = (
        f'[plugins]\nenable = [{HELLO}]\ndisable = ["hello-policy"]\n'
        '[plugin.hello-policy]\ndeny_names = ["mallory"]\n'
    )
    assert plugins(project, config)["hello-policy"]["status"] == "blocked"
    done = dsh(project, "call", "hello", '{"name": "mallory"}', config=config)
    assert done.returncode == 0, done.stderr
    assert "Hello, mallory!" in done.stdout


def test_a_bad_config_value_is_a_clear_error(project):
    config = f'[plugins]\nenable = [{HELLO}]\n[plugin.hello-policy]\ndeny_names = "mallory"\n'
    done = dsh(project, "call", "hello", '{"name": "x"}', config=config)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "dsh.toml, [plugin.hello-policy], key 'deny_names': expected a list of strings" in (
        done.stderr
    )


def test_an_unknown_plugin_name_lists_what_is_installed(project):
    done = dsh(project, "plugins", config='[plugins]\nenable = ["helo"]\n')
    assert done.returncode == 2
    assert "no installed plugin is named 'helo' (did you mean 'hello'?)" in done.stderr
    assert "hello-policy" in done.stderr


def test_broken_plugins_are_reported_and_the_others_work(project):
    config = f"[plugins]\nenable = [{HELLO}, {BROKEN}]\n"
    rows = plugins(project, config)
    expected = {
        "broken-import": "cannot import 'dsh_broken.boom': RuntimeError: dsh-broken: boom",
        "broken-misspelt": "unknown hook 'dsh_tool_pre_exec'; did you mean 'dsh_tool_pre_execute'?",
        "broken-args": "dsh_tool_pre_execute(call) takes 'call'",
        "broken-twin": "tool 'ping' is already registered globally by plugin 'broken-fine'; "
        "plugin 'broken-twin' registered it again",
    }
    for name, error in expected.items():
        row = rows[name]
        assert (row["status"], row["distribution"], row["version"]) == (
            "failed",
            "dsh-broken",
            "0.0.1",
        ), name
        assert error in row["error"], name
    assert rows["broken-fine"]["status"] == "enabled"
    assert rows["broken-missing"]["status"] == "disabled"
    done = dsh(project, "call", "hello", '{"name": "Ada"}', config=config)
    assert done.returncode == 0
    assert "Hello, Ada!" in done.stdout
    assert "not running 4 plugin(s) that failed to load" in done.stderr
    tools = json.loads(dsh(project, "tools", "--json", config=config).stdout)
    assert sorted(tool["name"] for tool in tools) == ["hello", "ping"]
    assert dsh(project, "call", "ping", config=config).stdout.splitlines()[-1] == "  pong"
