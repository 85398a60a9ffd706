"""No lost writes (issue 10 item 2): serialised writers, compare-and-swap edits, and results
that tell the truth about a commit even past a deadline."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import Host, ToolExecutionInput, hookimpl
from dsh_plugins_builtin._sandbox import _fence
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.timeout import TimeoutPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.conftest import soak_size
from tests.dsh_plugins_builtin.conftest import tools_host


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    return tools_host(make_host, ws, writable_roots=["."])


def _lines(n: int) -> str:
    return "".join(f"line {i} old\n" for i in range(n))


@pytest.mark.soak
async def test_concurrent_edits_of_different_lines_are_all_applied(host: Host, ws: Path) -> None:
    n = soak_size(50, 200)
    target = ws / "f.txt"
    target.write_text(_lines(n))
    results: dict[int, Any] = {}

    async def edit(i: int) -> None:
        args = {"path": "f.txt", "old_text": f"line {i} old\n", "new_text": f"line {i} new\n"}
        results[i] = await host.call("edit_file", args, call_id=f"c{i}")

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(edit, i)
    text = target.read_text()
    succeeded = [i for i, r in results.items() if not r.is_error]
    assert len(succeeded) == n, [r.text for r in results.values() if r.is_error][:3]
    for i in succeeded:  # every reported success is in the file
        assert f"line {i} new\n" in text
    assert "old" not in text


async def test_batched_and_direct_writers_of_one_path_are_serialised(host: Host, ws: Path) -> None:
    """Writes through ``execute_batch`` and ``host.call`` share one lock per resolved path."""
    target = ws / "f.txt"
    target.write_text(_lines(20))
    (ws / "link.txt").symlink_to("f.txt")  # another spelling of the same file
    inputs = [
        ToolExecutionInput(
            call_id=f"b{i}",
            name="edit_file",
            arguments={
                "path": "link.txt" if i % 2 else "f.txt",
                "old_text": f"line {i} old",
                "new_text": f"line {i} new",
            },
        )
        for i in range(10)
    ]
    direct: list[Any] = []

    async def direct_edits() -> None:
        for i in range(10, 20):
            args = {"path": "f.txt", "old_text": f"line {i} old", "new_text": f"line {i} new"}
            direct.append(await host.call("edit_file", args))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(direct_edits)
        batch = await host.registry.execute_batch(inputs)
    assert not [r.text for r in (*batch, *direct) if r.is_error]
    assert target.read_text() == "".join(f"line {i} new\n" for i in range(20))


async def test_an_edit_from_another_process_between_read_and_rename_is_a_conflict(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "f.txt"
    target.write_text("alpha\nbeta\n")

    def other_process_edits(key: Path) -> None:
        key.write_text("alpha\nBETA by someone else\n")  # in place, as an editor would

    monkeypatch.setattr(_fence, "_before_replace", other_process_edits)
    result = await host.call("edit_file", {"path": "f.txt", "old_text": "alpha", "new_text": "A"})
    assert result.is_error
    assert result.error.code == "EDIT_CONFLICT"
    assert '"f.txt" was changed by someone else since it was read' in result.error.message
    assert "nothing was written" in result.error.message
    assert target.read_text() == "alpha\nBETA by someone else\n"  # their edit survives
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]  # no temp file left
    # The control: with nobody else writing, the same edit applies.
    monkeypatch.setattr(_fence, "_before_replace", lambda key: None)
    again = await host.call("edit_file", {"path": "f.txt", "old_text": "alpha", "new_text": "A"})
    assert not again.is_error
    assert target.read_text() == "A\nBETA by someone else\n"


async def test_a_file_replaced_by_rename_between_read_and_commit_is_a_conflict(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "f.txt"
    target.write_text("alpha\n")

    def replaced(key: Path) -> None:
        (ws / "new").write_text("alpha\n")  # same content, another inode
        (ws / "new").rename(key)

    monkeypatch.setattr(_fence, "_before_replace", replaced)
    result = await host.call("edit_file", {"path": "f.txt", "old_text": "alpha", "new_text": "A"})
    assert result.error.code == "EDIT_CONFLICT"
    assert target.read_text() == "alpha\n"


# -- deadlines: an error result means nothing changed ---------------------------------------
#
# The clock is trio's MockClock: it jumps to the next deadline as soon as every task waits.
# `_busy_until` keeps one task runnable (a checkpoint loop, no sleeping) until the worker
# thread has reached the point the test is about, so the deadline passes exactly there.


def _timed_host(make_host: Any, ws: Path, ms: int = 5) -> Host:
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"writable_roots": ["."]},
            "timeout": {"per_tool": {"write_file": ms}},
        },
    }
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), TimeoutPlugin(), config=config)
    return host


async def _busy_until(event: threading.Event) -> None:
    while not event.is_set():
        await trio.sleep(0)


async def _call_when(host: Host, reached: threading.Event, args: dict[str, Any]) -> Any:
    result: Any = None

    async def call() -> None:
        nonlocal result
        result = await host.call("write_file", args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_busy_until, reached)
        nursery.start_soon(call)
    return result


async def test_a_write_still_running_at_its_deadline_times_out_and_changes_nothing(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    """The deadline passes while the worker thread is about to commit: it must not commit."""
    (ws / "f.txt").write_text("before\n")
    host = _timed_host(make_host, ws)
    reached, release, finished = threading.Event(), threading.Event(), threading.Event()
    original = SandboxPlugin.write_text

    def before_replace(key: Path) -> None:
        reached.set()
        release.wait(10)

    @functools.wraps(original)
    def write_text(self: SandboxPlugin, *args: Any, **kwargs: Any) -> None:
        try:
            original(self, *args, **kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(_fence, "_before_replace", before_replace)
    monkeypatch.setattr(SandboxPlugin, "write_text", write_text)
    result = await _call_when(host, reached, {"path": "f.txt", "content": "after\n"})
    assert result.is_error
    assert result.error.code == "TOOL_TIMEOUT"
    release.set()  # now let the abandoned thread try to commit
    assert finished.wait(10)
    assert (ws / "f.txt").read_text() == "before\n"
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]  # its temp file is gone too


async def test_a_write_committed_as_the_deadline_passes_reports_the_commit(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    """The rename happened, then the deadline passed before the body returned: a success."""
    (ws / "f.txt").write_text("before\n")
    host = _timed_host(make_host, ws)
    committed, release = threading.Event(), threading.Event()
    original = SandboxPlugin.write_text

    @functools.wraps(original)
    def write_text(self: SandboxPlugin, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        committed.set()
        release.wait(10)  # committed; the deadline passes while the body is still running

    monkeypatch.setattr(SandboxPlugin, "write_text", write_text)
    try:
        result = await _call_when(host, committed, {"path": "f.txt", "content": "after\n"})
    finally:
        release.set()
    assert (ws / "f.txt").read_text() == "after\n"
    assert not result.is_error, result.text
    assert result.text.startswith("Overwrote f.txt")
    assert "committed, although the tool's 5ms budget ran out" in result.text
    assert result.meta["path"] == "f.txt"
    assert trio.current_time() >= 0.005  # the deadline did pass


async def test_a_write_cancelled_before_it_began_does_nothing(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    """The deadline passes before the worker thread has begun to write (held there: left to
    itself, a fast thread sometimes committed first, and the call then rightly succeeded)."""
    host = _timed_host(make_host, ws)
    reached, release, finished = threading.Event(), threading.Event(), threading.Event()
    original = SandboxPlugin.write_text

    @functools.wraps(original)
    def write_text(self: SandboxPlugin, *args: Any, **kwargs: Any) -> None:
        reached.set()
        release.wait(10)
        try:
            original(self, *args, **kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(SandboxPlugin, "write_text", write_text)
    result = await _call_when(host, reached, {"path": "f.txt", "content": "x\n"})
    assert result.error.code == "TOOL_TIMEOUT"
    release.set()  # the abandoned thread begins now, too late to commit
    assert finished.wait(10)
    assert not (ws / "f.txt").exists()


async def test_a_write_within_its_budget_is_unchanged_by_the_ledger(
    make_host: Any, ws: Path
) -> None:
    host = _timed_host(make_host, ws, ms=60_000)
    result = await host.call("write_file", {"path": "f.txt", "content": "x\n"})
    assert not result.is_error
    assert result.text == "Created f.txt (1 line, 2 bytes)"


async def test_a_third_party_sandbox_with_a_plain_write_text_still_writes(
    make_host: Any, ws: Path
) -> None:
    """A sandbox plugin written against the older ``write_text(path, content)`` keeps working."""

    class PlainSandbox:
        name = "sandbox"
        mode = "workspace-write"

        @hookimpl  # a plugin must implement a hook to be registered
        def dsh_host_started(self) -> None:
            pass

        def __init__(self) -> None:
            self.writes: list[str] = []

        def check_read(self, path: str) -> Path:
            return ws / path

        def check_write(self, path: str) -> Path:
            return ws / path

        def write_text(self, path: str, content: str) -> None:
            self.writes.append(path)
            (ws / path).write_text(content)

        async def run(self, command: str, cwd: str | None = None, timeout: float | None = None):
            raise AssertionError("not used")

    sandbox = PlainSandbox()
    host = make_host(ToolsPlugin(), sandbox, config={"host": {"workspace": str(ws)}})
    result = await host.call("write_file", {"path": "f.txt", "content": "a\n"})
    assert not result.is_error, result.text
    edit = await host.call("edit_file", {"path": "f.txt", "old_text": "a", "new_text": "b"})
    assert not edit.is_error, edit.text
    assert (ws / "f.txt").read_text() == "b\n"
    assert sandbox.writes == ["f.txt", "f.txt"]
