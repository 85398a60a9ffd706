"""``write_file`` and ``edit_file`` through the pipeline: atomic writes, exact edits, diff meta."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host
from dsh_plugins_builtin._sandbox import _fence
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import tools_host


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    return tools_host(make_host, ws)


# -- write_file ----------------------------------------------------------------------------------


async def test_write_creates_parents_and_reports_a_new_file(host: Host, ws: Path) -> None:
    result = await host.call("write_file", {"path": "a/b/c.txt", "content": "one\ntwo\n"})
    assert (result.is_error, result.text) == (False, "Created a/b/c.txt (2 lines, 8 bytes)")
    assert (ws / "a/b/c.txt").read_text() == "one\ntwo\n"
    assert result.meta == {
        "path": "a/b/c.txt",
        "created": True,
        "diffs": (
            {"path": "a/b/c.txt", "old_text": None, "new_text": "one\ntwo\n", "new_start": 1},
        ),
    }


async def test_overwrite_keeps_the_changed_hunk_with_three_lines_of_context(
    host: Host, ws: Path
) -> None:
    old = "".join(f"{i}\n" for i in range(1, 21))
    (ws / "n.txt").write_text(old)
    new = old.replace("10\n", "ten\n")
    result = await host.call("write_file", {"path": "n.txt", "content": new})
    assert result.text == "Overwrote n.txt (20 lines, 52 bytes)"
    assert result.meta["diffs"] == (
        {
            "path": "n.txt",
            "old_text": "7\n8\n9\n10\n11\n12\n13\n",
            "new_text": "7\n8\n9\nten\n11\n12\n13\n",
            "old_start": 7,
            "new_start": 7,
        },
    )


async def test_write_is_atomic_through_a_temp_file(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "f.txt"
    target.write_text("old")
    seen: list[tuple[str, list[str]]] = []

    def before_replace(key: Path) -> None:
        seen.append((target.read_text(), sorted(p.name for p in ws.iterdir())))

    monkeypatch.setattr(_fence, "_before_replace", before_replace)
    result = await host.call("write_file", {"path": "f.txt", "content": "new"})
    assert not result.is_error
    [(content_then, names_then)] = seen
    assert content_then == "old"  # the target was untouched until the replace
    assert len(names_then) == 2
    assert any(n.startswith(".f.txt.") for n in names_then)
    assert target.read_text() == "new"
    assert [p.name for p in ws.iterdir()] == ["f.txt"]  # no temp file left behind


async def test_write_of_identical_content_writes_nothing(host: Host, ws: Path) -> None:
    target = ws / "same.txt"
    target.write_text("x\n")
    os.utime(target, (1, 1))
    result = await host.call("write_file", {"path": "same.txt", "content": "x\n"})
    assert result.text == "same.txt already has this content; nothing was written"
    assert target.stat().st_mtime == 1


async def test_write_to_a_directory_is_not_a_file(host: Host, ws: Path) -> None:
    (ws / "d").mkdir()
    result = await host.call("write_file", {"path": "d", "content": "x"})
    assert result.code == "NOT_A_FILE"
    assert (ws / "d").is_dir()


async def test_overwriting_a_binary_file_has_no_diff(host: Host, ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"\x00\x01")
    result = await host.call("write_file", {"path": "b.bin", "content": "text"})
    assert result.text == "Overwrote b.bin (1 line, 4 bytes)"
    assert "diffs" not in result.meta
    assert (ws / "b.bin").read_text() == "text"


# -- edit_file -----------------------------------------------------------------------------------


async def test_edit_replaces_exactly_one_match(host: Host, ws: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(1, 11))
    (ws / "e.txt").write_text(text)
    result = await host.call(
        "edit_file", {"path": "e.txt", "old_text": "line 5\n", "new_text": "LINE FIVE\nextra\n"}
    )
    assert result.text == "Edited e.txt: replaced 1 occurrence (line 5)"
    assert (ws / "e.txt").read_text() == text.replace("line 5\n", "LINE FIVE\nextra\n")
    assert result.meta == {
        "path": "e.txt",
        "replacements": 1,
        "diffs": (
            {
                "path": "e.txt",
                "old_text": "line 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\n",
                "new_text": "line 2\nline 3\nline 4\nLINE FIVE\nextra\nline 6\nline 7\nline 8\n",
                "old_start": 2,
                "new_start": 2,
            },
        ),
    }


async def test_edit_with_no_match(host: Host, ws: Path) -> None:
    (ws / "e.txt").write_text("alpha\n")
    result = await host.call("edit_file", {"path": "e.txt", "old_text": "beta", "new_text": "x"})
    assert result.code == "EDIT_NO_MATCH"
    assert result.error is not None
    assert result.error.message.startswith("old_text not found in e.txt")
    assert (ws / "e.txt").read_text() == "alpha\n"


async def test_edit_with_several_matches_names_their_lines(host: Host, ws: Path) -> None:
    (ws / "e.txt").write_text("x = 1\ny\nx = 1\nz\nx = 1\n")
    result = await host.call("edit_file", {"path": "e.txt", "old_text": "x = 1", "new_text": "x"})
    assert result.code == "EDIT_AMBIGUOUS"
    assert result.error is not None
    assert result.error.message == (
        "old_text matches 3 places in e.txt (lines 1, 3, 5); add context to make it unique "
        "or pass replace_all"
    )
    assert (ws / "e.txt").read_text() == "x = 1\ny\nx = 1\nz\nx = 1\n"


async def test_replace_all(host: Host, ws: Path) -> None:
    (ws / "e.txt").write_text("a\nb\na\n")
    result = await host.call(
        "edit_file", {"path": "e.txt", "old_text": "a", "new_text": "c", "replace_all": True}
    )
    assert result.text == "Edited e.txt: replaced 2 occurrences (lines 1, 3)"
    assert (ws / "e.txt").read_text() == "c\nb\nc\n"


async def test_an_edit_that_would_grow_the_file_past_the_limit_is_refused_first(
    host: Host, ws: Path
) -> None:
    # The input was bounded (16 MiB), the output not: 2 MB of "a", each replaced by 100
    # characters, wrote 200 MB (and 16 MiB x 1 KB would be 16 GB), made before any check.
    (ws / "big.txt").write_text("a" * 2_000_000)
    result = await host.call(
        "edit_file",
        {"path": "big.txt", "old_text": "a", "new_text": "b" * 100, "replace_all": True},
    )
    assert result.code == "EDIT_TOO_LARGE", result.text
    assert "2000000 replacements" in result.text
    assert (ws / "big.txt").stat().st_size == 2_000_000


async def test_edit_keeps_crlf_line_endings(host: Host, ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = await host.call(
        "edit_file", {"path": "w.txt", "old_text": "one\ntwo", "new_text": "1\n2"}
    )
    assert not result.is_error, result.text
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


@pytest.mark.parametrize("new_text", ["1\n1b", "1\r\n1b"])
async def test_edit_of_one_line_in_a_crlf_file_writes_crlf(host: Host, ws: Path, new_text) -> None:
    """Issue 26, row 15: a one-line old_text matched as is, and new_text's \\n went in bare."""
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    result = await host.call(
        "edit_file", {"path": "w.txt", "old_text": "one", "new_text": new_text}
    )
    assert not result.is_error, result.text
    assert (ws / "w.txt").read_bytes() == b"1\r\n1b\r\ntwo\r\n"


async def test_edit_of_a_file_with_mixed_endings_keeps_new_text_as_given(
    host: Host, ws: Path
) -> None:
    (ws / "m.txt").write_bytes(b"one\r\ntwo\n")
    result = await host.call("edit_file", {"path": "m.txt", "old_text": "two", "new_text": "2\n3"})
    assert not result.is_error, result.text
    assert (ws / "m.txt").read_bytes() == b"one\r\n2\n3\n"


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
@pytest.mark.parametrize("path", ["a\nb.txt", "a\rb.txt", "x\x1b[2J.txt", "t\tab.txt"])
async def test_a_path_with_a_control_character_is_refused(host: Host, ws: Path, tool, path) -> None:
    """Issue 26, row 16: write_file created "a\\nb.txt" and showed it over two lines."""
    args = {"path": path, "content": "x"} if tool == "write_file" else {
        "path": path, "old_text": "x", "new_text": "y"}  # fmt: skip
    result = await host.call(tool, args)
    assert result.code == "INVALID_ARGS"
    assert "must not contain control characters" in result.text
    assert "\n" not in result.text.strip()
    assert list(ws.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"old_text": "", "new_text": "x"}, '"old_text" must not be empty'),
        ({"old_text": "a", "new_text": "a"}, "identical"),
        ({"old_text": "a"}, '"new_text"'),
    ],
)
async def test_edit_bad_arguments(
    host: Host, ws: Path, args: dict[str, Any], fragment: str
) -> None:
    (ws / "e.txt").write_text("a\n")
    result = await host.call("edit_file", {"path": "e.txt", **args})
    assert result.code == "INVALID_ARGS"
    assert fragment in result.text


async def test_edit_missing_and_binary_files(host: Host, ws: Path) -> None:
    missing = await host.call("edit_file", {"path": "no.txt", "old_text": "a", "new_text": "b"})
    assert missing.code == "FILE_NOT_FOUND"
    assert not (ws / "no.txt").exists()
    (ws / "b.bin").write_bytes(b"a\x00b")
    binary = await host.call("edit_file", {"path": "b.bin", "old_text": "a", "new_text": "b"})
    assert binary.code == "BINARY_FILE"
    assert (ws / "b.bin").read_bytes() == b"a\x00b"


# -- the mode and the plugin ---------------------------------------------------------------------


async def test_read_only_mode_denies_writes_and_edits(make_host: Any, ws: Path) -> None:
    host = tools_host(make_host, ws, mode="read-only")
    (ws / "e.txt").write_text("a\n")
    write = await host.call("write_file", {"path": "new.txt", "content": "x"})
    assert write.code == "SANDBOX_DENIED"
    assert write.text.startswith('Error: write to "new.txt" (resolves to "')
    assert write.text.endswith("denied: file access denied under read-only mode")
    assert _attributed(write) == "sandbox: read-only mode"
    edit = await host.call("edit_file", {"path": "e.txt", "old_text": "a", "new_text": "b"})
    assert edit.code == "SANDBOX_DENIED"
    assert [p.name for p in ws.iterdir()] == ["e.txt"]
    assert (ws / "e.txt").read_text() == "a\n"
    read = await host.call("read_file", {"path": "e.txt"})
    assert read.text == "     1\ta"


async def test_danger_full_access_writes_outside(make_host: Any, ws: Path, tmp_path: Path) -> None:
    host = tools_host(make_host, ws, mode="danger-full-access", writable_roots=[str(ws)])
    target = tmp_path / "elsewhere" / "f.txt"
    result = await host.call("write_file", {"path": str(target), "content": "free"})
    assert (result.is_error, target.read_text()) == (False, "free")


async def test_without_the_sandbox_plugin_writes_fail_closed(
    make_host: Any, ws: Path, tmp_path: Path
) -> None:
    host = make_host(ToolsPlugin(), config={"host": {"workspace": str(ws)}})
    (ws / "e.txt").write_text("a\n")
    (tmp_path / "out.txt").write_text("outside\n")
    for name, args in [
        ("write_file", {"path": "n.txt", "content": "x"}),
        ("edit_file", {"path": "e.txt", "old_text": "a", "new_text": "b"}),
    ]:
        result = await host.call(name, args)
        assert result.code == "SANDBOX_UNAVAILABLE"
        assert "the sandbox plugin is not enabled" in result.text
        assert _attributed(result) == "tools: the sandbox plugin is not enabled"
        assert "Enable the `sandbox` plugin" in result.text
        assert "danger-full-access" in result.text
    assert [p.name for p in ws.iterdir()] == ["e.txt"]
    assert (ws / "e.txt").read_text() == "a\n"
    inside = await host.call("read_file", {"path": "e.txt"})
    assert inside.text == "     1\ta"
    # /tmp is normally readable; without the plugin reads stay in the workspace
    outside = await host.call("read_file", {"path": str(tmp_path / "out.txt")})
    assert outside.code == "SANDBOX_DENIED"
    assert outside.text.endswith(
        "(the sandbox plugin is not enabled, so reads stay inside the workspace)"
    )


def _attributed(result):
    """``decided_by: decision_detail``, the way these tests spell who decided and why."""
    detail = result.decision_detail
    return result.decided_by if detail is None else f"{result.decided_by}: {detail}"
