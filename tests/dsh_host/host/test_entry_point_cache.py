"""The entry-point cache (`dsh_host._host._entrypoints`, issue 27): it answers what
`importlib.metadata` would, or it is not used.

Each check runs fresh interpreters over a site directory of fake distributions (on
``PYTHONPATH``) with a state directory of its own, and compares what the host would load with
what `importlib.metadata` finds in the same environment.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from dsh_host._host import _entrypoints

PROBE = """
import json, sys
from dsh_host._host._entrypoints import installed_entry_points
eps = installed_entry_points("dsh.plugins")
cached = "importlib.metadata" not in sys.modules
import importlib.metadata
truth = importlib.metadata.entry_points(group="dsh.plugins")
def rows(eps):
    return [[ep.name, ep.value, ep.dist.name, ep.dist.version] for ep in eps]
print(json.dumps({"found": rows(eps), "truth": rows(truth), "cached": cached}))
"""


class Env:
    """A site directory of fake distributions and a state directory, for fresh interpreters."""

    def __init__(self, root: pathlib.Path) -> None:
        self.site = root / "site"
        self.state = root / "state"
        self.cwd = root / "cwd"
        for place in (self.site, self.state, self.cwd):
            place.mkdir()

    def install(self, name: str, entry_points: str, version: str = "1.0") -> pathlib.Path:
        info = self.site / f"{name.replace('-', '_')}-{version}.dist-info"  # as pip names it
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(entry_points)
        return info

    @property
    def cache(self) -> pathlib.Path:
        return self.state / "dsh" / "entry-points.json"

    def run(self, state: pathlib.Path | None = None) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        env["PYTHONPATH"] = str(self.site)
        env["XDG_STATE_HOME"] = str(state or self.state)
        done = subprocess.run(
            [sys.executable, "-c", PROBE],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Env:
    made = Env(tmp_path)
    made.install("dsh-fake", "[dsh.plugins]\nfake = fake_module:Plugin\n\n[other]\nx = y\n")
    return made


def names(result: dict[str, Any], key: str = "found") -> set[str]:
    return {row[0] for row in result[key]}


def test_the_second_process_is_answered_by_the_cache_with_what_importlib_finds(env):
    first = env.run()
    assert not first["cached"]
    assert env.cache.exists()
    second = env.run()
    assert second["cached"], "the cache was not used"
    assert second["found"] == second["truth"]
    assert "fake" in names(second)
    assert ["fake", "fake_module:Plugin", "dsh-fake", "1.0"] in second["found"]


def test_an_installed_distribution_is_seen_at_once(env):
    env.run()
    env.install("dsh-more", "[dsh.plugins]\nmore = more_module:Plugin\n")
    after = env.run()
    assert after["found"] == after["truth"]
    assert {"fake", "more"} <= names(after)


def test_an_upgraded_distribution_shows_its_new_version(env):
    """Same entry points, new version: the key (the site directory's mtime) changed."""
    env.run()
    old = env.site / "dsh_fake-1.0.dist-info"
    new = env.install("dsh-fake", (old / "entry_points.txt").read_text(), version="2.0")
    for child in old.iterdir():
        child.unlink()
    old.rmdir()
    after = env.run()
    assert ["fake", "fake_module:Plugin", "dsh-fake", "2.0"] in after["found"]
    assert after["found"] == after["truth"]
    assert new.exists()


def test_a_working_directory_without_distributions_may_change(env):
    """``python -m dsh_host`` puts the working directory on sys.path: files the agent writes
    there change its mtime, not the answer."""
    env.run()
    (env.cwd / "notes.txt").write_text("an agent wrote this")
    assert env.run()["cached"]
    env.cwd = env.cwd.parent / "another-workspace"
    env.cwd.mkdir()
    assert env.run()["cached"]


def test_a_changed_file_behind_an_unchanged_mtime_is_not_served_stale(env):
    """The key (path mtimes) matches, but the files say otherwise: a miss."""
    env.run()
    assert env.run()["cached"]
    before = os.stat(env.site)
    info = env.site / "dsh_fake-1.0.dist-info"
    (info / "entry_points.txt").write_text("[dsh.plugins]\nrenamed = fake_module:Other\n")
    env.install("dsh-twin", "[dsh.plugins]\nfake = twin_module:Plugin\n")
    os.utime(env.site, ns=(before.st_atime_ns, before.st_mtime_ns))  # fake an unchanged mtime
    after = env.run()
    assert not after["cached"]
    assert after["found"] == after["truth"]
    assert ["renamed", "fake_module:Other", "dsh-fake", "1.0"] in after["found"]
    assert ["fake", "twin_module:Plugin", "dsh-twin", "1.0"] in after["found"]


def planted(env: Env, edit: Any) -> dict[str, Any]:
    """Write a cache whose key is right for this environment, its list edited by *edit*."""
    env.run()
    data = json.loads(env.cache.read_text())
    rows = data["entries"][0]["entry_points"]
    edit(rows)
    env.cache.write_text(json.dumps(data))
    return env.run()


def test_a_planted_cache_cannot_add_an_entry_point(env):
    def add(rows: list[dict[str, Any]]) -> None:
        rows.append({"name": "evil", "value": "evil:Plugin", "distribution": "dsh-fake",
                     "version": "1.0"})  # fmt: skip

    after = planted(env, add)
    assert "evil" not in names(after)
    assert after["found"] == after["truth"]


def test_a_planted_cache_cannot_drop_an_entry_point(env):
    def drop(rows: list[dict[str, Any]]) -> None:
        rows[:] = [row for row in rows if row["name"] != "fake"]

    after = planted(env, drop)
    assert "fake" in names(after)
    assert after["found"] == after["truth"]


def test_a_planted_cache_cannot_redirect_an_entry_point(env):
    def redirect(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row["name"] == "fake":
                row["value"] = "evil:Plugin"

    after = planted(env, redirect)
    assert ["fake", "fake_module:Plugin", "dsh-fake", "1.0"] in after["found"]
    assert after["found"] == after["truth"]


def test_a_planted_cache_cannot_move_an_entry_point_to_another_distribution(env):
    def move(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row["name"] == "fake":
                row["distribution"] = "trusted-vendor"

    after = planted(env, move)
    assert after["found"] == after["truth"]
    assert not after["cached"]


def test_a_planted_cache_cannot_show_a_version_that_is_not_one(env):
    def escape(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row["name"] == "fake":
                row["version"] = "1.0\x1b]2;owned\x07"

    after = planted(env, escape)
    assert ["fake", "fake_module:Plugin", "dsh-fake", "1.0"] in after["found"]
    assert not after["cached"]


@pytest.mark.parametrize(
    ("field", "shown"),
    [("version", "99.0"), ("distribution", "DSH._-FAKE"), ("distribution", "dsh-\u212aake")],
    ids=["another-version", "another-spelling", "kelvin-sign"],
)
def test_a_planted_cache_cannot_show_another_name_or_version(env, field, shown):
    def spoof(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row["name"] == "fake":
                row[field] = shown

    after = planted(env, spoof)
    assert ["fake", "fake_module:Plugin", "dsh-fake", "1.0"] in after["found"]
    assert not after["cached"]


def test_a_path_object_on_sys_path_is_no_error(env, monkeypatch):
    monkeypatch.setattr(_entrypoints, "cache_path", lambda: str(env.cache))
    monkeypatch.setattr(sys, "path", [*sys.path, pathlib.Path(env.site)])
    found = _entrypoints.installed_entry_points("dsh.plugins")
    assert "permissions" in {ep.name for ep in found}
    assert not env.cache.exists()  # not keyed, not cached


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xffnot json",
        b'{"format": 1, "entries": {"not": "a list"}}',
        b'{"format": 1, "entries": [{"key": 1, "entry_points": 2}]}',
        b'{"format": 99, "entries": []}',
        b"[" * 100_000,
        b" " * (_entrypoints.MAX_BYTES + 10),
    ],
    ids=["garbage", "shape", "entry-shape", "format", "deep", "oversized"],
)
def test_a_corrupt_cache_falls_back_to_a_fresh_read(env, content):
    env.cache.parent.mkdir(parents=True)
    env.cache.write_bytes(content)
    after = env.run()
    assert after["found"] == after["truth"]
    assert "fake" in names(after)
    assert env.run()["cached"]  # and the next process is answered again


def test_a_cache_that_is_not_a_regular_file_is_ignored(env):
    env.cache.parent.mkdir(parents=True)
    os.mkfifo(env.cache)  # reading a FIFO would block the host
    after = env.run()
    assert after["found"] == after["truth"]


def test_a_symlinked_cache_is_not_followed(env, tmp_path):
    env.run()
    elsewhere = tmp_path / "elsewhere.json"
    env.cache.rename(elsewhere)
    env.cache.symlink_to(elsewhere)
    after = env.run()
    assert not after["cached"]
    assert after["found"] == after["truth"]


def test_a_state_directory_that_cannot_be_written_is_no_error(env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    first = env.run(state=blocker / "below")  # makedirs fails: NotADirectoryError
    second = env.run(state=blocker / "below")
    assert first["found"] == first["truth"] == second["found"]
    assert not second["cached"]


def test_a_stand_in_for_importlib_metadata_is_asked_directly(monkeypatch):
    import importlib.metadata

    ghost = importlib.metadata.EntryPoint("ghost", "ghost:Plugin", "dsh.plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [ghost])
    assert _entrypoints.installed_entry_points("dsh.plugins") == [ghost]


def test_an_entry_point_loads_as_importlib_metadata_loads_it():
    ep = _entrypoints.InstalledEntryPoint("x", "os.path:join", "g")
    assert ep.load() is os.path.join
    with pytest.raises(ValueError, match="not an entry point value"):
        _entrypoints.InstalledEntryPoint("x", "a b c", "g").load()
