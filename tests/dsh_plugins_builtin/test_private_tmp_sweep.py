"""The sandbox's private tmp: locked for its host's life, and swept once a host killed outright
(SIGKILL: no finalizer runs) left it behind. Only objects this test made are touched."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._sandbox._starting import _remove_if_unlocked, sweep_stale_tmp
from dsh_plugins_builtin.sandbox import SandboxPlugin

HOUR = 3600.0


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base"
    path.mkdir()
    return path


def left(base: Path, name: str, *, age: float = HOUR) -> Path:
    """A directory as a killed host leaves it: with a file in it, last changed *age* ago."""
    path = base / name
    path.mkdir(mode=0o700)
    (path / "scratch").write_text("x")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


@pytest.fixture
def held(base: Path) -> Iterator[Path]:
    """A private tmp a live host holds (its shared lock)."""
    path = left(base, "dsh-tmpl-live")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield path
    finally:
        os.close(fd)


def test_a_stale_private_tmp_is_removed(base: Path) -> None:
    stale = left(base, "dsh-tmpl-abc123")
    assert sweep_stale_tmp(base) == [stale]
    assert not stale.exists()


def test_a_private_tmp_a_live_host_holds_is_kept(base: Path, held: Path) -> None:
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (held / "scratch").exists()


def test_a_young_private_tmp_is_kept_before_its_host_locks_it(base: Path) -> None:
    young = left(base, "dsh-tmpl-young", age=0)
    assert sweep_stale_tmp(base) == []
    assert young.exists()


def test_only_our_own_directories_named_so_are_removed(base: Path, tmp_path: Path) -> None:
    other = left(base, "not-dsh-tmp")
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    (base / "dsh-tmpl-link").symlink_to(target)
    (base / "dsh-tmpl-file").write_text("x")
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (other / "scratch").exists()
    assert (target / "keep").exists()
    assert (base / "dsh-tmpl-file").exists()


def test_an_older_hosts_unlocked_private_tmp_is_never_swept(base: Path) -> None:
    older = left(base, "dsh-tmp-k2x8q1ab")  # made by a dsh that did not lock it: may be live
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (older / "scratch").exists()


def test_a_directory_swapped_since_it_was_looked_at_is_kept(base: Path) -> None:
    looked_at = left(base, "dsh-tmpl-first")
    seen = os.stat(looked_at, follow_symlinks=False)
    looked_at.rename(base / "elsewhere")
    swapped = left(base, "dsh-tmpl-first")  # another directory under the same name
    assert not _remove_if_unlocked(base, "dsh-tmpl-first", seen)
    assert (swapped / "scratch").exists()
    assert _remove_if_unlocked(base, "elsewhere", seen)  # the one it looked at, unlocked


def test_a_hosts_own_private_tmp_is_locked_while_it_lives(make_host: Any, ws: Path) -> None:
    plugin = SandboxPlugin()
    make_host(plugin, config={"host": {"workspace": str(ws)}})
    assert plugin.tmp is not None
    # (other, dead hosts' private tmps in the shared /tmp may be swept meanwhile: not ours)
    assert plugin.tmp not in sweep_stale_tmp(plugin.tmp.parent, min_age=0)
    assert plugin.tmp.exists()


def test_a_killed_hosts_private_tmp_is_swept_by_the_next(base: Path, ws: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from dsh_host import Host
        from dsh_plugins_builtin.sandbox import SandboxPlugin
        plugin = SandboxPlugin()
        host = Host({{"host": {{"workspace": {str(ws)!r}}}}}, plugins=[plugin],
                    load_entrypoints=False)
        print(plugin.tmp, flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "TMPDIR": str(base)}
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        tmp = Path(child.stdout.readline().decode().strip())
        assert tmp.parent == base
        assert tmp.name.startswith("dsh-tmpl-")
        assert sweep_stale_tmp(base, min_age=0) == []  # alive: kept
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert tmp.exists()  # no finalizer ran
    assert sweep_stale_tmp(base, min_age=0) == [tmp]
    assert not tmp.exists()
