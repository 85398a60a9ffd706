"""A path policy that can withhold nothing is not asked (issue 27, search).

The ``permissions`` plugin answers ``dsh_path_denied`` from its deny and ask rules that name a
path. With none (the default table: allow rules only), it lists ``dsh_path_denied`` in its
``dsh_idle_hooks``, and the search tools then do not walk the tree to ask it about every file:
ripgrep's answer is the same either way. A rule that names a path turns the walk back on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host
from dsh_plugins_builtin.permissions import PermissionsPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.test_search_hostile import WithholdSecrets
from tests.dsh_plugins_builtin.test_tools_search import put


def _host(make_host: Any, ws: Path, *extra: object, **table: Any) -> Host:
    config = {"host": {"workspace": str(ws)}, "plugin": {"permissions": table}}
    host: Host = make_host(
        ToolsPlugin(), SandboxPlugin(), PermissionsPlugin(), *extra, config=config
    )
    return host


def _asked(host: Host, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path the search tools put to policy (through `Host.path_denied`)."""
    asked: list[str] = []
    real = host.path_denied

    def counting(execution: Any, path: str, access: str) -> str | None:
        asked.append(path)
        return real(execution, path, access)

    monkeypatch.setattr(host, "path_denied", counting)
    return asked


def _tree(ws: Path) -> None:
    put(ws, {"a.py": "needle 1\n", "sub/b.py": "needle 2\n", "secrets/key": "needle 3\n"})


@pytest.mark.parametrize(
    ("table", "idle"),
    [
        ({"allow": ["grep"]}, True),
        ({"deny": ["bash"], "ask": ["write_file"]}, True),  # rules, but none names a path
        ({"deny": ["Read(./secrets/**)"]}, False),
        ({"ask": ["Edit(/docs/**)"]}, False),
        ({"deny": ["grep(./secrets/**)"]}, False),
    ],
)
def test_dsh_path_denied_is_idle_exactly_when_no_deny_or_ask_rule_names_a_path(
    make_host: Any, ws: Path, table: dict[str, Any], idle: bool
) -> None:
    host = _host(make_host, ws, **table)
    plugin = host.pm.get_plugin("permissions")
    assert ("dsh_path_denied" in plugin.dsh_idle_hooks) is idle
    assert host.pm.get_plugin("tools").has_path_policy() is not idle


def test_an_unstarted_permissions_plugin_is_not_idle() -> None:
    assert "dsh_path_denied" not in PermissionsPlugin().dsh_idle_hooks


async def test_grep_does_not_ask_an_idle_policy_and_finds_the_same(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    host = _host(make_host, ws, allow=["grep"])
    asked = _asked(host, monkeypatch)
    result = await host.call("grep", {"pattern": "needle"})
    assert not result.is_error, result.text
    assert asked == []
    assert result.meta["count"] == 3
    assert "withheld" not in result.text


async def test_a_read_rule_naming_a_path_turns_the_walk_back_on(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    host = _host(make_host, ws, allow=["grep"], deny=["Read(./secrets/**)"])
    asked = _asked(host, monkeypatch)
    result = await host.call("grep", {"pattern": "needle"})
    assert not result.is_error, result.text
    assert os.path.realpath(ws / "secrets" / "key") in asked
    assert result.meta["count"] == 2
    assert "needle 3" not in result.text
    assert "1 file(s) withheld by policy" in result.text


async def test_another_policy_plugin_is_still_asked_beside_an_idle_one(
    make_host: Any, ws: Path
) -> None:
    _tree(ws)
    other = WithholdSecrets(ws)
    host = _host(make_host, ws, other, allow=["grep"])
    assert "dsh_path_denied" in host.pm.get_plugin("permissions").dsh_idle_hooks
    result = await host.call("grep", {"pattern": "needle"})
    assert not result.is_error, result.text
    assert other.asked
    assert result.meta["count"] == 2
    assert "needle 3" not in result.text


async def test_an_idle_policy_plugin_is_not_asked_beside_another_one(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With another policy plugin active the search puts every file to policy, but the host
    skips the implementations set idle: the permissions plugin is not asked once per file."""
    _tree(ws)
    calls: list[str] = []
    real = PermissionsPlugin.dsh_path_denied

    def counting(self: Any, execution: Any, path: str, access: str) -> str | None:
        calls.append(path)
        return real(self, execution, path, access)

    counting.__dict__.update(real.__dict__)  # the hookimpl marker
    monkeypatch.setattr(PermissionsPlugin, "dsh_path_denied", counting)
    host = _host(make_host, ws, WithholdSecrets(ws), allow=["grep"])
    assert "dsh_path_denied" in host.pm.get_plugin("permissions").dsh_idle_hooks
    assert host.pm.hook.dsh_path_denied.get_hookimpls()[0].function.__func__ is counting
    result = await host.call("grep", {"pattern": "needle"})
    assert not result.is_error, result.text
    assert result.meta["count"] == 2
    assert calls == []
