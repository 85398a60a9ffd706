"""The sandbox policy is built once per host start (issue 27), whichever plugin asks first: the
tools', audit's, output_budget's and the hook commands' checks read the one the sandbox plugin
enforces. Never across hosts: another host (another configuration) builds its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._hooks._launch import sandbox_policy
from dsh_plugins_builtin._sandbox import _config
from dsh_plugins_builtin.audit import AuditPlugin
from dsh_plugins_builtin.output_budget import OutputBudgetPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The workspace of each policy built from now on (every `build_policy` pins its roots)."""
    seen: list[Path] = []
    real = _config.pin_roots

    def counting(policy: _config.SandboxPolicy) -> _config.SandboxPolicy:
        seen.append(policy.workspace)
        return real(policy)

    monkeypatch.setattr(_config, "pin_roots", counting)
    return seen


def host_in(ws: Path, tmp_path: Path, sandbox_first: bool = False, **sandbox: object) -> Host:
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": sandbox,
            "audit": {"path": str(tmp_path / "audit.sqlite3")},
            "output_budget": {"spill_dir": str(ws / ".dsh" / "spill")},
        },
    }
    others: list[object] = [ToolsPlugin(), AuditPlugin(), OutputBudgetPlugin()]
    plugins = [SandboxPlugin(), *others] if sandbox_first else [*others, SandboxPlugin()]
    return Host(config, plugins=plugins, load_entrypoints=False)


@pytest.mark.parametrize("sandbox_first", [False, True])
def test_one_start_builds_the_policy_once(
    ws: Path, tmp_path: Path, built: list[Path], sandbox_first: bool
) -> None:
    host = host_in(ws, tmp_path, sandbox_first)
    assert built == [ws]
    plugin = host.pm.get_plugin("sandbox")
    assert isinstance(plugin, SandboxPlugin)
    assert plugin.policy_at_start(host) is plugin.policy  # what the others read is enforced
    assert sandbox_policy(host) is plugin.policy  # the hook commands' and mounts' view
    assert built == [ws]


def test_each_host_builds_its_own(ws: Path, tmp_path: Path, built: list[Path]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    first = host_in(ws, tmp_path)
    second = host_in(other, tmp_path, mode="read-only")
    assert built == [ws, other]
    assert first.pm.get_plugin("sandbox").policy.mode == "workspace-write"  # type: ignore[union-attr]
    assert second.pm.get_plugin("sandbox").policy.mode == "read-only"  # type: ignore[union-attr]


def test_a_plugin_object_started_by_two_hosts_builds_for_each(
    ws: Path, tmp_path: Path, built: list[Path]
) -> None:
    sandbox = SandboxPlugin()
    for mode in ("workspace-write", "read-only"):
        config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": {"mode": mode}}}
        Host(config, plugins=[ToolsPlugin(), sandbox], load_entrypoints=False)
        assert sandbox.policy.mode == mode
    assert built == [ws, ws]


def test_an_unusable_policy_is_still_a_config_error_at_start(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="deny_read"):
        host_in(ws, tmp_path, deny_read=[str(ws)])
