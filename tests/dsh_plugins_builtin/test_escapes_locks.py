"""dsh's own locks are out of every command's reach (a denial of service, issue 22).

dsh coordinated the removal of its empty mount points with an ``flock`` on the protected
directory itself, and locked its private tmp the same way: anything a command ran could open
``.git`` and hold ``flock -x`` on it, and every later command of every host on that workspace
was refused (``MountPointBusy``). The locks are now files in a directory of the user's that no
command sees (`dsh_plugins_builtin._sandbox._locks`). Through the whole pipeline, on each
backend; `test_escapes_unprivileged.py` runs this module again as ``nobody``.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_plugins_builtin._sandbox import _locks
from dsh_plugins_builtin._sandbox._confine import probe_backends
from dsh_plugins_builtin._sandbox._deny import dsh_state
from dsh_plugins_builtin.sandbox import SandboxPlugin
from tests.dsh_plugins_builtin.test_escapes_process import bash, escape_host


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)  # Landlock refuses protected paths
async def test_a_lock_held_on_git_does_not_refuse_the_next_command(
    make_host: Any, ws: Path, backend: str
) -> None:
    """A process the test starts (not sandboxed) holds ``flock -x .git`` for good."""
    (ws / ".git").mkdir()
    host = escape_host(make_host, ws, backend)
    holder = os.open(ws / ".git", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = await bash(host, "test -d .git && echo ran")  # before: MountPointBusy
    finally:
        os.close(holder)
    assert result.text == "ran"


async def test_a_command_that_locks_git_does_not_refuse_another_hosts_command(
    make_host: Any, ws: Path, backend: str
) -> None:
    """A command (real bash, on each backend) of a host that does not protect ``.git`` holds
    ``flock -x .git`` while a command of another host (bwrap, ``.git`` protected) starts."""
    if probe_backends()["bwrap"] is not None:
        pytest.skip(f"bwrap unusable here: {probe_backends()['bwrap']}")
    (ws / ".git").mkdir()
    locking = escape_host(make_host, ws, backend, protected=[], protect_config=False)
    other = escape_host(make_host, ws, "bwrap")
    os.mkfifo(ws / "ready")
    outputs: list[str] = []

    async def locker() -> None:
        result = await bash(
            locking,
            "flock -n -x .git sh -c 'echo > ready; until [ -e go ]; do :; done; echo held' "
            "|| echo > ready",
        )
        outputs.append(result.text)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(locker)
        await trio.to_thread.run_sync((ws / "ready").read_text)  # it holds the lock now
        try:
            result = await other.call("bash", {"command": "echo ran", "timeout_ms": 60_000})
        finally:
            (ws / "go").touch()
    assert outputs == ["held"]  # control: the command did hold it
    assert not result.is_error, result.text  # before: "is locked by another process"
    assert result.text == "ran"


REACH = (
    "ls -A {dir} 2>/dev/null; "
    "(exec 9<{file} && flock -n -x 9 && echo reached) 2>/dev/null || echo unreachable"
)


@pytest.mark.parametrize("shown", [False, True], ids=["default", "under a writable root"])
async def test_a_command_cannot_reach_dshs_lock_files(
    make_host: Any,
    ws: Path,
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shown: bool,
) -> None:
    """The host holds its private tmp's lock for its whole life: the command cannot see the
    lock directory nor open that file, not even where a configured root shows the directory
    (it gets an empty read-only tmpfs)."""
    sandbox: dict[str, Any] = {}
    if shown:
        shared = tmp_path / "shared"
        shared.mkdir()
        monkeypatch.setattr(_locks, "lock_dir", lambda: shared / "dsh-locks")
        sandbox["writable_roots"] = [".", str(shared)]
    host = escape_host(make_host, ws, backend, **sandbox)
    plugin = next(p for p in host.pm.get_plugins() if isinstance(p, SandboxPlugin))
    assert plugin.tmp is not None
    info = os.stat(plugin.tmp)
    held = _locks.lock_dir() / f"tmp-{info.st_dev:x}-{info.st_ino:x}.lock"
    assert held.is_file()  # control: there, and held (an exclusive lock is refused)
    probe = os.open(held, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)
    result = await bash(host, REACH.format(dir=_locks.lock_dir(), file=held))
    assert result.text == "unreachable"


HOLD_READ_LOCK = """
import fcntl, os, pathlib, sys
try:
    fds = [os.open(name, os.O_RDONLY) for name in sys.argv[1:]]
    for fd in fds:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a POSIX read lock, as SQLite's
    print("locked", flush=True)
except OSError as exc:
    print("unreachable", exc.strerror, flush=True)
pathlib.Path("ready").write_text("")
while not pathlib.Path("go").exists():
    pass
"""


async def test_a_command_cannot_lock_the_audit_database(
    make_host: Any,
    ws: Path,
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dsh's state directory (the audit database) is hidden from commands: one that could open
    it could hold a POSIX read lock on it, and every audit write would fail (``database is
    locked``) while it holds it. (The state directory is in a readable root, so that the
    command would see it otherwise: ``tmp_path`` lies in the host's hidden ``/tmp``.)"""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state" / "dsh").mkdir(parents=True)
    db = tmp_path / "state" / "dsh" / "audit.sqlite3"
    writer = sqlite3.connect(db, timeout=0)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x)")
    writer.commit()
    host = escape_host(make_host, ws, backend, read_roots=[str(tmp_path / "state")])
    os.mkfifo(ws / "ready")
    outputs: list[str] = []
    files = " ".join(shlex.quote(str(p)) for p in (db, Path(f"{db}-shm")))
    script = shlex.quote(HOLD_READ_LOCK)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # (/root: hidden)
    command = f"{shlex.quote(python)} -I -S -c {script} {files} || echo failed > ready"

    async def locker() -> None:
        outputs.append((await bash(host, command)).text)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(locker)
            await trio.to_thread.run_sync((ws / "ready").read_text)
            try:
                writer.execute("INSERT INTO t VALUES (1)")  # before: database is locked
                writer.commit()
            finally:
                (ws / "go").touch()
    finally:
        writer.close()
    assert outputs[0].startswith("unreachable"), outputs


def test_a_configured_audit_database_is_hidden_with_its_journals(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    table = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": {"deny_read_defaults": False}}}
    tables = {"audit": {"path": "logs/audit.db"}}
    hidden = dsh_state(ws, tables)
    assert tmp_path / "state" / "dsh" in hidden
    for suffix in ("", "-wal", "-shm", "-journal"):
        assert ws / "logs" / f"audit.db{suffix}" in hidden
    host = make_host(SandboxPlugin(), config=table)
    plugin = next(p for p in host.pm.get_plugins() if isinstance(p, SandboxPlugin))
    assert tmp_path / "state" / "dsh" in plugin.policy.deny_read  # whatever deny_read says
