"""``grep`` and ``glob`` against a hostile model: patterns built to hang a backtracking matcher,
a booby-trapped ``.gitignore``, files withheld by policy, a replaced ``rg``, a search that never
ends, output too large for the sandbox, and no sandbox at all.

Time bounds here are generous wall-clock ceilings (10 s) on work that takes milliseconds; what
they catch took minutes or never finished before.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_host import AbortSignal, Host, ToolArgsError, hookimpl
from dsh_plugins_builtin._tools import _grep as _grep_tool
from dsh_plugins_builtin._tools import _grep_local, _grep_rg, _ripgrep
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools._walk import compile_glob
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.conftest import soak_size
from tests.dsh_plugins_builtin.conftest import tools_host
from tests.dsh_plugins_builtin.test_tools_search import engine, put

__all__ = ["engine"]  # the fixture, shared with test_tools_search

CEILING_S = 10.0


class WithholdSecrets:
    """A policy plugin withholding ``secrets/**`` under one workspace."""

    name = "secret_policy"

    def __init__(self, ws: Path) -> None:
        self.prefix = os.path.realpath(ws) + "/secrets/"
        self.asked: list[tuple[str, str]] = []

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        self.asked.append((path, access))
        return "secrets/** is withheld" if path.startswith(self.prefix) else None


def fake_rg(where: Path, script: str) -> str:
    path = where / "rg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host(make_host: Any, ws: Path, engine: str) -> Host:
    return tools_host(make_host, ws)


# -- patterns that hang a backtracking matcher ---------------------------------------------------


async def test_catastrophic_regex_finishes_at_once(host: Host, ws: Path) -> None:
    put(ws, {"a.txt": ("a" * 34 + "!\n") * 200, "b.txt": "aaaa\n"})
    started = time.monotonic()
    result = await host.call("grep", {"pattern": "^(a+)+$"})
    assert time.monotonic() - started < CEILING_S
    assert result.text == "b.txt:1:aaaa"
    nested = await host.call("grep", {"pattern": "(a|aa)*(a|aa)*(a|aa)*b", "path": "a.txt"})
    assert nested.text == "No matches for '(a|aa)*(a|aa)*(a|aa)*b' in a.txt"
    assert time.monotonic() - started < CEILING_S


async def test_hostile_glob_is_linear_in_the_path(host: Host, ws: Path) -> None:
    deep = ws.joinpath(*["d"] * 30)
    deep.mkdir(parents=True)
    (deep / "f").write_text("")
    (ws / ("a" * 200)).write_text("")
    started = time.monotonic()
    result = await host.call("glob", {"pattern": "**/" * 12 + "zzz"})
    assert result.text.startswith("No files match")
    stars = await host.call("glob", {"pattern": "*a" * 30 + "b"})
    assert stars.text.startswith("No files match")
    found = await host.call("glob", {"pattern": "**/" * 12 + "f"})
    assert found.text == "/".join(["d"] * 30) + "/f"
    assert time.monotonic() - started < CEILING_S


async def test_a_booby_trapped_gitignore_cannot_hang_the_walk(host: Host, ws: Path) -> None:
    put(ws, {".gitignore": "*a" * 30 + "b\n" + "**/" * 12 + "zzz\n", "keep.txt": "needle\n"})
    (ws / ("a" * 200)).write_text("needle\n")
    started = time.monotonic()
    listed = await host.call("glob", {"pattern": "**/*"})
    searched = await host.call("grep", {"pattern": "needle"})
    assert time.monotonic() - started < CEILING_S
    assert listed.text.split("\n") == [".gitignore", "a" * 200, "keep.txt"]
    assert searched.text == f"{'a' * 200}:1:needle\nkeep.txt:1:needle"


@pytest.mark.parametrize("pattern", ["a\0b", "\udcff"])
async def test_patterns_that_cannot_reach_a_command_line(host: Host, pattern: str) -> None:
    result = await host.call("grep", {"pattern": pattern})
    assert result.code == "INVALID_ARGS"
    assert '"pattern"' in result.text


async def test_a_bad_glob_names_the_glob(host: Host, ws: Path) -> None:
    put(ws, {"f.txt": "x\n"})
    result = await host.call("grep", {"pattern": "x", "glob": "[z-a]"})
    assert result.code == "INVALID_ARGS"
    assert result.text.startswith(
        """Error: invalid arguments: "glob" '[z-a]' is not a valid glob"""
    )
    huge = await host.call("grep", {"pattern": "x", "glob": "**/" * 300 + "*.txt"})
    assert huge.text == "f.txt:1:x"


async def test_a_pattern_that_looks_like_an_option_is_a_pattern(host: Host, ws: Path) -> None:
    put(ws, {"f.txt": "run with --files here\n"})
    assert (await host.call("grep", {"pattern": "--files"})).text == "f.txt:1:run with --files here"


# -- the host keeps answering while a search runs ------------------------------------------------


async def test_the_event_loop_runs_while_the_builtin_engine_searches(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search_tools, "find_rg", lambda: None)
    entered, release = threading.Event(), threading.Event()
    search_file = _grep_local._search_file

    def blocking(*args: Any) -> bool:
        entered.set()
        release.wait(30)
        return search_file(*args)

    monkeypatch.setattr(_grep_local, "_search_file", blocking)
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws)
    results: list[Any] = []

    async def grep() -> None:
        results.append(await host.call("grep", {"pattern": "needle"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grep)
        await trio.to_thread.run_sync(entered.wait, 30)
        # The search is stuck in its worker thread; another call still runs to the end.
        other = await host.call("glob", {"pattern": "*"})
        assert other.text == "f.txt"
        assert not results
        release.set()
    assert results[0].text == "f.txt:1:needle"


async def test_the_event_loop_runs_while_ripgrep_searches(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = tmp_path / "started"
    rg = fake_rg(tmp_path / "bin", f"touch {started}\nexec sleep 1000\n")
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws, mode="danger-full-access", backend="none")
    signal = AbortSignal()
    results: list[Any] = []

    async def grep() -> None:
        results.append(await host.call("grep", {"pattern": "needle"}, signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grep)
        while not started.exists():
            await trio.lowlevel.checkpoint()
        other = await host.call("glob", {"pattern": "*"})
        assert other.text == "f.txt"
        assert not results
        signal.abort("enough")
    assert results[0].code == "ABORTED"


# -- ripgrep runs inside the sandbox -------------------------------------------------------------


async def test_a_replaced_rg_is_confined_like_any_command(
    make_host: Any, ws: Path, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside.txt"
    inside = ws / "pwned.txt"
    script = (
        f"echo pwned > {outside}\necho pwned > {inside}\nprintf 'f.txt\\0001:it ran\\n'\nexit 0\n"
    )
    rg = fake_rg(ws / ".venv" / "bin", script)  # in a writable root, as a model could leave it
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"f.txt": "x\n"})
    host = tools_host(make_host, ws, backend=backend, mode="read-only")
    result = await host.call("grep", {"pattern": "x"})
    assert result.text == "f.txt:1:it ran"  # it ran ...
    assert not outside.exists()  # ... and could write nothing
    assert not inside.exists()


async def test_a_file_swapped_for_a_symlink_out_of_the_fence_is_dropped(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if ripgrep opened link.txt after it had been swapped for a symlink leading out.
    put(tmp_path, {"outside.txt": "outside secret\n"})
    (ws / "link.txt").symlink_to(tmp_path / "outside.txt")
    put(ws, {"ok.txt": "fine\n"})
    script = "printf 'link.txt\\0001:outside secret\\nok.txt\\0001:fine\\n'\n"
    rg = fake_rg(ws / ".venv" / "bin", script)  # visible in the sandbox
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    ran: list[str] = []
    parse = _ripgrep.parse_output
    monkeypatch.setattr(
        _ripgrep, "parse_output", lambda text, cut: ran.append(text) or parse(text, cut)
    )
    host = tools_host(make_host, ws, writable_roots=["."])
    assert (await host.call("grep", {"pattern": "e"})).text == "ok.txt:1:fine"
    assert "outside secret" in ran[0]  # ripgrep (the fake) did report it


async def test_a_search_that_never_ends_is_killed(
    make_host: Any, ws: Path, tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    late = tmp_path / "late"
    rg = fake_rg(tmp_path / "bin", f"sleep 1000; touch {late}\n")
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    host = tools_host(make_host, ws, mode="danger-full-access", backend="none")
    result = await host.call("grep", {"pattern": "x"})
    assert result.code == "SEARCH_TIMEOUT"
    assert result.text == (
        "Error: grep 'x' in . did not finish within 120 s and was stopped; narrow the path, "
        "the glob or the pattern"
    )
    assert not late.exists()


async def test_rg_is_resolved_once_when_the_tools_are_built(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counting() -> str | None:
        calls.append(1)
        return _ripgrep.find_rg()

    monkeypatch.setattr(_search_tools, "find_rg", counting)
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws)
    assert calls == [1]
    for _ in range(2):
        assert (await host.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"
    assert calls == [1]


@pytest.mark.parametrize(
    "sandbox",
    [None, {"backend": "none"}],
    ids=["sandbox-plugin-disabled", "no-backend"],
)
async def test_without_a_sandbox_grep_searches_in_process(
    make_host: Any, ws: Path, sandbox: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    local = _grep_tool.local_search
    monkeypatch.setattr(_grep_tool, "local_search", lambda *a: ran.append("builtin") or local(*a))
    put(ws, {"f.txt": "aaaa\n" + "a" * 34 + "!\n"})
    config = {"host": {"workspace": str(ws)}}
    if sandbox is None:
        host = make_host(ToolsPlugin(), config=config)
    else:
        host = make_host(
            ToolsPlugin(), SandboxPlugin(), config={**config, "plugin": {"sandbox": sandbox}}
        )
    started = time.monotonic()
    result = await host.call("grep", {"pattern": "^(a+)+$"})
    assert time.monotonic() - started < CEILING_S
    assert result.text == "f.txt:1:aaaa"
    assert ran == ["builtin"]


async def test_an_rg_the_sandbox_cannot_execute_falls_back(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search_tools, "find_rg", lambda: str(tmp_path / "gone" / "rg"))
    put(ws, {"f.txt": "needle\n"})
    host = tools_host(make_host, ws)
    assert (await host.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"


# -- output larger than the sandbox keeps ----------------------------------------------------------


async def test_too_much_output_is_searched_again_in_path_order(make_host: Any, ws: Path) -> None:
    put(ws, {f"f{i:02}.txt": "needle xxxxxxxxxxxxxxxxxxxx\n" * 30 for i in range(30)})
    host = tools_host(make_host, ws, max_output_bytes=24_000)
    result = await host.call("grep", {"pattern": "needle"})
    lines = result.text.split("\n")
    assert lines[0] == "f00.txt:1:needle xxxxxxxxxxxxxxxxxxxx"
    assert lines[499] == "f16.txt:20:needle xxxxxxxxxxxxxxxxxxxx"
    assert lines[501] == "[stopped after 500 matches; narrow the pattern, the path or the glob]"
    assert result.meta == {"path": ".", "count": 500, "files": 17, "truncated": True}


async def test_output_the_sandbox_cannot_hold_is_cut_and_said(make_host: Any, ws: Path) -> None:
    put(ws, {f"f{i:02}.txt": "needle xxxxxxxxxxxxxxxxxxxx\n" * 30 for i in range(30)})
    host = tools_host(make_host, ws, max_output_bytes=3000)
    result = await host.call("grep", {"pattern": "needle"})
    body, _, note = result.text.partition("\n\n")
    lines = body.split("\n")
    expected = [
        f"f{i:02}.txt:{n}:needle xxxxxxxxxxxxxxxxxxxx" for i in range(30) for n in range(1, 31)
    ]
    assert 10 < len(lines) < 100
    assert lines == expected[: len(lines)]  # the first matches in path order, none partial
    assert note.startswith(f"[stopped after {len(lines)} matches: the output limit was reached")
    assert result.meta["truncated"] is True


async def test_a_line_longer_than_ripgrep_prints(host: Host, ws: Path, engine: str) -> None:
    put(ws, {"min.js": "var a" + "b" * 9995 + "\n"})
    result = await host.call("grep", {"pattern": "var a"})
    head, _, more = result.text.partition(" [... ")
    assert head == f"min.js:1:var a{'b' * 395}"
    if engine == "ripgrep":  # rg printed only the line's head: a lower bound
        assert re.fullmatch(r"1[5-9]\d\d\+ more characters\]", more)
    else:
        assert more == "9600 more characters]"


# -- withholding by policy -----------------------------------------------------------------------


@pytest.fixture
def secrets(ws: Path) -> Path:
    put(
        ws,
        {
            "README.md": "needle in the readme\n",
            "pub/a.txt": "needle in public\n",
            "secrets/key.txt": "TOKEN=hunter2 needle\n",
            "secrets/deep/more.txt": "needle hunter2\n",
        },
    )
    return ws


@pytest.fixture
def policy_host(make_host: Any, secrets: Path, engine: str) -> tuple[Host, WithholdSecrets]:
    policy = WithholdSecrets(secrets)
    config = {"host": {"workspace": str(secrets)}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), policy, config=config)
    return host, policy


def assert_nothing_secret(text: str) -> None:
    assert "TOKEN=" not in text
    assert "needle hunter2" not in text
    assert "key.txt" not in text
    assert "more.txt" not in text
    assert "secrets/" not in text


async def test_grep_leaves_withheld_files_out(policy_host: tuple[Host, WithholdSecrets]) -> None:
    host, policy = policy_host
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == (
        "README.md:1:needle in the readme\npub/a.txt:1:needle in public\n\n"
        "[2 file(s) withheld by policy: left out of this search, names and contents]"
    )
    assert result.meta["withheld"] == 2
    assert result.meta["count"] == 2
    assert all(access == "read" and os.path.isabs(path) for path, access in policy.asked)
    inside = await host.call("grep", {"pattern": "hunter2", "path": "secrets"})
    assert inside.text.startswith("No matches for 'hunter2' in secrets\n\n[2 file(s) withheld")
    one = await host.call("grep", {"pattern": "hunter2", "path": "secrets/key.txt"})
    assert one.text == (
        "No matches for 'hunter2' in secrets/key.txt\n\n"
        "[1 file(s) withheld by policy: left out of this search, names and contents]"
    )
    for found in (result, inside):
        assert_nothing_secret(found.text.replace("in secrets", "in "))


async def test_ripgrep_is_told_to_skip_withheld_files(
    make_host: Any, secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw: list[str] = []
    parse = _ripgrep.parse_output
    monkeypatch.setattr(
        _ripgrep, "parse_output", lambda text, cut: raw.append(text) or parse(text, cut)
    )
    config = {"host": {"workspace": str(secrets)}}
    (secrets / "secrets" / "we[ir]d *{x}.txt").write_text("hunter2 again\n")
    host = make_host(ToolsPlugin(), SandboxPlugin(), WithholdSecrets(secrets), config=config)
    result = await host.call("grep", {"pattern": "hunter2|needle"})
    assert result.meta["withheld"] == 3
    assert raw  # ripgrep ran, and never printed a withheld file
    assert all("hunter2" not in text for text in raw)


async def test_the_withheld_count_does_not_depend_on_contents(
    policy_host: tuple[Host, WithholdSecrets],
) -> None:
    host, _ = policy_host
    hit = await host.call("grep", {"pattern": "hunter2"})
    miss = await host.call("grep", {"pattern": "hunter3"})
    assert hit.text == miss.text.replace("hunter3", "hunter2")
    assert (
        hit.meta
        == miss.meta
        == {
            "path": ".",
            "count": 0,
            "files": 0,
            "truncated": False,
            "withheld": 2,
        }
    )


async def test_glob_leaves_withheld_files_out(
    policy_host: tuple[Host, WithholdSecrets], secrets: Path
) -> None:
    host, _ = policy_host
    (secrets / "pub" / "link.txt").symlink_to(secrets / "secrets" / "key.txt")
    direct = await host.call("glob", {"pattern": "secrets/*"})
    assert direct.text == (
        "No files match 'secrets/*' in .\n\n"
        "[2 file(s) withheld by policy: left out of this search, names and contents]"
    )
    everything = await host.call("glob", {"pattern": "**/*"})
    assert everything.text.split("\n\n")[0] == "README.md\npub/a.txt"
    assert everything.meta["withheld"] == 3  # the two secrets and the link to one
    for found in (direct, everything):
        assert_nothing_secret(found.text.replace("'secrets/*'", ""))


async def test_grep_checks_what_ripgrep_reports_again(
    policy_host: tuple[Host, WithholdSecrets], monkeypatch: pytest.MonkeyPatch
) -> None:
    host, _ = policy_host
    list_files = _grep_tool._list_files

    def missed(*args: Any) -> Any:  # a walk that did not see the secrets (raced, or differed)
        listing = list_files(*args)
        listing.denied.clear()
        return listing

    monkeypatch.setattr(_grep_tool, "_list_files", missed)
    result = await host.call("grep", {"pattern": "hunter2"})
    assert_nothing_secret(result.text)


# -- the linear glob matcher means what the old one meant ------------------------------------------

_TOKENS = st.sampled_from(["a", "b", ".", "*", "?", "**", "/", "[ab]", "[!a]", "{a,b*}"])
_PATHS = st.lists(st.sampled_from(["a", "b", "ab", "a.b", "ba", ".a"]), min_size=1, max_size=5)


@pytest.mark.soak
@settings(max_examples=soak_size(200, 5000), deadline=None, database=None)
@given(tokens=st.lists(_TOKENS, min_size=1, max_size=7), paths=st.lists(_PATHS, max_size=8))
def test_glob_matches_as_the_backtracking_translation_did(
    tokens: list[str], paths: list[list[str]]
) -> None:
    """RE2 runs the same translation Python's `re` ran before, on small (safe) inputs."""
    pattern = "".join(tokens)
    try:
        linear, _depth = compile_glob(pattern)
    except ToolArgsError:
        return
    backtracking = re.compile(linear.pattern)
    for parts in paths:
        path = "/".join(parts)
        assert bool(linear.match(path)) == bool(backtracking.match(path)), (pattern, path)


@pytest.mark.soak
async def test_concurrent_searches_each_get_their_own_answer(host: Host, ws: Path) -> None:
    count = soak_size(4, 100)
    put(ws, {f"f{i:03}.txt": f"token{i}\nshared\n" for i in range(count)})
    results: dict[int, Any] = {}

    async def one(i: int) -> None:
        results[i] = await host.call("grep", {"pattern": f"token{i}$"})

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    for i in range(count):
        assert results[i].text == f"f{i:03}.txt:1:token{i}"


async def test_too_many_withheld_files_for_one_command_line_search_in_process(
    policy_host: tuple[Host, WithholdSecrets], engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, _ = policy_host
    monkeypatch.setattr(_grep_rg, "_MAX_COMMAND", 10)  # as if thousands were withheld
    ran: list[str] = []
    local = _grep_tool.local_search
    monkeypatch.setattr(_grep_tool, "local_search", lambda *a: ran.append("builtin") or local(*a))
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text.startswith("README.md:1:needle in the readme\npub/a.txt:1:needle in public")
    assert result.meta["withheld"] == 2
    assert ran == ["builtin"]


async def test_glob_leaves_out_a_symlink_it_may_not_resolve(make_host, ws, monkeypatch):
    """A link whose target cannot be read (``/proc/1/cwd`` of another user's process, from
    ``/`` with every root readable): where it leads is unknown, so it is left out; the search
    goes on (it failed with ``PermissionError``)."""
    (ws / "kept.txt").write_text("x")
    (ws / "link").symlink_to("kept.txt")
    real = os.path.realpath

    def refuse(path, *args, **kwargs):
        if str(path).endswith("/link"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_search_tools.os.path, "realpath", refuse)
    result = await tools_host(make_host, ws).call("glob", {"pattern": "*"})
    assert not result.is_error, result.text
    assert result.text.splitlines() == ["kept.txt"]
