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

from dsh_host import ConfigError
from dsh_plugins_builtin._sandbox import _locks
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
    """A private tmp a live host holds (its shared lock, a file in the lock directory)."""
    path = left(base, "dsh-ptmp-live")
    info = os.stat(path)
    lock = _locks.lock_key("tmp", info.st_dev, info.st_ino, fcntl.LOCK_SH)
    try:
        yield path
    finally:
        _locks.release(lock)


def test_a_stale_private_tmp_is_removed(base: Path) -> None:
    stale = left(base, "dsh-ptmp-abc123")
    assert sweep_stale_tmp(base) == [stale]
    assert not stale.exists()


def test_a_private_tmp_a_live_host_holds_is_kept(base: Path, held: Path) -> None:
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (held / "scratch").exists()


def test_a_young_private_tmp_is_kept_before_its_host_locks_it(base: Path) -> None:
    young = left(base, "dsh-ptmp-young", age=0)
    assert sweep_stale_tmp(base) == []
    assert young.exists()


def test_only_our_own_directories_named_so_are_removed(base: Path, tmp_path: Path) -> None:
    other = left(base, "not-dsh-tmp")
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    (base / "dsh-ptmp-link").symlink_to(target)
    (base / "dsh-ptmp-file").write_text("x")
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (other / "scratch").exists()
    assert (target / "keep").exists()
    assert (base / "dsh-ptmp-file").exists()


@pytest.mark.parametrize("name", ["dsh-tmp-k2x8q1ab", "dsh-tmpl-k2x8q1ab"])
def test_an_older_hosts_private_tmp_is_never_swept(base: Path, name: str) -> None:
    """Made by a dsh that did not lock it, or that locked the directory itself: may be live."""
    older = left(base, name)
    assert sweep_stale_tmp(base, min_age=0) == []
    assert (older / "scratch").exists()


def test_a_lock_on_the_private_tmp_itself_neither_keeps_nor_sweeps_it(
    base: Path, held: Path
) -> None:
    """A command sees its private tmp as ``/tmp`` and can ``flock`` it: the host's lock is
    elsewhere (before, a command's shared lock kept its dead host's tmp from ever being swept,
    and the host's own lock was one the command could reach)."""
    stale = left(base, "dsh-ptmp-stale")
    holders = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (held, stale)]
    try:
        fcntl.flock(holders[0], fcntl.LOCK_EX | fcntl.LOCK_NB)  # the live host's lock is not it
        fcntl.flock(holders[1], fcntl.LOCK_SH | fcntl.LOCK_NB)
        assert sweep_stale_tmp(base, min_age=0) == [stale]
    finally:
        for fd in holders:
            os.close(fd)
    assert (held / "scratch").exists()


def test_a_directory_swapped_since_it_was_looked_at_is_kept(base: Path) -> None:
    looked_at = left(base, "dsh-ptmp-first")
    seen = os.stat(looked_at, follow_symlinks=False)
    looked_at.rename(base / "elsewhere")
    swapped = left(base, "dsh-ptmp-first")  # another directory under the same name
    assert not _remove_if_unlocked(base, "dsh-ptmp-first", seen)
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
        assert tmp.name.startswith("dsh-ptmp-")
        assert sweep_stale_tmp(base, min_age=0) == []  # alive: kept
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert tmp.exists()  # no finalizer ran
    assert sweep_stale_tmp(base, min_age=0) == [tmp]
    assert not tmp.exists()


def test_a_start_sweeps_nothing_and_the_first_command_sweeps_once(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dsh hook`` and a read run no command: they scan no ``/tmp``."""
    from dsh_plugins_builtin._sandbox import _starting

    swept: list[Path] = []
    checks: list[bool] = []

    def check(*args: Any, deferred: bool) -> None:
        checks.append(deferred)
        if len(checks) == 1:
            raise ConfigError("not here")  # the first command is refused: no second sweep

    monkeypatch.setattr(_starting, "sweep_stale_tmp", lambda base: swept.append(base) or [])
    monkeypatch.setattr(_starting, "check_enforceable", check)
    monkeypatch.setattr(_starting, "landlock_possible", lambda config, bwrap: False)
    plugin = SandboxPlugin()
    make_host(plugin, config={"host": {"workspace": str(ws)}})
    assert plugin.tmp is not None
    assert (swept, checks) == ([], [])  # started: nothing swept, nothing probed
    assert plugin._check is not None
    with pytest.raises(ConfigError):
        plugin._check.run()
    assert swept == [plugin.tmp.parent]
    plugin._check.run()
    plugin._check.run()
    assert (swept, checks) == ([plugin.tmp.parent], [True, True])
