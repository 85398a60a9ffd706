"""The guards plugin: argument size, calls per tool, and the repeat-call reminder."""

from __future__ import annotations

import pytest

from dsh_host import (
    Accept,
    Block,
    ConfigError,
    HookContext,
    Host,
    Scope,
    ToolExecution,
    hookimpl,
)
from dsh_plugins_builtin.guards import GuardsConfig, GuardsPlugin
from dsh_plugins_builtin.permissions import PermissionsPlugin
from tests.conftest import make_echo


def make(*plugins, config=None, tools=("echo",)) -> Host:
    host = Host(config=config, plugins=[*plugins, GuardsPlugin()], load_entrypoints=False)
    for name in tools:
        host.registry.register(make_echo(name))
    return host


def guards(**table) -> dict:
    return {"plugin": {"guards": table}}


def reminders(result) -> list[str]:
    return [
        "".join(block.text for block in context.content)
        for context in result.additional_contexts
        if context.source == "guards"
    ]


def test_defaults():
    assert GuardsConfig() == GuardsConfig(
        max_argument_bytes=1_000_000, max_calls_per_tool={}, repeat_thresholds=(3, 5, 8)
    )


# -- argument size ---------------------------------------------------------------------------


async def test_arguments_over_the_limit_are_denied_naming_the_key(tmp_path):
    config = tmp_path / "dsh.toml"
    config.write_text("[plugin.guards]\nmax_argument_bytes = 20\n")
    host = make(config=config)
    assert (
        await host.call("echo", {"text": "x" * 9})
    ).text == "x" * 9  # {"text":"xxxxxxxxx"}: 20 bytes
    result = await host.call("echo", {"text": "x" * 10})
    assert (result.code, result.decided_by) == ("DENIED", "guards")
    assert result.error.message == (
        'the arguments of "echo" are 21 bytes of JSON, over the limit of 20; send less at '
        f"once, or raise max_argument_bytes in [plugin.guards] of {config}"
    )


async def test_argument_size_counts_utf8_bytes():
    host = make(config=guards(max_argument_bytes=20))
    assert (await host.call("echo", {"text": "é" * 4})).text == "é" * 4  # 11 + 8 bytes
    result = await host.call("echo", {"text": "é" * 5})  # 11 + 10 bytes
    assert "are 21 bytes of JSON" in result.text
    assert "max_argument_bytes in [plugin.guards]" in result.text


async def test_a_lone_surrogate_is_counted_not_a_plugin_failure():
    host = make(config=guards(max_argument_bytes=20))
    result = await host.call("echo", {"text": "\udcff" * 3})  # 11 + 9 bytes
    assert (result.is_error, result.text) == (False, "\udcff" * 3)
    over = await host.call("echo", {"text": "\udcff" * 4})
    assert over.code == "DENIED"
    assert "are 23 bytes of JSON" in over.text
    again = await host.call("echo", {"text": "\udcff" * 3})  # the repeat reminder hashes it too
    assert not again.is_error


# -- calls per tool --------------------------------------------------------------------------


async def test_calls_per_tool_are_limited_per_run():
    host = make(config=guards(max_calls_per_tool={"echo": 2}), tools=("echo", "other"))
    for text in ("a", "b"):
        assert (await host.call("echo", {"text": text})).text == text
    for _ in range(2):
        result = await host.call("echo", {"text": "c"})
        assert (result.code, result.decided_by) == ("DENIED", "guards")
        assert result.error.message == (
            '"echo" may be called at most 2 times per run and was called 2 times; '
            "the limit is max_calls_per_tool.echo in [plugin.guards]"
        )
    for text in ("a", "b", "c"):  # a tool not named is not limited
        assert (await host.call("other", {"text": text})).text == text


async def test_a_limit_of_zero_forbids_the_tool():
    host = make(config=guards(max_calls_per_tool={"echo": 0}))
    assert (await host.call("echo", {"text": "a"})).code == "DENIED"


async def test_calls_denied_before_the_guards_do_not_count():
    table = {"guards": {"max_calls_per_tool": {"echo": 1}}, "permissions": {"deny": ["echo"]}}
    plugin = GuardsPlugin()
    host = Host(
        config={"plugin": table}, plugins=[PermissionsPlugin(), plugin], load_entrypoints=False
    )
    host.registry.register(make_echo())
    for _ in range(3):
        assert (await host.call("echo", {"text": "a"})).code == "DENIED"
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "a"})
    assert plugin.dsh_tool_guard(execution) is None  # the one allowed call is still left
    assert plugin.dsh_tool_guard(execution) is not None


# -- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"max_argument_bytes": 0}, "max_argument_bytes must be a positive integer, got 0"),
        (
            {"max_calls_per_tool": {"bash": -1}},
            "max_calls_per_tool.bash must be 0 (no calls) or more",
        ),
        (
            {"repeat_thresholds": [5, 3]},
            "repeat_thresholds must be strictly increasing integers of at least 2",
        ),
        ({"repeat_thresholds": [3, 3]}, "got [3, 3]"),
        ({"repeat_thresholds": [1, 2]}, "got [1, 2]"),
        ({"repeat_thresholds": ["3"]}, "key 'repeat_thresholds[0]': expected an integer"),
    ],
)
def test_bad_values_stop_the_host(table, message):
    with pytest.raises(ConfigError) as info:
        make(config=guards(**table))
    assert info.value.plugin == "guards"
    assert message in str(info.value)


# -- the repeat reminder ---------------------------------------------------------------------


async def test_reminders_at_each_threshold_only():
    host = make()
    found = {}
    for n in range(1, 11):
        result = await host.call("echo", {"text": "same"})
        assert result.text == "same"  # never changes the result itself
        if reminders(result):
            found[n] = reminders(result)
    assert list(found) == [3, 5, 8]
    assert found[5] == [
        'You have called "echo" with the same arguments 5 times in a row. Repeating it will '
        "not give a different result: read the last result carefully and change your approach "
        "(different arguments, another tool, or finish if you have what you need)."
    ]


async def test_a_different_call_resets_the_run():
    host = make(config=guards(repeat_thresholds=[2]), tools=("echo", "other"))
    calls = [
        ("echo", {"text": "a"}),
        ("echo", {"text": "b"}),  # different arguments
        ("other", {"text": "b"}),  # different tool
        ("echo", {"text": "b"}),
        ("echo", {"text": "b"}),  # the second in a row
    ]
    seen = [bool(reminders(await host.call(name, args))) for name, args in calls]
    assert seen == [False, False, False, False, True]


async def test_key_order_does_not_make_a_call_different():
    host = make(config=guards(repeat_thresholds=[2]))
    await host.call("echo", {"text": "a", "n": {"x": 1, "y": 2}})
    result = await host.call("echo", {"n": {"y": 2, "x": 1}, "text": "a"})
    assert reminders(result)


async def test_no_thresholds_no_reminders():
    host = make(config=guards(repeat_thresholds=[]))
    for _ in range(4):
        assert not reminders(await host.call("echo", {"text": "a"}))


async def test_each_scope_has_its_own_run():
    host = make()
    a, b = Scope("agent-a"), Scope("agent-b")
    order = [a, b, a, b, b]
    seen = [
        (s.name, bool(reminders(await host.call("echo", {"text": "x"}, scope=s)))) for s in order
    ]
    assert seen == [
        ("agent-a", False),
        ("agent-b", False),
        ("agent-a", False),
        ("agent-b", False),
        ("agent-b", True),
    ]


async def test_denied_calls_count():
    table = {"guards": {"repeat_thresholds": [2]}, "permissions": {"deny": ["echo"]}}
    host = make(PermissionsPlugin(), config={"plugin": table})
    first = await host.call("echo", {"text": "a"})
    second = await host.call("echo", {"text": "a"})
    assert (first.code, second.code) == ("DENIED", "DENIED")
    assert not reminders(first)
    assert reminders(second)


async def test_calls_the_guards_deny_count_too():
    host = make(config=guards(repeat_thresholds=[2], max_calls_per_tool={"echo": 0}))
    await host.call("echo", {"text": "a"})
    assert reminders(await host.call("echo", {"text": "a"}))


class Post:
    """A plain post-execute plugin."""

    def __init__(self, decision, name="post") -> None:
        self.name = name
        self.decision = decision

    @hookimpl
    def dsh_tool_post_execute(self, execution, result):
        return self.decision


async def test_a_block_keeps_its_feedback_and_gains_the_reminder():
    theirs = HookContext("theirs", "post")
    host = make(
        Post(Block("withheld", additional_contexts=[theirs])), config=guards(repeat_thresholds=[2])
    )
    await host.call("echo", {"text": "a"})
    result = await host.call("echo", {"text": "a"})
    assert (result.code, result.text, result.decided_by) == ("BLOCKED", "withheld", "post")
    assert [c.source for c in result.additional_contexts] == ["guards", "post"]


async def test_a_replacement_is_kept_with_the_reminder():
    host = make(Post(Accept(content="replaced")), config=guards(repeat_thresholds=[2]))
    await host.call("echo", {"text": "a"})
    result = await host.call("echo", {"text": "a"})
    assert (result.text, result.decided_by) == ("replaced", "post")
    assert reminders(result)


async def test_guards_see_every_call_even_when_a_plain_plugin_decides():
    # registered after guards, a plain plugin would be asked first, were guards not tryfirst
    host = Host(
        config=guards(repeat_thresholds=[2]),
        plugins=[GuardsPlugin(), Post(Accept(content="mine"), name="late")],
        load_entrypoints=False,
    )
    host.registry.register(make_echo())
    await host.call("echo", {"text": "a"})
    result = await host.call("echo", {"text": "a"})
    assert result.text == "mine"
    assert reminders(result)


class _After(Post):
    """A plain post-execute plugin called after guards (``trylast``)."""

    @hookimpl(trylast=True)
    def dsh_tool_post_execute(self, execution, result):
        return self.decision


@pytest.mark.parametrize("limits", [{}, {"echo": 2}])
async def test_the_plain_reminder_when_last_is_the_links(limits):
    """With no post-execute implementation after it, the host calls `_alone` (no
    ``call_next``): every call ends exactly as through the link, which an abstaining plugin
    after it makes the host call (denied calls included)."""
    config = guards(repeat_thresholds=[2, 3], max_calls_per_tool=limits)
    alone, linked = make(config=config), make(config=config)
    linked.pm.register(_After(None), name="after")
    kinds = [
        [(i.plugin, i.waterfall) for i in h.registry._pipeline.hooks.impls("dsh_tool_post_execute")]
        for h in (alone, linked)
    ]
    assert kinds == [[("guards", False)], [("guards", True), ("after", False)]]
    texts = ["a", "a", "a", "b", "b", "a"]
    ends = [[await h.call("echo", {"text": t}) for t in texts] for h in (alone, linked)]
    assert ends[0] == ends[1]
    assert [bool(reminders(r)) for r in ends[0]] == [False, True, True, False, True, False]


# -- the hot path ------------------------------------------------------------------------------


async def test_the_arguments_are_serialised_once_per_call(monkeypatch):
    from dsh_plugins_builtin import guards as guards_module

    made: list[object] = []
    real = guards_module.canonical

    def counting(value: object) -> str:
        made.append(value)
        return real(value)

    monkeypatch.setattr(guards_module, "canonical", counting)
    host = make()
    for i in range(10):
        assert not (await host.call("echo", {"text": str(i % 2)})).is_error
    assert len(made) == 10  # one text for the size limit and the repeat count alike


def test_a_call_between_thresholds_is_handed_on_as_it_is():
    plugin = GuardsPlugin()
    make(plugin)
    downstream = object()
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    assert plugin.dsh_tool_post_execute(execution, None, lambda: downstream) is downstream
    assert plugin.dsh_tool_post_execute(execution, None, lambda: downstream) is downstream
    third = plugin.dsh_tool_post_execute(execution, None, lambda: downstream)
    assert third is not downstream  # the third in a row: a reminder to add
    third.close()


async def test_size_is_exact_at_the_limit_for_four_byte_characters():
    host = make(config=guards(max_argument_bytes=27))
    assert not (await host.call("echo", {"text": "\U0001f600" * 4})).is_error  # 11 + 16 bytes
    over = await host.call("echo", {"text": "\U0001f600" * 4 + "a"})
    assert "are 28 bytes of JSON" in over.text
