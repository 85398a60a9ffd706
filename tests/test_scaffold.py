"""``dsh new plugin``: each kind of generated distribution passes its own tests as generated,
and one installs for real and shows up in ``dsh plugins``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_host._cli._main import main
from dsh_host._cli._scaffold import KINDS, write_plugin


def run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_passes_its_own_tests_as_generated(tmp_path, kind):
    root = write_plugin(f"demo-{kind}", kind, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = run("-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=root, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout


def test_the_cli_writes_a_distribution_that_installs_and_is_listed(tmp_path, capsys):
    assert main(["new", "plugin", "weather", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "dsh-weather"
    assert "pip install -e '.[test]'" in capsys.readouterr().out
    pyproject = (root / "pyproject.toml").read_text()
    assert 'weather = "dsh_weather.plugin:Plugin"' in pyproject
    assert "trio_mode = true" in pyproject
    installed = run("-m", "pip", "install", "--quiet", "--no-deps", str(root), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        env["DSH_PLUGINS"] = "weather"
        listed = run("-m", "dsh_host", "plugins", "--json", cwd=tmp_path, env=env)
        assert listed.returncode == 0, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)}
        assert (rows["weather"]["status"], rows["weather"]["distribution"]) == (
            "enabled",
            "dsh-weather",
        )
        tests = run("-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=root, env=env)
        assert tests.returncode == 0, tests.stdout + tests.stderr
    finally:
        run("-m", "pip", "uninstall", "--yes", "--quiet", "dsh-weather", cwd=tmp_path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["new", "plugin", "Bad Name"], "is not a plugin name"),
        (["new", "plugin", "x", "--kind", "nope"], "invalid choice"),
    ],
)
def test_bad_names_and_kinds_are_usage_errors(tmp_path, capsys, argv, message):
    assert main([*argv, "--dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_an_existing_folder_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "dsh-x").mkdir()
    assert main(["new", "plugin", "x", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_the_policy_template_teaches_the_monotonic_guard_not_a_tryfirst_allow(tmp_path):
    """Issue #23 row 1: the template used to make a ``tryfirst`` pre-execute policy."""
    root = write_plugin("demo-guard", "policy", tmp_path)
    source = next(root.rglob("plugin.py")).read_text()
    assert "def dsh_tool_guard(" in source
    assert "hookimpl(tryfirst" not in source
    assert "def dsh_tool_pre_execute(" not in source
