"""The ``bash`` tool through the pipeline: output, markers, meta, timeouts, cwd, fail-closed.

Tests that need a real backend run once per backend. A backend the probe finds unusable is
skipped locally, but fails the test when ``CI=true``, so CI cannot pass without bubblewrap or
Landlock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._sandbox import _confine
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import tools_host


async def test_output_exit_code_and_meta(make_host: Any, ws: Path, backend: str) -> None:
    host = tools_host(make_host, ws, backend=backend)
    result = await host.call("bash", {"command": "echo out; echo err >&2; exit 3"})
    assert (result.is_error, result.text) == (False, "out\nerr\n[exit code: 3]")
    assert result.meta == {
        "exit_code": 3,
        "signal": None,
        "timed_out": False,
        "truncated": False,
        "total_bytes": 8,
        "backend": backend,
        "mode": "workspace-write",
        "confined": True,
        "denied": False,
    }
    quiet = await host.call("bash", {"command": "true"})
    assert (quiet.text, quiet.meta["exit_code"]) == ("(no output)", 0)


async def test_a_refused_write_gets_the_denial_marker(
    make_host: Any, ws: Path, backend: str
) -> None:
    host = tools_host(make_host, ws, backend=backend)
    result = await host.call("bash", {"command": "echo x > /etc/dsh-denied-probe"})
    assert result.text.endswith(
        "\n[sandbox: file access denied under workspace-write mode]\n[exit code: 1]"
    )
    assert result.meta["denied"] is True
    assert not Path("/etc/dsh-denied-probe").exists()


async def test_cwd(make_host: Any, ws: Path, backend: str) -> None:
    (ws / "sub").mkdir()
    (ws / "file.txt").write_text("")
    host = tools_host(make_host, ws, backend=backend)
    result = await host.call("bash", {"command": "pwd", "cwd": "sub"})
    assert result.text == os.path.realpath(ws / "sub")
    for cwd, code in [
        ("nope", "FILE_NOT_FOUND"),
        ("file.txt", "NOT_A_DIRECTORY"),
        ("/etc", "SANDBOX_DENIED"),
    ]:
        failed = await host.call("bash", {"command": "touch ran", "cwd": cwd})
        assert failed.code == code, (cwd, failed.text)
    assert not (ws / "ran").exists()


async def test_max_output_bytes_is_the_cap(make_host: Any, ws: Path, backend: str) -> None:
    host = tools_host(make_host, ws, backend=backend, max_output_bytes=1000)
    result = await host.call("bash", {"command": "head -c 10000 /dev/zero | tr '\\0' a"})
    assert result.meta["truncated"] is True
    assert result.meta["total_bytes"] == 10_000
    assert "[... output truncated: 9000 of 10000 bytes omitted ...]" in result.text
    assert len(result.text) < 1200


async def test_timeout_kills_the_command(make_host: Any, ws: Path, autojump_clock: Any) -> None:
    host = tools_host(make_host, ws, mode="danger-full-access")
    # The mock clock jumps as soon as everything waits, so the command prints nothing first.
    result = await host.call("bash", {"command": "sleep 1000; touch late", "timeout_ms": 1500})
    assert result.text == (
        "[sandbox: danger-full-access, unconfined]\n(no output)\n"
        "[timed out after 1500ms; the command and its child processes were killed]\n"
        "[killed by signal: SIGKILL]"
    )
    assert (result.meta["timed_out"], result.meta["signal"]) == (True, "SIGKILL")
    assert not (ws / "late").exists()


async def test_a_signal_is_reported(make_host: Any, ws: Path) -> None:
    host = tools_host(make_host, ws, mode="danger-full-access")
    result = await host.call("bash", {"command": "kill -TERM $$"})
    assert result.text.endswith("\n[killed by signal: SIGTERM]")
    assert (result.meta["exit_code"], result.meta["signal"]) == (None, "SIGTERM")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"command": "true", "timeout_ms": 0}, '"timeout_ms" must be between 1 and 600000, got 0'),
        ({"command": "true", "timeout_ms": 600_001}, "got 600001"),
        ({"command": "  "}, '"command" must not be empty'),
        ({}, '"command"'),
    ],
)
async def test_bad_arguments(make_host: Any, ws: Path, args: dict[str, Any], fragment: str) -> None:
    host = tools_host(make_host, ws)
    result = await host.call("bash", args)
    assert result.code == "INVALID_ARGS"
    assert fragment in result.text


async def test_declares_a_budget_above_its_own_longest_run(make_host: Any, ws: Path) -> None:
    tool = tools_host(make_host, ws).registry.get("bash")
    assert tool is not None
    assert tool.timeout_ms == 605_000  # 600 s max run + grace, so its own timeout reports first


async def test_danger_full_access_says_it_is_unconfined(make_host: Any, ws: Path) -> None:
    host = tools_host(make_host, ws, mode="danger-full-access", backend="none")
    result = await host.call("bash", {"command": "echo hi"})
    assert result.text == "[sandbox: danger-full-access, unconfined]\nhi"
    assert (result.meta["confined"], result.meta["backend"]) == (False, "none")


async def test_backend_none_refuses_a_confined_mode(make_host: Any, ws: Path) -> None:
    host = tools_host(make_host, ws, backend="none")
    result = await host.call("bash", {"command": "touch ran"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert result.text.startswith(
        'Error: sandbox mode "workspace-write" is requested but no sandbox backend is usable'
    )
    assert 'backend "none" cannot confine' in result.text
    assert _attributed(result) == "sandbox: workspace-write mode"
    assert "dsh sandbox check" in result.text
    assert not (ws / "ran").exists()


async def test_no_usable_backend_never_runs_unconfined(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        _confine,
        "probe_backends",
        lambda bwrap=None: {
            "bwrap": "not installed",
            "landlock": "ENOSYS",
            "landlock-net": "ENOSYS",
        },
    )
    host = tools_host(make_host, ws)
    result = await host.call("bash", {"command": "touch ran"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert "bwrap: not installed; landlock: ENOSYS" in result.text
    assert "apt-get install bubblewrap" in result.text
    assert not (ws / "ran").exists()


async def test_without_the_sandbox_plugin_bash_fails_closed(make_host: Any, ws: Path) -> None:
    host = make_host(ToolsPlugin(), config={"host": {"workspace": str(ws)}})
    result = await host.call("bash", {"command": "touch ran"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert result.text == (
        "Error: running a bash command needs the sandbox plugin, but the sandbox plugin is not "
        "enabled; refusing to run it unconfined. Enable the `sandbox` plugin (take it out of "
        '[plugins] disable), or set [plugin.sandbox] mode = "danger-full-access" to allow it '
        "without confinement"
    )
    assert not (ws / "ran").exists()


def _attributed(result):
    """``decided_by: decision_detail``, the way these tests spell who decided and why."""
    detail = result.decision_detail
    return result.decided_by if detail is None else f"{result.decided_by}: {detail}"
