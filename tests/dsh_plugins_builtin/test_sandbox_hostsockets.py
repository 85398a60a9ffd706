"""The host's listening Unix sockets a command would see (`_hostsockets`), and how both command
lines cover them (issue 22 row 1; the escape itself is in `test_escapes_boundary.py`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_plugins_builtin._sandbox._bwrap import bwrap_argv, mount_plan
from dsh_plugins_builtin._sandbox._hostsockets import covers, in_view, listening, prefixes
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy

TABLE = (
    "Num       RefCount Protocol Flags    Type St Inode Path\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 20571 /run/systemd/notify\n"
    "0000000000000000: 00000003 00000000 00000000 0001 03  1126\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 31337 @/tmp/.X11-unix/X0\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 31338 relative.sock\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 31339 /home/u/a b.sock\n"
    "0000000000000000: 00000003 00000000 00000000 0001 03 31340 /home/u/a b.sock\n"
    "0000000000000000: 00000002 00000000 00010000 0005 01    12 /dev/log\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 31341 /x\n"
)


def test_the_table_gives_named_sockets_only(tmp_path: Path) -> None:
    table = tmp_path / "unix"
    table.write_text(TABLE)
    assert listening(str(table)) == {
        "/run/systemd/notify",
        "/home/u/a b.sock",
        "/dev/log",
        "/x",
    }
    assert listening(str(tmp_path / "missing")) == frozenset()


def test_this_machines_table_names_a_socket_bound_here(tmp_path: Path) -> None:
    path = tmp_path / "bound here.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(1)
        assert str(path) in listening()


@pytest.fixture
def bound(tmp_path: Path) -> Iterator[list[Path]]:
    """Two listening sockets in a workspace (one through a symlink), and a stale name."""
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "link").symlink_to(ws / "real")
    (ws / "stale.sock").write_text("not a socket any more")
    servers = []
    for path in (ws / "a.sock", ws / "link" / "b.sock"):
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen(1)
        servers.append(server)
    yield [ws / "a.sock", ws / "link" / "b.sock", ws / "stale.sock"]
    for server in servers:
        server.close()


def test_in_view_gives_real_paths_of_live_sockets_not_hidden(bound: list[Path]) -> None:
    ws = bound[0].parent
    names = [str(path) for path in bound]
    assert in_view(names, lambda path: False) == [ws / "a.sock", ws / "real" / "b.sock"]
    assert in_view(names, lambda path: path.endswith("/a.sock")) == [ws / "real" / "b.sock"]
    # a directory said hidden hides every socket in it, asked once, through any spelling
    asked: list[str] = []
    assert in_view(names, lambda path: asked.append(path) or path == str(ws / "real")) == [
        ws / "a.sock"
    ]
    assert asked.count(str(ws / "real")) == 1
    assert in_view([str(ws / "gone" / "c.sock")], lambda path: False) == []


def test_both_command_lines_cover_a_socket_in_view_once(
    bound: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap binds /dev/null over it, the Landlock plan has a ``null`` step; one under a hidden
    ``deny_read`` entry or listed in ``allow_unix_sockets`` gets nothing more."""
    ws = bound[0].parent
    policy = SandboxPolicy("workspace-write", ws, protected=(), deny_read=(ws / "real",))
    argv = bwrap_argv(["true"], policy, ws, missing=())
    assert ["--ro-bind", "/dev/null", str(ws / "a.sock")] == argv[
        argv.index(str(ws / "a.sock")) - 2 :
    ][:3]
    assert str(ws / "real" / "b.sock") not in argv
    assert ("null", str(ws / "a.sock")) in mount_plan(policy)
    allowed = SandboxPolicy("workspace-write", ws, protected=(), unix_sockets=(ws / "a.sock",))
    assert str(ws / "a.sock") not in bwrap_argv(["true"], allowed, ws, missing=())
    assert ("null", str(ws / "a.sock")) not in mount_plan(allowed)
    assert ("null", str(ws / "real" / "b.sock")) in mount_plan(allowed)


def test_covers_goes_by_whole_path_components() -> None:
    roots = prefixes([Path("/a"), Path("/srv/b")])
    for path in ("/a", "/a/x.sock", "/srv/b/c/d"):
        assert covers(path, roots), path
    for path in ("/ab", "/srv", "/srv/bc"):
        assert not covers(path, roots), path
    assert covers("/anything", prefixes([Path("/")]))
