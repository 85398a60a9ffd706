"""The approval plugin: static answers, the terminal prompt, remembered calls, cancellation."""

from __future__ import annotations

import io
import os
import queue
import threading

import pytest
import trio
import trio.testing

from dsh_host import (
    AbortSignal,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    ConfigError,
    Host,
    ToolExecution,
    hookimpl,
)
from dsh_plugins_builtin.approval import ApprovalConfig, ApprovalPlugin, arguments_lines, preview
from dsh_plugins_builtin.permissions import PermissionsPlugin
from tests.conftest import make_echo

QUESTION = "allow [o]nce / for this [r]un / [d]eny (default: deny): "  # no config file: no "always"


class FakeInput:
    """A stdin whose ``readline`` blocks until the test feeds a line."""

    def __init__(self, *lines: str) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        for line in lines:
            self.lines.put(line)
        self.reading = threading.Event()
        self.reads = 0

    def readline(self) -> str:
        self.reads += 1
        self.reading.set()
        return self.lines.get()

    def feed(self, line: str) -> None:
        self.lines.put(line)

    async def blocked(self) -> None:
        """Return once a reader thread is waiting in ``readline`` (then re-arm)."""
        await trio.to_thread.run_sync(self.reading.wait)
        self.reading.clear()


class AskAll:
    name = "asker"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Ask("a human should look")


def make(*plugins, config=None, tools=("echo",)) -> Host:
    host = Host(config=config, plugins=plugins, load_entrypoints=False)
    for name in tools:
        host.registry.register(make_echo(name))
    return host


def terminal(stdin, stdout=None) -> ApprovalPlugin:
    return ApprovalPlugin(stdin, stdout or io.StringIO(), isatty=True)


def request(tool="echo", arguments=None, signal=None) -> ApprovalRequest:
    execution = ToolExecution(
        call_id="c1",
        name=tool,
        arguments=arguments or {"text": "hi"},
        signal=signal or AbortSignal(),
    )
    return ApprovalRequest(execution=execution, reason="why not", asked_by="asker")


# -- static answers --------------------------------------------------------------------------


async def test_without_a_terminal_an_ask_is_unavailable_and_names_the_asker():
    assert ApprovalConfig() == ApprovalConfig(mode="auto", answer="deny")
    host = make(AskAll(), ApprovalPlugin(isatty=False))
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert result.decided_by == "asker"
    assert "requires approval" in result.error.message
    assert "no approval channel is available" in result.error.message


async def test_terminal_mode_never_reads_a_stdin_that_is_no_terminal():
    stdin = FakeInput("o\n")
    config = {"plugin": {"approval": {"mode": "terminal"}}}
    host = make(AskAll(), ApprovalPlugin(stdin, io.StringIO(), isatty=False), config=config)
    result = await host.call("echo", {"text": "hi"})
    assert "no approval channel is available" in result.error.message
    assert stdin.reads == 0


async def test_explicit_static_deny_rejects():
    config = {"plugin": {"approval": {"mode": "static"}}}
    host = make(AskAll(), ApprovalPlugin(isatty=True), config=config)
    result = await host.call("echo", {"text": "hi"})
    assert (result.code, result.decided_by) == ("DENIED", "approval")
    assert result.error.message == 'tool "echo" was rejected by approval'


async def test_auto_mode_without_a_terminal_honours_a_configured_allow():
    config = {"plugin": {"approval": {"answer": "allow"}}}
    host = make(AskAll(), ApprovalPlugin(isatty=False), config=config)
    assert (await host.call("echo", {"text": "hi"})).text == "hi"


async def test_static_allow_runs_the_tool():
    config = {"plugin": {"approval": {"mode": "static", "answer": "allow"}}}
    host = make(AskAll(), ApprovalPlugin(isatty=True), config=config)
    result = await host.call("echo", {"text": "hi"})
    assert (result.text, result.decided_by) == ("hi", None)


async def test_auto_mode_prompts_only_on_a_terminal():
    stdin = FakeInput("o\n")
    assert terminal(stdin).mode == "terminal"
    assert ApprovalPlugin(stdin, io.StringIO(), isatty=False).mode == "static"
    assert ApprovalPlugin(io.StringIO()).mode == "static"  # StringIO is no terminal
    assert ApprovalPlugin(stdin).mode == "static"  # no isatty method at all
    closed = io.StringIO()
    closed.close()
    assert ApprovalPlugin(closed).mode == "static"
    host = make(AskAll(), terminal(stdin))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"


@pytest.mark.parametrize(
    ("table", "key"), [({"mode": "always"}, "mode"), ({"answer": "yes"}, "answer")]
)
def test_bad_config_values_are_config_errors(table, key):
    with pytest.raises(ConfigError) as info:
        make(ApprovalPlugin(), config={"plugin": {"approval": table}})
    assert (info.value.plugin, info.value.key) == ("approval", key)


async def test_other_approvers_are_asked_first():
    class Yes:
        name = "yes"

        @hookimpl
        def dsh_tool_approve(self, request):
            return ApprovalOutcome.ALLOWED_ONCE

    # registered last, approval would be asked first if it were not trylast
    host = make(AskAll(), Yes(), ApprovalPlugin(isatty=False))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"


# -- the terminal prompt ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        ("o\n", ApprovalOutcome.ALLOWED_ONCE),
        ("Allow\n", ApprovalOutcome.ALLOWED_ONCE),
        ("y\n", ApprovalOutcome.ALLOWED_ONCE),
        ("r\n", ApprovalOutcome.ALLOWED_ONCE),
        ("d\n", ApprovalOutcome.REJECTED),
        ("no\n", ApprovalOutcome.REJECTED),
        ("\n", ApprovalOutcome.REJECTED),
        ("", ApprovalOutcome.REJECTED),  # end of input
    ],
)
async def test_answers(line, outcome):
    assert await terminal(FakeInput(line)).dsh_tool_approve(request()) is outcome


async def test_the_prompt_shows_the_tool_the_reason_and_the_arguments():
    out = io.StringIO()
    plugin = terminal(FakeInput("maybe\n", "d\n"), out)
    outcome = await plugin.dsh_tool_approve(request(arguments={"text": "hi\x1b[2J", "n": 1}))
    assert outcome is ApprovalOutcome.REJECTED
    assert out.getvalue() == (
        "dsh: tool 'echo' asks for approval\n"
        "  reason (asker): why not\n"
        "  arguments:\n"
        "    text: hi\\x1b[2J\n"
        "    n: 1\n"
        f"{QUESTION}  please answer o, r or d\n{QUESTION}"
    )


def test_the_preview_is_whole_and_safe():
    assert preview({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert preview({"text": "x" * 300}) == '{"text":"' + "x" * 300 + '"}'
    assert preview({"t": "\u202eevil"}) == '{"t":"\\u202eevil"}'


def test_arguments_are_wrapped_never_cut_and_hidden_tails_show():
    command = "git status" + " " * 230 + "; touch x"
    lines = arguments_lines({"command": command}, width=80)
    assert lines == ["    command: git status⟨230 spaces⟩; touch x"]
    long = arguments_lines({"text": "y" * 100}, width=40)
    assert "".join(line.strip() for line in long) == "text: " + "y" * 100
    assert all(len(line) <= 40 for line in long)
    multi = arguments_lines({"command": "echo a\nrm -rf /\x1b[2K"}, width=80)
    assert multi == ["    command: echo a", "      rm -rf /\\x1b[2K"]


@pytest.mark.parametrize("blank", ["\u3164", "\u115f", "\uffa0", "\u2800", "\u034f", "\ufe0f"])
def test_characters_that_show_as_nothing_are_escaped_and_counted(blank):
    # Printable to Python, blank on a screen: 3,000 Hangul fillers pushed `; rm -rf ~` 44 lines
    # below `command: ls`, past the 20 the card shows.
    lines = arguments_lines({"command": "ls" + blank * 3000 + "; rm -rf ~"}, 80)
    assert lines == [f"    command: ls⟨3000 x \\u{ord(blank):04x}⟩; rm -rf ~"]


def test_the_terminal_and_the_mcp_client_are_shown_arguments_by_one_function():
    import dsh_host
    import dsh_host._mcp._approve as mcp_approve

    assert arguments_lines is dsh_host.arguments_lines  # the plugin re-exports the host's
    assert mcp_approve.arguments_lines is dsh_host.arguments_lines
    assert arguments_lines({"n": [1, "\u202e"]}) == ['    n: [1,"\\u202e"]']


async def test_a_very_long_command_is_summarised_and_v_shows_all_of_it():
    out = io.StringIO()
    command = "echo " + "a" * 3000 + " && touch pwned"
    plugin = ApprovalPlugin(FakeInput("v\n", "d\n"), out, isatty=True, width=60)
    outcome = await plugin.dsh_tool_approve(request(arguments={"command": command}))
    assert outcome is ApprovalOutcome.REJECTED
    text = out.getvalue()
    head, _, viewed = text.partition("arguments, in full:")
    assert "touch pwned" not in head
    assert "more characters, press v to view all" in head
    assert "[v]iew all" in head
    assert "touch pwned" in "".join(line.strip() for line in viewed.splitlines())
    assert "a" * 3000 in "".join(
        line.strip().removeprefix("command: ") for line in viewed.splitlines()
    )


async def test_a_remembered_approval_says_allowed_for_this_run():
    out = io.StringIO()
    host = make(AskAll(), terminal(FakeInput("r\n"), out))
    await host.call("echo", {"text": "hi"})
    await host.call("echo", {"text": "hi"})
    assert out.getvalue().count("allowed for this run") == 2
    assert "approved once" not in out.getvalue()


async def test_allow_for_the_run_remembers_the_tool_and_its_exact_arguments():
    stdin = FakeInput("r\n", "d\n")
    out = io.StringIO()
    host = make(AskAll(), terminal(stdin, out), tools=("echo", "other"))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"
    assert (await host.call("echo", {"text": "hi"})).text == "hi"  # not asked again
    assert stdin.reads == 1
    changed = await host.call("echo", {"text": "hi!"})  # a changed argument asks again
    assert changed.code == "DENIED"
    assert stdin.reads == 2
    assert out.getvalue().count(QUESTION) == 2
    stdin.feed("d\n")
    # the same arguments for another tool are another call
    assert (await host.call("other", {"text": "hi"})).code == "DENIED"


async def test_allow_once_is_not_remembered():
    host = make(AskAll(), terminal(FakeInput("o\n", "d\n")))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"
    assert (await host.call("echo", {"text": "hi"})).code == "DENIED"


async def test_concurrent_asks_are_asked_one_at_a_time():
    stdin = FakeInput()
    out = io.StringIO()
    host = make(AskAll(), terminal(stdin, out))
    results = {}

    async def call(text):
        results[text] = await host.call("echo", {"text": text})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "one")
        await stdin.blocked()
        nursery.start_soon(call, "two")
        await trio.testing.wait_all_tasks_blocked()
        assert out.getvalue().count("asks for approval") == 1  # the second waits its turn
        stdin.feed("o\n")
        await stdin.blocked()
        assert out.getvalue().count("asks for approval") == 2
        stdin.feed("d\n")
    assert results["one"].text == "one"
    assert results["two"].code == "DENIED"
    assert out.getvalue().index("text: one") < out.getvalue().index("text: two")


async def test_an_identical_ask_waiting_its_turn_takes_the_remembered_answer():
    stdin = FakeInput()
    host = make(AskAll(), terminal(stdin))
    results = []

    async def call():
        results.append(await host.call("echo", {"text": "same"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await stdin.blocked()
        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        stdin.feed("r\n")
        stdin.feed("d\n")  # would answer a second prompt
    assert [r.text for r in results] == ["same", "same"]
    assert stdin.reads == 1


# -- cancellation ----------------------------------------------------------------------------


async def test_an_abort_while_waiting_cancels_the_prompt():
    stdin = FakeInput()
    out = io.StringIO()
    plugin = terminal(stdin, out)
    signal = AbortSignal()
    outcomes = []

    async def ask():
        outcomes.append(await plugin.dsh_tool_approve(request(signal=signal)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await stdin.blocked()
        signal.abort("user pressed Esc")
    assert outcomes == [ApprovalOutcome.CANCELLED]
    assert out.getvalue().endswith(f"{QUESTION}(cancelled)\n")
    stdin.feed("")  # let the abandoned reader finish


async def test_an_abort_through_the_host_ends_the_call_before_dispatch():
    stdin = FakeInput()
    host = make(AskAll(), terminal(stdin))
    signal = AbortSignal()
    results = []

    async def call():
        results.append(await host.call("echo", {"text": "hi"}, signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await stdin.blocked()
        signal.abort()
    assert results[0].code == "ABORTED_BEFORE_DISPATCH"
    stdin.feed("")  # let the abandoned reader finish


async def test_an_already_aborted_signal_is_cancelled_without_a_prompt():
    out = io.StringIO()
    signal = AbortSignal()
    signal.abort()
    plugin = terminal(FakeInput("o\n"), out)
    assert await plugin.dsh_tool_approve(request(signal=signal)) is ApprovalOutcome.CANCELLED
    assert out.getvalue() == ""


async def test_a_line_typed_after_an_abort_goes_to_the_prompt_on_screen():
    stdin = FakeInput()
    plugin = terminal(stdin)
    signal = AbortSignal()
    outcomes = []

    async def ask(req):
        outcomes.append(await plugin.dsh_tool_approve(req))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, request(signal=signal))
        await stdin.blocked()
        signal.abort()
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask, request(arguments={"text": "next"}))
        await trio.testing.wait_all_tasks_blocked()
        stdin.feed("o\n")  # read by the abandoned thread, handed to the live prompt
        stdin.feed("d\n")  # a second reader would see this one
    assert outcomes == [ApprovalOutcome.CANCELLED, ApprovalOutcome.ALLOWED_ONCE]
    assert stdin.reads == 1


async def test_an_abort_while_waiting_for_another_prompt_cancels_too():
    stdin = FakeInput()
    plugin = terminal(stdin)
    signal = AbortSignal()
    outcomes = {}

    async def ask(name, req):
        outcomes[name] = await plugin.dsh_tool_approve(req)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first", request())
        await stdin.blocked()
        nursery.start_soon(ask, "second", request(arguments={"x": 1}, signal=signal))
        await trio.testing.wait_all_tasks_blocked()
        signal.abort()
        await trio.testing.wait_all_tasks_blocked()
        stdin.feed("o\n")
    assert outcomes == {"second": ApprovalOutcome.CANCELLED, "first": ApprovalOutcome.ALLOWED_ONCE}


# -- with the permissions plugin -------------------------------------------------------------


def with_permissions(approval: ApprovalPlugin, **approval_table) -> Host:
    config = {
        "plugin": {
            "permissions": {"ask": ["bash(git push:*)"], "allow": ["bash(git:*)"]},
            "approval": approval_table,
        }
    }
    return make(PermissionsPlugin(), approval, config=config, tools=("bash",))


async def test_an_ask_rule_answered_by_a_static_allow_runs_the_tool():
    host = with_permissions(ApprovalPlugin(), mode="static", answer="allow")
    result = await host.call("bash", {"text": "pushed", "command": "git push"})
    assert (result.is_error, result.text) == (False, "pushed")


async def test_an_ask_rule_answered_by_a_static_deny_is_denied_by_approval():
    host = with_permissions(ApprovalPlugin(), mode="static")
    result = await host.call("bash", {"text": "pushed", "command": "git push"})
    assert (result.code, result.decided_by) == ("DENIED", "approval")
    assert result.error.message == 'tool "bash" was rejected by approval'
    allowed = await host.call("bash", {"text": "logged", "command": "git log"})
    assert allowed.text == "logged"  # allow rules need no approver


async def test_the_prompt_shows_the_rule_that_asked_and_remembers_the_call():
    stdin = FakeInput("r\n")
    out = io.StringIO()
    host = with_permissions(terminal(stdin, out), mode="terminal")
    call = {"text": "pushed", "command": "git push origin main"}
    assert (await host.call("bash", call)).text == "pushed"
    assert (await host.call("bash", call)).text == "pushed"
    assert stdin.reads == 1
    assert (
        "  reason (permissions): approval required by rule bash(git push:*) in the configuration given to Host\n"
        in out.getvalue()
    )
    stdin.feed("")
    other = await host.call("bash", {"text": "pushed", "command": "git push --force"})
    assert (other.code, other.decided_by) == ("DENIED", "approval")


async def test_an_abort_during_a_permissions_prompt_ends_the_call():
    stdin = FakeInput()
    host = with_permissions(terminal(stdin), mode="terminal")
    signal = AbortSignal()
    results = []

    async def call():
        results.append(await host.call("bash", {"text": "x", "command": "git push"}, signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await stdin.blocked()
        signal.abort()
    assert results[0].code == "ABORTED_BEFORE_DISPATCH"
    stdin.feed("")


# -- always allow: the rule goes into the config file (issue 26, row 14) -------------------------


def _configured(tmp_path, text="[plugin.permissions]\ndeny = []  # keep me\n"):
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "dsh.toml"
    config.write_text(f'[host]\nworkspace = "{ws}"\n\n{text}', encoding="utf-8")
    return config


def _bash_host(config, stdin, out):
    host = Host(config=str(config), plugins=[PermissionsPlugin(), terminal(stdin, out)],
                load_entrypoints=False)  # fmt: skip
    host.registry.register(make_echo("bash"))
    return host


async def test_always_allows_once_and_appends_the_narrowest_rule(tmp_path):
    import tomllib

    config = _configured(tmp_path)
    out = io.StringIO()
    host = _bash_host(config, FakeInput("a\n"), out)
    result = await host.call("bash", {"text": "x", "command": "git status --short"})
    assert not result.is_error, result.text
    assert "[a]lways (bash(git status:*))" in out.getvalue()
    assert "added bash(git status:*) to [plugin.permissions] allow in" in out.getvalue()
    text = config.read_text(encoding="utf-8")
    assert "# keep me" in text  # the rest of the file as it was
    assert tomllib.loads(text)["plugin"]["permissions"]["allow"] == ["bash(git status:*)"]
    # the next host started from the file runs the call without asking
    again = _bash_host(config, FakeInput(), io.StringIO())
    assert not (await again.call("bash", {"text": "x", "command": "git status"})).is_error


@pytest.mark.parametrize("trusted", [True, False])
async def test_always_keeps_a_trusted_file_trusted_and_trusts_no_other(
    tmp_path, tmp_path_factory, monkeypatch, trusted
):
    from dsh_host import TrustedConfigs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    config = _configured(tmp_path)
    if trusted:  # found in the working directory and trusted (`dsh config trust`)
        TrustedConfigs().trust(config)
    host = _bash_host(config, FakeInput("a\n"), io.StringIO())
    assert not (await host.call("bash", {"text": "x", "command": "git status"})).is_error
    assert TrustedConfigs().state(config) == ("trusted" if trusted else "untrusted")
    assert "git status" in config.read_text(encoding="utf-8")


async def test_always_is_refused_without_a_config_file(tmp_path):
    out = io.StringIO()
    host = Host(config={}, plugins=[PermissionsPlugin(), terminal(FakeInput("a\n", "d\n"), out)],
                load_entrypoints=False)  # fmt: skip
    host.registry.register(make_echo("bash"))
    result = await host.call("bash", {"text": "x", "command": "ls"})
    assert result.code == "DENIED"  # asked again, then denied
    # no file to write the rule to: "always" is not offered, and "a" is not an answer
    assert "[a]lways" not in out.getvalue()
    assert "please answer o, r or d" in out.getvalue()


async def test_always_is_refused_when_the_config_file_is_protected(tmp_path, monkeypatch):
    config = _configured(tmp_path)
    before = config.read_text()
    out = io.StringIO()
    host = _bash_host(config, FakeInput("a\n", "o\n"), out)
    real_access = os.access
    monkeypatch.setattr(  # as for a file another user owns: root may write anything
        os,
        "access",
        lambda path, mode: False if str(path) == str(config) else real_access(path, mode),
    )
    assert not (await host.call("bash", {"text": "x", "command": "ls"})).is_error  # then "o"
    assert f"cannot always allow: {config} is protected from this user" in out.getvalue()
    assert config.read_text() == before


async def test_always_is_refused_for_a_symlinked_config_and_when_no_rule_is_narrow_enough(tmp_path):
    config = _configured(tmp_path)
    link = tmp_path / "link.toml"
    link.symlink_to(config)
    out = io.StringIO()
    host = _bash_host(link, FakeInput("a\n", "d\n"), out)
    await host.call("bash", {"text": "x", "command": "ls"})
    assert "is not a regular file (a symbolic link?)" in out.getvalue()
    out = io.StringIO()
    host = _bash_host(config, FakeInput("a\n", "d\n"), out)
    await host.call("bash", {"text": "x", "command": "echo $(id)"})
    assert "[a]lways" not in out.getvalue()  # no rule narrower than the whole tool: not offered
    assert "please answer o, r or d" in out.getvalue()
    assert "allow =" not in config.read_text()
