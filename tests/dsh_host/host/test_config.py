"""Configuration: finding the file, its tables, and strict per-plugin structuring (issue #3 §3)."""

from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib
from typing import Any, Literal

import attrs
import pytest

from dsh_host import ConfigError, Host, find_config, hookimpl
from dsh_host._host._config import (
    HostSettings,
    PluginSelection,
    describe_type,
    load_config,
    structure_plugin_config,
)
from tests.trusted import write_config


@pytest.fixture(autouse=True)
def nothing_installed(monkeypatch):
    """Hide installed entry points: messages listing "installed" plugins stay predictable."""
    real = importlib.metadata.entry_points

    def entry_points(**selection: Any) -> Any:
        return [] if selection == {"group": "dsh.plugins"} else real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


@attrs.frozen
class Settings:
    deny_names: tuple[str, ...] = ()
    greeting: str = "hello"
    loud: bool = False
    retries: int = 3
    ratio: float = 1.0
    mode: Literal["ask", "deny"] = "ask"
    where: pathlib.Path = pathlib.Path(".")
    limits: dict[str, int] = attrs.field(factory=dict)
    pair: tuple[int, str] = (0, "")
    either: int | str = 0


@attrs.frozen
class Required:
    token: str


@attrs.frozen
class Positive:
    n: int = attrs.field(default=1)

    @n.validator
    def _check(self, attribute: Any, value: int) -> None:
        if value < 1:
            raise ValueError("n must be at least 1")


def structure(data: dict[str, Any], cls: type[Any] = Settings) -> Any:
    return structure_plugin_config(data, cls, plugin="policy", where="dsh.toml")


def problem(data: dict[str, Any], cls: type[Any] = Settings) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        structure(data, cls)
    return info.value


# -- finding the file ------------------------------------------------------------------------


def test_no_config_anywhere_is_fine(tmp_path):
    assert find_config(tmp_path, {}) is None
    assert load_config(None) == load_config(None)
    host = Host(None, load_entrypoints=False)
    assert host.config.source is None
    assert host.config.describe() == "the built-in defaults"


def test_dsh_toml_beats_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.dsh.host]\nobserver_timeout = 1\n")
    assert find_config(tmp_path, {}) == tmp_path / "pyproject.toml"
    write_config(tmp_path / "dsh.toml", "")
    assert find_config(tmp_path, {}) == tmp_path / "dsh.toml"


def test_pyproject_without_tool_dsh_is_not_a_config(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.other]\nx = 1\n")
    assert find_config(tmp_path, {}) is None


@pytest.mark.parametrize(
    "content",
    [
        b'[project]\ndependencies = ["a",]]\n[tool.dsh.plugin.permissions]\ndeny = ["bash"]\n',
        b"not [valid toml",
        b"[tool.dsh]\n\xff\n",
    ],
)
def test_a_pyproject_dsh_cannot_read_stops_it_rather_than_dropping_its_rules(tmp_path, content):
    # A broken file may hold [tool.dsh] deny rules: starting with the built-in defaults would
    # drop them without a word (a reviewer read a denied file so).
    path = tmp_path / "pyproject.toml"
    path.write_bytes(content)
    assert find_config(tmp_path, {}) == path
    with pytest.raises(ConfigError, match=r"dsh\.toml beside it") as info:
        Host.from_config(None, load_entrypoints=False, cwd=tmp_path, environ={})
    assert info.value.path == str(path)


def test_dsh_config_beats_dsh_toml(tmp_path):
    write_config(tmp_path / "dsh.toml", "")
    other = tmp_path / "elsewhere.toml"
    other.write_text("")
    assert find_config(tmp_path, {"DSH_CONFIG": str(other)}) == other


def test_dsh_config_naming_a_missing_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="DSH_CONFIG") as info:
        find_config(tmp_path, {"DSH_CONFIG": str(tmp_path / "missing.toml")})
    assert info.value.path == str(tmp_path / "missing.toml")


def test_explicit_path_beats_dsh_config_and_dsh_toml(tmp_path):
    write_config(tmp_path / "dsh.toml", "[host]\nobserver_timeout = 1\n")
    env = tmp_path / "env.toml"
    env.write_text("[host]\nobserver_timeout = 2\n")
    explicit = tmp_path / "explicit.toml"
    explicit.write_text("[host]\nobserver_timeout = 3\n")
    environ = {"DSH_CONFIG": str(env)}
    host = Host.from_config(explicit, load_entrypoints=False, cwd=tmp_path, environ=environ)
    assert host.config.host.observer_timeout == 3
    host = Host.from_config(None, load_entrypoints=False, cwd=tmp_path, environ=environ)
    assert host.config.host.observer_timeout == 2
    host = Host.from_config(None, load_entrypoints=False, cwd=tmp_path, environ={})
    assert host.config.host.observer_timeout == 1


def test_pyproject_tool_dsh_is_read(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n[tool.dsh.plugins]\ndisable = ["audit"]\n')
    assert load_config(path).plugins.disable == ("audit",)


def test_tool_dsh_must_be_a_table(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool]\ndsh = "yes"\n')
    with pytest.raises(ConfigError, match=r"\[tool.dsh\] must be a table"):
        load_config(path)


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file") as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.path == str(tmp_path / "nope.toml")


def test_toml_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "dsh.toml"
    path.write_text('[plugins]\nenable = ["a"]\ndisable = ["b" "c"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "not valid TOML" in message
    assert "line 3, column" in message


# -- the top-level tables --------------------------------------------------------------------


def test_unknown_top_level_table_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"unknown top-level table \[plugin_\]") as info:
        load_config({"plugin_": {}})
    assert "did you mean 'plugin'" in str(info.value)
    assert info.value.key == "plugin_"


def test_plugins_enable_must_be_a_list_not_a_string(tmp_path):
    path = tmp_path / "dsh.toml"
    path.write_text('[plugins]\nenable = "hello"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "plugins.enable"
    assert info.value.path == str(path)
    assert 'expected a list of strings, got the string "hello"' in str(info.value)


def test_unknown_key_in_plugins_table_suggests_the_right_one():
    with pytest.raises(ConfigError, match="did you mean 'disable'") as info:
        load_config({"plugins": {"disabled": ["x"]}})
    assert info.value.key == "plugins.disabled"


def test_host_table_types_are_strict():
    with pytest.raises(ConfigError, match="expected a number, got the string") as info:
        load_config({"host": {"observer_timeout": "10"}})
    assert info.value.key == "host.observer_timeout"
    assert load_config({"host": {"observer_timeout": 5}}).host.observer_timeout == 5.0


def test_plugin_tables_must_be_tables():
    with pytest.raises(ConfigError, match="must be a table") as info:
        load_config({"plugin": {"policy": 3}})
    assert info.value.plugin == "policy"


def test_workspace_is_relative_to_the_config_file(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "dsh.toml"
    path.write_text('[host]\nworkspace = "../ws"\n')
    (tmp_path / "ws").mkdir()
    assert load_config(path).host.workspace == (tmp_path / "ws").resolve()
    (tmp_path / "ws").rmdir()  # a config file's workspace must be a directory
    with pytest.raises(ConfigError, match=r"\[host\] workspace '.*ws' does not exist") as info:
        load_config(path)
    assert (info.value.path, info.value.key) == (str(path), "host.workspace")


def test_defaults():
    config = load_config({})
    assert config.plugins == PluginSelection(enable=None, disable=())
    assert config.host.observer_timeout == HostSettings().observer_timeout
    assert load_config({"plugins": {"enable": []}}).plugins.enable == ()


# -- per-plugin tables -----------------------------------------------------------------------


def test_a_valid_table_is_structured_into_the_class():
    settings = structure({"deny_names": ["mallory"], "retries": 5, "ratio": 2, "where": "x"})
    assert settings == Settings(
        deny_names=("mallory",), retries=5, ratio=2.0, where=pathlib.Path("x")
    )
    assert isinstance(settings.ratio, float)


def test_unknown_key_names_file_plugin_key_and_the_valid_keys():
    error = problem({"greting": "hi"})
    assert (error.path, error.plugin, error.key) == ("dsh.toml", "policy", "greting")
    message = str(error)
    assert message.startswith("dsh.toml, [plugin.policy], key 'greting': unknown key")
    assert "did you mean 'greeting'" in message
    assert "greeting (a string)" in message


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        ({"deny_names": "mallory"}, "deny_names", 'a list of strings, got the string "mallory"'),
        ({"deny_names": ["a", 1]}, "deny_names[1]", "a string, got the integer 1"),
        ({"greeting": 5}, "greeting", "a string, got the integer 5"),
        ({"loud": "false"}, "loud", 'true or false, got the string "false"'),
        ({"retries": "7"}, "retries", 'an integer, got the string "7"'),
        ({"retries": True}, "retries", "an integer, got true"),
        ({"retries": 1.5}, "retries", "an integer, got the number 1.5"),
        ({"ratio": False}, "ratio", "a number, got false"),
        ({"mode": "allow"}, "mode", 'one of "ask", "deny", got the string "allow"'),
        ({"where": 3}, "where", "a path string, got the integer 3"),
        ({"deny_names": {"a": 1}}, "deny_names", "a list of strings, got a table"),
        ({"limits": {"read": "x"}}, "limits.read", 'an integer, got the string "x"'),
        ({"limits": [1]}, "limits", "a table, got a list"),
        ({"pair": [1]}, "pair", "a list, got a list"),
        ({"pair": ["a", "b"]}, "pair[0]", 'an integer, got the string "a"'),
        ({"either": 1.5}, "either", "an integer or a string, got the number 1.5"),
    ],
)
def test_wrong_types_are_errors_not_coercions(data, key, expected):
    error = problem(data)
    assert error.key == key
    assert f"key {key!r}: expected {expected}" in str(error)


def test_nested_and_union_values_that_fit():
    settings = structure({"limits": {"read": 2}, "pair": [1, "x"], "either": "s"})
    assert (settings.limits, settings.pair, settings.either) == ({"read": 2}, (1, "x"), "s")


def test_every_problem_is_named_at_once():
    message = str(problem({"greting": "x", "retries": "1"}))
    assert "key 'greting': unknown key" in message
    assert "key 'retries': expected an integer" in message


def test_missing_required_value():
    error = problem({}, Required)
    assert error.key == "token"
    assert "required key is missing; expected a string" in str(error)


def test_class_validators_become_config_errors():
    error = problem({"n": 0}, Positive)
    assert error.plugin == "policy"
    assert "n must be at least 1" in str(error)


def test_describe_type():
    assert describe_type(tuple[str, ...]) == "a list of strings"
    assert describe_type(list[int]) == "a list of integers"
    assert describe_type(Literal["a", 1]) == 'one of "a", 1'
    assert describe_type(dict[str, int]) == "a table"
    assert describe_type(Settings) == "a table"
    assert describe_type(int | str) == "an integer or a string"
    assert describe_type(str | None) == "a string"


# -- through the host ------------------------------------------------------------------------


class Policy:
    """A plugin with a config class, reading it through the host."""

    name = "policy"

    def __init__(self) -> None:
        self.seen: Any = None

    @hookimpl
    def dsh_plugin_config(self) -> type[Settings]:
        return Settings

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.seen = host.config_for(self)


class Plain:
    name = "plain"

    @hookimpl
    def dsh_tool_guard(self) -> None:
        return None


def test_plugin_reads_its_table_through_the_host():
    policy = Policy()
    config = {"plugin": {"policy": {"deny_names": ["mallory"]}}}
    host = Host(config, plugins=[policy], load_entrypoints=False)
    assert policy.seen == Settings(deny_names=("mallory",))
    assert host.config_for("policy") is policy.seen
    assert host.config_for(policy) is policy.seen


def test_no_table_gives_the_class_defaults():
    policy = Policy()
    Host(plugins=[policy], load_entrypoints=False)
    assert policy.seen == Settings()


def test_a_bad_value_stops_the_host_naming_file_plugin_and_key(tmp_path):
    path = tmp_path / "dsh.toml"
    path.write_text('[plugin.policy]\nloud = "yes"\n')
    with pytest.raises(ConfigError) as info:
        Host(path, plugins=[Policy()], load_entrypoints=False)
    assert (info.value.path, info.value.plugin, info.value.key) == (str(path), "policy", "loud")


def test_a_table_for_an_unknown_plugin_is_a_warning_listing_what_is_installed():
    host = Host({"plugin": {"polcy": {}}}, plugins=[Policy(), Plain()], load_entrypoints=False)
    [warning] = host.warnings
    assert warning.startswith("the configuration given to Host, [plugin.polcy]: no plugin")
    assert "(did you mean [plugin.policy]?)" in warning
    assert "Installed: plain, policy" in warning


def test_a_table_for_a_plugin_without_config_class_is_an_error():
    with pytest.raises(ConfigError, match="takes no configuration") as info:
        Host({"plugin": {"plain": {"x": 1}}}, plugins=[Plain()], load_entrypoints=False)
    assert info.value.plugin == "plain"


def test_config_error_from_host_started_stops_the_host():
    class Strict:
        name = "strict"

        @hookimpl
        def dsh_host_started(self) -> None:
            raise ConfigError("rule file does not parse", path="rules.toml")

    with pytest.raises(ConfigError, match="rule file does not parse"):
        Host(plugins=[Strict()], load_entrypoints=False)


def test_effective_config_round_trips_through_toml():
    from dsh_host._cli._toml import dump_toml
    from dsh_host._host._config import config_converter

    settings = Settings(deny_names=("a", 'b"c'), where=pathlib.Path("x y"))
    tables = {("plugin", "my.plugin"): config_converter().unstructure(settings)}
    parsed = tomllib.loads("\n".join(dump_toml(tables)))
    assert structure(parsed["plugin"]["my.plugin"]) == settings


def test_a_config_class_the_converter_cannot_structure_fails_the_plugin():
    @attrs.frozen
    class Odd:
        value: list[int] | dict[str, int] = attrs.field(factory=list)

    class OddPlugin:
        name = "odd"

        @hookimpl
        def dsh_plugin_config(self) -> type[Odd]:
            return Odd

    host = Host({"plugin": {"odd": {"value": [1]}}}, plugins=[OddPlugin()], load_entrypoints=False)
    (row,) = host.plugins()
    assert row.status.value == "failed"
    assert "config class cannot be structured" in (row.error or "")
    assert host.pm.get_plugin("odd") is None


def test_a_config_dict_describes_itself_as_given_to_host():
    from dsh_host._host._config import load_config as load

    assert load({"plugin": {}}).describe() == "the configuration given to Host"
    assert load(None).describe() == "the built-in defaults"


@attrs.frozen
class Limits:
    processes: int = 1
    open_files: int = 2


@attrs.frozen
class Outer:
    mode: str = "x"
    limits: Limits = Limits()
    maybe: Limits | None = None


@pytest.mark.parametrize("table", ["limits", "maybe"])
def test_an_unknown_nested_key_lists_the_keys_of_its_own_table(table):
    message = str(problem({table: {"procs": 5}}, Outer))
    assert f"key '{table}.procs': unknown key (did you mean 'processes'?)" in message
    assert f"Valid keys of {table}: processes (an integer), open_files (an integer)" in message
    assert "mode (" not in message
    top = str(problem({"mods": 1}, Outer))
    assert "Valid keys: mode (a string), limits (a table)" in top


def test_a_workspace_under_home_is_spelled_with_a_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "proj").mkdir(parents=True)
    path = tmp_path / "dsh.toml"
    path.write_text('[host]\nworkspace = "~/proj"\n')
    assert load_config(path).host.workspace == (tmp_path / "home" / "proj").resolve()


async def test_open_host_refuses_a_workspace_that_is_no_directory(tmp_path):
    from dsh_host import open_host

    (tmp_path / "file").write_text("")
    for given, problem in ((tmp_path / "missing", "does not exist"), (tmp_path / "file", "is not")):
        with pytest.raises(ConfigError, match=f"given to open_host {problem}") as info:
            async with open_host(workspace=given, entry_points=False):
                pass  # pragma: no cover
        assert info.value.key == "host.workspace"
