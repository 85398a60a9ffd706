"""`Host` composition: built-in entry points that name classes get one instance per host."""

from __future__ import annotations

from dsh_host import Host


def test_class_entry_points_are_instantiated_once_per_host():
    env = {"DSH_PLUGINS": "hook_commands"}
    first, second = Host(environ=env), Host(environ=env)
    a, b = first.pm.get_plugin("hook_commands"), second.pm.get_plugin("hook_commands")
    assert a is not None
    assert b is not None
    assert not isinstance(a, type)
    assert a is not b
    assert [r.name for r in first.plugins() if r.status.value == "enabled"] == ["hook_commands"]
