"""A file name a model planted can neither break a tool nor pass for two entries.

A name that is not UTF-8 (``os`` decodes its bytes to lone surrogates) once made ``glob`` fail
for the whole workspace (``UnicodeEncodeError``: RE2 encodes what it matches); a name holding a
line break showed in ``glob`` and ``list_dir`` as two entries. Every name a tool prints is now
`printable` (escaped), and matching reads a byte that is not UTF-8 as U+FFFD.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.test_tools_search import engine, put

__all__ = ["engine"]

BAD = os.fsdecode(b"bad\xffname.txt")
NAMES = [BAD, "nl\nname.txt", "cr\rname.txt", "esc\x1bname.txt", "ok.txt"]
SHOWN = ["bad\\udcffname.txt", "cr\\rname.txt", "esc\\x1bname.txt", "nl\\nname.txt", "ok.txt"]


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    for name in NAMES:
        (ws / name).write_text("needle\n")
    put(ws, {".gitignore": "*.log\n"})
    (ws / os.fsdecode(b"x\xff.log")).write_text("needle\n")  # ignored, whatever its bytes
    h: Host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    return h


def _plain(text: str) -> None:
    """No lone surrogate and no control character but the line feeds between entries."""
    text.encode("utf-8")
    assert not any(c in text for c in "\r\x1b")


async def test_glob_lists_each_hostile_name_once_escaped(host: Host) -> None:
    result = await host.call("glob", {"pattern": "**/*.txt"})
    assert not result.is_error, result.text
    assert result.text.split("\n") == SHOWN
    _plain(result.text)
    star = await host.call("glob", {"pattern": "*name.txt"})
    assert star.text.split("\n") == [n for n in SHOWN if n != "ok.txt"]
    everything = await host.call("glob", {"pattern": "**/*"})
    assert everything.text.split("\n") == [".gitignore", *SHOWN]  # x\xff.log is ignored


async def test_list_dir_lists_each_hostile_name_once_escaped(host: Host) -> None:
    result = await host.call("list_dir", {})
    assert not result.is_error, result.text
    shown = sorted([".gitignore", "x\\udcff.log", *SHOWN])
    assert sorted(result.text.split("\n")) == shown
    _plain(result.text)


async def test_grep_names_escaped_and_its_glob_matches_bytes_not_utf8(
    host: Host, engine: str
) -> None:
    result = await host.call("grep", {"pattern": "needle", "glob": "*name.txt"})
    assert not result.is_error, result.text
    assert sorted(result.text.split("\n")) == [f"{n}:1:needle" for n in SHOWN if n != "ok.txt"]
    _plain(result.text)


async def test_file_tools_echo_names_escaped(host: Host, ws: Path) -> None:
    missing = await host.call("read_file", {"path": "gone\n\x1b[2Jx.txt"})
    assert missing.error is not None
    assert missing.error.code == "FILE_NOT_FOUND"
    assert '"gone\\n\\x1b[2Jx.txt"' in missing.text
    _plain(missing.text)
    empty = ws / os.fsdecode(b"e\xff.txt")
    empty.write_text("")
    read = await host.call("read_file", {"path": empty.name})
    assert read.text == "(e\\udcff.txt is empty)"
    edited = await host.call("edit_file", {"path": BAD, "old_text": "needle", "new_text": "thread"})
    assert not edited.is_error, edited.text
    assert edited.text.startswith("Edited bad\\udcffname.txt:")
    wrote = await host.call("write_file", {"path": BAD, "content": "x\n"})
    assert wrote.text.startswith("Overwrote bad\\udcffname.txt ")
    assert (ws / BAD).read_text() == "x\n"


async def test_grep_on_a_fifo_says_what_it_is(host: Host, ws: Path, engine: str) -> None:
    os.mkfifo(ws / "pipe")
    result = await host.call("grep", {"pattern": "x", "path": "pipe"})
    assert result.error is not None
    assert result.error.code == "NOT_A_FILE"
    assert '"pipe" is neither a regular file nor a directory (a FIFO' in result.text
    assert "is a directory" not in result.text


async def test_a_deny_read_refusal_names_a_hostile_name_escaped(make_host: Any, ws: Path) -> None:
    """The refusal's text named the deny_read entry raw: a lone surrogate some clients reject."""
    (ws / os.fsdecode(b"s\xff.key")).write_text("KEY\n")
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": {"deny_read": ["*.key"]}}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    refused = await host.call("read_file", {"path": os.fsdecode(b"s\xff.key")})
    assert "deny_read" in refused.text
    _plain(refused.text)


async def test_a_name_holding_an_escape_as_text_never_prints_as_the_byte(
    make_host: Any, ws: Path
) -> None:
    """``a\\xffb`` and a name spelling ``a\\udcffb`` out printed alike: a planted name could
    stand for another file. Backslashes are doubled, so no two names print alike."""
    (ws / os.fsdecode(b"a\xffb.txt")).write_text("needle\n")
    (ws / "a\\udcffb.txt").write_text("needle\n")
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    for tool, args in (("list_dir", {}), ("glob", {"pattern": "*.txt"})):
        lines = (await host.call(tool, args)).text.split("\n")
        assert "a\\udcffb.txt" in lines, (tool, lines)
        assert "a\\\\udcffb.txt" in lines, (tool, lines)
    grep = (await host.call("grep", {"pattern": "needle", "include_ignored": True})).text
    assert "a\\udcffb.txt:1:" in grep
    assert "a\\\\udcffb.txt:1:" in grep


async def test_a_gitignore_line_for_one_byte_hides_no_other(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte that is not UTF-8 was read as U+FFFD: a .gitignore line naming conf\\xff.py
    hid conf\\xfe.py too, from glob and the in-process grep, with no note. (ripgrep matches
    .gitignore by its bytes itself.)"""
    from dsh_plugins_builtin._tools import _search

    monkeypatch.setattr(_search, "find_rg", lambda: None)
    (ws / ".gitignore").write_bytes(b"conf\xff.py\n")
    (ws / os.fsdecode(b"conf\xff.py")).write_text("needle\n")
    (ws / os.fsdecode(b"conf\xfe.py")).write_text("needle\n")
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    listed = (await host.call("glob", {"pattern": "*.py"})).text.split("\n")
    assert listed == ["conf\\udcfe.py"]
    found = (await host.call("grep", {"pattern": "needle"})).text
    assert "conf\\udcfe.py:1:" in found
    assert "conf\\udcff.py" not in found
