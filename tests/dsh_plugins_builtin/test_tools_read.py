"""``read_file`` and ``list_dir`` through the whole pipeline, with the sandbox plugin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import ExecutionMode, Host, ToolExecutionInput
from dsh_plugins_builtin._tools import _listing
from dsh_plugins_builtin._tools import _read as _file_tools
from dsh_plugins_builtin.tools import TOOL_NAMES
from tests.dsh_plugins_builtin.conftest import tools_host


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    return tools_host(make_host, ws)


async def test_registers_the_seven_tools(host: Host) -> None:
    assert sorted(s.name for s in host.registry.schemas()) == sorted(TOOL_NAMES)
    for schema in host.registry.schemas():
        assert schema.description
        for name, prop in schema.parameters["properties"].items():
            assert prop.get("description"), f"{schema.name}.{name} has no description"


@pytest.mark.parametrize(
    ("name", "args", "mode"),
    [
        ("read_file", {"path": "a"}, ExecutionMode.PARALLEL),
        ("list_dir", {}, ExecutionMode.PARALLEL),
        ("glob", {"pattern": "*"}, ExecutionMode.PARALLEL),
        ("grep", {"pattern": "x"}, ExecutionMode.PARALLEL),
        ("write_file", {"path": "a", "content": ""}, ExecutionMode.EXCLUSIVE),
        ("edit_file", {"path": "a", "old_text": "a", "new_text": "b"}, ExecutionMode.EXCLUSIVE),
        ("bash", {"command": "true"}, ExecutionMode.EXCLUSIVE),
    ],
)
async def test_concurrency_safety(host: Host, name: str, args: dict[str, Any], mode: str) -> None:
    assert (
        host.registry.execution_mode(ToolExecutionInput(call_id="c1", name=name, arguments=args))
        == mode
    )


# -- read_file -----------------------------------------------------------------------------------


async def test_numbered_lines_like_cat_n(host: Host, ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\n\tbeta\n\ngamma")
    result = await host.call("read_file", {"path": "a.txt"})
    assert not result.is_error
    assert result.text == "     1\talpha\n     2\t\tbeta\n     3\t\n     4\tgamma"
    assert result.meta == {"path": "a.txt", "offset": 1, "count": 4, "total_lines": 4}


async def test_offset_and_limit_window_with_a_note(host: Host, ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await host.call("read_file", {"path": "n.txt", "offset": 3, "limit": 2})
    assert result.text == (
        "     3\tline 3\n     4\tline 4\n\n"
        "[showing lines 3-4 of 10; call read_file with offset=5 to read more]"
    )
    tail = await host.call("read_file", {"path": "n.txt", "offset": 9})
    assert tail.text == "     9\tline 9\n    10\tline 10"
    assert tail.meta["total_lines"] == 10


async def test_default_limit_is_2000_lines(host: Host, ws: Path) -> None:
    (ws / "big.txt").write_text("x\n" * 2500)
    result = await host.call("read_file", {"path": "big.txt"})
    assert result.meta["count"] == 2000
    assert result.text.endswith(
        "[showing lines 1-2000 of 2500; call read_file with offset=2001 to read more]"
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"offset": 0}, '"offset" must be at least 1, got 0'),
        ({"limit": 0}, '"limit" must be at least 1, got 0'),
        ({"offset": 5}, '"offset" is 5 but a.txt has only 2 lines'),
        ({"offset": "1"}, '"offset" must be an integer'),
    ],
)
async def test_bad_window_is_invalid_args(
    host: Host, ws: Path, args: dict[str, Any], fragment: str
) -> None:
    (ws / "a.txt").write_text("1\n2\n")
    result = await host.call("read_file", {"path": "a.txt", **args})
    assert result.code == "INVALID_ARGS"
    assert fragment in result.text


async def test_an_offset_past_a_one_line_file_says_line(host: Host, ws: Path) -> None:
    (ws / "one.txt").write_text("only\n")
    result = await host.call("read_file", {"path": "one.txt", "offset": 3})
    assert '"offset" is 3 but one.txt has only 1 line; pass an offset from 1 to 1' in result.text


async def test_long_lines_are_cut_with_a_marker(host: Host, ws: Path) -> None:
    (ws / "long.txt").write_text("a" * 5000 + "\nshort\n")
    result = await host.call("read_file", {"path": "long.txt"})
    first, second = result.text.split("\n")
    assert first == "     1\t" + "a" * 2000 + " [... line truncated: 3000 more characters]"
    assert second == "     2\tshort"


async def test_crlf_and_missing_final_newline(host: Host, ws: Path) -> None:
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree")
    result = await host.call("read_file", {"path": "crlf.txt"})
    assert result.text == "     1\tone\n     2\ttwo\n     3\tthree"
    assert result.meta["total_lines"] == 3


async def test_empty_file(host: Host, ws: Path) -> None:
    (ws / "empty.txt").write_text("")
    result = await host.call("read_file", {"path": "empty.txt"})
    assert (result.is_error, result.text) == (False, "(empty.txt is empty)")
    assert result.meta["total_lines"] == 0


async def test_utf8_split_across_read_chunks(host: Host, ws: Path) -> None:
    """A multi-byte character straddling the 1 MiB read boundary decodes intact."""
    head = "a" * (_file_tools._CHUNK - 1)
    (ws / "u.txt").write_text(head + "é\nzweite Zeile ü\n", encoding="utf-8")
    result = await host.call("read_file", {"path": "u.txt", "offset": 2})
    assert result.text == "     2\tzweite Zeile ü"
    first = await host.call("read_file", {"path": "u.txt", "limit": 1})
    assert "[... line truncated:" in first.text


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"text\x00more", "it contains NUL bytes"),
        (b"caf\xe9 au lait\n", "not valid UTF-8 at byte 3"),
        (b"a" * (3 << 20) + b"\xff", f"not valid UTF-8 at byte {3 << 20}"),
    ],
)
async def test_binary_files_are_refused(host: Host, ws: Path, data: bytes, why: str) -> None:
    (ws / "bin.dat").write_bytes(data)
    result = await host.call("read_file", {"path": "bin.dat"})
    assert result.code == "BINARY_FILE"
    assert result.text == (
        f'Error: "bin.dat" looks like a binary file ({why}); only UTF-8 text files can be read '
        "or edited"
    )


async def test_missing_file_directory_and_fifo(host: Host, ws: Path) -> None:
    (ws / "dir").mkdir()
    os.mkfifo(ws / "fifo")
    missing = await host.call("read_file", {"path": "nope.txt"})
    assert missing.code == "FILE_NOT_FOUND"
    assert (
        missing.text == 'Error: no such file or directory: "nope.txt" (relative to the workspace)'
    )
    directory = await host.call("read_file", {"path": "dir"})
    assert directory.code == "NOT_A_FILE"
    assert "list_dir" in directory.text
    fifo = await host.call("read_file", {"path": "fifo"})  # must not block on the FIFO
    assert fifo.code == "NOT_A_FILE"


async def test_missing_path_argument_is_invalid_args(host: Host) -> None:
    result = await host.call("read_file", {})
    assert result.code == "INVALID_ARGS"
    assert '"path"' in result.text


async def test_absolute_paths_inside_and_outside(host: Host, ws: Path, tmp_path: Path) -> None:
    (ws / "in.txt").write_text("inside\n")
    inside = await host.call("read_file", {"path": str(ws / "in.txt")})
    assert inside.text == "     1\tinside"
    outside = await host.call("read_file", {"path": "/etc/hostname"})
    assert outside.code == "SANDBOX_DENIED"
    assert outside.text.startswith('Error: read of "/etc/hostname" denied: outside the workspace')
    assert outside.text.endswith("under workspace-write mode")


async def test_read_roots_extend_what_can_be_read(make_host: Any, ws: Path, tmp_path: Path) -> None:
    extra = Path("/etc")
    host = tools_host(make_host, ws, read_roots=[str(extra)])
    result = await host.call("read_file", {"path": "/etc/hostname"})
    assert result.code != "SANDBOX_DENIED"
    denied = await host.call("read_file", {"path": "/usr/lib/os-release"})
    assert denied.code == "SANDBOX_DENIED"


# -- list_dir ------------------------------------------------------------------------------------


async def test_list_dir_sorted_and_type_marked(host: Host, ws: Path) -> None:
    (ws / "b.txt").write_text("")
    (ws / "a_dir").mkdir()
    (ws / "c_link").symlink_to(ws / "b.txt")
    (ws / "d_dirlink").symlink_to(ws / "a_dir")
    (ws / ".hidden").write_text("")
    result = await host.call("list_dir", {})
    assert result.text == ".hidden\na_dir/\nb.txt\nc_link@\nd_dirlink@"
    assert result.meta == {"path": ".", "count": 5, "total": 5}
    sub = await host.call("list_dir", {"path": "a_dir"})
    assert sub.text == "(a_dir is an empty directory)"


async def test_list_dir_errors(host: Host, ws: Path) -> None:
    (ws / "f.txt").write_text("")
    not_dir = await host.call("list_dir", {"path": "f.txt"})
    assert not_dir.code == "NOT_A_DIRECTORY"
    assert "read_file" in not_dir.text
    missing = await host.call("list_dir", {"path": "nope"})
    assert missing.code == "FILE_NOT_FOUND"
    outside = await host.call("list_dir", {"path": "/etc"})
    assert outside.code == "SANDBOX_DENIED"


async def test_list_dir_is_capped(host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _listing.MAX_DIR_ENTRIES == 1000
    monkeypatch.setattr(_listing, "MAX_DIR_ENTRIES", 10)  # creating files is slow here
    for i in range(12):
        (ws / f"f{i:02}").write_text("")
    result = await host.call("list_dir", {})
    lines = result.text.split("\n")
    assert lines[:10] == [f"f{i:02}" for i in range(10)]
    assert lines[10:] == ["", "[showing 10 of 12 entries; use glob to narrow down]"]
    assert result.meta == {"path": ".", "count": 10, "total": 12}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "a\n",
        "a\r\nb\r\n",
        "\n\n\nx",
        "one\ntwo\nthree\nfour\nfive\n",
        "x" * 2500 + "\ny\n",
        "x" * 2000 + "\r\n" + "y" * 2001 + "\r\nz" + "é" * 2001,
        "\r\n\r",
    ],
)
@pytest.mark.parametrize(("offset", "limit"), [(1, 2000), (2, 2), (4, 1), (1, 1)])
def test_the_window_fast_path_agrees_with_the_line_by_line_one(
    text: str, offset: int, limit: int
) -> None:
    from dsh_plugins_builtin._tools._read import _whole_window, _Window

    whole, bytewise = _Window(offset, limit), _Window(offset, limit)
    whole.feed(text)  # one chunk: the fast path where it applies
    for char in text:  # one character a chunk: never the fast path past the first line
        bytewise.feed(char)
    assert (whole.finish(), whole.lines) == (bytewise.finish(), bytewise.lines)
    # The small-file path (the whole text at once) agrees with both.
    lines, total = _whole_window(text, offset, limit)
    assert (total, lines) == (bytewise.lineno - 1, bytewise.lines)
