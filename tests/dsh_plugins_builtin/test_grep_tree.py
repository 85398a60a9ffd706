"""``grep``'s policy walk reads again only the directories that changed (issue 27).

What a directory holds is reused while its stamp and those of the ``.gitignore`` files that apply
are the same, and is kept only when they are older than the slack before the walk began. Policy
is asked again on every call, and a withheld file added since is withheld.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins_builtin._tools import _grep_tree
from dsh_plugins_builtin._tools._walk import walk_files
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.test_search_hostile import WithholdSecrets, assert_nothing_secret
from tests.dsh_plugins_builtin.test_tools_search import put

NEVER = lambda: False  # noqa: E731 - a stop poll that never stops


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    _grep_tree.forget()
    yield
    _grep_tree.forget()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walks begin well after every stamp in the test's tree (as if it were created long ago)."""
    monkeypatch.setattr(_grep_tree, "_now_ns", lambda: time.time_ns() + 10 * _grep_tree.SLACK_NS)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories read (relative to the walk root, ``""`` for the root)."""
    seen: list[str] = []
    real = _grep_tree._Walker._read

    def counted(self: Any, directory: str, rel: str, *args: Any) -> Any:
        seen.append(rel)
        return real(self, directory, rel, *args)

    monkeypatch.setattr(_grep_tree._Walker, "_read", counted)
    return seen


def _tree(ws: Path) -> None:
    put(
        ws,
        {
            ".gitignore": "*.log\nbuild/\n",
            "a.py": "x\n",
            "app.log": "x\n",
            "build/out.py": "x\n",
            "src/.gitignore": "!keep.log\ngen/\n",
            "src/keep.log": "x\n",
            "src/m.py": "x\n",
            "src/gen/g.py": "x\n",
            "src/deep/empty/.keep": "",
        },
    )
    os.symlink("a.py", ws / "link.py")


def _listed(root: Path, top: Path, respect: bool = True) -> list[str]:
    return _grep_tree.listed_files(root, top, respect, NEVER)


def test_the_listing_is_the_walks_files_without_symlinks(ws: Path, settled: None) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    for root, respect in ((real, True), (real, False), (real / "src", True)):
        walked = walk_files(root, top=real, respect_ignore=respect)
        expected = [r for r, e in walked if not e.is_symlink()]
        assert _listed(root, real, respect) == expected  # walked
        assert _listed(root, real, respect) == expected  # kept
    assert _listed(real, real) == [".gitignore", "a.py", "src/.gitignore", "src/deep/empty/.keep", "src/keep.log", "src/m.py"]  # fmt: skip


def test_an_unchanged_tree_is_not_walked_again(ws: Path, settled: None, reads: list[str]) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    first = _listed(real, real)
    read = len(reads)
    assert read == 4  # the root, src, src/deep, src/deep/empty (build/ and src/gen/ ignored)
    assert _listed(real, real) == first
    assert _listed(real, real) == first
    assert len(reads) == read


def test_a_tree_changed_just_before_the_walk_is_walked_again(ws: Path, reads: list[str]) -> None:
    _tree(ws)  # just now: a later change within the clock's tick could leave its stamps alone
    real = Path(os.path.realpath(ws))
    _listed(real, real)
    _listed(real, real)
    assert len(reads) == 2 * 4


AGAIN = {  # the directories read again after each change
    "add deep": ["src/deep/empty"],
    "remove": ["src"],
    "rename": ["src"],
    "symlink swap": ["src"],
    "edit gitignore": ["src", "src/deep", "src/deep/empty", "src/gen"],  # gen/ no longer ignored
    "new gitignore": ["src/deep/empty"],
    "new dir": ["src", "src/fresh"],
}


@pytest.mark.parametrize("change", sorted(AGAIN))
def test_a_change_anywhere_in_the_tree_is_seen(
    ws: Path, settled: None, reads: list[str], change: str
) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    before = _listed(real, real)
    deep = ws / "src" / "deep" / "empty"
    if change == "add deep":
        (deep / "new.py").write_text("x\n")
    elif change == "remove":
        (ws / "src" / "m.py").unlink()
    elif change == "rename":
        (ws / "src" / "m.py").rename(ws / "src" / "n.py")
    elif change == "symlink swap":
        (ws / "src" / "m.py").unlink()
        os.symlink("../a.py", ws / "src" / "m.py")
    elif change == "edit gitignore":  # same size, and the old mtime put back: only ctime tells
        gitignore = ws / "src" / ".gitignore"
        old = gitignore.stat()
        gitignore.write_text("!keep.log\nm.py\n")  # was "!keep.log\ngen/\n"
        os.utime(gitignore, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert gitignore.stat().st_size == old.st_size
    elif change == "new gitignore":
        (deep / ".gitignore").write_text(".keep\n")
    else:
        (ws / "src" / "fresh").mkdir()
        (ws / "src" / "fresh" / "f.py").write_text("x\n")
    read = len(reads)
    after = _listed(real, real)
    expected = [r for r, e in walk_files(real, top=real) if not e.is_symlink()]
    assert after == expected != before
    assert reads[read:] == AGAIN[change]  # what changed, and what a changed .gitignore covers


def test_an_ancestor_gitignore_edited_in_place_is_seen(
    ws: Path, settled: None, reads: list[str]
) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    assert "m.py" in _listed(real / "src", real)
    assert "m.py" in _listed(real / "src", real)
    read = len(reads)
    (ws / ".gitignore").write_text("*.log\nbuild/\nm.py\n")
    assert "m.py" not in _listed(real / "src", real)
    assert len(reads) == 2 * read  # every directory: an ancestor's .gitignore applies to all


def test_a_stopped_walk_is_not_kept(ws: Path, settled: None, reads: list[str]) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    polls: list[int] = []
    stop = lambda: polls.append(1) or len(polls) > 2  # noqa: E731 - stops in the third directory
    partial = _grep_tree.listed_files(real, real, True, stop)
    read = len(reads)
    assert partial != _listed(real, real)
    assert len(reads) == read + 4  # nothing of the stopped walk was kept


async def test_grep_asks_policy_every_call_and_withholds_a_file_added_since(
    make_host: Any, ws: Path, settled: None, reads: list[str]
) -> None:
    put(ws, {"README.md": "needle\n", "secrets/old.txt": "TOKEN=hunter2 needle\n"})
    policy = WithholdSecrets(ws)
    host = make_host(
        ToolsPlugin(), SandboxPlugin(), policy, config={"host": {"workspace": str(ws)}}
    )
    for _ in range(2):
        policy.asked.clear()
        result = await host.call("grep", {"pattern": "needle"})
        assert result.text.startswith("README.md:1:needle\n\n[1 file(s) withheld")
        assert len(policy.asked) == 2  # policy is asked every call, listing kept or not
    put(ws, {"secrets/new.txt": "TOKEN=hunter3 needle\n"})
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text.startswith("README.md:1:needle\n\n[2 file(s) withheld")
    assert_nothing_secret(result.text)
    assert "hunter3" not in result.text


def test_a_tree_too_large_to_keep_is_walked_every_time(
    ws: Path, settled: None, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    real = Path(os.path.realpath(ws))
    monkeypatch.setattr(_grep_tree, "_MAX_ENTRIES", 5)
    first = _listed(real, real)
    assert _listed(real, real) == first
    assert len(reads) == 2 * 4
