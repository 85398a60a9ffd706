"""hook_commands: Claude Code PreToolUse / PostToolUse command hooks, run as real processes."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import (
    AbortSignal,
    Accept,
    Allow,
    ApprovalOutcome,
    Block,
    ConfigError,
    Deny,
    HookContext,
    Host,
    TextBlock,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    hookimpl,
)
from dsh_plugins_builtin.hook_commands import HookCommand, HookCommandsPlugin
from tests.conftest import make_echo

TOOLS = ("read_file", "read_files", "write_file", "echo")


# -- helpers ---------------------------------------------------------------------------------------


def sh(tmp_path: Path, name: str, body: str) -> str:
    """Write an executable /bin/sh script; return the command that runs it."""
    path = tmp_path / f"{name}.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return shlex.quote(str(path))


def py(tmp_path: Path, name: str, body: str) -> str:
    """Write a Python script; return the command that runs it with this interpreter."""
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def prints(tmp_path: Path, name: str, output: dict[str, Any]) -> str:
    """A Python hook that prints *output* as JSON and exits 0."""
    return py(tmp_path, name, f"import json\nprint(json.dumps({output!r}))\n")


def group(command: str, matcher: str | None = "", **hook: Any) -> dict[str, Any]:
    entry = {"type": "command", "command": command, **hook}
    return {"hooks": [entry]} if matcher is None else {"matcher": matcher, "hooks": [entry]}


def settings(
    tmp_path: Path, pre: list[Any] = (), post: list[Any] = (), name: str = "settings.json"
) -> str:
    (tmp_path / name).write_text(
        json.dumps({"hooks": {"PreToolUse": list(pre), "PostToolUse": list(post)}})
    )
    return name


def host(tmp_path: Path, *files: str, plugins: tuple[object, ...] = (), **config: Any) -> Host:
    table = {"settings": list(files), **config}
    built = Host(
        config={"host": {"workspace": str(tmp_path)}, "plugin": {"hook_commands": table}},
        plugins=[*plugins, HookCommandsPlugin()],
        load_entrypoints=False,
    )
    for name in TOOLS:
        built.registry.register(make_echo(name))
    return built


async def call(h: Host, name: str = "echo", text: str = "hi", **kw: Any) -> Any:
    return await h.call(name, {"text": text}, **kw)


def contexts(result: Any) -> list[str]:
    return [c.content[0].text for c in result.additional_contexts]


async def wait_gone(pid: int) -> None:
    """Wait (event-driven, through a pidfd) until process *pid* has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with trio.fail_after(2):
            await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


class Denier:
    """A lower-priority pre-execute plugin that denies everything."""

    name = "denier"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Deny("denied by the next plugin")


class Lenient:
    """A lower-priority pre-execute plugin that allows everything."""

    name = "lenient"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Allow(detail="lenient")


class Approver:
    name = "approver"

    def __init__(self) -> None:
        self.reasons: list[str | None] = []

    @hookimpl
    def dsh_tool_approve(self, request):
        self.reasons.append(request.reason)
        return ApprovalOutcome.ALLOWED_ONCE


class Downstream:
    """A lower-priority post-execute plugin that adds a context of its own."""

    name = "downstream"

    @hookimpl
    def dsh_tool_post_execute(self, execution, result):
        return Accept(additional_contexts=[HookContext("downstream note", "downstream")])


# -- no settings -----------------------------------------------------------------------------------


async def test_no_settings_does_nothing(tmp_path):
    h = host(tmp_path)
    result = await call(h)
    assert (result.text, result.is_error, result.additional_contexts) == ("hi", False, ())
    assert h.config_for("hook_commands").timeout_ms == 60_000
    assert h.config_for("hook_commands").fail_closed is True


def test_no_settings_calls_no_hook_per_call(tmp_path):
    h = host(tmp_path)
    for hook in ("dsh_tool_pre_execute", "dsh_tool_post_execute", "dsh_tool_result"):
        assert h.hooks.impls(hook) == ()


async def test_a_call_no_hook_matches_is_answered_at_once(tmp_path, monkeypatch):
    """The hot path with hooks for other tools: matched once per tool, then no coroutine."""
    block = sh(tmp_path, "block", "exit 2")
    h = host(
        tmp_path,
        settings(tmp_path, pre=[group(block, "write_file")], post=[group(block, "read_file")]),
    )
    plugin = h.pm.get_plugin("hook_commands")
    assert (await call(h)).text == "hi"  # echo matches no hook: worked out on its first call
    matched: list[str] = []
    real = HookCommand.matches

    def counting(self: HookCommand, *names: str) -> bool:
        matched.append(self.command)
        return real(self, *names)

    monkeypatch.setattr(HookCommand, "matches", counting)
    for _ in range(20):
        assert (await call(h)).text == "hi"
    assert matched == []
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    downstream = object()
    assert plugin.dsh_tool_pre_execute(execution, lambda: downstream) is None
    ok = ToolExecutionResult(content=(TextBlock("x"),))
    assert plugin.dsh_tool_post_execute(execution, ok, lambda: downstream) is downstream
    assert (await call(h, "write_file")).code == "DENIED"  # the hooks of other tools still run


# -- PreToolUse ------------------------------------------------------------------------------------


async def test_exit_2_denies_with_stderr_and_tool_does_not_run(tmp_path):
    ran = tmp_path / "ran"
    touch = sh(tmp_path, "touch", f"touch {shlex.quote(str(ran))}")
    block = sh(tmp_path, "block", "echo 'danger tool blocked' >&2\nexit 2")
    h = host(tmp_path, settings(tmp_path, pre=[group(block)], post=[group(touch)]))
    result = await call(h)
    assert result.is_error
    assert result.code == "DENIED"
    assert result.text == "Error: danger tool blocked"
    assert result.decided_by == "hook_commands"
    assert not ran.exists()  # denied calls never ran their tool: no PostToolUse either


async def test_exit_2_without_stderr_has_default_reason(tmp_path):
    block = sh(tmp_path, "block", "echo 'stdout is ignored on exit 2'\nexit 2")
    h = host(tmp_path, settings(tmp_path, pre=[group(block)]))
    assert (await call(h)).text == "Error: blocked by PreToolUse hook"


async def test_json_decision_block_denies(tmp_path):
    hook = prints(tmp_path, "block", {"decision": "block", "reason": "not on a Friday"})
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    result = await call(h)
    assert (result.code, result.text) == ("DENIED", "Error: not on a Friday")


async def test_continue_false_denies_with_stop_reason(tmp_path):
    hook = prints(tmp_path, "stop", {"continue": False, "stopReason": "halt everything"})
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    result = await call(h)
    assert (result.code, result.text) == ("DENIED", "Error: halt everything")


def permission(decision: str, reason: str = "") -> dict[str, Any]:
    out = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    return {"hookSpecificOutput": {**out, "permissionDecisionReason": reason}}


async def test_permission_decision_deny(tmp_path):
    hook = prints(tmp_path, "deny", permission("deny", "secrets live there"))
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    result = await call(h)
    assert (result.code, result.text) == ("DENIED", "Error: secrets live there")


async def test_permission_decision_ask_without_approver_fails_closed(tmp_path):
    hook = prints(tmp_path, "ask", permission("ask", "needs approval"))
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    result = await call(h)
    assert result.code == "DENIED"
    assert result.text.endswith("Reason for asking: needs approval")
    assert result.decided_by == "hook_commands"


async def test_permission_decision_ask_goes_to_the_approver(tmp_path):
    approver = Approver()
    hook = prints(tmp_path, "ask", permission("ask", "needs approval"))
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]), plugins=(approver,))
    result = await call(h)
    assert (result.text, result.is_error) == ("hi", False)
    assert approver.reasons == ["needs approval"]


async def test_allow_never_beats_a_deny_of_the_plugins_after_it(tmp_path):
    allow = prints(tmp_path, "allow", permission("allow"))
    h = host(tmp_path, settings(tmp_path, pre=[group(allow)]), plugins=(Denier(),))
    result = await call(h)
    assert (result.code, result.decided_by) == ("DENIED", "denier")


async def test_plain_text_stdout_is_no_decision(tmp_path):
    chatty = sh(tmp_path, "chatty", "echo 'looks fine to me'")
    h = host(tmp_path, settings(tmp_path, pre=[group(chatty)]), plugins=(Denier(),))
    result = await call(h)
    assert (result.text, result.decided_by) == ("Error: denied by the next plugin", "denier")
    h = host(tmp_path, settings(tmp_path, pre=[group(chatty)]))
    assert (await call(h)).text == "hi"


async def test_first_deny_wins_and_later_hooks_do_not_run(tmp_path):
    marker = tmp_path / "second-ran"
    first = prints(tmp_path, "first", permission("deny", "first says no"))
    second = sh(tmp_path, "second", f"touch {shlex.quote(str(marker))}\nexit 2")
    h = host(tmp_path, settings(tmp_path, pre=[group(first), group(second)]))
    assert (await call(h)).text == "Error: first says no"
    assert not marker.exists()


async def test_deny_beats_an_earlier_ask_and_ask_beats_allow(tmp_path):
    ask = prints(tmp_path, "ask", permission("ask", "please check"))
    allow = prints(tmp_path, "allow", permission("allow"))
    deny = prints(tmp_path, "deny", permission("deny", "no"))
    h = host(tmp_path, settings(tmp_path, pre=[group(ask), group(deny)]))
    assert (await call(h)).text == "Error: no"
    approver = Approver()
    files = settings(tmp_path, pre=[group(allow), group(ask), group(allow)], name="b.json")
    h = host(tmp_path, files, plugins=(approver,))
    assert (await call(h)).text == "hi"
    assert approver.reasons == ["please check"]


@pytest.mark.parametrize(
    ("output", "text"),
    [
        ({"decision": "approve"}, "allowed by hook_commands"),  # Claude's legacy top-level allow
        ({"decision": "block", **permission("allow")}, "allowed by hook_commands"),
        ({"decision": "allow"}, "allowed by lenient"),  # not a top-level value: no decision
        ({"continue": False}, "Error: stopped by PreToolUse hook (continue: false)"),
        (
            {"hookSpecificOutput": {"permissionDecision": "maybe"}},
            "unknown permissionDecision 'maybe'",
        ),
    ],
)
async def test_json_output_fields(tmp_path, output, text):
    hook = prints(tmp_path, "hook", output)
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]), plugins=(Lenient(),))
    call = ToolExecutionInput(call_id="c", name="echo", arguments={"text": "hi"})
    prepared = await h.registry._pipeline.prepare(call, None)  # who allowed, if it was allowed
    if prepared.result is not None:
        assert text in prepared.result.text
    else:
        assert text == f"allowed by {prepared.allowed_by}"


async def test_pre_additional_context_reaches_the_result(tmp_path):
    specific = prints(
        tmp_path,
        "specific",
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "from pre"}},
    )
    top = prints(tmp_path, "top", {"additionalContext": "top-level pre"})
    h = host(tmp_path, settings(tmp_path, pre=[group(specific), group(top)]))
    result = await call(h)
    assert result.text == "hi"
    assert result.additional_contexts == (
        HookContext("from pre", "hook_commands"),
        HookContext("top-level pre", "hook_commands"),
    )


async def test_pre_context_is_kept_when_the_call_is_denied(tmp_path):
    out = {"additionalContext": "why", "decision": "block", "reason": "no"}
    h = host(tmp_path, settings(tmp_path, pre=[group(prints(tmp_path, "both", out))]))
    result = await call(h)
    assert (result.text, contexts(result)) == ("Error: no", ["why"])


async def test_wrong_hook_event_name_is_a_failure(tmp_path):
    out = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "permissionDecision": "allow"}}
    h = host(tmp_path, settings(tmp_path, pre=[group(prints(tmp_path, "wrong", out))]))
    result = await call(h)
    assert result.code == "DENIED"
    assert "hookEventName 'PostToolUse', not 'PreToolUse'" in result.text


@pytest.mark.parametrize(
    ("matcher", "denied"),
    [
        ("read_.*", {"read_file", "read_files"}),
        ("*", set(TOOLS)),
        ("", set(TOOLS)),
        (None, set(TOOLS)),
        ("read_file", {"read_file"}),
        ("read", set()),  # the whole name must match
        ("write_file|echo", {"write_file", "echo"}),
    ],
)
async def test_matcher_filters_tools(tmp_path, matcher, denied):
    block = sh(tmp_path, "block", "exit 2")
    h = host(tmp_path, settings(tmp_path, pre=[group(block, matcher=matcher)]))
    seen = {name for name in TOOLS if (await call(h, name)).code == "DENIED"}
    assert seen == denied


# -- failures --------------------------------------------------------------------------------------


async def test_hook_past_its_timeout_is_killed_with_its_tree_and_denies(tmp_path, caplog):
    pidfile = tmp_path / "sleeper.pid"
    body = "sleep 30 &\necho $! > {pid}\nwait"  # the shell waits on its backgrounded child
    slow = sh(tmp_path, "slow", body.format(pid=shlex.quote(str(pidfile))))
    h = host(tmp_path, settings(tmp_path, pre=[group(slow, timeout=0.5)]))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        result = await call(h)
    assert time.monotonic() - started < 4
    assert result.code == "DENIED"
    assert "timed out after 0.5 s and was killed" in result.text
    assert "settings.json" in result.text
    assert slow in result.text
    assert "fail_closed is true" in result.text
    assert "timed out" in caplog.text
    await wait_gone(int(pidfile.read_text()))  # the backgrounded grandchild died too


async def test_a_hook_that_exits_decides_and_its_leftover_children_are_killed(tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    body = f"sleep 30 &\necho $! > {shlex.quote(str(pidfile))}"  # exits; the child keeps stdout
    quick = sh(tmp_path, "quick", body)
    h = host(tmp_path, settings(tmp_path, pre=[group(quick, timeout=20)]))
    started = time.monotonic()
    result = await call(h)
    assert time.monotonic() - started < 10  # not the hook's timeout: its own exit decided
    assert (result.text, result.is_error) == ("hi", False)
    await wait_gone(int(pidfile.read_text()))


async def test_timeout_ms_applies_to_hooks_without_their_own_timeout(tmp_path):
    slow = sh(tmp_path, "slow", "exec sleep 5")
    h = host(tmp_path, settings(tmp_path, pre=[group(slow)]), timeout_ms=300)
    result = await call(h)
    assert "timed out after 0.3 s" in result.text


async def test_crashing_hook_denies_when_fail_closed(tmp_path):
    crash = sh(tmp_path, "crash", "echo 'oops: no such thing' >&2\nexit 1")
    h = host(tmp_path, settings(tmp_path, pre=[group(crash)]))
    result = await call(h)
    assert result.code == "DENIED"
    assert "exited with code 1: oops: no such thing" in result.text
    assert "(from settings.json)" in result.text


async def test_crashing_hook_is_reported_and_ignored_when_fail_open(tmp_path, caplog):
    crash = sh(tmp_path, "crash", "exit 1")
    ctx = prints(tmp_path, "ctx", {"additionalContext": "still here"})
    h = host(tmp_path, settings(tmp_path, pre=[group(crash), group(ctx)]), fail_closed=False)
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        result = await call(h)
    assert (result.text, contexts(result)) == ("hi", ["still here"])
    assert "exited with code 1" in caplog.text
    assert "ignored (fail_closed = false)" in caplog.text


async def test_hook_that_cannot_start_fails_closed(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings(workspace, pre=[group("true")])
    h = host(workspace, "settings.json")
    shutil.rmtree(workspace)  # the hook's cwd is gone
    result = await call(h)
    assert result.code == "DENIED"
    assert "PreToolUse hook 'true' (from settings.json) could not start" in result.text


async def test_unparsable_json_fails_closed(tmp_path):
    broken = sh(tmp_path, "broken", "echo '{\"decision\": '")
    h = host(tmp_path, settings(tmp_path, pre=[group(broken)]))
    result = await call(h)
    assert result.code == "DENIED"
    assert "printed JSON that does not parse" in result.text


@pytest.mark.parametrize(
    ("event", "code"), [("pre", "ABORTED_BEFORE_DISPATCH"), ("post", "ABORTED")]
)
async def test_abort_kills_a_running_hook(tmp_path, event, code):
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    pidfile = tmp_path / "hook.pid"
    slow = sh(
        tmp_path, "slow", f"echo $$ > {pidfile}\necho go > {shlex.quote(str(fifo))}\nexec sleep 30"
    )
    h = host(tmp_path, settings(tmp_path, **{event: [group(slow)]}))
    signal = AbortSignal()
    results = []

    async def run() -> None:
        results.append(await call(h, signal=signal))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)
            signal.abort("user pressed Esc")
    assert results[0].code == code
    await wait_gone(int(pidfile.read_text()))


# -- the payload -----------------------------------------------------------------------------------


RECORD = """\
import json, os, sys
data = json.load(sys.stdin)
data["_env"] = [os.environ.get("DSH_PROJECT_DIR"), os.environ.get("CLAUDE_PROJECT_DIR")]
data["_cwd"] = os.getcwd()
with open({out!r}, "w") as f:
    json.dump(data, f)
"""


async def test_hooks_receive_the_call_as_json_on_stdin(tmp_path):
    pre_out, post_out = tmp_path / "pre.json", tmp_path / "post.json"
    pre = py(tmp_path, "pre", RECORD.format(out=str(pre_out)))
    post = py(tmp_path, "post", RECORD.format(out=str(post_out)))
    h = host(tmp_path, settings(tmp_path, pre=[group(pre)], post=[group(post)]))
    result = await h.call("echo", {"text": "hello"}, call_id="toolu_1")
    assert result.text == "hello"
    where = str(tmp_path)
    common = {
        "session_id": None,
        "transcript_path": None,
        "permission_mode": "default",
        "tool_name": "echo",
        "tool_input": {"text": "hello"},
        "tool_use_id": "toolu_1",
        "cwd": where,
        "_env": [where, where],
        "_cwd": where,
    }
    assert json.loads(pre_out.read_text()) == {**common, "hook_event_name": "PreToolUse"}
    assert json.loads(post_out.read_text()) == {
        **common,
        "hook_event_name": "PostToolUse",
        "tool_response": {"content": "hello", "is_error": False},
    }


# -- PostToolUse -----------------------------------------------------------------------------------


async def test_post_exit_2_blocks_with_stderr(tmp_path):
    block = sh(tmp_path, "block", "echo 'output leaked a key' >&2\nexit 2")
    h = host(tmp_path, settings(tmp_path, post=[group(block)]))
    result = await call(h)
    assert (result.is_error, result.code) == (True, "BLOCKED")
    assert result.text == "output leaked a key"
    assert result.decided_by == "hook_commands"


async def test_post_exit_2_without_stderr_has_default_feedback(tmp_path):
    h = host(tmp_path, settings(tmp_path, post=[group(sh(tmp_path, "b", "exit 2"))]))
    assert (await call(h)).text == "blocked by PostToolUse hook"


async def test_post_json_block_keeps_every_context_of_ours(tmp_path):
    pre = prints(tmp_path, "pre", {"additionalContext": "pre note"})
    post = prints(
        tmp_path,
        "post",
        {"decision": "block", "reason": "too big", "additionalContext": "post note"},
    )
    h = host(tmp_path, settings(tmp_path, pre=[group(pre)], post=[group(post)]))
    result = await call(h)
    assert (result.code, result.text) == ("BLOCKED", "too big")
    assert contexts(result) == ["pre note", "post note"]


async def test_post_additional_context_is_appended_to_the_downstream_decision(tmp_path):
    post = prints(
        tmp_path,
        "post",
        {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "post note"}},
    )
    files = settings(tmp_path, post=[group(post, matcher="echo")])
    h = host(tmp_path, files, plugins=(Downstream(),))
    result = await call(h)
    assert (result.text, result.is_error) == ("hi", False)
    assert result.additional_contexts == (
        HookContext("downstream note", "downstream"),
        HookContext("post note", "hook_commands"),
    )
    assert contexts(await call(h, "read_file")) == ["downstream note"]  # matcher: echo only


async def test_post_continue_false_blocks(tmp_path):
    post = prints(tmp_path, "post", {"continue": False, "stopReason": "enough"})
    h = host(tmp_path, settings(tmp_path, post=[group(post)]))
    assert ((r := await call(h)).code, r.text) == ("BLOCKED", "enough")


async def test_context_is_added_to_a_downstream_block(tmp_path):
    class Blocks:
        name = "blocks"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Block("withheld")

    pre = prints(tmp_path, "pre", {"additionalContext": "pre note"})
    h = host(tmp_path, settings(tmp_path, pre=[group(pre)]), plugins=(Blocks(),))
    result = await call(h)
    assert (result.code, result.text, contexts(result)) == ("BLOCKED", "withheld", ["pre note"])


async def test_post_sees_tool_errors(tmp_path):
    out = tmp_path / "post.json"
    post = py(tmp_path, "post", RECORD.format(out=str(out)))
    h = host(tmp_path, settings(tmp_path, post=[group(post)]))
    result = await h.call("echo", {"wrong": 1})
    assert result.code == "INVALID_ARGS"
    assert json.loads(out.read_text())["tool_response"] == {
        "content": result.text,
        "is_error": True,
    }


async def test_post_crash_blocks_when_fail_closed_and_not_when_open(tmp_path):
    crash = "kill -9 $$"  # the hook's shell dies by a signal
    files = settings(tmp_path, post=[group(crash)])
    result = await call(host(tmp_path, files))
    assert result.code == "BLOCKED"
    assert "was killed by signal 9" in result.text
    assert crash in result.text
    assert "the result was blocked" in result.text
    assert (await call(host(tmp_path, files, fail_closed=False))).text == "hi"


async def test_pipeline_failure_forgets_pending_pre_context(tmp_path):
    class Explodes:
        name = "explodes"

        @hookimpl
        def dsh_tool_guard(self, execution):
            raise RuntimeError("boom")

    pre = prints(tmp_path, "pre", {"additionalContext": "pre note"})
    h = host(tmp_path, settings(tmp_path, pre=[group(pre)]), plugins=(Explodes(),))
    plugin = h.pm.get_plugin("hook_commands")
    result = await call(h)
    assert result.code == "PLUGIN_FAILED"
    assert plugin._pending == {}


# -- loading ---------------------------------------------------------------------------------------


def test_missing_settings_file_stops_the_host(tmp_path):
    with pytest.raises(ConfigError) as info:
        host(tmp_path, ".claude/settings.json")
    message = str(info.value)
    assert "[plugin.hook_commands]" in message
    assert "'.claude/settings.json'" in message
    assert "no such file" in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not valid JSON"),
        # refused, not a RecursionError that took the plugin out (and its hooks with it)
        ('{"hooks": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than 512 levels"),
        ('{"hooks": {}, "hooks": {"PreToolUse": []}}', 'duplicate object key "hooks"'),
        (b"\xff{}", "is not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('{"hooks": []}', "'hooks' must be an object"),
        ('{"hooks": {"PreToolUse": {}}}', "hooks.PreToolUse must be a list"),
        ('{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}', "is not a valid regex"),
        ('{"hooks": {"PostToolUse": [{"hooks": [{"type": "command"}]}]}}', "command must be"),
        (
            '{"hooks": {"PreToolUse": [{"hooks": [{"command": "a\\u0000b"}]}]}}',
            "command must not contain a NUL character",
        ),
        (
            '{"hooks": {"PreToolUse": [{"hooks": [{"command": "x", "timeout": -1}]}]}}',
            "hooks.PreToolUse[0].hooks[0].timeout must be a positive number",
        ),
    ],
)
def test_malformed_settings_stop_the_host(tmp_path, text, problem):
    (tmp_path / "s.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as info:
        host(tmp_path, "s.json")
    assert "[plugin.hook_commands], key 'settings': settings file 's.json'" in str(info.value)
    assert problem in str(info.value)


async def test_other_hook_types_and_events_are_skipped(tmp_path, caplog):
    data = {
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "exit 2"}]}],
            "PreToolUse": [{"matcher": "*", "hooks": [{"type": "prompt", "prompt": "judge"}]}],
        },
    }
    (tmp_path / "s.json").write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        h = host(tmp_path, "s.json")
    assert "type 'prompt'" in caplog.text
    assert (await call(h)).text == "hi"


async def test_bare_event_map_and_several_files_run_in_order(tmp_path):
    first = prints(tmp_path, "first", {"additionalContext": "one"})
    second = prints(tmp_path, "second", {"additionalContext": "two"})
    (tmp_path / "bare.json").write_text(json.dumps({"PreToolUse": [group(first)]}))
    h = host(tmp_path, "bare.json", settings(tmp_path, pre=[group(second)]))
    assert contexts(await call(h)) == ["one", "two"]


def test_timeout_ms_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="hook_commands"):
        host(tmp_path, timeout_ms=0)


@pytest.mark.parametrize(
    ("event", "key"),
    [("PreToolUse", "updatedInput"), ("PostToolUse", "updatedMCPToolOutput")],
)
async def test_a_rewrite_dsh_cannot_apply_fails_closed(tmp_path, event, key):
    out = {"hookSpecificOutput": {"hookEventName": event, key: {"text": "sanitised"}}}
    hook = prints(tmp_path, "rewrite", out)
    side = "pre" if event == "PreToolUse" else "post"
    h = host(tmp_path, settings(tmp_path, **{side: [group(hook)]}))
    result = await call(h, text="raw")
    assert result.code == ("DENIED" if side == "pre" else "BLOCKED")
    assert f"asked to rewrite the call with {key}, which dsh does not support" in result.text
    assert "raw" not in result.text


async def test_system_message_is_logged_for_the_user(tmp_path, caplog):
    hook = prints(tmp_path, "msg", {"systemMessage": "formatting took 3 s"})
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        assert (await call(h)).text == "hi"
    assert "says: formatting took 3 s" in caplog.text


async def test_a_hooks_words_reach_the_log_escaped(tmp_path, caplog):
    # A hook's systemMessage (which may echo the model's command or a tool's output) was logged
    # raw: a clear-screen and a window title reached the operator's terminal.
    hook = prints(tmp_path, "msg", {"systemMessage": "hi\x1b[2J\x1b]0;pwned\x07\u202e"})
    h = host(tmp_path, settings(tmp_path, pre=[group(hook)]))
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        assert (await call(h)).text == "hi"
    assert "\x1b" not in caplog.text
    assert "\u202e" not in caplog.text
    assert "says: hi\\x1b[2J\\x1b]0;pwned\\x07\\u202e" in caplog.text
