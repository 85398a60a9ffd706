"""``grep`` reports each match under the exact name of its file, whatever the name holds.

ripgrep's ``--null`` output is ``name NUL number:text``: a name may hold colons and line breaks
(never a NUL: no file name can), and the sandbox decodes the output with bytes that are not UTF-8
as U+FFFD. A name read short at a line break once put another file's lines under ``README.md``
(and had the re-check vouch for ``README.md``, not the file ripgrep read); a name that is not
UTF-8 lost its matches. Both engines now agree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._ripgrep import parse_output
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.test_search_hostile import WithholdSecrets, fake_rg
from tests.dsh_plugins_builtin.test_tools_search import engine, put

__all__ = ["engine"]  # the fixture: every test here runs with ripgrep and with RE2

BAD = os.fsdecode(b"bad\xff.txt")  # a name that is not UTF-8 (a lone surrogate here)


def _hostile(ws: Path) -> None:
    put(
        ws,
        {
            "README.md": "hello\n",
            "x:1:y.txt": "needle colon\n",
            "nl\nREADME.md": "needle newline\n",
            "dir\nx/f.txt": "needle in a broken directory name\n",
            "plain.txt": "needle plain\n",
        },
    )
    (ws / BAD).write_bytes(b"needle bad name\n")


# Each name as the output shows it: `printable`, so a line break or a byte that is not UTF-8
# is escaped (one match, one line; no lone surrogate in the text).
EXPECTED = [
    "dir\\nx/f.txt:1:needle in a broken directory name",
    "bad\\udcff.txt:1:needle bad name",
    "nl\\nREADME.md:1:needle newline",
    "plain.txt:1:needle plain",
    "x:1:y.txt:1:needle colon",
]


def _matches(text: str) -> list[str]:
    body = text.split("\n\n[")[0]
    out: list[str] = []
    for name in ("dir\\nx/f.txt", "bad\\udcff.txt", "nl\\nREADME.md", "plain.txt", "x:1:y.txt"):
        for line in EXPECTED:
            if line.startswith(name + ":") and line in body:
                out.append(line)
    return out


@pytest.mark.parametrize("policed", [False, True])
async def test_names_with_colons_line_breaks_and_bytes_not_utf8_are_exact(
    make_host: Any, ws: Path, engine: str, policed: bool
) -> None:
    _hostile(ws)
    put(ws, {"secrets/key\nplain.txt": "needle TOKEN=hunter2\n"})
    plugins: list[object] = [ToolsPlugin(), SandboxPlugin()]
    if policed:
        plugins.append(WithholdSecrets(ws))
    else:
        (ws / "secrets" / "key\nplain.txt").unlink()
    host = make_host(*plugins, config={"host": {"workspace": str(ws)}})
    result = await host.call("grep", {"pattern": "needle"})
    assert result.meta["count"] == 5, result.text
    assert _matches(result.text) == EXPECTED
    assert "README.md:1:needle" not in result.text.replace("nl\\nREADME.md", "")
    assert "hunter2" not in result.text
    assert result.meta.get("withheld", 0) == (1 if policed else 0)


async def test_a_file_named_explicitly_with_a_line_break(
    make_host: Any, ws: Path, engine: str
) -> None:
    _hostile(ws)
    host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    result = await host.call("grep", {"pattern": "needle", "path": "nl\nREADME.md"})
    assert result.text == "nl\\nREADME.md:1:needle newline"


def test_parsing_reads_a_name_up_to_its_nul_and_keeps_messages_apart() -> None:
    text = (
        "./a\nREADME.md\x001:one\n"
        "./x:1:y\x002:two:three\r\n"
        "rg: a message\n"
        "./b.txt\x003:four\n"
        "trailing note\n"
    )
    out = parse_output(text, False)
    assert [(m.path, m.line, m.text) for m in out.matches] == [
        ("a\nREADME.md", 1, "one"),
        ("x:1:y", 2, "two:three"),
        ("b.txt", 3, "four"),
    ]
    assert out.messages == ("rg: a message", "trailing note")
    other = parse_output("sh: 1: cannot create x\nf.txt\x001:it ran\n", False)  # not ./...
    assert [(m.path, m.text) for m in other.matches] == [("f.txt", "it ran")]
    assert other.messages == ("sh: 1: cannot create x",)


async def test_a_withheld_file_whose_name_ends_in_an_allowed_one_stays_withheld(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if ripgrep read the withheld file anyway (its walk raced ours): read short at the
    # line break, its name was README.md, which policy allows.
    put(ws, {"README.md": "needle readme\n", "secrets/key\nREADME.md": "needle TOKEN=hunter2\n"})
    script = "printf './secrets/key\\nREADME.md\\0001:needle TOKEN=hunter2\\n./README.md\\0001:needle readme\\n'\n"
    rg = fake_rg(ws / ".venv" / "bin", script)  # visible in the sandbox
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    host = make_host(
        ToolsPlugin(), SandboxPlugin(), WithholdSecrets(ws), config={"host": {"workspace": str(ws)}}
    )
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text.startswith("README.md:1:needle readme\n\n[1 file(s) withheld")
    assert "hunter2" not in result.text
