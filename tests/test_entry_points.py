"""Real entry points: pip-install the example distributions, drive ``dsh``, and run the
examples' own test suites against the installed distributions.

``examples/dsh-hello``, ``examples/dsh-timing`` and ``examples/dsh-broken`` are installed once
per session with pip into a site directory of their own (``--target``), which the subprocesses
get on ``PYTHONPATH``: the running interpreter's environment is never changed, so no other test
(``tests/test_docs.py`` counts on it) sees them. ``dsh`` runs as a subprocess (``python -m
dsh_host``) in a temporary directory holding its ``dsh.toml``; every config pins ``[plugins]
enable`` so whatever else is installed never changes the outcome.
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

from tests.trusted import write_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
HELLO = '"hello", "hello-policy"'
BROKEN = '"broken-import", "broken-misspelt", "broken-args", "broken-fine", "broken-twin"'


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


SITE: list[pathlib.Path] = []  # the session's site directory, once installed


@pytest.fixture(scope="session")
def examples_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """Install the example distributions into a site directory for the session."""
    site = tmp_path_factory.mktemp("examples-site")
    names = ("dsh-hello", "dsh-timing", "dsh-broken")
    pip(
        "install",
        "--quiet",
        "--no-deps",
        "--target",
        str(site),
        *(str(EXAMPLES / n) for n in names),
    )
    SITE.append(site)
    try:
        yield site
    finally:
        SITE.remove(site)


@pytest.fixture
def project(tmp_path: pathlib.Path, examples_installed: pathlib.Path) -> pathlib.Path:
    return tmp_path


def clean_env() -> dict[str, str]:
    """This environment without DSH_* variables, with the examples' site directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(str(site) for site in SITE)
    return env


def dsh(cwd: pathlib.Path, *argv: str, config: str) -> subprocess.CompletedProcess[str]:
    write_config(cwd / "dsh.toml", config)
    env = clean_env()
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


@pytest.mark.parametrize("example", ["dsh-hello", "dsh-timing"])
def test_the_examples_own_tests_pass_against_the_installed_distribution(
    examples_installed, tmp_path, example
):
    # A copy of the tests alone: its package can only come from the installed distribution.
    (tmp_path / "tests").mkdir()
    for test in (EXAMPLES / example / "tests").glob("test_*.py"):
        (tmp_path / "tests" / test.name).write_text(test.read_text())
    (tmp_path / "pyproject.toml").write_text((EXAMPLES / example / "pyproject.toml").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
    module = example.replace("-", "_")
    where = subprocess.run(
        [sys.executable, "-c", f"import {module}; print({module}.__file__)"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(examples_installed)), where.stdout
