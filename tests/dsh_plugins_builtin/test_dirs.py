"""`dsh_plugins_builtin._common._dirs`: the user's directories without importing platformdirs,
exactly as platformdirs names them (issue 27)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import platformdirs
import pytest

from dsh_plugins_builtin._common import _dirs

VARIABLES = ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "HOME")
VALUES = (None, "", "/x/y", "/x/y/", "/", "//x", "rel/x", " /x", "/x ", "~/x", "/x/../y")


def _answers() -> tuple[object, ...]:
    return (
        _dirs.user_state_path("dsh"),
        _dirs.user_data_path("dsh"),
        _dirs.user_cache_path(),
    )


def _platformdirs() -> tuple[object, ...]:
    return (
        platformdirs.user_state_path("dsh"),
        platformdirs.user_data_path("dsh"),
        platformdirs.user_cache_path(),
    )


@pytest.mark.parametrize("home", VALUES)
def test_every_environment_gets_platformdirs_answer(monkeypatch, home):
    """Whatever the answer comes from (the spelled-out common case or platformdirs), it is
    platformdirs' own, for each combination of XDG values."""
    for values in itertools.product(VALUES, repeat=3):
        for name, value in zip(VARIABLES, (*values, home), strict=True):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        try:
            expected: object = _platformdirs()
        except Exception as exc:  # platformdirs refuses (no usable home): so do we
            expected = type(exc)
        try:
            got: object = _answers()
        except Exception as exc:
            got = type(exc)
        assert got == expected, (home, values)


def test_the_common_case_does_not_import_platformdirs(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ANDROID_"))},
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    code = (
        "import sys\n"
        "from dsh_plugins_builtin._common import _dirs\n"
        "print(_dirs.user_state_path('dsh'), _dirs.user_data_path('dsh'), _dirs.user_cache_path())\n"
        "assert 'platformdirs' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [
        str(tmp_path / "state" / "dsh"),
        str(tmp_path / ".local" / "share" / "dsh"),
        str(tmp_path / ".cache"),
    ]


def test_an_android_app_is_left_to_platformdirs(monkeypatch):
    monkeypatch.setenv("ANDROID_DATA", "/data")
    monkeypatch.setenv("HOME", "/x")
    assert _dirs._xdg("XDG_STATE_HOME", ".local/state", "dsh") is None


@pytest.mark.parametrize("home", VALUES)
def test_the_entry_point_cache_is_in_the_state_directory_the_plugins_use(monkeypatch, home):
    """The host's entry-points cache lives where the audit database does and the sandbox hides
    from commands: a padded ``XDG_STATE_HOME`` (stripped by the host, kept by platformdirs) put
    it outside. ``None`` (no cache) only when that directory is not absolute."""
    from pathlib import Path

    from dsh_host._host import _entrypoints

    for value in VALUES:
        for name, setting in (("XDG_STATE_HOME", value), ("HOME", home)):
            if setting is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, setting)
        try:
            state: Path | None = _dirs.user_state_path("dsh")
        except Exception:  # no usable home
            state = None
        cache = _entrypoints.cache_path()
        if state is None or not state.is_absolute():
            assert cache is None, (home, value)
        else:
            assert cache is not None, (home, value)
            assert Path(cache) == state / "entry-points.json", (home, value)
