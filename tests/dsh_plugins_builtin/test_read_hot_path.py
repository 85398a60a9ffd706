"""``read_file``'s hot path (issue 11): what makes a small read cheap, and that it stays fenced.

A small regular file is fenced, opened and read on the event loop (no worker thread); the roots
are canonicalised once, at start; a call resolves only the components below its root and opens
nothing but the file. Each structural fact below fails if the cheaper path is undone; the
escape tests (test_file_fence.py, test_tools_escapes.py, test_escapes_*.py) keep it fenced.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import Host
from dsh_plugins_builtin._sandbox import _fence, _judge, _open, _pins, _policy
from dsh_plugins_builtin._sandbox._fence import RootReplaced, SandboxPolicy, open_read, pin_roots
from dsh_plugins_builtin._tools import _read as _file_tools
from tests.dsh_plugins_builtin.conftest import tools_host

SMALL = ("x" * 69 + "\n") * 20  # 1,400 bytes, as the benchmark reads


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    return tools_host(make_host, ws)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def _counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple[Any, ...]]:
    """Record every call of ``owner.name`` (still calling it)."""
    calls: list[tuple[Any, ...]] = []
    real: Callable[..., Any] = getattr(owner, name)

    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, record)
    return calls


async def test_a_small_read_uses_no_worker_thread(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.txt").write_text(SMALL)
    await host.call("read_file", {"path": "a.txt"})  # warm: nothing lazy left

    async def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a small read went through a worker thread")

    monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
    result = await host.call("read_file", {"path": "a.txt"})
    assert not result.is_error, result.text
    assert result.text.splitlines()[19] == "    20\t" + "x" * 69
    assert result.meta == {"path": "a.txt", "offset": 1, "count": 20, "total_lines": 20}


async def test_a_file_over_the_inline_limit_is_read_in_a_worker_thread(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = "y" * 99 + "\n"
    (ws / "big.txt").write_text(line * (_file_tools.INLINE_READ_BYTES // 100 + 1))
    (ws / "edge.txt").write_text("z" * (_file_tools.INLINE_READ_BYTES - 1) + "\n")
    threads = _counting(monkeypatch, trio.to_thread, "run_sync")
    edge = await host.call("read_file", {"path": "edge.txt"})  # exactly the limit: inline
    assert (edge.is_error, threads) == (False, [])
    result = await host.call("read_file", {"path": "big.txt", "offset": 600, "limit": 1})
    assert len(threads) == 1
    assert result.text.startswith("   600\t" + "y" * 99)
    assert result.meta["total_lines"] == _file_tools.INLINE_READ_BYTES // 100 + 1


def test_a_file_that_grew_after_its_fstat_is_read_on_or_left_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fstat`` said 5 bytes, the file holds 10: read to the end, or ``None`` past the limit."""
    path = tmp_path / "grown.txt"
    path.write_bytes(b"0123456789")
    reads = _counting(monkeypatch, os, "read")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _file_tools._read_at_most(fd, 20, 5) == b"0123456789"
        os.lseek(fd, 0, os.SEEK_SET)
        assert _file_tools._read_at_most(fd, 8, 5) is None  # grew past the limit: a thread
        os.lseek(fd, 0, os.SEEK_SET)
        reads.clear()
        assert _file_tools._read_at_most(fd, 20, 10) == b"0123456789"
        assert len(reads) == 1  # the size fstat gave, in one read
        os.lseek(fd, 3, os.SEEK_SET)  # shorter than fstat said (truncated meanwhile): to EOF
        assert _file_tools._read_at_most(fd, 20, 10) == b"3456789"
    finally:
        os.close(fd)


async def test_the_roots_are_canonicalised_once_and_plain_paths_not_resolved(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text(SMALL)
    await host.call("read_file", {"path": "sub/a.txt"})
    canonical = _counting(monkeypatch, _policy, "_canonical_roots")
    pinned = _counting(monkeypatch, _pins, "pin_roots")
    root_walks = _counting(monkeypatch, _open, "open_dir_nofollow")
    resolves = _counting(monkeypatch, _judge, "resolve_abs")
    for _ in range(100):
        result = await host.call("read_file", {"path": "sub/a.txt"})
        assert not result.is_error, result.text
    assert (canonical, pinned, root_walks) == ([], [], [])
    assert resolves == []  # no symlink on the path: opened as spelled, nothing resolved
    (ws / "alias").symlink_to("sub")
    result = await host.call("read_file", {"path": "alias/a.txt"})
    assert (result.is_error, result.meta["path"]) == (False, "sub/a.txt")
    # A symlink on the path: resolved, but only below the workspace (a pinned root).
    assert resolves == [("alias/a.txt", str(ws))]
    assert (canonical, pinned, root_walks) == ([], [], [])


def test_check_pinned_is_an_identity_comparison_not_a_walk(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = pin_roots(SandboxPolicy("workspace-write", ws, writable_roots=(ws,)))

    def no_walk(*args: object, **kwargs: object) -> int:
        raise AssertionError("check_pinned opened the root")

    monkeypatch.setattr(_pins, "open_dir_nofollow", no_walk)
    monkeypatch.setattr(_pins, "resolve_abs", no_walk)
    _fence.check_pinned(policy)


def test_a_root_replaced_after_start_is_refused_by_the_read_itself(ws: Path) -> None:
    """Without the sandbox plugin's up-front check (`FailClosedSandbox` calls `open_read`
    directly), the read must still see that its root is no longer the pinned directory."""
    (ws / "a.txt").write_text("pinned\n")
    policy = pin_roots(SandboxPolicy("read-only", ws, writable_roots=(ws,)))
    ws.rename(ws.parent / "away")
    ws.mkdir()
    (ws / "a.txt").write_text("impostor\n")
    with pytest.raises(RootReplaced, match="another directory"):
        open_read("a.txt", policy)


def test_a_workspace_spelled_through_a_symlink_reads_through_the_slow_path(
    tmp_path: Path, ws: Path, outside: Path
) -> None:
    (ws / "a.txt").write_text("inside\n")
    (outside / "secret.txt").write_text("OUTSIDE\n")
    link = tmp_path / "ws-link"
    link.symlink_to(ws)
    policy = pin_roots(SandboxPolicy("read-only", link, writable_roots=(link,)))
    fd, real = open_read("a.txt", policy)
    try:
        assert (real, os.read(fd, 100)) == (str(ws / "a.txt"), b"inside\n")
    finally:
        os.close(fd)
    with pytest.raises(_fence.FenceDenied):
        open_read(f"../{outside.name}/secret.txt", policy)
