"""Escape attempts, end to end: tool -> sandbox plugin -> result code, and nothing got out.

Every test goes through ``Host(plugins=[ToolsPlugin(), SandboxPlugin()])`` and ``host.call``,
then checks the host itself: the file that must not exist does not, the listener got no
connection, the process is gone. The writable roots are only the workspace, so a sibling of the
workspace under the pytest temp dir is "outside".

``bash`` escapes run once per backend: a backend the probe finds unusable is skipped locally and
fails the test when ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import AbortSignal, Host
from dsh_plugins_builtin._sandbox import _fence
from tests.dsh_plugins_builtin.conftest import processes_with, tools_host, wait_gone


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def escape_host(make_host: Any, ws: Path, **sandbox: Any) -> Host:
    """The workspace is the only writable root: the `outside` directories live under /tmp,
    which is a writable root by default."""
    sandbox.setdefault("writable_roots", [str(ws)])
    return tools_host(make_host, ws, **sandbox)


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    return escape_host(make_host, ws)


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# -- the file fence ------------------------------------------------------------------------------


async def test_dotdot_traversal(host: Host, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    write = await host.call("write_file", {"path": "../escape.txt", "content": "x"})
    assert write.code == "SANDBOX_DENIED"
    assert 'write to "../escape.txt" (resolves to' in write.text
    assert write.text.endswith("under workspace-write mode")
    assert _attributed(write) == "sandbox: workspace-write mode"
    edit = await host.call(
        "edit_file", {"path": "sub/../../secret.txt", "old_text": "secret", "new_text": "x"}
    )
    assert edit.code == "SANDBOX_DENIED"
    read = await host.call("read_file", {"path": "../secret.txt"})
    assert read.code == "SANDBOX_DENIED"
    assert "secret" not in read.text.replace("secret.txt", "")
    assert not (tmp_path / "escape.txt").exists()
    assert (tmp_path / "secret.txt").read_text() == "secret\n"


async def test_absolute_path_outside(host: Host, outside: Path) -> None:
    result = await host.call("write_file", {"path": str(outside / "x.txt"), "content": "x"})
    assert result.code == "SANDBOX_DENIED"
    assert tree(outside) == []


async def test_symlink_inside_pointing_at_etc(host: Host, ws: Path) -> None:
    (ws / "etc").symlink_to("/etc")
    name = f"dsh-escape-{uuid.uuid4().hex}"
    write = await host.call("write_file", {"path": f"etc/{name}", "content": "x"})
    assert write.code == "SANDBOX_DENIED"
    assert f'(resolves to "/etc/{name}")' in write.text
    read = await host.call("read_file", {"path": "etc/hostname"})
    assert read.code == "SANDBOX_DENIED"
    listing = await host.call("grep", {"pattern": ".", "path": "etc"})
    assert listing.code == "SANDBOX_DENIED"
    assert not Path("/etc", name).exists()


async def test_symlinked_file_pointing_outside(host: Host, ws: Path, outside: Path) -> None:
    (outside / "target.txt").write_text("original\n")
    (ws / "link.txt").symlink_to(outside / "target.txt")
    write = await host.call("write_file", {"path": "link.txt", "content": "pwned"})
    edit = await host.call(
        "edit_file", {"path": "link.txt", "old_text": "original", "new_text": "pwned"}
    )
    assert (write.code, edit.code) == ("SANDBOX_DENIED", "SANDBOX_DENIED")
    assert (outside / "target.txt").read_text() == "original\n"
    assert (ws / "link.txt").is_symlink()


async def test_symlinked_directory(host: Host, ws: Path, outside: Path) -> None:
    (ws / "dir").symlink_to(outside)
    result = await host.call("write_file", {"path": "dir/f.txt", "content": "x"})
    assert result.code == "SANDBOX_DENIED"
    assert tree(outside) == []


async def test_new_file_under_a_symlinked_directory(host: Host, ws: Path, outside: Path) -> None:
    (ws / "dir").symlink_to(outside)
    result = await host.call("write_file", {"path": "dir/newdir/deep.txt", "content": "x"})
    assert result.code == "SANDBOX_DENIED"
    assert tree(outside) == []  # outside/newdir was not created


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_symlink_swapped_in_between_check_and_write(
    host: Host, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    (ws / "sub").mkdir()
    (ws / "sub/f.txt").write_text("old\n")
    swapped: list[Path] = []

    def swap(target: Path) -> None:
        (ws / "sub").rename(ws / "sub.moved")
        (ws / "sub").symlink_to(outside)
        swapped.append(target)

    monkeypatch.setattr(_fence, "_before_replace", swap)
    args = (
        {"path": "sub/f.txt", "content": "pwned"}
        if tool == "write_file"
        else {"path": "sub/f.txt", "old_text": "old", "new_text": "pwned"}
    )
    result = await host.call(tool, args)
    assert swapped, "the swap hook did not run"
    assert result.code == "SANDBOX_DENIED"
    assert result.text.startswith('Error: write to "sub/f.txt"')
    assert result.text.endswith("under workspace-write mode")
    assert tree(outside) == []
    assert (ws / "sub.moved/f.txt").read_text() == "old\n"


# -- bash ----------------------------------------------------------------------------------------


@pytest.fixture
def outside_home(tmp_path: Path) -> Iterator[Path]:
    """A home directory outside every writable root, not under /tmp when possible."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(tmp_path)
    path = Path(tempfile.mkdtemp(prefix="dsh-home-", dir=base)).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_bash_write_to_etc(make_host: Any, ws: Path, backend: str) -> None:
    host = escape_host(make_host, ws, backend=backend)
    target = Path(f"/etc/dsh-escape-{uuid.uuid4().hex}")
    result = await host.call("bash", {"command": f"echo pwned > {target}"})
    assert (result.is_error, result.meta["backend"]) == (False, backend)
    assert result.meta["exit_code"] != 0
    assert not target.exists()


async def test_bash_write_to_home(
    make_host: Any, ws: Path, backend: str, outside_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(outside_home))
    host = escape_host(make_host, ws, backend=backend)
    result = await host.call(
        "bash", {"command": 'echo pwned > "$HOME/escape.txt"; mkdir "$HOME/escape.d"'}
    )
    assert result.meta["exit_code"] != 0
    assert tree(outside_home) == []


async def _listener() -> trio.socket.SocketType:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def _pending_connection(sock: trio.socket.SocketType) -> bool:
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        raw.setblocking(False)
        conn, _ = raw.accept()
    except BlockingIOError:
        return False
    finally:
        raw.close()
    conn.close()
    return True


@pytest.mark.parametrize("network", [False, True])
async def test_bash_reaching_loopback(
    make_host: Any, ws: Path, backend: str, network: bool
) -> None:
    """``network = false`` blocks it; ``true`` is the control proving the check detects it."""
    host = escape_host(make_host, ws, backend=backend, network=network)
    with await _listener() as listener:
        port = listener.getsockname()[1]
        command = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"
        result = await host.call("bash", {"command": command})
        assert ("CONNECTED" in result.text) is network
        assert _pending_connection(listener) is network


async def test_bash_reading_an_env_secret(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-secret-value-1")
    monkeypatch.setenv("DSH_SESSION_TOKEN", "secret-value-2")
    monkeypatch.setenv("KEPT_TOKEN", "allowed-value-3")
    host = escape_host(make_host, ws, backend=backend, env_allow=["KEPT_TOKEN"])
    result = await host.call("bash", {"command": "env; cat /proc/self/environ | tr '\\0' '\\n'"})
    assert "sk-secret-value-1" not in result.text
    assert "secret-value-2" not in result.text
    assert "KEPT_TOKEN=allowed-value-3" in result.text.split("\n")


async def test_bash_under_read_only_cannot_write_the_workspace(
    make_host: Any, ws: Path, backend: str
) -> None:
    (ws / "existing.txt").write_text("original")
    host = escape_host(make_host, ws, backend=backend, mode="read-only")
    result = await host.call(
        "bash",
        {"command": "echo pwned > new.txt; echo pwned > existing.txt; mkdir d; cat existing.txt"},
    )
    assert "original" in result.text  # still readable
    assert result.meta["mode"] == "read-only"
    assert tree(ws) == ["existing.txt"]
    assert (ws / "existing.txt").read_text() == "original"


async def test_bash_background_process_does_not_outlive_the_call(
    make_host: Any, ws: Path, backend: str
) -> None:
    marker = f"{60 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    host = escape_host(make_host, ws, backend=backend)
    result = await host.call(
        "bash",
        {
            "command": f"(touch alive; sleep {marker}; touch late) & "
            "while [ ! -e alive ]; do :; done; echo started"
        },
    )
    assert (result.text, result.meta["exit_code"]) == ("started", 0)
    assert (ws / "alive").exists()  # the background child really ran
    await wait_gone(processes_with(marker))
    assert processes_with(marker) == []
    assert not (ws / "late").exists()


async def test_bash_abort_kills_the_process_group(make_host: Any, ws: Path, backend: str) -> None:
    marker = f"{60 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    os.mkfifo(ws / "ready")
    host = escape_host(make_host, ws, backend=backend)
    signal = AbortSignal()
    results = []

    async def call() -> None:
        command = f"echo go > ready; sleep {marker}; touch late"
        results.append(await host.call("bash", {"command": command}, signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        # Blocks (in a thread) until the command has started and written to the FIFO.
        with trio.fail_after(30):
            await trio.to_thread.run_sync((ws / "ready").read_text, abandon_on_cancel=True)
        pids = processes_with(marker)
        signal.abort("the user pressed stop")
    assert [r.code for r in results] == ["ABORTED"]
    assert pids, "the sleeper was not found running"
    await wait_gone(pids)
    assert not (ws / "late").exists()


async def test_bash_printing_50_mb_is_capped(make_host: Any, ws: Path, backend: str) -> None:
    host = escape_host(make_host, ws, backend=backend)
    result = await host.call("bash", {"command": "head -c 50000000 /dev/zero | tr '\\0' a"})
    assert result.meta["total_bytes"] == 50_000_000
    assert result.meta["truncated"] is True
    assert len(result.text.encode()) <= 64_000 + 200
    assert "[... output truncated: 49936000 of 50000000 bytes omitted ...]" in result.text


def _attributed(result):
    """``decided_by: decision_detail``, the way these tests spell who decided and why."""
    detail = result.decision_detail
    return result.decided_by if detail is None else f"{result.decided_by}: {detail}"
