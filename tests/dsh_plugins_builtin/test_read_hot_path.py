"""``read_file``'s hot path (issue 11): what makes a small read cheap, and that it stays fenced.

A small regular file is fenced, opened and read on the event loop (no worker thread); the roots
are canonicalised once, at start; a call resolves only the components below its root and opens
nothing but the file. Each structural fact below fails if the cheaper path is undone; the
escape tests (test_file_fence.py, test_tools_escapes.py, test_escapes_*.py) keep it fenced.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from dsh_host import Host
from dsh_plugins_builtin._sandbox import _fence, _judge, _open, _pins, _policy
from dsh_plugins_builtin._sandbox._beneath import open_normal
from dsh_plugins_builtin._sandbox._fence import RootReplaced, SandboxPolicy, open_read, pin_roots
from dsh_plugins_builtin._sandbox._paths import within
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


# -- issue 27: the floor of a small read -------------------------------------------------------


async def test_a_small_read_from_its_start_numbers_its_lines_in_one_pass(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No per-line tuple or format: the prefixes made once are joined to the lines."""
    (ws / "a.txt").write_text(SMALL)

    def no_window(*args: object) -> None:
        raise AssertionError("a small read from its start took the per-line path")

    monkeypatch.setattr(_file_tools, "_whole_window", no_window)
    result = await host.call("read_file", {"path": "a.txt", "limit": 5})
    assert result.text.splitlines()[:5] == [f"{n:6d}\t" + "x" * 69 for n in range(1, 6)]
    assert result.text.endswith(
        "[showing lines 1-5 of 20; call read_file with offset=6 to read more]"
    )
    assert result.meta == {"path": "a.txt", "offset": 1, "count": 5, "total_lines": 20}


_TEXT = st.lists(
    st.sampled_from(["", "a", "b\tc", "é", "\r", "x" * 2001, "y" * 1999]), max_size=8
).map("\n".join)


@given(
    text=_TEXT | _TEXT.map(lambda t: t + "\n"),
    offset=st.integers(1, 12) | st.integers(1990, 2010),
    limit=st.integers(1, 12) | st.integers(1990, 2010),
)
def test_the_one_pass_body_is_what_the_per_line_path_writes(
    text: str, offset: int, limit: int
) -> None:
    lines, total = _file_tools._whole_window(text, offset, limit)
    numbered = _file_tools._numbered_text(text, offset, limit)
    if numbered is None:
        return  # the caller takes the per-line path
    body, last, counted = numbered
    assert counted == total
    expected = _file_tools._read_result("f", lines, total, offset)
    assert _file_tools._body_result("f", body, last, total, offset) == expected


def test_read_files_body_is_one_coroutine_that_still_attributes_sandbox_refusals(
    ws: Path,
) -> None:
    """No `guarded_async` wrapper around the body (a coroutine more per call); a refusal still
    comes back as the sandbox's result."""
    import functools
    import inspect

    from dsh_plugins_builtin._tools._read import read_file_tool
    from dsh_plugins_builtin._tools._support import FailClosedSandbox

    class Env:
        workspace = ws

        def sandbox(self) -> Any:
            return FailClosedSandbox(ws, "not enabled")

    tool = read_file_tool(Env())  # type: ignore[arg-type]
    assert isinstance(tool.execute, functools.partial)
    assert tool.execute.func is _file_tools._read_file
    assert inspect.iscoroutinefunction(tool.execute)
    assert tool.is_async
    result = trio.run(tool.execute, {"path": "/etc/hostname"})
    assert (result.is_error, result.code) == (True, "SANDBOX_DENIED"), result
    assert result.decided_by is not None


def test_a_plain_path_is_opened_without_splitting_it_again(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lexical path is normal already (`_open._normal`): one ``openat2``, no `_split`."""
    from dsh_plugins_builtin._sandbox import _beneath

    if not _beneath.HAVE_OPENAT2:
        pytest.skip("no openat2 here: the walk splits the path")
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("inside\n")
    policy = pin_roots(SandboxPolicy("read-only", ws, writable_roots=(ws,)))

    def no_split(rel: str) -> list[str]:
        raise AssertionError(f"split {rel!r} again")

    monkeypatch.setattr(_beneath, "_split", no_split)
    fd, real = open_read("sub/a.txt", policy)
    try:
        assert (real, os.read(fd, 100)) == (str(ws / "sub" / "a.txt"), b"inside\n")
    finally:
        os.close(fd)
    (ws / "link").symlink_to(ws / "sub" / "a.txt")
    with pytest.raises(OSError, match="symbolic links"):
        open_normal(str(ws / "link"), os.O_RDONLY)  # the kernel still refuses a symlink


def test_a_second_file_in_a_directory_does_not_walk_its_ancestors_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = types.SimpleNamespace(
        deny_read=(Path("/srv/secret"), Path("/srv/data/keys")), deny_patterns=()
    )
    assert _judge.denied_by("/srv/data/a.txt", policy) is None  # type: ignore[arg-type]

    def no_walk(*args: object) -> None:
        raise AssertionError("walked the ancestors of a directory seen before")

    monkeypatch.setattr(_judge, "_within_entry", no_walk)
    assert _judge.denied_by("/srv/data/b.txt", policy) is None  # type: ignore[arg-type]
    assert _judge.denied_by("/srv/data/keys", policy) == "/srv/data/keys"  # type: ignore[arg-type]


_PART = st.sampled_from(["a", "b", "keys", ""])


@given(
    keys=st.lists(st.lists(_PART, max_size=4).map(lambda p: "/" + "/".join(p)), max_size=12),
    deny=st.lists(st.lists(_PART, max_size=3).map(lambda p: "/" + "/".join(p)), max_size=4),
)
def test_remembered_directories_answer_as_the_ancestor_walk_does(
    keys: list[str], deny: list[str]
) -> None:
    """One policy, many files: what a directory lies within, remembered, is what the walk says."""
    policy = types.SimpleNamespace(deny_read=tuple(Path(p) for p in deny), deny_patterns=())
    texts = [str(Path(p)) for p in deny]
    for key in keys:
        entries = [t for t in texts if within(key, t)]  # every entry in order
        expected = None if not entries else _judge._home_text(entries[0])
        assert _judge.denied_by(key, policy) == expected  # type: ignore[arg-type]
