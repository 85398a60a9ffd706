"""``grep`` reads ripgrep's output as it arrives (issue 27, search).

Records are parsed as soon as they have arrived, wherever the pipe cut the output (inside a
name, a line, a character); a line longer than any piece is read whole. ripgrep is stopped (its
processes killed and reaped) as soon as what can be shown has been read, or when its output
passes the sandbox's limit, instead of running to the end.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from dsh_plugins_builtin._tools import _ripgrep
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._ripgrep import RgStream, parse_output
from tests.dsh_plugins_builtin.conftest import processes_with, tools_host
from tests.dsh_plugins_builtin.test_search_hostile import fake_rg
from tests.dsh_plugins_builtin.test_tools_search import put

CEILING_S = 10.0  # a wall-clock ceiling on a search that ends at once when the code is right

OUTPUT = (
    b"rg: a message first\n"
    b"./a\nREADME.md\x001:one \xe2\x82\xac euro\n"
    b"./x:1:y\x002:two:three\r\n"
    b"./bad\xff.txt\x003:bad \xff name\n"
    b"rg: a message between\n"
    b"./b.txt\x004:four [... omitted end of long line]\n"
    b"./c.txt\x005:no line break at the end"
)


def _streamed(data: bytes, cuts: list[int], complete: bool = True, batch: int = 1) -> Any:
    """Feed ``data`` cut at ``cuts``, whole records parsed once ``batch`` bytes are pending."""
    saved = _ripgrep.BATCH_BYTES
    _ripgrep.BATCH_BYTES = batch
    try:
        stream = RgStream()
        start = 0
        for cut in [*sorted(cuts), len(data)]:
            assert stream.feed(data[start:cut]) is False
            start = cut
        return stream.finish(complete)
    finally:
        _ripgrep.BATCH_BYTES = saved


def test_every_cut_reads_as_the_whole_output() -> None:
    whole = parse_output(OUTPUT.decode("utf-8", "replace"), False)
    assert len(whole.matches) == 5
    assert len(whole.messages) == 2
    for batch in (1, 7, 64, _ripgrep.BATCH_BYTES):
        for cut in range(len(OUTPUT) + 1):  # one cut anywhere: in a name, a line, a character
            assert _streamed(OUTPUT, [cut], batch=batch) == whole, (batch, cut)
        assert _streamed(OUTPUT, list(range(len(OUTPUT))), batch=batch) == whole


@given(st.lists(st.integers(0, len(OUTPUT)), max_size=8))
def test_any_cuts_read_as_the_whole_output(cuts: list[int]) -> None:
    assert _streamed(OUTPUT, cuts) == parse_output(OUTPUT.decode("utf-8", "replace"), False)


def test_a_line_longer_than_any_piece_is_read_whole() -> None:
    text = b"needle " + b"x" * 300_000
    data = b"./big.txt\x007:" + text + b"\r\n./z.txt\x001:z\n"
    out = _streamed(data, list(range(0, len(data), 65536)), batch=_ripgrep.BATCH_BYTES)
    assert [(m.path, m.line, m.text) for m in out.matches] == [
        ("big.txt", 7, text.decode()),
        ("z.txt", 1, "z"),
    ]


def test_a_cut_output_drops_its_unfinished_record() -> None:
    for batch in (1, _ripgrep.BATCH_BYTES):  # parsed as it came, or all at the end
        out = _streamed(b"./a\x001:one\n./b\x002:tw", [5], complete=False, batch=batch)
        assert [m.path for m in out.matches] == ["a"]
        assert out.complete is False


def test_with_a_limit_the_stream_says_enough_and_keeps_the_first() -> None:
    stream = RgStream(limit=3)
    data = b"".join(b"./f\x00%d:x\n" % n for n in range(1, 11))
    assert stream.feed(data[:9]) is False
    assert stream.feed(data[9:]) is True
    assert [m.line for m in stream.finish(True).matches] == [1, 2, 3]
    cut = RgStream(limit=3)  # the third record is unfinished: not enough yet
    assert cut.feed(b"./f\x001:x\n./f\x002:x\n./f\x003:") is False
    assert cut.feed(b"x") is False
    assert cut.feed(b"\n./f\x004:x\n") is True
    assert [m.line for m in cut.finish(True).matches] == [1, 2, 3]


def _spy_on_sinks(host: Any, monkeypatch: pytest.MonkeyPatch, piece: int) -> list[bytes]:
    """Hand grep's sink the output ``piece`` bytes at a time; returns what it was handed."""
    sandbox: Any = host.pm.get_plugin("sandbox")
    real = sandbox.run
    seen: list[bytes] = []

    async def run(
        command: str, cwd: Any = None, timeout: Any = None, sink: Any = None, **kwargs: Any
    ) -> Any:
        def cut(data: bytes) -> bool:
            seen.append(data)
            enough = False
            for start in range(0, len(data), piece):
                enough = sink(data[start : start + piece])
                if enough:
                    break
            return enough

        return await real(command, cwd=cwd, timeout=timeout, sink=cut, **kwargs)

    monkeypatch.setattr(sandbox, "run", run)
    return seen


async def test_grep_reads_names_and_lines_cut_anywhere(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(ws, {"a\nb:1:c.txt": "needle \u20ac one\n", "plain.txt": "x\nneedle two\n"})
    host = tools_host(make_host, ws)
    seen = _spy_on_sinks(host, monkeypatch, 1)  # a byte at a time: every cut there is
    monkeypatch.setattr(_ripgrep, "BATCH_BYTES", 1)  # and each read as soon as it can be
    result = await host.call("grep", {"pattern": "needle"})
    # the name's line break shown escaped (test_tools_hostile_names.py): one match, one line
    assert result.text == "a\\nb:1:c.txt:1:needle \u20ac one\nplain.txt:2:needle two"
    assert seen  # streamed


async def test_output_past_the_limit_stops_ripgrep_and_the_sorted_search_stops_at_enough(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake ripgrep that prints 2,000 matches, then never ends: only a stop ends it.
    first, second = (f"1000.{uuid.uuid4().int % 10**9}" for _ in range(2))
    script = (
        "i=1; while [ $i -le 2000 ]; do printf 'f.txt\\000%d:needle\\n' $i; i=$((i+1)); done\n"
        f'case "$*" in *--sort=path*) exec sleep {second} ;; *) exec sleep {first} ;; esac\n'
    )
    rg = fake_rg(ws / ".venv" / "bin", script)
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws, max_output_bytes=16_000)  # about 1,000 matches
    commands: list[str] = []
    sandbox: Any = host.pm.get_plugin("sandbox")
    real = sandbox.run

    async def run(command: str, **kwargs: Any) -> Any:
        commands.append(command)
        return await real(command, **kwargs)

    monkeypatch.setattr(sandbox, "run", run)
    with trio.fail_after(CEILING_S):
        result = await host.call("grep", {"pattern": "needle"})
    lines = result.text.split("\n")
    assert lines[:2] == ["f.txt:1:needle", "f.txt:2:needle"]
    assert lines[499] == "f.txt:500:needle"
    assert lines[501] == "[stopped after 500 matches; narrow the pattern, the path or the glob]"
    assert result.meta == {"path": ".", "count": 500, "files": 1, "truncated": True}
    assert len(commands) == 2
    assert "--sort=path" in commands[1]
    assert "| head" not in commands[1]
    assert processes_with(first) == []
    assert processes_with(second) == []


def test_random_pieces_of_a_long_output_read_as_the_whole() -> None:
    rng = random.Random(5)
    records = []
    for n in range(2000):
        name = "".join(rng.choice("ab\n:/\xe9") for _ in range(rng.randint(1, 12)))
        records.append(f"./{name}\0{n}:{'t' * rng.randint(0, 300)}\n".encode())
    data = b"".join(records)
    cuts = [rng.randint(0, len(data)) for _ in range(300)]
    for batch in (1, 4096, _ripgrep.BATCH_BYTES):
        assert _streamed(data, cuts, batch=batch) == parse_output(data.decode(), False)
