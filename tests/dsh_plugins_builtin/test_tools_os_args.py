"""A NUL or a lone surrogate in an argument that reaches the OS is ``INVALID_ARGS``, naming it.

``bash`` with ``echo \\u0000x`` once failed with ``TOOL_FAILED: ValueError: embedded null byte``;
a path holding a NUL was ``SANDBOX_DENIED`` by some tools and ``INVALID_ARGS`` by others. Every
path, ``cwd`` and command line now goes through `os_arg`. A surrogate that stands for a byte of a
name that is not UTF-8 (``\\udc80``-``\\udcff``) still passes: it names a real file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

NUL, LONE = "a\0b", "a\ud800b"
CASES = [
    ("bash", {"command": "echo \0x"}, "command"),
    ("bash", {"command": "echo \ud800x"}, "command"),
    ("bash", {"command": "echo x", "cwd": NUL}, "cwd"),
    ("bash", {"command": "echo x", "cwd": LONE}, "cwd"),
    *[
        (tool, {**extra, "path": bad}, "path")
        for tool, extra in [
            ("read_file", {}),
            ("list_dir", {}),
            ("glob", {"pattern": "*"}),
            ("grep", {"pattern": "x"}),
            ("write_file", {"content": "x"}),
            ("edit_file", {"old_text": "x", "new_text": "y"}),
        ]
        for bad in (NUL, LONE)
    ],
]


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    h: Host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    return h


@pytest.mark.parametrize(("tool", "args", "name"), CASES)
async def test_nul_or_lone_surrogate_is_invalid_args_naming_the_argument(
    host: Host, tool: str, args: dict[str, Any], name: str
) -> None:
    result = await host.call(tool, args)
    assert result.error is not None, result.text
    assert result.error.code == "INVALID_ARGS", result.text
    bad = "a NUL character" if "\0" in args[name] else "a lone surrogate (U+D800"
    assert f'"{name}" holds {bad}' in result.text
    result.text.encode("utf-8")  # the message itself is printable


async def test_bytes_not_utf8_still_name_files_and_content_may_hold_nul(
    host: Host, ws: Path
) -> None:
    bad = os.fsdecode(b"d\xff")
    (ws / bad).mkdir()
    (ws / bad / "f.txt").write_text("one\n")
    read = await host.call("read_file", {"path": f"{bad}/f.txt"})
    assert read.text.endswith("one"), read.text
    listed = await host.call("list_dir", {"path": bad})
    assert listed.text == "f.txt"
    found = await host.call("grep", {"pattern": "one", "path": bad})
    assert found.text == "d\\udcff/f.txt:1:one", found.text
    missing = await host.call("bash", {"command": "pwd", "cwd": os.fsdecode(b"e\xff")})
    assert missing.error is not None
    assert missing.error.code == "FILE_NOT_FOUND"
    assert 'cwd "e\\udcff" does not exist' in missing.text
    wrote = await host.call("write_file", {"path": "n.bin", "content": "x\0y"})
    assert not wrote.is_error, wrote.text  # content is data, never a C string
    assert (ws / "n.bin").read_bytes() == b"x\0y"
