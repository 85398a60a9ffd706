"""The ``output_budget`` plugin: long text is saved to a private file and shown as head + tail."""

from __future__ import annotations

import logging
import math
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from dsh_host import (
    Accept,
    Block,
    ConfigError,
    HookContext,
    ImageBlock,
    TextBlock,
    ToolExecutionResult,
    define_tool,
    hookimpl,
)
from dsh_plugins_builtin import output_budget
from dsh_plugins_builtin.guards import GuardsPlugin
from dsh_plugins_builtin.output_budget import (
    NoticeDoesNotFit,
    OutputBudgetConfig,
    OutputBudgetPlugin,
    bound_text,
    default_spill_dir,
)
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.timeout import TimeoutPlugin

# Either wording: the tools may read the spill file (in the workspace), or not (with no sandbox
# plugin they read only the workspace; see test_output_budget_spill_fence.py).
NOTICE = re.compile(
    r"\n\n\[\.\.\. (?P<cut>[\d,]+) of (?P<total>[\d,]+) bytes cut here\. "
    r"The full output (?:is saved in (?P<path>\S+): read it in parts with read_file "
    r"\(offset/limit\) or search it with grep|was saved for the user in (?P<saved>\S+), which "
    r"the tools cannot read\. To see what was cut, narrow the call: read_file with "
    r"offset/limit, a narrower grep pattern or path, or a command whose output is shorter "
    r"\(head, tail, grep\)) \.\.\.\]\n\n"
)
LOGGER = "dsh_plugins_builtin.output_budget"


def returns(value, name: str = "big", **kwargs):
    """A tool whose body returns *value*."""

    async def execute(args, ctx):
        return value

    return define_tool(name=name, description="", parameters={}, execute=execute, **kwargs)


def budget(tmp_path: Path, cap: int = 1000, **table):
    return {
        "plugin": {
            "output_budget": {
                "max_inline_bytes": cap,
                "spill_dir": str(tmp_path / "spill"),
                **table,
            }
        }
    }


def parse(text: str) -> tuple[str, int, int, Path, str]:
    """``(head, cut, total, path, tail)`` of a bounded text."""
    match = NOTICE.search(text)
    assert match is not None, text
    cut, total = (int(match[k].replace(",", "")) for k in ("cut", "total"))
    path = Path(match["path"] or match["saved"])
    return text[: match.start()], cut, total, path, text[match.end() :]


def spilled(tmp_path: Path) -> list[Path]:
    spill = tmp_path / "spill"
    return sorted(spill.iterdir()) if spill.exists() else []


# -- passing through --------------------------------------------------------------------------


async def test_output_within_the_budget_is_untouched(make_host, tmp_path):
    text = "x" * 1000
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=budget(tmp_path))
    result = await host.call("big", {})
    assert (result.text, result.decided_by) == (text, None)
    assert spilled(tmp_path) == []


async def test_the_budget_counts_utf8_bytes_not_characters(make_host, tmp_path):
    text = "é" * 501  # 501 characters, 1002 bytes
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=budget(tmp_path))
    result = await host.call("big", {})
    assert result.decided_by == "output_budget"
    assert len(result.text.encode()) <= 1000


async def test_errors_pass_through_untouched(make_host, tmp_path):
    async def execute(args, ctx):
        raise ValueError("x" * 5000)

    tool = define_tool(name="big", description="", parameters={}, execute=execute)
    host = make_host(OutputBudgetPlugin(), tools=[tool], config=budget(tmp_path))
    result = await host.call("big", {})
    assert result.code == "TOOL_FAILED"
    assert len(result.text) > 5000
    assert spilled(tmp_path) == []


async def test_a_block_passes_through_untouched(make_host, tmp_path):
    class Blocker:
        name = "blocker"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Block("y" * 3000)

    host = make_host(OutputBudgetPlugin(), Blocker(), tools=[returns("x" * 5000)],
                     config=budget(tmp_path))  # fmt: skip
    result = await host.call("big", {})
    assert (result.code, result.text, result.decided_by) == ("BLOCKED", "y" * 3000, "blocker")
    assert spilled(tmp_path) == []


async def test_a_timeout_error_passes_through(make_host, tmp_path, autojump_clock):
    async def execute(args, ctx):
        await trio.sleep(math.inf)

    tool = define_tool(name="big", description="", parameters={}, execute=execute, timeout_ms=10)
    host = make_host(
        OutputBudgetPlugin(), TimeoutPlugin(), tools=[tool], config=budget(tmp_path, cap=20)
    )
    result = await host.call("big", {})
    assert (result.code, result.decided_by) == ("TOOL_TIMEOUT", "timeout")
    assert result.text == "Error: tool call timed out after 10ms"  # longer than the 20-byte cap


# -- bounding ---------------------------------------------------------------------------------


async def test_long_output_is_saved_and_shown_as_head_and_tail(make_host, tmp_path):
    text = "".join(f"line {i:05d}\n" for i in range(2000))  # 22,000 bytes
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=budget(tmp_path))
    result = await host.call("big", {}, call_id="call/7")
    assert not result.is_error
    assert result.decided_by == "output_budget"
    assert len(result.text.encode()) <= 1000
    head, cut, total, path, tail = parse(result.text)
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) - len(tail) in (0, 1)  # the budget is split evenly
    assert len(head) > 300
    assert total == len(text)
    assert cut == total - len(head) - len(tail)
    assert [path] == spilled(tmp_path)
    assert path.read_text() == text
    assert re.fullmatch(r"big-call_7-[0-9a-f]{16}\.txt", path.name)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("cap", [300, 301, 302, 303, 500, 999])
def test_the_bounded_text_never_exceeds_the_cap_and_cuts_whole_characters(cap):
    text = "aé€😀" * 400
    path = "/spill/tool-call-0123456789abcdef.txt"
    bounded = bound_text(text.encode(), cap, path)
    assert len(bounded.encode()) <= cap
    head, cut, total, found, tail = parse(bounded)
    assert str(found) == path
    assert text.startswith(head)
    assert text.endswith(tail)
    assert cut == total - len(head.encode()) - len(tail.encode())
    assert cap - len(bounded.encode()) <= 6  # nothing but partial characters and digits lost


def test_a_cap_that_only_holds_the_notice_shows_just_the_notice():
    data = b"x" * 100_000
    smallest = None
    for cap in range(100, 400):
        try:
            bounded = bound_text(data, cap, "/p")
        except NoticeDoesNotFit:
            continue
        smallest = cap
        break
    assert smallest is not None
    head, cut, total, _, tail = parse(bounded)
    assert (head, tail, cut, total) == ("", "", 100_000, 100_000)
    assert len(bounded.encode()) == smallest


async def test_a_replacement_from_downstream_is_bounded_and_contexts_are_kept(make_host, tmp_path):
    class Expander:
        name = "expander"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(content="z" * 4000, additional_contexts=[HookContext("note", "expander")])

    host = make_host(OutputBudgetPlugin(), Expander(), tools=[returns("small")],
                     config=budget(tmp_path))  # fmt: skip
    result = await host.call("big", {})
    head, _, total, path, _ = parse(result.text)
    assert (head[:3], total) == ("zzz", 4000)
    assert path.read_text() == "z" * 4000
    assert result.additional_contexts == (HookContext("note", "expander"),)
    assert result.decided_by == "output_budget"


async def test_it_is_the_outermost_link(make_host, tmp_path):
    class Replacer:  # not a waterfall link: were it asked first, the chain would stop there
        name = "replacer"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(content="w" * 4000)

    host = make_host(OutputBudgetPlugin(), Replacer(), tools=[returns("small")],
                     config=budget(tmp_path))  # fmt: skip
    result = await host.call("big", {})
    assert len(result.text.encode()) <= 1000
    assert len(spilled(tmp_path)) == 1


async def test_a_result_that_fits_is_handed_on_when_only_guards_follow(make_host, tmp_path):
    """No coroutine of its own: with only ``guards`` (which adds contexts) after it, a result
    whose text fits is passed on as ``call_next()`` returns it, and an error always is."""
    plugin = OutputBudgetPlugin()
    host = make_host(plugin, GuardsPlugin(), tools=[returns("small")], config=budget(tmp_path))
    assert (await host.call("big", {})).text == "small"
    downstream = object()
    small = ToolExecutionResult(content="small")
    large = ToolExecutionResult(content="x" * 4000)
    error = ToolExecutionResult(content="y" * 4000, is_error=True)
    execution = SimpleNamespace(name="big", call_id="c")

    def call(result):
        return plugin.dsh_tool_post_execute(execution, result, lambda: downstream)

    assert call(small) is downstream
    assert call(error) is downstream
    bounding = call(large)  # waits for the downstream decision, to bound it
    assert bounding is not downstream
    bounding.close()


async def test_a_replacing_link_registered_later_is_still_bounded(make_host, tmp_path):
    class Expander:
        name = "expander"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result, call_next):
            return Accept(content="z" * 4000)

    host = make_host(
        OutputBudgetPlugin(), GuardsPlugin(), tools=[returns("small")], config=budget(tmp_path)
    )
    assert (await host.call("big", {})).text == "small"  # nothing after it replaces content
    host.pm.register(Expander())
    result = await host.call("big", {})
    assert len(result.text.encode()) <= 1000
    assert parse(result.text)[2] == 4000


async def test_a_subclass_of_guards_that_replaces_content_is_still_bounded(make_host, tmp_path):
    """Only guards' own class is known to leave the content as it is (it adds a reminder); a
    plugin subclassing it may override the hook and replace the content with anything."""

    class Expander(GuardsPlugin):
        name = "expander"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result, call_next):
            return Accept(content="z" * 4000)

    host = make_host(
        OutputBudgetPlugin(), Expander(), tools=[returns("small")], config=budget(tmp_path)
    )
    result = await host.call("big", {})
    assert len(result.text.encode()) <= 1000
    assert parse(result.text)[2] == 4000


async def test_images_are_kept_and_text_blocks_are_joined(make_host, tmp_path):
    image = ImageBlock("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", "image/png")
    content = [TextBlock("a" * 3000), image, TextBlock("b" * 3000)]
    host = make_host(OutputBudgetPlugin(), tools=[returns(content)], config=budget(tmp_path))
    result = await host.call("big", {})
    assert len(result.content) == 2
    assert result.content[1] == image
    head, _, total, path, tail = parse(result.content[0].text)
    assert (head[0], tail[-1], total) == ("a", "b", 6001)
    assert path.read_text() == "a" * 3000 + "\n" + "b" * 3000


# -- best effort ------------------------------------------------------------------------------


async def test_an_unwritable_spill_dir_keeps_the_original_and_warns(make_host, tmp_path, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    config = {
        "plugin": {"output_budget": {"max_inline_bytes": 1000, "spill_dir": str(blocker / "spill")}}
    }
    text = "x" * 5000
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=config)
    result = await host.call("big", {}, call_id="c1")
    assert (result.text, result.is_error, result.decided_by) == (text, False, None)
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith(
        'output_budget: could not save the full output of tool "big" (call c1, 5000 bytes) in '
    )
    assert "NotADirectoryError" in message or "FileExistsError" in message
    assert "spill_dir" in message


async def test_an_existing_file_or_symlink_is_never_followed_or_overwritten(
    make_host, tmp_path, caplog, monkeypatch
):
    caplog.set_level(logging.WARNING, LOGGER)
    spill = tmp_path / "spill"
    spill.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (spill / "big-c1-0000.txt").symlink_to(victim)
    monkeypatch.setattr(output_budget.secrets, "token_hex", lambda n: "0000")
    text = "x" * 5000
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=budget(tmp_path))
    result = await host.call("big", {}, call_id="c1")
    assert result.text == text
    assert victim.read_text() == "precious"
    assert "FileExistsError" in caplog.records[0].getMessage()


@pytest.mark.parametrize("level", ["spill", "parent"])
async def test_a_spill_dir_swapped_for_a_symlink_after_start_is_never_followed(
    make_host, tmp_path, caplog, level
):
    """Issue 8 row 12 (spill part): the agent replaces the spill dir, or a directory above it,
    with a symlink to a directory outside; the host must not write there."""
    caplog.set_level(logging.WARNING, LOGGER)
    ws = tmp_path / "ws"
    (ws / "parent" / "spill").mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "spill").mkdir(parents=True)
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"output_budget": {"max_inline_bytes": 1000, "spill_dir": "parent/spill"}},
    }
    text = "x" * 5000
    host = make_host(OutputBudgetPlugin(), tools=[returns(text)], config=config)
    swapped = ws / "parent" / "spill" if level == "spill" else ws / "parent"
    swapped.rename(tmp_path / "moved-away")
    swapped.symlink_to(outside / "spill" if level == "spill" else outside)
    result = await host.call("big", {}, call_id="c1")
    assert result.text == text  # passed on in full
    assert not result.is_error
    assert list((outside / "spill").iterdir()) == []
    assert "could not save the full output" in caplog.records[-1].getMessage()
    # The control: with the real directory back, the same output is spilled there.
    swapped.unlink()
    (tmp_path / "moved-away").rename(swapped)
    _, _, _, path, _ = parse((await host.call("big", {})).text)
    assert path.parent == ws / "parent" / "spill"
    assert path.read_text() == text


async def test_a_spill_dir_in_the_workspace_is_warned_about_at_start(make_host, tmp_path, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {"output_budget": {"spill_dir": "out"}},
    }
    make_host(OutputBudgetPlugin(), config=config)
    [record] = caplog.records
    assert "lies in the workspace" in record.getMessage()
    assert "[plugin.sandbox] protected" in record.getMessage()
    caplog.clear()
    make_host(OutputBudgetPlugin(), config=budget(tmp_path / "elsewhere"))
    assert caplog.records == []
    # Under a protected path of the sandbox (.dsh by default) the tools cannot touch it.
    protected = {"host": {"workspace": str(tmp_path)}}
    protected["plugin"] = {"output_budget": {"spill_dir": ".dsh/spill"}, "sandbox": {}}
    make_host(OutputBudgetPlugin(), SandboxPlugin(), config=protected)
    assert caplog.records == []


async def test_a_cap_too_small_for_the_notice_keeps_the_original(make_host, tmp_path, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    host = make_host(
        OutputBudgetPlugin(), tools=[returns("x" * 500)], config=budget(tmp_path, cap=50)
    )
    result = await host.call("big", {})
    assert result.text == "x" * 500
    assert spilled(tmp_path) == []  # nothing written: the fit is checked first
    assert "cannot hold the notice itself" in caplog.records[0].getMessage()


# -- configuration ------------------------------------------------------------------------------


async def test_the_default_spill_dir_is_under_the_user_cache_dir(make_host, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_spill_dir() == tmp_path / "cache" / "dsh-spill"
    host = make_host(OutputBudgetPlugin(), tools=[returns("x" * 60_000)])
    result = await host.call("big", {})
    _, _, _, path, _ = parse(result.text)
    assert path.parent == tmp_path / "cache" / "dsh-spill"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(result.text.encode()) <= 50_000


async def test_a_relative_spill_dir_is_in_the_workspace(make_host, tmp_path):
    config = {
        "host": {"workspace": str(tmp_path)},
        "plugin": {"output_budget": {"max_inline_bytes": 400, "spill_dir": "out"}},
    }
    host = make_host(OutputBudgetPlugin(), tools=[returns("x" * 5000)], config=config)
    _, _, _, path, _ = parse((await host.call("big", {})).text)
    assert path.parent == tmp_path / "out"
    assert os.path.isabs(path)


def test_the_config_defaults():
    assert OutputBudgetConfig() == OutputBudgetConfig(max_inline_bytes=50_000, spill_dir=None)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"max_inline_bytes": 0}, "max_inline_bytes must be a positive number of bytes, got 0"),
        ({"max_inline_bytes": "big"}, "key 'max_inline_bytes': expected an integer"),
        ({"spill": "x"}, "key 'spill': unknown key (did you mean 'spill_dir'?)"),
    ],
)
def test_bad_config_is_refused_at_load(make_host, table, words):
    with pytest.raises(ConfigError, match=r"\[plugin\.output_budget\]") as info:
        make_host(OutputBudgetPlugin(), config={"plugin": {"output_budget": table}})
    assert words in str(info.value)
