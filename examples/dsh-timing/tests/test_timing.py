"""The timing plugin, tested with dsh's kit: no real time passes (trio's autojump clock)."""

import pytest
import trio
from dsh_timing import TimingPlugin

from dsh_host import ConfigError, define_tool
from dsh_host.testing import make_host, stub_tool


async def two_seconds(args):
    await trio.sleep(2)
    return "done"


SLOW = define_tool(name="slow", description="takes 2 s", parameters={}, execute=two_seconds)


async def test_a_slow_call_gets_a_context_note(autojump_clock):
    host = make_host(TimingPlugin(), tools=[SLOW], config={"plugin": {"timing": {"slow_ms": 500}}})
    result = await host.call("slow", {})
    assert result.text == "done"
    [note] = result.additional_contexts
    assert (note.source, note.content[0].text) == ("timing", "slow took 2000 ms")


async def test_a_fast_call_is_passed_through_unchanged():
    fast = stub_tool("fast", returns="quick")
    result = await make_host(TimingPlugin(), tools=[fast]).call("fast", {"x": 1})
    assert (result.text, result.additional_contexts) == ("quick", ())
    assert fast.calls == [{"x": 1}]


async def test_a_skipped_tool_never_runs():
    bash = stub_tool("bash")
    host = make_host(
        TimingPlugin(), tools=[bash], config={"plugin": {"timing": {"skip": ["bash"]}}}
    )
    result = await host.call("bash", {"command": "ls"})
    assert (result.is_error, result.code) == (True, "SKIPPED")
    assert bash.calls == []


def test_a_bad_value_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="slow_ms"):
        make_host(TimingPlugin(), config={"plugin": {"timing": {"slow_ms": 0}}})
