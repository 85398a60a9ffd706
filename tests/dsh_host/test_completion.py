"""Shell completion: ``dsh completion SHELL`` and the answers argcomplete gives the shell."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dsh_host._cli._main import main


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(capsys, shell):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "dsh" in script
    assert "_ARGCOMPLETE" in script


def test_an_unknown_shell_is_a_usage_error(capsys):
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def complete(tmp_path, line: str) -> list[str]:
    out = tmp_path / "completions"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DSH_")},
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "DSH_PLUGINS": "tools,sandbox",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dsh_host"], env=env, cwd=tmp_path, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return out.read_text().split()


def test_commands_options_and_tool_names_complete(tmp_path):
    assert "call" in complete(tmp_path, "dsh ca")
    assert "completion" in complete(tmp_path, "dsh com")
    assert complete(tmp_path, "dsh call re") == ["read_file"]
    assert "--trace" in complete(tmp_path, "dsh call --tr")


def test_disable_completes_installed_plugin_names(tmp_path):
    assert complete(tmp_path, "dsh --disable au") == ["audit"]
    assert complete(tmp_path, "dsh tools --disable sa") == ["sandbox"]
