"""``grep`` re-checks the files of a large output while ripgrep still runs (issue 27, search).

Each file ripgrep reports is checked again by its real path after ripgrep reported it
(`_grep_recheck.Recheck`). For an output of many files that check was most of what followed
ripgrep; now a worker thread makes it as the output arrives (`_grep_recheck.Early`), and only
the last, small part is left for the end. What is shown does not change: a file swapped for a
symlink out of the fence is still dropped, and only the output shown is vouched for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_plugins_builtin._tools import _grep_recheck, _ripgrep
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._ripgrep import RgMatch, RgStream, parse_output
from tests.dsh_plugins_builtin.conftest import tools_host
from tests.dsh_plugins_builtin.test_search_hostile import fake_rg
from tests.dsh_plugins_builtin.test_tools_search import put

CEILING_S = 10.0  # a wall-clock ceiling on a wait that ends at once when the code is right
MANY = 300  # files whose output passes SEEN_BATCH_BYTES several times over


def _asked_about(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], threading.Event]:
    """Record every file `Recheck.readable` is asked about; the event is set once the first
    has been answered (set before, a test's swap could come ahead of that answer)."""
    asked: list[str] = []
    first = threading.Event()
    real = _grep_recheck.Recheck.readable

    def readable(self: _grep_recheck.Recheck, rel: str) -> bool:
        asked.append(rel)
        try:
            return real(self, rel)
        finally:
            first.set()

    monkeypatch.setattr(_grep_recheck.Recheck, "readable", readable)
    return asked, first


def _after_each_run(
    monkeypatch: pytest.MonkeyPatch, host: Any, ended: Callable[[], Awaitable[None]]
) -> None:
    """Await *ended* each time the sandbox plugin's ``run`` (ripgrep) has ended, before grep
    goes on."""
    sandbox: Any = host.pm.get_plugin("sandbox")
    real = sandbox.run

    async def run(command: str, **kwargs: Any) -> Any:
        result = await real(command, **kwargs)
        await ended()
        return result

    monkeypatch.setattr(sandbox, "run", run)


def test_the_stream_hands_on_what_it_reads_as_the_output_arrives() -> None:
    data = b"".join(b"./d/f%03d.txt\x001:needle\n" % n for n in range(MANY))
    seen: list[RgMatch] = []
    stream = RgStream(seen=seen.extend)
    for start in range(0, len(data), 100):
        assert stream.feed(data[start : start + 100]) is False
    assert len(data) > 3 * _ripgrep.SEEN_BATCH_BYTES
    assert 0 < len(seen) < MANY  # batches as they came; the rest is read at the end ...
    out = stream.finish(True)
    assert out == parse_output(data.decode(), False)
    assert seen == list(out.matches[: len(seen)])  # ... and not handed on


async def test_the_files_of_a_large_output_are_rechecked_while_ripgrep_runs(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(ws, {f"d/f{n:03}.txt": "needle\n" for n in range(MANY)})
    host = tools_host(make_host, ws)
    asked, first = _asked_about(monkeypatch)
    early: list[bool] = []

    async def ended() -> None:
        # ripgrep has ended and grep has not gone on yet: some file was asked about already.
        early.append(await trio.to_thread.run_sync(first.wait, CEILING_S))

    _after_each_run(monkeypatch, host, ended)
    result = await host.call("grep", {"pattern": "needle"})
    assert early == [True]
    assert result.meta["count"] == MANY
    assert result.text.split("\n")[:2] == ["d/f000.txt:1:needle", "d/f001.txt:1:needle"]
    assert sorted(asked) == sorted(f"d/f{n:03}.txt" for n in range(MANY))  # each once


async def test_a_file_swapped_for_a_symlink_out_of_the_fence_is_dropped_early(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if ripgrep opened link.txt after it had been swapped for a symlink leading out: it is
    # reported first, in the batch read while the (fake) ripgrep goes on printing.
    put(tmp_path, {"outside.txt": "outside secret\n"})
    (ws / "link.txt").symlink_to(tmp_path / "outside.txt")
    put(ws, {f"f{n:03}.txt": "fine\n" for n in range(MANY)})
    script = "printf './link.txt\\0001:outside secret\\n'\n" + "".join(
        f"printf './f{n:03}.txt\\0001:fine\\n'\n" for n in range(MANY)
    )
    monkeypatch.setattr(_search_tools, "find_rg", lambda: fake_rg(ws / ".venv" / "bin", script))
    asked, _ = _asked_about(monkeypatch)
    host = tools_host(make_host, ws, writable_roots=["."])
    result = await host.call("grep", {"pattern": "e"})
    assert result.meta["count"] == MANY
    assert "outside secret" not in result.text
    assert asked.count("link.txt") == 1  # asked once, the answer kept to the end


async def test_an_output_searched_again_is_vouched_for_as_shown(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the output limit ripgrep runs again in path order: what the first run reported was
    # asked about meanwhile, but the files shown are those of the second, asked about after it.
    put(ws, {f"d/f{n:03}.txt": "needle\n" * 20 for n in range(MANY)})
    host = tools_host(make_host, ws, max_output_bytes=16_000)
    asked, _ = _asked_about(monkeypatch)
    ran: list[int] = []

    async def ended() -> None:
        ran.append(len(asked))  # asked about so far, when each run has ended

    _after_each_run(monkeypatch, host, ended)
    result = await host.call("grep", {"pattern": "needle"})
    assert len(ran) == 2
    assert result.meta["count"] == 500
    assert result.meta["truncated"]
    shown = {line.split(":")[0] for line in result.text.split("\n")[:500]}
    assert shown <= set(asked[ran[1] :])  # each one shown asked about after the second run


async def test_a_directory_swapped_after_its_first_files_were_rechecked_is_resolved_again(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory resolved while ripgrep runs holds only for the files it had reported then: a
    file it reports after the directory was swapped for a symlink leading out of the fence
    (here by another process, between two of ripgrep's lines) is checked through the symlink,
    not through the directory's earlier answer."""
    put(tmp_path, {"out/zz.txt": "outside secret\n"})
    put(ws, {f"sub/f{n:03}.txt": "fine\n" for n in range(MANY)})
    put(ws, {"sub/zz.txt": "fine\n"})
    gate = ws / "gate"
    os.mkfifo(gate)
    script = "".join(f"printf './sub/f{n:03}.txt\\0001:fine\\n'\n" for n in range(MANY))
    script += f"read line < {gate}\nprintf './sub/zz.txt\\0001:outside secret\\n'\n"
    monkeypatch.setattr(_search_tools, "find_rg", lambda: fake_rg(ws / ".venv" / "bin", script))
    _, first = _asked_about(monkeypatch)
    host = tools_host(make_host, ws, writable_roots=["."])

    async def swap_then_go_on() -> None:
        assert await trio.to_thread.run_sync(first.wait, CEILING_S)  # sub/ resolved early
        (ws / "sub").rename(ws / "sub.real")
        (ws / "sub").symlink_to(tmp_path / "out")
        await trio.to_thread.run_sync(gate.write_text, "go\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(swap_then_go_on)
        result = await host.call("grep", {"pattern": "e"})
    # (the files checked after the swap lead nowhere now, and are dropped as gone)
    assert 0 < result.meta["count"] <= MANY
    assert "outside secret" not in result.text
    assert "zz.txt" not in result.text
