"""The sandbox plugin's start (issue 27): the machine is probed before the first command, not
at start, unless Landlock may be the backend; a failed probe never means unconfined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._sandbox import _confine, _starting
from dsh_plugins_builtin.sandbox import SandboxPlugin, sandbox_check_command
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import patch_probes
from tests.trusted import write_config

PROBES_OK = {"bwrap": None, "landlock": None, "landlock-net": None}


class Recorder:
    """A fake `probe_backends` counting its calls."""

    def __init__(self, answer: dict[str, str | None]) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, bwrap: Any = None) -> dict[str, str | None]:
        self.calls += 1
        return dict(self.answer)


def host_in(ws: Path, **sandbox: Any) -> Host:
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": sandbox}}
    return Host(config, plugins=[ToolsPlugin(), SandboxPlugin()], load_entrypoints=False)


async def test_a_call_that_runs_no_command_never_probes(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Recorder(PROBES_OK)
    patch_probes(monkeypatch, probe)
    (ws / "a.txt").write_text("hello\n")
    host = host_in(ws)
    result = await host.call("read_file", {"path": "a.txt"})
    assert not result.is_error, result.text
    assert probe.calls == 0
    await host.call("bash", {"command": "true"})
    await host.call("bash", {"command": "true"})
    assert probe.calls == 1  # before the first command, once


@pytest.mark.parametrize("backend", ["bwrap", "auto"])
async def test_a_failed_probe_refuses_every_command_and_runs_none(
    ws: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    broken = {"bwrap": "the probe exited 1: no user namespaces", "landlock": "ENOSYS"}
    probe = Recorder({**broken, "landlock-net": "ENOSYS"})
    patch_probes(monkeypatch, probe)
    monkeypatch.setattr(_confine, "probe_backends", probe)  # and the command's own choice
    host = host_in(ws, backend=backend)
    for _ in range(2):
        result = await host.call("bash", {"command": "echo ran > ran"})
        assert result.code == "SANDBOX_UNAVAILABLE", result.text
    assert not (ws / "ran").exists()
    assert probe.calls >= 2  # a refusal is not remembered as a pass


def test_landlock_may_confine_so_the_machine_is_probed_at_start(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Landlock's ruleset is built at start, holding the roots as they were then."""
    probe = Recorder({"bwrap": "not installed", "landlock": None, "landlock-net": "ABI 3"})
    patch_probes(monkeypatch, probe)
    with pytest.raises(ConfigError, match="key 'network'"):
        host_in(ws, backend="landlock")
    assert probe.calls == 1
    monkeypatch.setenv("PATH", str(ws / "no-bwrap-here"))
    with pytest.raises(ConfigError, match="key 'network'"):
        host_in(ws, protected=[], protect_config=False)
    assert probe.calls == 2


def test_danger_full_access_never_probes(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Recorder(PROBES_OK)
    patch_probes(monkeypatch, probe)
    host_in(ws, mode="danger-full-access")
    assert probe.calls == 0
    assert not _starting.landlock_possible(SandboxPlugin().config, ("/usr/bin/bwrap", "PATH"))


def test_sandbox_check_still_reports_what_cannot_be_enforced(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dsh sandbox check`` does not wait for a command: the error names the key, exit 2."""
    probes = {"bwrap": "the probe exited 1", "landlock": None, "landlock-net": "ABI 3"}
    patch_probes(monkeypatch, Recorder(probes))
    monkeypatch.chdir(ws)
    write_config(
        ws / "dsh.toml",
        '[host]\nworkspace = "."\n[plugin.sandbox]\nprotected = []\nprotect_config = false\n',
    )
    assert sandbox_check_command([]) == 2
    assert "key 'network'" in capsys.readouterr().err
