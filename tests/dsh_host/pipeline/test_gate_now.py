"""Stages C-G on the caller's frame (`_Gate._gate_now`): plain pre-execute and guard hooks cost
no coroutine of their own; whatever must be awaited (a hook that raises or answers with an
awaitable, an ``Ask``, a registered guard) goes on in `_gate` from where it stopped, with the
same outcome."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from dsh_host import Allow, Ask, Block, Deny, HookContext, Host, ToolExecutionInput, hookimpl
from dsh_host._pipeline._pipeline import Pipeline
from tests.conftest import make_echo

CALL = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "x"})


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What every `_gate` coroutine was started with (its ``later``), from now on."""
    seen: list[Any] = []
    gate = Pipeline._gate

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        later = args[4] if len(args) > 4 else kwargs.get("later")
        seen.append(later)
        return gate(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "_gate", counting)
    return seen


class Policy:
    """A plain pre-execute hook and a plain guard, answering as told."""

    name = "policy"

    def __init__(self, pre: Any = None, guard: Any = None) -> None:
        self.pre, self.guard = pre, guard
        self.seen: list[str] = []

    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any) -> Any:
        self.seen.append("pre")
        return self.pre(execution) if callable(self.pre) else self.pre

    @hookimpl
    def dsh_tool_guard(self, execution: Any) -> Any:
        self.seen.append("guard")
        return self.guard(execution) if callable(self.guard) else self.guard


def _host(*plugins: object) -> Host:
    host = Host(plugins=plugins, load_entrypoints=False)
    host.registry.register(make_echo())
    return host


async def test_plain_pre_execute_and_guard_hooks_start_no_gate_coroutine(gated):
    policy = Policy()
    result = await _host(policy).registry.execute(CALL)
    assert (result.is_error, result.text) == (False, "x")
    assert policy.seen == ["pre", "guard"]
    assert gated == []


async def test_a_denial_by_either_hook_ends_the_call_on_the_callers_frame(gated):
    denied = await _host(Policy(pre=Deny(reason="no"))).registry.execute(CALL)
    assert (denied.code, denied.decided_by) == ("DENIED", "policy")
    guarded = await _host(Policy(guard="not now")).registry.execute(CALL)
    assert (guarded.code, guarded.decided_by) == ("DENIED", "policy")
    assert "not now" in guarded.text
    assert gated == []


def _boom(execution: Any) -> Any:
    raise RuntimeError("boom")


async def _later(execution: Any) -> Any:
    return Deny(reason="decided later")


@pytest.mark.parametrize("where", ["pre", "guard"])
async def test_a_hook_that_raises_goes_on_in_the_gate_from_where_it_stopped(gated, where):
    policy = Policy(**{where: _boom})
    result = await _host(policy).registry.execute(CALL)
    assert result.code == "PLUGIN_FAILED"
    assert policy.seen == (["pre"] if where == "pre" else ["pre", "guard"])  # each hook once
    (later,) = gated
    assert (later.pre is not None, later.guard is not None) == (where == "pre", where == "guard")


async def test_a_hook_answering_with_an_awaitable_is_awaited_in_the_gate(gated):
    policy = Policy(pre=lambda execution: _later(execution))
    result = await _host(policy).registry.execute(CALL)
    assert (result.code, result.decided_by) == ("DENIED", "policy")
    assert "decided later" in result.text
    assert policy.seen == ["pre"]
    (later,) = gated
    assert later.pre is not None


async def test_an_ask_goes_to_the_approvers_in_the_gate(gated):
    policy = Policy(pre=Ask(reason="sure?"))
    result = await _host(policy).registry.execute(CALL)
    assert result.code == "DENIED"  # nobody approves it
    (later,) = gated
    assert type(later.decision) is Ask
    assert later.who == "policy"
    assert policy.seen == ["pre"]


async def test_a_registered_guard_runs_in_the_gate_after_the_plain_pre_execute_hook(gated):
    policy = Policy()
    host = _host(policy)
    ran: list[str] = []
    remove = host.registry.add_guard(lambda execution: ran.append("mine"), name="mine")
    result = await host.registry.execute(CALL)
    assert (result.is_error, ran, policy.seen) == (False, ["mine"], ["pre", "guard"])
    (later,) = gated
    assert (later.pre, later.guard, later.who) == (None, None, None)
    host.registry.add_guard(lambda execution: "registered says no", name="no")
    remove()
    denied = await host.registry.execute(CALL)
    assert denied.code == "DENIED"
    assert "registered says no" in denied.text


class Observer:
    """Reads ``execution.pre_decision`` in the observer round."""

    name = "observer"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def dsh_tool_result(self, execution: Any, result: Any) -> None:
        self.seen.append(execution.pre_decision)


@pytest.mark.parametrize("traced", [False, True])
async def test_the_decision_of_stage_c_is_noted_for_the_observers(traced):
    allow = Allow(detail="rule echo")
    answers = iter([allow, Deny(reason="no", detail="rule no"), None, Ask(reason="sure?")])
    observer = Observer()
    host = _host(Policy(pre=lambda execution: next(answers)), observer)
    trace = [].append if traced else None
    for _ in range(4):
        await host.registry.execute(CALL, trace=trace)
    decisions = observer.seen
    assert decisions[0] is allow
    assert (type(decisions[1]), decisions[1].detail) == (Deny, "rule no")
    assert decisions[2] is None  # nobody decided: the host's default
    assert type(decisions[3]) is Ask


async def test_a_decision_after_a_hook_that_raised_is_noted_too():
    class Second:
        name = "second"

        @hookimpl
        def dsh_tool_pre_execute(self, execution: Any) -> Any:
            return Allow(detail="rule second")

    observer = Observer()
    host = _host(Second(), Policy(pre=_boom), observer)  # `policy` runs first (pluggy's order)
    result = await host.registry.execute(CALL)
    assert result.code == "PLUGIN_FAILED"
    assert observer.seen == [None]  # a failed stage C decided nothing


class Link:
    """A waterfall pre-execute link: its own answer, or the downstream one (awaited after a
    checkpoint when *waits*)."""

    name = "link"

    def __init__(self, own: Any = None, waits: bool = False) -> None:
        self.own, self.waits = own, waits

    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        if self.own is not None:
            return self.own
        if self.waits:
            return self._later(call_next)
        return call_next()  # a tail call: passed over

    async def _later(self, call_next: Any) -> Any:
        import trio

        await trio.lowlevel.checkpoint()
        return await call_next()


async def test_a_chain_that_answers_at_once_starts_no_gate_coroutine(gated):
    own = await _host(Link(own=Deny(reason="mine", detail="rule link"))).registry.execute(CALL)
    assert (own.code, own.decided_by, own.decision_detail) == ("DENIED", "link", "rule link")
    policy = Policy(pre=Deny(reason="policy says no"))
    passed = await _host(policy, Link()).registry.execute(CALL)
    assert (passed.code, passed.decided_by) == ("DENIED", "policy")
    assert gated == []


async def test_a_link_that_waits_goes_on_in_the_gate_with_the_same_credit(gated):
    policy = Policy(pre=Deny(reason="policy says no"))
    result = await _host(policy, Link(waits=True)).registry.execute(CALL)
    assert (result.code, result.decided_by) == ("DENIED", "policy")  # credited downstream
    assert policy.seen == ["pre"]  # once
    (later,) = gated
    assert later.chain is not None
    assert later.slow is not None
    allowed = await _host(Link(waits=True)).registry.execute(CALL)
    assert (allowed.is_error, allowed.decided_by) == (False, None)  # the default, passed on


async def test_a_batch_with_plain_hooks_starts_no_gate_coroutine_and_a_dry_run_reports(gated):
    policy = Policy(pre=Allow(detail="rule echo"))
    host = _host(policy)
    second = ToolExecutionInput(call_id="d", name="echo", arguments={"text": "y"})
    results = await host.registry.execute_batch([CALL, second])
    assert [(r.is_error, r.text) for r in results] == [(False, "x"), (False, "y")]
    assert gated == []
    prepared = await host.registry._pipeline.prepare(CALL, None)  # not a dry run: reports too
    assert (prepared.result, prepared.allowed_by, prepared.detail) == (None, "policy", "rule echo")
    assert gated == []
    dry = await host.registry.dry_run(CALL)
    assert (dry.allowed_by, dry.detail) == ("policy", "rule echo")  # `_gate` reports who
    assert gated == [None]


class Last:
    """A plain waterfall link called last (``trylast``), answering as told by *how*."""

    name = "last"

    def __init__(self, how: str) -> None:
        self.how = how
        self.kept: list[Any] = []

    @hookimpl(trylast=True)
    def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        how = self.how
        if how == "own":
            return Deny(reason="mine", detail="rule last")
        if how == "none":
            return None
        if how == "tail":
            self.kept.append(call_next)
            return call_next()
        if how == "raises":
            raise KeyError("boom")
        if how == "junk":
            return 42
        return self._later(call_next, how)

    async def _later(self, call_next: Any, how: str) -> Any:
        import trio

        if how == "waits":
            await trio.lowlevel.checkpoint()
        downstream = await call_next()
        if how == "stricter":
            return Ask(reason="ask me", detail="rule last")
        return downstream  # passed on: credited downstream (the default: nobody)


class Transparent:
    """An ``async`` link after every other that passes the decision on: the chain is not a
    tail one (`_Links.tail`), and decides as it would without it."""

    name = "transparent"

    @hookimpl(trylast=True)
    async def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        return await call_next()

    @hookimpl(trylast=True)
    async def dsh_tool_post_execute(self, execution: Any, result: Any, call_next: Any) -> Any:
        return await call_next()


class Passes:
    """A plain link called after `Last` (``trylast``, registered later): a tail call."""

    name = "passes"

    @hookimpl(trylast=True)
    def dsh_tool_pre_execute(self, execution: Any, call_next: Any) -> Any:
        return call_next()


HOWS = ["own", "none", "tail", "raises", "junk", "waits", "passes", "stricter"]


def _outcome(result: Any) -> tuple[Any, ...]:
    return (result.is_error, result.code, result.decided_by, result.decision_detail)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("pre", [None, Allow(detail="rule policy")])
@pytest.mark.parametrize("first", [False, True])
async def test_a_tail_chain_decides_as_the_whole_chain_would(how, pre, first):
    """Plain hooks and plain links (*first*: the told link before another plain link)."""
    if first:
        tail = _host(Policy(pre=pre), Last(how), Passes())
        assert _outcome(await tail.registry.execute(CALL)) == _outcome(
            await _host(Policy(pre=pre), Last(how), Passes(), Transparent()).registry.execute(CALL)
        )
        return
    tail = _host(Policy(pre=pre), Last(how))
    assert tail.registry._pipeline._links(tail.hooks.plan())[0].tail
    whole = _host(Policy(pre=pre), Last(how), Transparent())
    assert not whole.registry._pipeline._links(whole.hooks.plan())[0].tail
    assert _outcome(await tail.registry.execute(CALL)) == _outcome(
        await whole.registry.execute(CALL)
    )


async def test_a_tail_chain_that_answers_at_once_makes_no_chain(monkeypatch, gated):
    from dsh_host._pipeline import _chain, _gate_now, _tail

    made: list[Any] = []

    class Counted(_chain._Chain):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(args)
            super().__init__(*args, **kwargs)

    for module in (_chain, _gate_now, _tail):
        monkeypatch.setattr(module, "_Chain", Counted)
    for how, code in (("own", "DENIED"), ("tail", None), ("none", None)):
        last = Last(how)
        result = await _host(Policy(), last).registry.execute(CALL)
        assert result.code == code
    assert made == []
    assert gated == []
    waits = await _host(Policy(), Last("waits")).registry.execute(CALL)
    assert (waits.is_error, waits.decided_by) == (False, None)  # the default, passed on
    assert len(made) == 1  # made when the link awaited its call_next


async def test_a_tail_called_end_cannot_be_awaited_later():
    last = Last("tail")
    result = await _host(Policy(), last).registry.execute(CALL)
    assert (result.is_error, result.decided_by) == (False, None)
    (spent,) = last.kept
    with pytest.raises(RuntimeError, match="tail call"):
        await spent


class PostLink:
    """A plain post-execute link: a tail call, or a context added to the downstream decision."""

    def __init__(self, name: str, how: str) -> None:
        self.name, self.how = name, how

    @hookimpl
    def dsh_tool_post_execute(self, execution: Any, result: Any, call_next: Any) -> Any:
        if self.how == "tail":
            return call_next()
        if self.how == "block":
            return Block(feedback="no")
        return self._add(call_next)

    async def _add(self, call_next: Any) -> Any:
        decision = await call_next()
        return attrs.evolve(decision, additional_contexts=(HookContext("seen", self.name),))


@pytest.mark.parametrize("hows", [("tail", "tail"), ("tail", "block"), ("block", "tail"),
                                  ("add", "tail"), ("tail", "add"), ("add", "block")])  # fmt: skip
async def test_a_post_execute_tail_chain_applies_what_the_whole_chain_would(hows, monkeypatch):
    from dsh_host._pipeline import _chain, _finish, _tail

    made: list[Any] = []

    class Counted(_chain._Chain):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(args)
            super().__init__(*args, **kwargs)

    for module in (_chain, _finish, _tail):
        monkeypatch.setattr(module, "_Chain", Counted)
    links = [PostLink(f"p{i}", how) for i, how in enumerate(hows)]
    tail = _host(*links)
    assert tail.registry._pipeline._links(tail.hooks.plan())[1].tail
    got = await tail.registry.execute(CALL)
    if "add" not in hows:
        assert made == []  # every link answered at once or passed the call on
    whole = await _host(*links, Transparent()).registry.execute(CALL)
    assert _outcome(got) == _outcome(whole)
    assert (got.text, got.additional_contexts) == (whole.text, whole.additional_contexts)
