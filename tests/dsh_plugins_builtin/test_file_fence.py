"""The file tools against a hostile model: protected paths, pinned roots, races (issue 8).

Rows of the issue-8 table held here: 5, 6, 7 (protected paths), 10, 11 (pinned roots), 13 (a
directory and a symlink swapped while ``read_file`` runs). Each runs as root and as an
unprivileged user: it only touches directories the test created.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host, hookimpl
from dsh_plugins_builtin._sandbox import _beneath
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import tools_host


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("OUTSIDE\n")
    return path


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    # Only the workspace is writable: the sibling "outside" really is outside.
    return tools_host(make_host, ws, writable_roots=["."])


def _error(result: Any) -> tuple[str, str]:
    assert result.is_error, result.text
    return result.error.code, result.error.message


# -- protected paths (rows 5, 6, 7) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "protected"),
    [
        (".claude/hooks/check.sh", ".claude"),  # row 5
        (".git/config", ".git"),  # row 6
        (".dsh/approvals.json", ".dsh"),
        (".git", ".git"),
    ],
)
async def test_write_file_refuses_protected_paths(
    host: Host, ws: Path, path: str, protected: str
) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".claude" / "hooks").mkdir(parents=True)
    (ws / ".claude" / "hooks" / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    result = await host.call("write_file", {"path": path, "content": "pwned"})
    code, message = _error(result)
    assert code == "SANDBOX_DENIED"
    assert f'"{ws / protected}" is protected' in message
    assert "[plugin.sandbox] protected" in message
    assert (result.decided_by, result.decision_detail) == ("sandbox", "workspace-write mode")
    assert {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()} == before


async def test_edit_file_refuses_a_protected_path_but_read_file_reads_it(
    host: Host, ws: Path
) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\nbare = false\n")
    edit = await host.call(
        "edit_file",
        {"path": ".git/config", "old_text": "bare = false", "new_text": "fsmonitor = evil"},
    )
    assert _error(edit)[0] == "SANDBOX_DENIED"
    assert (ws / ".git" / "config").read_text() == "[core]\nbare = false\n"
    read = await host.call("read_file", {"path": ".git/config"})
    assert not read.is_error
    assert "bare = false" in read.text


async def test_a_symlink_into_a_protected_directory_is_refused_too(host: Host, ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / "g").symlink_to(ws / ".git")
    result = await host.call("write_file", {"path": "g/config", "content": "pwned"})
    assert _error(result)[0] == "SANDBOX_DENIED"
    assert not (ws / ".git" / "config").exists()


async def test_a_protected_name_is_refused_even_through_a_dotdot_spelling(
    host: Host, ws: Path
) -> None:
    (ws / "sub").mkdir()
    result = await host.call(
        "write_file", {"path": "sub/../.claude/settings.json", "content": "{}"}
    )
    assert _error(result)[0] == "SANDBOX_DENIED"
    assert not (ws / ".claude").exists()


async def test_the_config_file_in_use_is_protected(make_host: Any, ws: Path) -> None:
    """Row 7: ``write_file dsh.toml`` with ``mode = "danger-full-access"`` is refused."""
    config = ws / "dsh.toml"
    config.write_text(f'[host]\nworkspace = "{ws}"\n')
    host = make_host(ToolsPlugin(), SandboxPlugin(), config=str(config))
    result = await host.call(
        "write_file",
        {"path": "dsh.toml", "content": '[plugin.sandbox]\nmode = "danger-full-access"\n'},
    )
    code, message = _error(result)
    assert code == "SANDBOX_DENIED"
    assert "the config file in use" in message
    assert "[plugin.sandbox] protected" in message
    assert "danger" not in config.read_text()
    # A control: the same call on another file of the workspace is allowed.
    ok = await host.call("write_file", {"path": "other.toml", "content": "x = 1\n"})
    assert not ok.is_error


@pytest.mark.parametrize("has_table", [True, False])
async def test_a_pyproject_in_the_workspace_is_protected_whether_or_not_it_configures_dsh(
    make_host: Any, ws: Path, caplog: pytest.LogCaptureFixture, has_table: bool
) -> None:
    """Issue 22 row 7: a tool appending [tool.dsh] (mode = "danger-full-access") to a
    pyproject.toml would set the next run's policy; it is protected like dsh.toml."""
    config = ws / "pyproject.toml"
    table = f'\n[tool.dsh.host]\nworkspace = "{ws}"\n' if has_table else ""
    config.write_text(f'[project]\nname = "x"\n{table}')
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.tools"):
        host = make_host(
            ToolsPlugin(), SandboxPlugin(), config=str(config) if has_table else _ws_config(ws)
        )
    assert not [r for r in caplog.records if r.name == "dsh_plugins_builtin.tools"]
    planted = '[tool.dsh.plugin.sandbox]\nmode = "danger-full-access"\n'
    result = await host.call(
        "edit_file", {"path": "pyproject.toml", "old_text": 'name = "x"', "new_text": planted}
    )
    assert result.is_error
    assert "pyproject.toml" in result.text
    assert "protect" in result.text
    assert "danger" not in config.read_text()


async def test_a_pyproject_config_stays_writable_with_a_warning_without_protect_config(
    make_host: Any, ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ws / "pyproject.toml"
    config.write_text(
        f'[project]\nname = "x"\n\n[tool.dsh.host]\nworkspace = "{ws}"\n'
        "[tool.dsh.plugin.sandbox]\nprotect_config = false\n"
    )
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.tools"):
        host = make_host(ToolsPlugin(), SandboxPlugin(), config=str(config))
    warnings = [r.getMessage() for r in caplog.records if r.name == "dsh_plugins_builtin.tools"]
    assert len(warnings) == 1
    assert str(config) in warnings[0]
    assert "next run" in warnings[0]
    assert "DSH_CONFIG" in warnings[0]
    assert "dsh.toml" in warnings[0]
    result = await host.call(
        "edit_file", {"path": "pyproject.toml", "old_text": 'name = "x"', "new_text": 'name = "y"'}
    )
    assert not result.is_error, result.text
    assert 'name = "y"' in config.read_text()


def _ws_config(ws: Path) -> dict[str, Any]:
    return {"host": {"workspace": str(ws)}}


async def test_no_warning_when_the_config_lies_outside_the_workspace(
    make_host: Any, ws: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text(
        f'[tool.dsh.host]\nworkspace = "{ws}"\n[tool.dsh.plugin.sandbox]\nwritable_roots = ["."]\n'
    )
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.tools"):
        make_host(ToolsPlugin(), SandboxPlugin(), config=str(config))
    assert not [r for r in caplog.records if r.name == "dsh_plugins_builtin.tools"]


# -- pinned roots (rows 10, 11) --------------------------------------------------------------


async def test_a_workspace_swapped_for_a_symlink_fails_closed(
    make_host: Any, tmp_path: Path, outside: Path
) -> None:
    """Row 10: ``mv ws away && ln -s /outside ws``; the next file tool call must not follow."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("inside\n")
    host = tools_host(make_host, ws)  # default writable roots: the workspace and /tmp
    ws.rename(tmp_path / "away")
    ws.symlink_to(outside)
    for name, args in (
        ("write_file", {"path": "pwned.txt", "content": "pwned"}),
        ("read_file", {"path": "secret.txt"}),
        ("list_dir", {}),
        ("edit_file", {"path": "secret.txt", "old_text": "OUTSIDE", "new_text": "pwned"}),
    ):
        result = await host.call(name, args)
        code, message = _error(result)
        assert code == "SANDBOX_UNAVAILABLE", (name, message)
        assert f'"{ws}" was replaced after the host started' in message
        assert "restart dsh" in message
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "OUTSIDE\n"


async def test_a_workspace_replaced_by_another_directory_fails_closed(
    make_host: Any, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    host = tools_host(make_host, ws)
    ws.rename(tmp_path / "away")
    ws.mkdir()
    result = await host.call("write_file", {"path": "a.txt", "content": "x"})
    code, message = _error(result)
    assert code == "SANDBOX_UNAVAILABLE"
    assert "another directory" in message
    assert not (ws / "a.txt").exists()


async def test_a_configured_writable_root_replaced_by_a_symlink_fails_closed(
    make_host: Any, ws: Path, tmp_path: Path, outside: Path
) -> None:
    """Row 11: a writable root listed in config replaced by a symlink."""
    extra = tmp_path / "extra"
    extra.mkdir()
    host = tools_host(make_host, ws, writable_roots=[".", str(extra)])
    extra.rename(tmp_path / "extra-away")
    extra.symlink_to(outside)
    result = await host.call("write_file", {"path": str(extra / "x.txt"), "content": "pwned"})
    code, message = _error(result)
    assert code == "SANDBOX_UNAVAILABLE"
    assert f'"{extra}"' in message
    assert not (outside / "x.txt").exists()
    # Every call checks every pinned root: a workspace write is refused as well.
    ws_write = await host.call("write_file", {"path": "ok.txt", "content": "x"})
    assert _error(ws_write)[0] == "SANDBOX_UNAVAILABLE"


# -- symlinks and hard links -----------------------------------------------------------------


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "nofollow-walk"])
async def test_symlinks_that_stay_inside_keep_working(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch, walk: bool
) -> None:
    if walk:
        monkeypatch.setattr(_beneath, "HAVE_OPENAT2", False)
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("hello\n")
    (ws / "abs").symlink_to(ws / "real")  # an absolute link (RESOLVE_BENEATH alone refuses it)
    (ws / "rel").symlink_to("real")
    (ws / "file-link").symlink_to("real/a.txt")
    for path in ("abs/a.txt", "rel/a.txt", "file-link"):
        read = await host.call("read_file", {"path": path})
        assert "hello" in read.text, (path, read.text)
        assert not read.is_error
    listing = await host.call("list_dir", {"path": "abs"})
    assert listing.text == "a.txt"
    write = await host.call("write_file", {"path": "abs/b.txt", "content": "new\n"})
    assert not write.is_error, write.text
    assert (ws / "real" / "b.txt").read_text() == "new\n"


async def test_a_hard_link_to_a_file_outside_is_replaced_not_written_through(
    host: Host, ws: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", ws / "h.txt")
    write = await host.call("write_file", {"path": "h.txt", "content": "pwned\n"})
    assert not write.is_error, write.text
    edit = await host.call("edit_file", {"path": "h.txt", "old_text": "pwned", "new_text": "x"})
    assert not edit.is_error, edit.text
    assert (outside / "secret.txt").read_text() == "OUTSIDE\n"
    assert (ws / "h.txt").read_text() == "x\n"


def test_open_beneath_refuses_symlinks_and_escapes_either_way(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "link").symlink_to(outside)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for walk in (False, True):
            for rel, why in (("link/secret.txt", "Errno 40"), ("../x", "Errno 18")):
                with pytest.raises(OSError, match=why):
                    _beneath.open_beneath(fd, rel, os.O_RDONLY, walk=walk)
            made = _beneath.mkdir_beneath(fd, "d/e/f", walk=walk)
            os.close(made)
            assert (root / "d" / "e" / "f").is_dir()
            with pytest.raises(OSError, match="Errno 40"):
                _beneath.mkdir_beneath(fd, "link/new", walk=walk)
            assert not (outside / "new").exists()
    finally:
        os.close(fd)


def test_a_level_removed_while_directories_are_made_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty directory the sandbox made as a mount point (``.dsh``) is removed after the
    command, while the host makes its spill directory in it: the walk is made again rather than
    failing (the spill once failed with ``No such file or directory: 'spill'``)."""
    (tmp_path / ".dsh").mkdir()
    real = os.mkdir
    removed: list[str] = []

    def mkdir(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        if name == "spill" and not removed:  # the sandbox's removal, just before this mkdir
            removed.append(name)
            (tmp_path / ".dsh").rmdir()
        real(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(_beneath.os, "mkdir", mkdir)
    made = _beneath.makedirs_nofollow(str(tmp_path / ".dsh" / "spill"))
    os.close(made)
    assert removed
    assert (tmp_path / ".dsh" / "spill").is_dir()


# -- row 13: a directory and a symlink swapped while read_file runs -------------------------


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "nofollow-walk"])
async def test_read_file_never_returns_the_outside_file_while_a_symlink_is_swapped_in(
    host: Host, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, walk: bool
) -> None:
    if walk:
        monkeypatch.setattr(_beneath, "HAVE_OPENAT2", False)
    real = ws / "d"
    real.mkdir()
    (real / "secret.txt").write_text("inside\n")
    parked = ws / "d-parked"
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            os.rename(real, parked)
            os.symlink(outside, real)
            os.unlink(real)
            os.rename(parked, real)
            swaps += 1
            os.sched_yield()  # let reads land on the real directory too

    thread = threading.Thread(target=swapper)
    thread.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(400):
            result = await host.call("read_file", {"path": "d/secret.txt"})
            assert "OUTSIDE" not in result.text
            key = result.error.code if result.is_error else "inside"
            outcomes[key] = outcomes.get(key, 0) + 1
    finally:
        stop.set()
        thread.join()
    assert swaps > 0
    assert set(outcomes) <= {"inside", "SANDBOX_DENIED", "FILE_NOT_FOUND"}, outcomes
    # The control: with the directory back in place, the same read succeeds.
    control = await host.call("read_file", {"path": "d/secret.txt"})
    assert not control.is_error
    assert "inside" in control.text


async def test_write_file_never_lands_outside_while_a_symlink_is_swapped_in(
    host: Host, ws: Path, outside: Path
) -> None:
    real = ws / "d"
    real.mkdir()
    parked = ws / "d-parked"
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            os.rename(real, parked)
            try:
                os.symlink(outside, real)
                os.unlink(real)
            except FileExistsError:
                pass  # write_file re-created the missing "d" first: it is inside, fine
            while True:  # put the real directory back, whatever a write created meanwhile
                if real.is_dir() and not real.is_symlink():
                    shutil.rmtree(real, ignore_errors=True)
                try:
                    os.rename(parked, real)
                    break
                except OSError:
                    continue
            os.sched_yield()

    thread = threading.Thread(target=swapper)
    thread.start()
    codes: set[str] = set()
    try:
        for i in range(120):
            result = await host.call("write_file", {"path": "d/f.txt", "content": f"{i}\n"})
            codes.add(result.error.code if result.is_error else "ok")
    finally:
        stop.set()
        thread.join()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert codes <= {"ok", "SANDBOX_DENIED", "FILE_NOT_FOUND"}, codes
    control = await host.call("write_file", {"path": "d/f.txt", "content": "last\n"})
    assert not control.is_error
    assert (real / "f.txt").read_text() == "last\n"


# -- list_dir and path rules -----------------------------------------------------------------


class DenySecrets:
    """A path policy: withholds every path whose name contains "secret"."""

    name = "deny_secrets"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        self.asked.append((execution.name, path, access))
        return "secrets are private" if "secret" in os.path.basename(path) else None


async def test_list_dir_withholds_entries_a_path_rule_denies_and_says_how_many(
    make_host: Any, ws: Path, outside: Path
) -> None:
    policy = DenySecrets()
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": {}}}
    host = make_host(ToolsPlugin(), SandboxPlugin(), policy, config=config)
    (ws / "a.txt").write_text("a")
    (ws / "secret.env").write_text("k")
    (ws / "secrets").mkdir()
    (ws / "innocent").symlink_to(outside / "secret.txt")  # withheld by its target
    result = await host.call("list_dir", {})
    assert not result.is_error
    assert result.text.splitlines()[0] == "a.txt"
    assert "secret" not in result.text.split("\n\n")[0]
    assert "innocent" not in result.text
    assert "[3 entries withheld by policy" in result.text
    assert result.meta["withheld"] == 3
    assert ("list_dir", str(ws / "a.txt"), "read") in policy.asked
    # Without a rule nothing is withheld and nothing is said.
    plain = await tools_host(make_host, ws).call("list_dir", {})
    assert "withheld" not in plain.text
    assert "withheld" not in plain.meta


# -- hostile input ---------------------------------------------------------------------------


async def test_lone_surrogates_in_paths_and_text_get_clear_errors_and_nothing_is_written(
    host: Host, ws: Path
) -> None:
    bad_path = await host.call("write_file", {"path": "\ud800.txt", "content": "x"})
    assert _error(bad_path)[0] == "INVALID_ARGS"  # as for content: test_tools_os_args.py
    assert '"path" holds a lone surrogate (U+D800 at character 0)' in bad_path.error.message
    bad_text = await host.call("write_file", {"path": "s.txt", "content": "a\ud800b"})
    assert _error(bad_text)[0] == "INVALID_ARGS"
    assert '"content" holds a lone surrogate (U+D800 at character 1)' in bad_text.error.message
    (ws / "e.txt").write_text("x\n")
    bad_edit = await host.call(
        "edit_file", {"path": "e.txt", "old_text": "x", "new_text": "\udfff"}
    )
    assert _error(bad_edit)[0] == "INVALID_ARGS"
    assert sorted(p.name for p in ws.iterdir()) == ["e.txt"]
    # "\udcff" is how Python spells the undecodable byte 0xff in a file name: it round-trips.
    ok = await host.call("write_file", {"path": "\udcff.txt", "content": "x\n"})
    assert not ok.is_error
    assert (ws / b"\xff.txt".decode("utf-8", "surrogateescape")).read_text() == "x\n"
    listing = await host.call("list_dir", {})
    assert "\\udcff.txt" in listing.text.splitlines()  # shown escaped: test_tools_hostile_names
