"""``grep``'s ripgrep runs with nothing writable (issue 27, search).

A search only reads, so the sandbox runs ripgrep read-only (`SandboxPlugin.run(read_only=True)`):
the workspace-write policy's roots and pins, its ``deny_read``, but no writable root, so no
protected path needs a mount either (cheaper to set up). An ``rg`` the model managed to replace
can no longer write anything; ``bash`` commands still run with the configured mode.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin.sandbox import SandboxPlugin
from tests.dsh_plugins_builtin.conftest import tools_host
from tests.dsh_plugins_builtin.test_search_hostile import fake_rg
from tests.dsh_plugins_builtin.test_tools_search import put

PLANT = 'echo planted > planted.txt; echo planted > "$TMPDIR/planted"\n'


async def test_ripgrep_cannot_write_the_workspace_or_the_private_tmp(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    rg = fake_rg(ws / ".venv" / "bin", PLANT + "printf 'f.txt\\0001:needle\\n'\n")
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws, backend=backend)
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == "f.txt:1:needle"
    assert not (ws / "planted.txt").exists()
    sandbox = host.pm.get_plugin("sandbox")
    assert isinstance(sandbox, SandboxPlugin)
    assert sandbox.tmp is None or not (sandbox.tmp / "planted").exists()
    # bash runs with the configured mode: the same lines write both
    done = await host.call("bash", {"command": PLANT})
    assert not done.is_error, done.text
    assert (ws / "planted.txt").read_text() == "planted\n"


async def test_a_read_only_run_keeps_deny_read_and_the_configured_mode_otherwise(
    make_host: Any, ws: Path
) -> None:
    put(ws, {"secret.txt": "hunter2\n", "open.txt": "fine\n"})
    host = tools_host(make_host, ws, deny_read=[str(ws / "secret.txt")])
    sandbox = host.pm.get_plugin("sandbox")
    assert isinstance(sandbox, SandboxPlugin)
    done = await sandbox.run("cat open.txt; cat secret.txt; touch new.txt", read_only=True)
    assert "fine" in done.output
    assert "hunter2" not in done.output
    assert not (ws / "new.txt").exists()
    assert sandbox.policy.mode == "workspace-write"  # the plugin's own policy is unchanged
    again = await sandbox.run("touch new.txt")
    assert again.exit_code == 0
    assert (ws / "new.txt").exists()


async def test_whether_the_sandbox_run_takes_read_only_is_read_once(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`inspect.signature` costs tens of microseconds: the sandbox plugin's ``run`` is read at
    the first search (of the process), not at every one."""
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws)
    read: list[object] = []
    real = inspect.signature

    def signature(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        read.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", signature)
    for _ in range(3):
        assert (await host.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"
    assert [obj for obj in read if getattr(obj, "__func__", obj) is SandboxPlugin.run] in (
        [],
        [SandboxPlugin.run],
    )
