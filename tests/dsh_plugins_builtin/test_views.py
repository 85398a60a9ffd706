"""Kept bwrap views (`_views`): a command started in one sees what a fresh bwrap would show it,
and nothing of the commands beside it. What a view could make stale (the host mounting, or
replacing what a mask covers, or creating a protected path) is tried here; the escape tests run
in a view too (the ``bwrap-in-a-view`` backend). As root here and as ``nobody`` through
`test_escapes_unprivileged.py` (those that need root to set up skip there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_plugins_builtin._sandbox import _forkclient, _viewhold, _views, _viewtable
from dsh_plugins_builtin._sandbox._confine import probe_backends
from dsh_plugins_builtin._sandbox._mountpoints import MOUNT_POINTS
from tests.dsh_plugins_builtin.test_escapes_boundary import bash, boundary_host


@pytest.fixture(autouse=True)
def views(monkeypatch: pytest.MonkeyPatch) -> Iterator[_views.Views]:
    reason = probe_backends()["bwrap"]
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bwrap must work on CI but does not: {reason}")
        pytest.skip(f"bwrap does not work here: {reason}")
    monkeypatch.setattr(_views, "ENABLED", True)
    monkeypatch.setattr(_views, "EAGER", True)
    shared = _views.shared()
    shared.close()  # each test starts with no view
    yield shared
    assert shared.broken is None


def view_host(make_host: Any, ws: Path, **sandbox: Any) -> Any:
    return boundary_host(make_host, ws, "bwrap", **sandbox)


async def together(host: Any, **commands: str) -> dict[str, Any]:
    """Run each of *commands* at once (20 s each at most); their results by name."""
    results: dict[str, Any] = {}

    async def run(name: str, command: str) -> None:
        results[name] = await host.call("bash", {"command": command, "timeout_ms": 20_000})

    async with trio.open_nursery() as nursery:
        for name, command in commands.items():
            nursery.start_soon(run, name, command)
    return results


async def test_commands_of_one_view_share_it_and_nothing_else(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """Two commands at once in one view: each is PID 1 of its own namespace, sees no process of
    the other, and its loopback is its own (a server of one is not reachable from the other)."""
    host = view_host(make_host, ws)
    await bash(host, "true")  # the view is made
    used = views.used
    serve = (
        "python3 -c 'import socket, time; s = socket.socket(); "
        's.bind(("127.0.0.1", 8765)); s.listen(); open("ready", "w"); time.sleep(3)\''
    )
    probe = (
        "for i in $(seq 100); do [ -e ready ] && break; sleep 0.05; done; echo pid $$; "
        "ls -d /proc/[0-9]* | wc -l; "
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765), 1)' "
        "2>/dev/null && echo REACHED || echo refused"
    )
    results = await together(host, server=serve, probe=probe)
    text = results["probe"].text
    assert "pid 1" in text
    assert "refused" in text
    assert "REACHED" not in text
    assert int(text.split("\n")[1]) <= 4  # its shell, ls, wc, and the subshell: not the server
    assert views.used - used == 2
    assert len(views._views) == 1


async def test_a_mask_the_host_replaces_is_not_trusted(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """Replacing a ``deny_read`` file by a rename, or a denied directory by a new one, detaches
    the view's mask over it (in a writable root the new one would even be writable): the view's
    server sees its mount table change and is not used again; the next command gets a view
    that hides the new ones too."""
    secret, keys = ws / "secret", ws / "keys"
    secret.write_text("SECRET-1\n")
    keys.mkdir()
    (keys / "key").write_text("SECRET-1\n")
    host = view_host(make_host, ws, deny_read=["secret", "keys"])
    read = "cat secret keys/key 2>&1; echo x >> secret 2>&1; echo done"
    assert "SECRET" not in (await bash(host, read)).text
    fresh = ws / "fresh"
    fresh.write_text("SECRET-2\n")
    os.replace(fresh, secret)  # as an editor or passwd saves a file
    (keys / "key").unlink()
    keys.rmdir()
    keys.mkdir()
    (keys / "key").write_text("SECRET-2\n")
    for _ in range(3):
        text = (await bash(host, read)).text
        assert "SECRET" not in text
        assert "done" in text
    assert secret.read_text() == "SECRET-2\n"


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory of the test's own outside ``/tmp`` (which a command sees privately)."""
    base = Path("/var/lib") if os.access("/var/lib", os.W_OK) else None
    if base is None:
        pytest.skip("no writable place outside /tmp")
    path = Path(tempfile.mkdtemp(prefix="dsh-views-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can mount on the host")
async def test_a_mount_the_host_makes_later_is_not_writable(
    make_host: Any, ws: Path, outside_tmp: Path
) -> None:
    """A host mount made after the view propagates into it, writable (bwrap made read-only only
    what was mounted when it started): the view is then not used again."""
    place = outside_tmp / "later"
    place.mkdir()
    # A shared mount, as / is on a systemd host: what is mounted below it propagates.
    subprocess.run(["mount", "--bind", str(outside_tmp), str(outside_tmp)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(outside_tmp)], check=True)
        host = view_host(make_host, ws)
        await bash(host, "true")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(place)], check=True)
        for _ in range(2):
            text = (await bash(host, f"touch {place}/x 2>&1; echo done")).text
            assert "Read-only file system" in text
        assert not (place / "x").exists()
    finally:
        subprocess.run(["umount", "-R", "-l", str(outside_tmp)], check=False)


async def test_a_protected_path_the_host_creates_later_stays_read_only(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """``dsh.toml`` missing when the view was made (each command seals it), then created on the
    host: the next command cannot write it (another view: the line a fresh bwrap would run
    changed)."""
    host = view_host(make_host, ws)
    text = (await bash(host, "echo x > dsh.toml 2>&1; echo done")).text
    assert "done" in text
    assert not (ws / "dsh.toml").is_file()
    MOUNT_POINTS.settle()  # its empty mount point is removed after the call
    (ws / "dsh.toml").write_text("# mine\n")
    for _ in range(2):
        await bash(host, "echo '[plugin.sandbox]' >> dsh.toml 2>/dev/null; true")
    assert (ws / "dsh.toml").read_text() == "# mine\n"
    assert len(views._views) == 2  # another view: the old one is kept, idle


async def test_a_one_off_command_makes_no_view(
    make_host: Any, ws: Path, views: _views.Views, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view is made the second time a command would use it: ``dsh call bash`` (one command,
    then exit) pays for no view it would never use again."""
    monkeypatch.setattr(_views, "EAGER", False)
    host = view_host(make_host, ws, limits={"processes": 77})  # a key met nowhere else
    used = views.used
    await bash(host, "true")
    assert views.used == used
    await bash(host, "true")
    assert views.used == used + 1


async def test_views_are_kept_up_to_a_bound_the_least_recently_used_idle_one_closed(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """Six views one after another (six ``deny_read`` lists), then the first and the last
    again: the four most recently used are kept, the others closed."""
    for n in range(6):
        (ws / f"d{n}").write_text("x")
    hosts = [view_host(make_host, ws, deny_read=[f"d{n}"]) for n in range(6)]
    for host in (*hosts, hosts[0], hosts[5]):
        await bash(host, "true")
    assert len(views._views) == _views.MAX_VIEWS

    def shown(n: int) -> bool:
        return any(str(ws / f"d{n}") in key for key in views._views)

    assert [n for n in range(6) if shown(n)] == [0, 3, 4, 5]


async def test_a_view_ends_its_commands_and_itself_with_it(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """Closing the views (the host's exit) ends their bwrap and servers; a later command
    starts a new one."""
    host = view_host(make_host, ws)
    await bash(host, "true")
    kept = list(views._views.values())
    assert kept
    views.close()
    for view in kept:
        assert view.holder.poll() is not None
        assert view.server._proc is None
    assert "pid 1" in (await bash(host, "echo pid $$")).text


async def test_what_a_command_leaves_in_ram_is_gone_with_it(make_host: Any, ws: Path) -> None:
    """``/dev/shm`` and the fresh directories over the host's socket directories are each
    command's own, sized as in a fresh bwrap: a file (memory) one leaves there is not held for
    the view's life, nor seen by the next."""
    host = view_host(make_host, ws, limits={"memory_mib": 64})
    first = "for d in /dev/shm /run /var/tmp; do echo kept > $d/left; done; echo done"
    assert "done" in (await bash(host, first)).text
    text = (await bash(host, "cat /dev/shm/left /run/left /var/tmp/left 2>&1; df -k /dev/shm")).text
    assert "kept" not in text
    size = int(text.splitlines()[-1].split()[1])  # KiB: a third of 64 MiB each
    assert size <= 64 * 1024 // 3 + 4


async def test_a_terminal_one_command_opens_is_not_another_ones(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """Each command mounts a ``/dev/pts`` of its own (bwrap's ``--dev`` made one per command):
    a pseudo-terminal one opens is not in the other's, to write to or read from."""
    host = view_host(make_host, ws)
    await bash(host, "true")
    opener = (
        "python3 -c 'import os, pty, time; m, s = pty.openpty(); print(os.ttyname(s)); "
        'open("ready", "w"); time.sleep(2)\''
    )
    lister = "for i in $(seq 100); do [ -e ready ] && break; sleep 0.05; done; ls /dev/pts"
    results = await together(host, opener=opener, lister=lister)
    assert "/dev/pts/" in results["opener"].text
    assert results["lister"].text.split() == ["ptmx"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root's processes are not counted")
async def test_each_command_has_the_process_limit_to_itself(make_host: Any, ws: Path) -> None:
    """The kernel counts processes per user and user namespace: each command of a view gets a
    user namespace of its own, so one holding most of ``processes`` leaves the next its own."""
    host = view_host(make_host, ws, limits={"processes": 60})
    await bash(host, "true")
    holder = "for i in $(seq 45); do sleep 3 & done; touch ready; wait"
    forker = (
        "for i in $(seq 100); do [ -e ready ] && break; sleep 0.05; done; n=0; "
        "for i in $(seq 40); do (sleep 1) 2>/dev/null & n=$((n+1)); done; wait; echo forked $n"
    )
    results = await together(host, holder=holder, forker=forker)
    assert "forked 40" in results["forker"].text
    assert "Resource temporarily unavailable" not in results["forker"].text


async def test_no_view_where_a_directory_in_ram_would_be_the_views(
    make_host: Any, views: _views.Views
) -> None:
    """A workspace in ``/dev/shm``: that directory in RAM, with the workspace mounted below it,
    would be the view's (shared by its commands, holding what they left): no view then."""
    shm = Path(tempfile.mkdtemp(prefix="dsh-views-", dir="/dev/shm"))
    try:
        host = view_host(make_host, shm)
        asked, used = views.asked, views.used
        await bash(host, "echo kept > /dev/shm/left; true")
        text = (await bash(host, "cat /dev/shm/left 2>&1; echo done")).text
        assert "kept" not in text
        assert (views.asked - asked, views.used - used) == (0, 0)  # not even asked for
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_no_view_server_from_code_a_command_could_write(tmp_path: Path) -> None:
    """The server runs on the host before it enters the view: its interpreter, standard library
    and package must not lie in a writable root (unless protected), nor a root in them."""
    package = Path(os.path.realpath(_forkclient._forkserver.__file__)).parents[1]
    _forkclient._trusted.cache_clear()
    _views._cat.cache_clear()
    assert _views.programs([tmp_path], []) is not None
    assert _views.programs([package / "_sandbox"], []) is None  # a root inside the package
    assert _views.programs([package.parent], []) is None  # the package in a root
    assert _views.programs([package.parent], [package]) is not None  # ... protected


async def test_a_cat_planted_on_path_does_not_hold_a_view(
    make_host: Any, ws: Path, views: _views.Views, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program that holds a view lives as long as the view: one found first on ``PATH`` in
    a writable root (a project's ``.venv/bin``, where a command can write) is never it."""
    marker = ws / "cat-ran"  # where it can write, run inside the view
    planted = ws / "bin"
    planted.mkdir()
    (planted / "cat").write_text(f'#!/bin/sh\necho ran > "{marker}"\nexec /bin/cat "$@"\n')
    (planted / "cat").chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ['PATH']}")
    _forkclient._trusted.cache_clear()
    _views._cat.cache_clear()
    host = view_host(make_host, ws)
    used = views.used
    for _ in range(2):
        await bash(host, "true")
    assert views.used - used == 2
    assert not marker.exists()
    subprocess.run([str(planted / "cat"), "/dev/null"], check=True)  # control: the plant runs
    assert marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can mount on the host")
async def test_what_the_host_unmounts_is_gone_from_the_next_command(
    make_host: Any, ws: Path, outside_tmp: Path
) -> None:
    """The host's ``/`` need not propagate (a private root, as here): a volume the host
    unmounts after the view was made must not stay readable in it."""
    volume = outside_tmp / "volume"
    volume.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    try:
        (volume / "secret").write_text("ON-THE-VOLUME\n")
        host = view_host(make_host, ws)
        assert "ON-THE-VOLUME" in (await bash(host, f"cat {volume}/secret")).text
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=True)
    for _ in range(2):
        assert "ON-THE-VOLUME" not in (await bash(host, f"cat {volume}/secret 2>&1; true")).text


async def test_a_view_whose_holder_died_is_dropped(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    host = view_host(make_host, ws)
    await bash(host, "true")
    [view] = views._views.values()
    view.holder.kill()
    view.holder.wait()
    for _ in range(2):
        assert "pid 1" in (await bash(host, "echo pid $$")).text
    assert view not in views._views.values()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can mount on the host")
async def test_a_host_unmount_while_a_view_is_made_is_not_missed(
    make_host: Any, ws: Path, outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host unmounts a volume just after the view's bwrap copied its mounts, and another
    command's look at the host's mount table takes that change meanwhile: the new view is
    still not used (it was kept, and showed the volume after the unmount)."""
    volume = outside_tmp / "volume"
    volume.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    (volume / "secret").write_text("ON-THE-VOLUME\n")
    held = _views._hold
    started, unmounted = threading.Event(), threading.Event()

    def hold(parts: Any, cat: str) -> Any:
        out = held(parts, cat)
        if not started.is_set():  # the first view only
            subprocess.run(["umount", "-l", str(volume)], check=True)
            started.set()
            unmounted.wait(10)  # while another command looks at the host's mounts
        return out

    monkeypatch.setattr(_views, "_hold", hold)
    host = view_host(make_host, ws)

    async def other() -> None:
        await trio.to_thread.run_sync(started.wait, 10)
        await bash(host, "echo other")  # (this command's line is the same: no view for it)
        unmounted.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await bash(host, "true")
    for _ in range(2):
        assert "ON-THE-VOLUME" not in (await bash(host, f"cat {volume}/secret 2>&1; true")).text


def test_a_command_forked_ahead_whose_early_steps_fail_takes_no_request() -> None:
    """Its launcher made the command's namespaces already and could not make them again: the
    fork of a command ahead says so (`EarlyFailed`), and the launcher takes no request (the
    server forks a fresh one). It used to fall back in place, and the command always failed."""
    code = (
        "import os, sys\n"
        "from dsh_plugins_builtin._sandbox import _ahead, _landlock\n"
        "_landlock.VIEW.append(0)\n"
        '_ahead.EARLY.append((("tmpfs", "/proc/1/dsh-no-such-dir", False, 4096),))\n'
        "spare = os.open('/dev/null', os.O_RDONLY)\n"
        "try:\n"
        "    print('forked', _ahead.Ahead.fork(spare))\n"
        "except _ahead.EarlyFailed:\n"
        "    print('early failed')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "early failed", done.stdout + done.stderr


async def test_the_program_holding_a_view_runs_under_the_seccomp_filter(
    make_host: Any, ws: Path, views: _views.Views
) -> None:
    """It outlives every command of its view: it gets the commands' filter too (and no
    capability, as they do)."""
    host = view_host(make_host, ws)
    await bash(host, "true")
    [view] = views._views.values()
    bwrap = view.holder.pid
    [cat] = Path(f"/proc/{bwrap}/task/{bwrap}/children").read_text().split()
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{cat}/status").read_text().splitlines()
    )
    assert status["Seccomp"].strip() == "2"
    assert int(status["CapEff"].strip(), 16) == 0


@pytest.mark.parametrize("how", ["a directory", "a file, linked back", "its parent"])
async def test_a_mask_whose_entry_the_host_renames_away_is_not_trusted(
    make_host: Any, ws: Path, outside_tmp: Path, views: _views.Views, how: str
) -> None:
    """A mask sits on a directory entry: renamed away on the host (``mv``), the entry takes the
    view's mask with it, no mount event comes of that, and what the host puts at the path
    after (another directory, the same file linked back, a new parent) would be in view. The
    view's mount table then shows the mount at the new path: its server compares it before
    each command, and the view is not used again."""
    parent = outside_tmp / "home"
    secret = parent / "secret"
    secret.mkdir(parents=True)
    (secret / "key").write_text("SECRET-1\n")
    denied = secret / "key" if how == "a file, linked back" else secret
    host = view_host(make_host, ws, deny_read=[str(denied)])
    read = f"cat {secret}/key 2>&1; echo done"
    for _ in range(2):
        assert "SECRET" not in (await bash(host, read)).text
    used = views.used
    if how == "a directory":
        secret.rename(outside_tmp / "moved")
        secret.mkdir()
        (secret / "key").write_text("SECRET-2\n")
    elif how == "a file, linked back":
        (secret / "key").rename(secret / "moved")
        os.link(secret / "moved", secret / "key")
    else:
        parent.rename(outside_tmp / "moved")
        secret.mkdir(parents=True)
        (secret / "key").write_text("SECRET-2\n")
    for _ in range(20):  # until a new view is made (in a thread) and used
        text = (await bash(host, read)).text
        assert "SECRET" not in text
        assert "done" in text
        if views.used > used + 1:
            break
    assert views.used > used + 1  # in views still: new ones, made as the host is now


async def test_a_view_whose_places_moved_while_it_was_made_is_not_used(
    make_host: Any,
    ws: Path,
    outside_tmp: Path,
    views: _views.Views,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host renames a masked entry away and remakes it after bwrap mounted over it, before
    the view's table is first read: the table no longer shows the mount where the line puts
    it, and that view is not used (the command starts the old way; the next view is right)."""
    secret = outside_tmp / "secret"
    secret.mkdir()
    (secret / "key").write_text("SECRET\n")
    before = _viewhold._table_once_running
    refused: list[bool] = []

    def moved_first(holder: Any, pid: int) -> bytes:
        table = before(holder, pid)  # bwrap has built the view
        if refused:
            return table
        secret.rename(outside_tmp / "moved")
        secret.mkdir()
        (secret / "key").write_text("SECRET\n")
        table = _read(pid)
        refused.append(not _viewtable.shows(table, [str(secret)]))
        return table

    monkeypatch.setattr(_viewhold, "_table_once_running", moved_first)
    host = view_host(make_host, ws, deny_read=[str(secret)])
    used = views.used
    for _ in range(3):
        text = (await bash(host, f"cat {secret}/key 2>&1; echo done")).text
        assert "SECRET" not in text
        assert "done" in text
    assert refused == [True]
    assert views.used - used == 2  # the first view refused: its command ran the old way
    views._failures = 0  # (views that would not start count toward giving up on them)


def _read(pid: int) -> bytes:
    fd = os.open(f"/proc/{pid}/mountinfo", os.O_RDONLY)
    try:
        return _viewtable.read(fd)
    finally:
        os.close(fd)
