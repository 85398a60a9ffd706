"""An empty (or absent) config table is its class's defaults, without cattrs (issue 27)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import attrs
import pytest

from dsh_host import ConfigError
from dsh_host._host._config import structure_plugin_config


@attrs.frozen
class Defaults:
    retries: int = 3
    names: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class BadDefault:
    n: int = attrs.field(default=0)

    @n.validator
    def _check(self, attribute: Any, value: int) -> None:
        if value < 1:
            raise ValueError("n must be at least 1")


@attrs.frozen
class Required:
    token: str


def structure(cls: type[Any]) -> Any:
    return structure_plugin_config({}, cls, plugin="p", where="dsh.toml")


def test_an_empty_table_is_the_defaults() -> None:
    assert structure(Defaults) == Defaults()


def test_an_empty_table_still_names_a_default_its_validator_rejects() -> None:
    with pytest.raises(ConfigError, match=r"\[plugin.p\]: invalid value: n must be at least 1"):
        structure(BadDefault)


def test_an_empty_table_still_names_a_missing_required_key() -> None:
    with pytest.raises(ConfigError, match="required key is missing") as info:
        structure(Required)
    assert info.value.key == "token"


def test_an_empty_table_imports_no_cattrs() -> None:
    code = (
        "import sys, attrs\n"
        "from dsh_host._host._config import structure_plugin_config\n"
        "@attrs.frozen\n"
        "class C:\n"
        "    retries: int = 3\n"
        "assert structure_plugin_config({}, C, plugin='p', where=None) == C()\n"
        "assert 'cattrs' not in sys.modules, 'cattrs imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
