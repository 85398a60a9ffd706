"""Plain (synchronous) hook implementations run in the pipeline's own loop (issue 11); what
they may return or raise is handled exactly as an ``async`` implementation's would be."""

from __future__ import annotations

import pytest
import trio

from dsh_host import Accept, Allow, Block, Deny, Host, hookimpl
from tests.conftest import make_echo


def _host(*plugins: object, config: dict | None = None) -> Host:
    host = Host(config=config or {}, plugins=plugins, load_entrypoints=False)
    host.registry.register(make_echo())
    return host


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


async def _later(value):
    await trio.sleep(0)
    return value


async def test_a_plain_pre_execute_returning_an_awaitable_is_awaited_and_credited():
    class Abstains(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution):
            return _later(None)  # an awaitable that abstains: the next one is asked

    class Denies(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return _later(Deny("not today"))

    result = await _host(Abstains("abstains"), Denies("denies")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by, result.text) == ("DENIED", "denies", "Error: not today")


async def test_plain_hooks_after_an_awaitable_one_are_still_asked():
    asked = []

    class Awaits(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_guard(self, execution):
            asked.append(self.name)
            return _later(None)

    class Plain(Named):
        @hookimpl
        def dsh_tool_guard(self, execution):
            asked.append(self.name)
            return "too big"

    result = await _host(Awaits("awaits"), Plain("plain")).call("echo", {"text": "x"})
    assert asked == ["awaits", "plain"]
    assert (result.code, result.decided_by) == ("DENIED", "plain")


async def test_a_plain_hook_raising_fails_its_call_and_names_it():
    class Raises(Named):
        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            raise KeyError("boom")

    result = await _host(Raises("raises")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "raises")
    assert "KeyError" in result.text


async def test_a_plain_hook_answering_nonsense_fails_closed():
    class Nonsense(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            return "yes"

    result = await _host(Nonsense("nonsense")).call("echo", {"text": "x"})
    assert (result.code, result.decided_by) == ("PLUGIN_FAILED", "nonsense")


async def test_the_first_plain_answer_wins_and_later_ones_are_not_asked():
    asked = []

    class Allows(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_pre_execute(self, execution):
            asked.append(self.name)
            return Allow()

    class Never(Named):
        @hookimpl
        def dsh_tool_pre_execute(self, execution):
            asked.append(self.name)
            return Deny("no")

    class Blocks(Named):
        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return _later(Block("withheld"))

    class Adds(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_post_execute(self, execution, result):
            return None

    host = _host(Allows("allows"), Never("never"), Blocks("blocks"), Adds("adds"))
    result = await host.call("echo", {"text": "x"})
    assert asked == ["allows"]
    assert (result.code, result.decided_by, result.text) == ("BLOCKED", "blocks", "withheld")


async def test_a_plain_observer_raising_is_contained_and_the_next_still_runs(caplog):
    seen = []

    class Raises(Named):
        @hookimpl(tryfirst=True)
        def dsh_tool_result(self, execution, result):
            raise RuntimeError("observer broke")

    class Awaits(Named):
        @hookimpl
        def dsh_tool_result(self, execution, result):
            seen.append(self.name)
            return _later(None)

    class Plain(Named):
        @hookimpl(trylast=True)
        def dsh_tool_result(self, execution, result):
            seen.append(self.name)

    result = await _host(Raises("raises"), Awaits("awaits"), Plain("plain")).call(
        "echo", {"text": "x"}
    )
    assert result.text == "x"
    assert seen == ["awaits", "plain"]
    assert "observer broke" in caplog.text


async def test_post_execute_accept_with_contexts_keeps_the_result_and_adds_them():
    class Adds(Named):
        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(additional_contexts=("remember this",))

    result = await _host(Adds("adds")).call("echo", {"text": "x"})
    assert result.text == "x"
    assert [c.content[0].text for c in result.additional_contexts] == ["remember this"]


def test_a_real_ctrl_c_in_a_plain_observer_stops_the_call_as_itself():
    import signal

    class PressesCtrlC(Named):
        @hookimpl
        def dsh_tool_result(self, execution, result):
            signal.raise_signal(signal.SIGINT)  # what the terminal sends, while it runs

    host = _host(PressesCtrlC("ctrl_c"))
    with pytest.raises(KeyboardInterrupt):
        trio.run(host.call, "echo", {"text": "x"})
