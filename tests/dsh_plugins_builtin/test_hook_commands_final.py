"""A hook's deny is final and its ask is put to an approver, whatever the plugin order; a hook's
allow never beats a deny rule (issue #23 row 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_host import Allow, Host, hookimpl
from dsh_plugins_builtin.hook_commands import HookCommandsPlugin
from dsh_plugins_builtin.permissions import PermissionsPlugin
from tests.conftest import make_echo
from tests.dsh_plugins_builtin.test_hook_commands import group, permission, prints, settings


class FirstAllow:
    name = "eager"

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        return Allow()


class Overrider:
    name = "overrider"

    @hookimpl(tryfirst=True)
    async def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        await call_next()
        return Allow()


def _host(tmp_path: Path, hook: str, order: list[object], rules: dict[str, Any]) -> Host:
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {
            "hook_commands": {"settings": [settings(tmp_path, pre=[group(hook)])]},
            "permissions": rules,
        },
    }
    h = Host(config=config, plugins=order, load_entrypoints=False)
    h.registry.register(make_echo("echo"))
    return h


@pytest.mark.parametrize("permissions_first", [True, False])
async def test_a_hooks_allow_never_beats_a_deny_rule(tmp_path: Path, permissions_first: bool):
    hook = prints(tmp_path, "allow", permission("allow"))
    perms, hooks = PermissionsPlugin(), HookCommandsPlugin()
    # registered last = called first
    order: list[object] = [hooks, perms] if permissions_first else [perms, hooks]
    h = _host(tmp_path, hook, order, {"allow": ["grep"], "deny": ["echo"]})
    result = await h.call("echo", {"text": "hi"})
    assert (result.code, result.decided_by) == ("DENIED", "permissions"), result.text
    assert "rule echo" in result.text


@pytest.mark.parametrize("other", [FirstAllow, Overrider])
@pytest.mark.parametrize("decision", ["deny", "ask"])
async def test_a_hooks_deny_or_ask_holds_against_a_plugin_allowing_first(
    tmp_path: Path, other: type, decision: str
):
    hook = prints(tmp_path, decision, permission(decision, "the hook says no"))
    h = _host(tmp_path, hook, [HookCommandsPlugin(), PermissionsPlugin(), other()], {})
    h.pm.unregister(name="permissions")
    result = await h.call("echo", {"text": "hi"})
    assert (result.code, result.decided_by) == ("DENIED", "hook_commands"), result.text
    assert "the hook says no" in result.text
