"""The tools' cards: exact views for real results, ``None`` (never an exception) for junk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_host import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    Host,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolExecutionResult,
    ToolFailure,
)
from dsh_plugins_builtin._tools import _presenters as p
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

CALLS = [p.read_call, p.write_call, p.edit_call, p.list_call, p.glob_call, p.grep_call, p.bash_call]
RESULTS = [p.read_result, p.diff_result, p.list_result, p.glob_result, p.grep_result, p.bash_result]


def ok(text: str, meta: Any = None) -> ToolExecutionResult:
    return ToolExecutionResult(content=text, meta=meta)


@pytest.fixture
def host(make_host: Any, ws: Path) -> Host:
    host: Host = make_host(
        ToolsPlugin(),
        SandboxPlugin(),
        config={
            "host": {"workspace": str(ws)},
            "plugin": {"sandbox": {"mode": "danger-full-access"}},
        },
    )
    return host


# -- calls ---------------------------------------------------------------------------------------


def test_read_call_windows() -> None:
    assert p.read_call({"path": "a.py"}) == GenericCallView(
        title="Read a.py", kind=ToolCallKind.READ, raw_input={"path": "a.py"},
        locations=[FileLocation("a.py", 1)],
    )  # fmt: skip
    assert p.read_call({"path": "a.py", "offset": 10, "limit": 5}).title == "Read a.py (10 - 14)"
    assert p.read_call({"path": "a.py", "limit": 5}).title == "Read a.py (1 - 5)"
    assert p.read_call({"path": "a.py", "offset": 7}).title == "Read a.py (from line 7)"


def test_other_calls() -> None:
    assert p.write_call({"path": "n.txt", "content": "x\n"}) == DiffCallView(
        title="Write n.txt",
        diffs=[FileDiff("n.txt", None, "x\n")],
        locations=[FileLocation("n.txt")],
    )
    assert p.edit_call({"path": "e.py", "old_text": "a", "new_text": "b"}) == DiffCallView(
        title="Edit e.py", diffs=[FileDiff("e.py", "a", "b")], locations=[FileLocation("e.py")]
    )
    assert p.list_call({}).title == "List ."
    assert p.glob_call({"pattern": "**/*.py", "path": "src"}).title == "Glob **/*.py in src"
    grep = p.grep_call({"pattern": "def "})
    assert (grep.title, grep.kind) == ("Grep def ", ToolCallKind.SEARCH)
    assert p.bash_call({"command": "ls", "cwd": "sub"}) == TerminalCallView(title="ls", cwd="sub")
    assert p.bash_call({"command": "ls"}) == TerminalCallView(title="ls")


# -- results of real calls, through the host -----------------------------------------------------


async def test_read_result_card(host: Host, ws: Path) -> None:
    (ws / "a.txt").write_text("one\n\ttwo\nthree\n")
    args = {"path": "a.txt", "offset": 2, "limit": 1}
    result = await host.call("read_file", args)
    assert host.present_result("read_file", args, result) == ReadResultView(
        path="a.txt", offset=2, lines=[(2, "\ttwo")], total_lines=3, title="a.txt"
    )
    (ws / "e.txt").write_text("")
    empty = await host.call("read_file", {"path": "e.txt"})
    assert p.read_result({"path": "e.txt"}, empty) == ReadResultView(
        path="e.txt", offset=1, lines=[], total_lines=0, title="e.txt"
    )


async def test_diff_result_cards(host: Host, ws: Path) -> None:
    args = {"path": "n.txt", "content": "a\nb\n"}
    created = await host.call("write_file", args)
    assert host.present_result("write_file", args, created) == DiffResultView(
        title="Created n.txt", diffs=[FileDiff("n.txt", None, "a\nb\n")]
    )
    edit = {"path": "n.txt", "old_text": "b", "new_text": "c"}
    edited = await host.call("edit_file", edit)
    assert host.present_result("edit_file", edit, edited) == DiffResultView(
        title="Edited n.txt", diffs=[FileDiff("n.txt", "a\nb\n", "a\nc\n")]
    )
    overwrite = {"path": "n.txt", "content": "z\n"}
    wrote = await host.call("write_file", overwrite)
    assert host.present_result("write_file", overwrite, wrote).title == "Wrote n.txt"


async def test_search_and_list_result_cards(host: Host, ws: Path) -> None:
    (ws / "a.py").write_text("def a:\n  x: 1:2\n")
    (ws / "b.py").write_text("def b\n")
    grep = await host.call("grep", {"pattern": ":|def"})
    assert p.grep_result({"pattern": ":|def"}, grep) == SearchResultView(
        title="Grep :|def",
        matches=[("a.py", 1, "def a:"), ("a.py", 2, "  x: 1:2"), ("b.py", 1, "def b")],
        total=3,
    )
    glob = await host.call("glob", {"pattern": "*.py"})
    assert p.glob_result({"pattern": "*.py"}, glob) == SearchResultView(
        title="Glob *.py", paths=["a.py", "b.py"], total=2
    )
    listing = await host.call("list_dir", {})
    assert p.list_result({}, listing) == GenericResultView(title="List .", content="a.py\nb.py")


async def test_bash_result_cards(host: Host) -> None:
    done = await host.call("bash", {"command": "echo hi; echo '[exit code: 3]'; exit 3"})
    assert p.bash_result({}, done) == TerminalResultView(output="hi\n[exit code: 3]", exit_code=3)
    quiet = await host.call("bash", {"command": "true"})
    assert p.bash_result({}, quiet) == TerminalResultView(output="", exit_code=0)
    killed = await host.call("bash", {"command": "echo bye; kill -KILL $$"})
    assert p.bash_result({}, killed) == TerminalResultView(output="bye", signal="SIGKILL")


def test_bash_result_strips_exactly_the_markers_the_meta_announces() -> None:
    meta = {
        "exit_code": 1, "signal": None, "timed_out": False, "total_bytes": 4, "confined": True,
        "denied": True,
    }  # fmt: skip
    text = "out\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
    denial = "out\n[sandbox: file access denied under read-only mode]"  # kept: the card shows why
    assert p.bash_result({}, ok(text, meta)) == TerminalResultView(output=denial, exit_code=1)
    timeout = "[timed out after 1000ms; the command and its child processes were killed]"
    meta_killed = {**meta, "exit_code": None, "signal": "SIGKILL", "timed_out": True, "denied": False,
                   "total_bytes": 0}  # fmt: skip
    killed = ok(f"(no output)\n{timeout}\n[killed by signal: SIGKILL]", meta_killed)
    assert p.bash_result({}, killed) == TerminalResultView(output=timeout, signal="SIGKILL")
    meta_ok = {**meta, "exit_code": 0, "denied": False}
    assert p.bash_result({}, ok("[exit code: 1]", meta_ok)).output == "[exit code: 1]"


# -- junk in, None out ---------------------------------------------------------------------------

JUNK_ARGS: list[Any] = [None, 3, "path", [], {}, {"path": 3}, {"path": None}, {"command": ["ls"]},
                        {"pattern": 1}, {"path": "a", "offset": "x"}, {"path": "a", "limit": 2.5}]  # fmt: skip
ERROR = ToolExecutionResult(
    content="Error: boom", is_error=True, error=ToolFailure("boom", "SANDBOX_DENIED", "X")
)
JUNK_RESULTS: list[Any] = [
    None,
    "text",
    ERROR,
    ok("no meta"),
    ok("x", meta=[1, 2]),
    ok("x", meta={"path": 1, "offset": "1", "count": -1, "total_lines": None}),
    ok(
        "x", meta={"path": "a", "offset": 1, "count": 5, "total_lines": 9}
    ),  # fewer lines than count
    ok("garbage", meta={"path": "a", "offset": 1, "count": 1, "total_lines": 1}),
    ok("x", meta={"path": "a", "diffs": [{"old_text": 3, "new_text": "x"}]}),
    ok("x", meta={"path": "a", "diffs": "nope"}),
    ok("x", meta={"count": 1, "total": "many"}),
    ok("x", meta={"exit_code": None, "signal": None}),
    ok("x", meta={"exit_code": 1, "signal": "SIGKILL"}),
    ok("x", meta={"exit_code": True, "signal": None}),
]


@pytest.mark.parametrize("args", JUNK_ARGS)
def test_calls_return_none_for_junk(args: Any) -> None:
    for present in CALLS:
        view = present(args)
        assert view is None or isinstance(view, GenericCallView | TerminalCallView | DiffCallView)
    assert p.read_call(args) is None


def test_calls_with_a_missing_or_wrong_value() -> None:
    assert p.write_call({"path": "a", "content": None}) is None
    assert p.edit_call({"path": "a", "old_text": "x"}) is None
    assert p.bash_call({"command": "ls", "cwd": 3}) is None
    assert p.glob_call({"pattern": "*", "path": ["x"]}) is None


@pytest.mark.parametrize("result", JUNK_RESULTS)
def test_results_return_none_for_junk(result: Any) -> None:
    for present in RESULTS:
        assert present({"path": "a", "pattern": "x", "command": "ls"}, result) is None, present


def test_a_presenter_that_hits_an_exception_returns_none() -> None:
    class Hostile(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            raise RuntimeError("hostile mapping")

    for present in CALLS:
        assert present(Hostile(path="a", command="ls", pattern="x")) is None

    class HostileResult:
        is_error = False
        text = "x"

        @property
        def meta(self) -> Any:
            raise RuntimeError("hostile result")

    for present in RESULTS:
        assert present({"path": "a"}, HostileResult()) is None


def test_error_results_have_no_card() -> None:
    meta = {"exit_code": 1, "signal": None, "path": "a", "count": 0, "total": 0, "diffs": []}
    error = ToolExecutionResult(
        content="Error: x", is_error=True, error=ToolFailure("x", "C", "N"), meta=meta
    )
    for present in RESULTS:
        assert present({}, error) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=12,
)
keys = st.sampled_from(
    ["path", "offset", "limit", "content", "old_text", "new_text", "pattern", "command", "cwd",
     "count", "total", "total_lines", "diffs", "exit_code", "signal", "confined", "truncated",
     "timed_out", "denied", "created", "total_bytes"]
)  # fmt: skip
mappings = st.dictionaries(keys, json_values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(args=json_values | mappings, meta=json_values | mappings, text=st.text(max_size=60),
       is_error=st.booleans())  # fmt: skip
def test_presenters_never_raise(args: Any, meta: Any, text: str, is_error: bool) -> None:
    result = ToolExecutionResult(
        content=text,
        is_error=is_error,
        error=ToolFailure("x", "C", "N") if is_error else None,
        meta=meta,
    )
    for call in CALLS:
        call(args)
    for present in RESULTS:
        present(args, result)


@pytest.mark.parametrize("tool", ["read_file", "write_file", "edit_file", "list_dir"])
def test_a_path_with_a_line_break_stays_on_one_title_line(tool):
    """Issue 26, row 16: a path holding a newline showed its card split over two lines (and a
    path can forge the line of the approval prompt under it)."""
    from dsh_plugins_builtin._tools import _presenters

    args = {"path": "a\nb.txt\x1b[2J", "content": "x", "old_text": "x", "new_text": "y"}
    present = {"read_file": _presenters.read_call, "write_file": _presenters.write_call,
               "edit_file": _presenters.edit_call, "list_dir": _presenters.list_call}[tool]  # fmt: skip
    view = present(args)
    assert view is not None
    assert "\n" not in view.title
    assert "\x1b" not in view.title
    assert "a\\nb.txt\\x1b[2J" in view.title
