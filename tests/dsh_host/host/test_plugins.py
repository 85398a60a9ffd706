"""Discovery, isolation, enable/disable and registration order (issue #3 §1-§2).

Entry points are faked here (``importlib.metadata.entry_points`` is replaced for the test), so
these tests never depend on what happens to be installed; ``tests/test_entry_points.py``
installs a real distribution.
"""

from __future__ import annotations

import importlib.metadata
import types
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from dsh_host import (
    ConfigError,
    Deny,
    Host,
    PluginStatus,
    ToolExecution,
    define_tool,
    hookimpl,
)
from dsh_host._host._plugins import inspect_hooks

GROUP = "dsh.plugins"


@attrs.frozen
class FakeDist:
    name: str
    version: str


@attrs.define
class FakeEntryPoint:
    """Quacks like `importlib.metadata.EntryPoint`; counts imports."""

    name: str
    target: Callable[[], object]
    dist: FakeDist | None = FakeDist("dsh-fake", "1.2.3")
    loads: int = 0

    @property
    def value(self) -> str:
        return f"fake_{self.name}:plugin"

    def load(self) -> object:
        self.loads += 1
        return self.target()


@pytest.fixture
def installed(monkeypatch) -> Callable[..., list[FakeEntryPoint]]:
    """Install fake entry points: ``installed(ep, ...)``; they replace the real ones."""
    eps: list[FakeEntryPoint] = []
    real = importlib.metadata.entry_points

    def entry_points(**selection: Any) -> Any:
        if selection == {"group": GROUP}:
            return list(eps)
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    def install(*new: FakeEntryPoint) -> list[FakeEntryPoint]:
        eps.extend(new)
        return eps

    return install


def denier(reason: str) -> object:
    class Denier:
        @hookimpl
        def dsh_tool_pre_execute(self, execution: ToolExecution) -> Deny:
            return Deny(reason)

    return Denier()


def tool_plugin(*names: str) -> object:
    class Tools:
        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            for name in names:
                register(define_tool(name=name, description=name, parameters={}, execute=str))

    return Tools()


def ep(name: str, plugin: object | None = None, **kw: Any) -> FakeEntryPoint:
    made = plugin if plugin is not None else tool_plugin(f"{name}_tool")
    return FakeEntryPoint(name, lambda: made, **kw)


def rows(host: Host) -> dict[str, Any]:
    return {row.name: row for row in host.plugins()}


def boom() -> object:
    raise RuntimeError("cannot import me")


# -- isolation -------------------------------------------------------------------------------


def test_a_plugin_that_fails_to_import_is_reported_and_the_rest_load(installed):
    installed(ep("a"), FakeEntryPoint("broken", boom), ep("c"))
    host = Host(environ={})
    row = rows(host)["broken"]
    assert row.status is PluginStatus.FAILED
    assert (row.distribution, row.version) == ("dsh-fake", "1.2.3")
    assert row.error == "cannot import 'fake_broken:plugin': RuntimeError: cannot import me"
    assert {t.name for t in host.registry.tools()} == {"a_tool", "c_tool"}


def test_an_entry_point_that_implements_no_hook_is_failed_saying_why(installed):
    class Hookless:  # an entry point naming the wrong object (a module, a constant...)
        pass

    installed(ep("a"), ep("empty", Hookless()))
    host = Host(environ={})
    row = rows(host)["empty"]
    assert row.status is PluginStatus.FAILED
    assert row.error.startswith("implements no dsh hook (no @hookimpl method)")
    assert host.pm.get_plugin("empty") is None
    assert rows(host)["a"].status is PluginStatus.ENABLED


def test_system_exit_at_import_is_contained(installed):
    def exits() -> object:
        raise SystemExit(3)

    installed(FakeEntryPoint("quitter", exits), ep("a"))
    host = Host(environ={})
    assert rows(host)["quitter"].status is PluginStatus.FAILED
    assert rows(host)["a"].status is PluginStatus.ENABLED


def test_unknown_hook_fails_with_a_suggestion(installed):
    class Misspelt:
        @hookimpl
        def dsh_tool_pre_exec(self, execution: Any) -> None:
            return None

    installed(ep("misspelt", Misspelt()), ep("ok"))
    host = Host(environ={})
    row = rows(host)["misspelt"]
    assert row.status is PluginStatus.FAILED
    assert "unknown hook 'dsh_tool_pre_exec'; did you mean 'dsh_tool_pre_execute'?" in row.error
    assert host.pm.get_plugin("misspelt") is None
    assert rows(host)["ok"].status is PluginStatus.ENABLED


def test_unknown_hook_far_from_any_name_lists_the_hooks():
    class Odd:
        name = "odd"

        @hookimpl
        def frobnicate(self) -> None:
            return None

    host = Host(plugins=[Odd()], load_entrypoints=False)
    assert "dsh's hooks are: dsh_config_files, dsh_host_started" in rows(host)["odd"].error


def test_wrong_argument_names_fail_naming_the_argument_and_the_hook(installed):
    class WrongArgs:
        @hookimpl
        def dsh_tool_pre_execute(self, call: Any) -> None:
            return None

    installed(ep("wrong", WrongArgs()))
    row = rows(Host(environ={}))["wrong"]
    assert row.status is PluginStatus.FAILED
    assert "dsh_tool_pre_execute(call) takes 'call'" in row.error
    assert "its arguments are: execution, call_next" in row.error


def test_a_hook_function_without_the_marker_fails():
    module = types.ModuleType("forgot")

    def dsh_tool_guard(execution: Any) -> str:
        return "never asked"

    module.dsh_tool_guard = dsh_tool_guard  # type: ignore[attr-defined]
    host = Host(plugins=[module], load_entrypoints=False)
    assert "without @hookimpl" in rows(host)["forgot"].error


def test_a_pluggy_wrapper_on_a_per_call_hook_fails():
    class Wrapper:
        name = "wrapper"

        @hookimpl(wrapper=True)
        def dsh_tool_result(self) -> Iterator[None]:
            yield

    host = Host(plugins=[Wrapper()], load_entrypoints=False)
    assert "cannot be a pluggy wrapper" in rows(host)["wrapper"].error


def test_register_tools_raising_rolls_back_its_tools():
    class Half:
        name = "half"

        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register(define_tool(name="first", description="", parameters={}, execute=str))
            raise RuntimeError("second tool broke")

    host = Host(plugins=[Half(), denier("no")], load_entrypoints=False)
    row = rows(host)["half"]
    assert row.status is PluginStatus.FAILED
    assert row.error.startswith("dsh_register_tools failed: RuntimeError: second tool broke")
    assert host.registry.get("first") is None
    assert host.pm.get_plugin("half") is None


def test_a_duplicate_tool_name_fails_the_second_plugin_naming_both(installed):
    installed(ep("alpha", tool_plugin("grep")), ep("beta", tool_plugin("extra", "grep")))
    host = Host(environ={})
    row = rows(host)["beta"]
    assert row.status is PluginStatus.FAILED
    assert "tool 'grep' is already registered globally by plugin 'alpha'" in row.error
    assert "plugin 'beta' registered it again" in row.error
    assert host.registry.owner("grep") == "alpha"
    assert host.registry.get("extra") is None


def test_host_started_raising_takes_the_plugin_out():
    class Late:
        name = "late"

        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register(define_tool(name="late_tool", description="", parameters={}, execute=str))

        @hookimpl
        def dsh_host_started(self) -> None:
            raise KeyError("missing")

    host = Host(plugins=[Late()], load_entrypoints=False)
    assert rows(host)["late"].status is PluginStatus.FAILED
    assert "dsh_host_started failed: KeyError" in rows(host)["late"].error
    assert host.registry.get("late_tool") is None


@pytest.mark.parametrize(
    ("returned", "expected"),
    [(RuntimeError("x"), "dsh_plugin_config failed: RuntimeError: x"), (dict, "expected an attrs")],
)
def test_bad_config_class_hook_fails_the_plugin(returned, expected):
    class Configured:
        name = "configured"

        @hookimpl
        def dsh_plugin_config(self) -> Any:
            if isinstance(returned, Exception):
                raise returned
            return returned

    host = Host(plugins=[Configured()], load_entrypoints=False)
    assert expected in rows(host)["configured"].error
    assert host.pm.get_plugin("configured") is None


def test_two_plugins_under_one_name():
    first, second = denier("first"), denier("second")
    first.name = second.name = "same"  # type: ignore[attr-defined]
    host = Host(plugins=[first, second], load_entrypoints=False)
    statuses = sorted(row.status.value for row in host.plugins())
    assert statuses == ["enabled", "failed"]
    assert host.pm.get_plugin("same") is first


def test_one_entry_point_name_from_two_distributions_loads_neither(installed):
    one = ep("dupe", dist=FakeDist("dist-one", "1"))
    two = ep("dupe", dist=FakeDist("dist-two", "2"))
    installed(one, two)
    host = Host(environ={})
    dupes = [row for row in host.plugins() if row.name == "dupe"]
    assert [row.status for row in dupes] == [PluginStatus.FAILED, PluginStatus.FAILED]
    assert "provided by several distributions (dist-one 1, dist-two 2)" in (dupes[0].error or "")
    assert one.loads == two.loads == 0


# -- enable / disable ------------------------------------------------------------------------


def test_disable_blocks_before_import(installed):
    eps = installed(ep("audit"), ep("tools"))
    host = Host({"plugins": {"disable": ["audit"]}}, environ={})
    assert eps[0].loads == 0
    row = rows(host)["audit"]
    assert row.status is PluginStatus.BLOCKED
    assert "blocked by plugins.disable" in (row.error or "")
    assert rows(host)["tools"].status is PluginStatus.ENABLED


def test_enable_is_an_allow_list_and_empty_means_none(installed):
    eps = installed(ep("a"), ep("b"))
    host = Host({"plugins": {"enable": ["b"]}}, environ={})
    assert rows(host)["a"].status is PluginStatus.DISABLED
    assert eps[0].loads == 0
    assert rows(host)["b"].status is PluginStatus.ENABLED
    host = Host({"plugins": {"enable": []}}, environ={})
    assert {row.status for row in host.plugins()} == {PluginStatus.DISABLED}


def test_config_naming_an_uninstalled_plugin_lists_what_is_installed(installed):
    installed(ep("hello"), ep("audit"))
    with pytest.raises(ConfigError) as info:
        Host({"plugins": {"enable": ["helo"]}}, environ={})
    assert info.value.key == "plugins.enable"
    assert "no installed plugin is named 'helo' (did you mean 'hello'?)" in str(info.value)
    assert "installed: audit, hello" in str(info.value)
    host = Host({"plugins": {"disable": ["nope"]}}, environ={})  # a warning: see test_selection
    assert "no installed plugin is named 'nope'" in host.warnings[0]


def test_autoload_off_loads_none_but_what_dsh_plugins_names(installed):
    installed(ep("a"), ep("b"))
    host = Host(environ={"DSH_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert {row.status for row in host.plugins()} == {PluginStatus.DISABLED}
    assert "DSH_DISABLE_PLUGIN_AUTOLOAD" in (rows(host)["a"].error or "")
    host = Host(environ={"DSH_DISABLE_PLUGIN_AUTOLOAD": "1", "DSH_PLUGINS": "b"})
    assert rows(host)["b"].status is PluginStatus.ENABLED
    assert rows(host)["a"].status is PluginStatus.DISABLED
    host = Host(environ={"DSH_DISABLE_PLUGIN_AUTOLOAD": "0"})
    assert {row.status for row in host.plugins()} == {PluginStatus.ENABLED}


def test_dsh_plugins_is_an_allow_list(installed):
    installed(ep("a"), ep("b"))
    host = Host(environ={"DSH_PLUGINS": " b , "})
    assert rows(host)["a"].status is PluginStatus.DISABLED
    assert "DSH_PLUGINS" in (rows(host)["a"].error or "")
    assert rows(host)["b"].status is PluginStatus.ENABLED
    assert {r.status for r in Host(environ={"DSH_PLUGINS": ""}).plugins()} == {
        PluginStatus.DISABLED
    }
    with pytest.raises(ConfigError, match="DSH_PLUGINS environment variable: no installed plugin"):
        Host(environ={"DSH_PLUGINS": "c"})


def test_a_table_for_an_installed_but_unloaded_plugin_is_fine(installed):
    eps = installed(ep("hello"))
    Host({"plugin": {"hello": {"x": 1}}}, load_entrypoints=False)
    assert eps[0].loads == 0
    [warning] = Host({"plugin": {"helo": {}}}, load_entrypoints=False).warnings
    assert "(did you mean [plugin.hello]?); the table is ignored. Installed: hello" in warning


def test_plugin_objects_load_even_with_autoload_off(installed):
    installed(ep("a"))
    host = Host(plugins=[denier("x")], environ={"DSH_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert rows(host)["Denier"].status is PluginStatus.ENABLED


# -- order -----------------------------------------------------------------------------------


async def test_order_is_sorted_names_never_install_order(installed):
    installed(ep("zeta", denier("zeta")), ep("alpha", denier("alpha")))
    host = Host(environ={})
    assert [(r.name, r.order) for r in host.plugins()] == [("alpha", 1), ("zeta", 2)]
    result = await host.call("anything", {})  # the most recently registered is asked first
    assert result.decided_by == "zeta"


async def test_order_follows_the_enable_list(installed):
    installed(ep("zeta", denier("zeta")), ep("alpha", denier("alpha")))
    host = Host({"plugins": {"enable": ["zeta", "alpha", "zeta"]}}, environ={})
    assert [(r.name, r.order) for r in host.plugins()] == [("alpha", 2), ("zeta", 1)]
    assert (await host.call("anything", {})).decided_by == "alpha"


async def test_order_follows_dsh_plugins_without_an_enable_list(installed):
    installed(ep("zeta", denier("zeta")), ep("alpha", denier("alpha")))
    host = Host(environ={"DSH_PLUGINS": "zeta,alpha"})
    assert (await host.call("anything", {})).decided_by == "alpha"


def test_plugin_objects_register_after_entry_points(installed):
    installed(ep("b"))
    host = Host(plugins=[denier("x")], environ={})
    assert [(r.name, r.order) for r in host.plugins()] == [("Denier", 2), ("b", 1)]
    assert rows(host)["Denier"].source == "object"


# -- rows and helpers ------------------------------------------------------------------------


def test_rows_name_hooks_and_config_class():
    @attrs.frozen
    class Settings:
        level: int = 1

    class Configured:
        name = "configured"

        @hookimpl
        def dsh_plugin_config(self) -> type[Settings]:
            return Settings

        @hookimpl
        def dsh_tool_guard(self) -> None:
            return None

    host = Host(plugins=[Configured()], load_entrypoints=False)
    row = rows(host)["configured"]
    assert row.hooks == ("dsh_plugin_config", "dsh_tool_guard")
    assert row.config_class is not None
    assert row.config_class.endswith("Settings")
    assert row.to_json()["status"] == "enabled"
    assert host.config_for("configured") == Settings()


def test_config_for_an_unknown_plugin_raises():
    host = Host(load_entrypoints=False)
    with pytest.raises(KeyError):
        host.config_for(object())


def test_inspect_hooks_of_a_good_plugin():
    host = Host(load_entrypoints=False)
    assert inspect_hooks(host.pm, denier("x"), "d") == ("dsh_tool_pre_execute",)
