"""hook_commands against a hostile model: nothing it can write is ever run by the host, a hook's
process tree never outlives the hook, its output is capped, and a dry run runs nothing."""

from __future__ import annotations

import json
import logging
import os
import shlex
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import AbortSignal, ConfigError, Deny, Host, ToolExecutionInput, hookimpl
from dsh_plugins_builtin._hooks._environment import unconfined_environment
from dsh_plugins_builtin._hooks._launch import Exposure, plan_launch, safe_path_env
from dsh_plugins_builtin.hook_commands import HookCommandsPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.conftest import make_echo, soak_size


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every writable root (the sandbox below writes only in ``ws``)."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def script(where: Path, name: str, body: str) -> Path:
    path = where / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def settings(ws: Path, *commands: str, event: str = "PreToolUse") -> str:
    groups = [{"matcher": "", "hooks": [{"type": "command", "command": c}]} for c in commands]
    (ws / "hooks.json").write_text(json.dumps({"hooks": {event: groups}}))
    return "hooks.json"


def build(
    ws: Path, files: str, *, sandbox: dict[str, Any] | None = None, plugins: tuple = (), **table
) -> Host:
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"writable_roots": ["."], **(sandbox or {})},
            "hook_commands": {"settings": [files], **table},
        },
    }
    host = Host(
        config=config,
        plugins=[*plugins, ToolsPlugin(), SandboxPlugin(), HookCommandsPlugin()],
        load_entrypoints=False,
    )
    host.registry.register(make_echo())
    return host


def gone(pid: int) -> bool:
    """Whether process *pid* no longer exists (not even as a zombie)."""
    return not os.path.exists(f"/proc/{pid}")


# -- start-time checks: nothing the host runs is writable by the sandboxed side ---------------


def test_a_hook_script_in_the_workspace_is_refused_at_start(ws):
    hook = script(ws, "hooks/check.sh", "exit 0")
    with pytest.raises(ConfigError) as info:
        build(ws, settings(ws, str(hook)))
    message = str(info.value)
    assert "settings file 'hooks.json'" in message
    assert f"PreToolUse hook {str(hook)!r}" in message
    assert "hooks.PreToolUse[0].hooks[0]" in message
    assert f"its executable {str(hook)!r}" in message
    assert "inside a writable root" in message


@pytest.mark.parametrize(
    "spelled",
    [
        "sh hooks/check.sh",
        "/bin/sh ./hooks/check.sh --strict",
        '"$CLAUDE_PROJECT_DIR"/hooks/check.sh',
        "cat | sh $DSH_PROJECT_DIR/hooks/check.sh && exit 0",
        "sh ~/check.sh",
    ],
)
def test_a_script_argument_in_the_workspace_is_refused_at_start(ws, monkeypatch, spelled):
    monkeypatch.setenv("HOME", str(ws / "hooks"))
    script(ws, "hooks/check.sh", "exit 0")
    with pytest.raises(ConfigError) as info:
        build(ws, settings(ws, spelled))
    assert "check.sh" in str(info.value)
    assert "inside a writable root" in str(info.value)


async def test_a_hook_under_a_protected_path_is_allowed_and_runs(ws):
    marker = ws.parent / "ran"
    hook = script(ws, ".claude/hooks/check.sh", f"touch {shlex.quote(str(marker))}\nexit 2")
    host = build(ws, settings(ws, '"$CLAUDE_PROJECT_DIR"/.claude/hooks/check.sh'))
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert marker.exists()
    # The tools cannot rewrite it (the fence protects .claude), so no rewrite ever runs.
    rewrite = await host.call("write_file", {"path": str(hook), "content": "#!/bin/sh\nexit 0"})
    assert rewrite.is_error
    assert "exit 2" in hook.read_text()


def test_a_symlink_in_the_workspace_to_a_script_outside_is_refused(ws, outside):
    target = script(outside, "check.sh", "exit 0")
    (ws / "check.sh").symlink_to(target)
    with pytest.raises(ConfigError, match="inside a writable root"):
        build(ws, settings(ws, "./check.sh"))


def test_a_script_outside_that_links_into_the_workspace_is_refused(ws, outside):
    target = script(ws, "real.sh", "exit 0")
    (outside / "check.sh").symlink_to(target)
    with pytest.raises(ConfigError, match=r"real\.sh"):
        build(ws, settings(ws, str(outside / "check.sh")))


def test_an_executable_planted_in_a_path_dir_inside_the_workspace_is_not_used(
    ws, outside, monkeypatch
):
    bin_dir = ws / ".venv" / "bin"
    script(bin_dir, "my-hook-tool", "exit 0")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(ConfigError) as info:
        build(ws, settings(ws, "my-hook-tool --check"))
    assert "'my-hook-tool' was not found on PATH" in str(info.value)
    assert str(bin_dir) not in str(info.value).split("PATH (")[1]  # dropped from the hook's PATH


async def test_a_command_word_shadowed_later_in_the_workspace_still_runs_the_real_one(
    ws, outside, monkeypatch
):
    bin_dir = ws / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    host = build(ws, settings(ws, "true", "true | cat"))
    pwned = ws.parent / "pwned"
    script(bin_dir, "true", f"touch {shlex.quote(str(pwned))}")  # planted after start
    script(bin_dir, "cat", f"touch {shlex.quote(str(pwned))}")
    result = await host.call("echo", {"text": "hi"})
    assert result.text == "hi"
    assert not pwned.exists()


def test_command_substitution_cannot_be_checked_and_is_refused(ws):
    with pytest.raises(ConfigError, match="command or process substitution"):
        build(ws, settings(ws, "sh $(cat which-hook)"))


async def test_a_shell_snippet_of_outside_tools_is_accepted(ws, outside):
    hook = script(outside, "check.sh", "grep -q rm && exit 2; exit 0")
    snippet = f"cat | {shlex.quote(str(hook))} 2>/dev/null >> {shlex.quote(str(ws / 'log'))}"
    host = build(ws, settings(ws, snippet, "jq -r .tool_input.text 2>/dev/null | grep -vq x"))
    assert (await host.call("echo", {"text": "rm it"})).code == "DENIED"


async def test_no_sandbox_plugin_or_danger_full_access_checks_nothing(ws):
    hook = script(ws, "check.sh", "exit 2")
    host = build(ws, settings(ws, str(hook)), sandbox={"mode": "danger-full-access"})
    assert (await host.call("echo", {"text": "hi"})).code == "DENIED"


def test_the_default_writable_roots_include_tmp(ws):
    hook = script(ws.parent, "check.sh", "exit 0")  # under /tmp: writable by default
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "hook_commands": {"settings": [settings(ws, str(hook))]},
            "sandbox": {"private_tmp": False},  # (with a private tmp: not /tmp)
        },
    }
    with pytest.raises(ConfigError, match="inside a writable root"):
        Host(config=config, plugins=[SandboxPlugin(), HookCommandsPlugin()], load_entrypoints=False)


# -- the process tree ----------------------------------------------------------------------------

ESCAPE = """\
import os, sys, time
ready_r, ready_w = os.pipe()


def child():
    for fd in (0, 1, 2):
        os.close(fd)
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
    os.write(ready_w, b"x")
    time.sleep(60)
    os._exit(0)


how = {how!r}
if os.fork() == 0:
    if how == "setsid":
        os.setsid()
    elif how == "new process group":
        os.setpgid(0, 0)
    elif os.fork() != 0:  # double fork: the middle process exits at once
        os._exit(0)
    child()
os.read(ready_r, 1)  # the escapee has written its pid
sys.exit(0)
"""


@pytest.mark.parametrize("how", ["setsid", "double fork", "new process group"])
@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse"])
async def test_no_descendant_of_a_hook_outlives_it(ws, outside, how, event):
    pidfile = outside / "child.pid"
    code = outside / "escape.py"
    code.write_text(ESCAPE.format(pidfile=str(pidfile), how=how))
    host = build(ws, settings(ws, f"{sys.executable} {code}", event=event))
    started = time.monotonic()
    result = await host.call("echo", {"text": "hi"})
    assert time.monotonic() - started < 20
    assert (result.text, result.is_error) == ("hi", False)
    pid = int(pidfile.read_text())
    assert gone(pid), f"the {how} child {pid} outlived its hook"


async def test_the_timeout_kills_a_detached_child_holding_the_pipes(ws, outside):
    pidfile = outside / "child.pid"
    hook = script(
        outside, "slow.sh", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' &\nwait\nsleep 60"
    )
    host = build(ws, settings(ws, str(hook)))
    with_timeout = json.loads((ws / "hooks.json").read_text())
    with_timeout["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"] = 0.5
    (ws / "hooks.json").write_text(json.dumps(with_timeout))
    host = build(ws, "hooks.json")
    started = time.monotonic()
    result = await host.call("echo", {"text": "hi"})
    assert time.monotonic() - started < 10
    assert result.code == "DENIED"
    assert "timed out after 0.5 s" in result.text
    assert gone(int(pidfile.read_text()))


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_past_the_cap_is_a_failure_and_kills_the_hook(ws, outside, stream):
    code = outside / "loud.py"
    code.write_text(
        "import os, sys\n"
        f"open({str(outside / 'loud.pid')!r}, 'w').write(str(os.getpid()))\n"
        f"out = sys.{stream}.buffer\n"
        "while True:\n    out.write(b'x' * 65536)\n"
    )
    host = build(ws, settings(ws, f"{sys.executable} {code}"), max_output_bytes=100_000)
    started = time.monotonic()
    result = await host.call("echo", {"text": "hi"})
    assert time.monotonic() - started < 20
    assert result.code == "DENIED"
    assert f"printed more than 100000 bytes on {stream} and was killed" in result.text
    assert "max_output_bytes" in result.text
    assert gone(int((outside / "loud.pid").read_text()))


async def test_output_under_the_cap_is_read_whole(ws, outside):
    code = outside / "quiet.py"
    reason = "r" * 90_000
    code.write_text(f"import sys\nsys.stderr.write({reason!r})\nsys.exit(2)\n")
    host = build(ws, settings(ws, f"{sys.executable} {code}"), max_output_bytes=100_000)
    assert (await host.call("echo", {"text": "hi"})).text == f"Error: {reason}"


def test_the_output_cap_defaults_to_one_megabyte_and_must_be_positive(ws, outside):
    hook = script(outside, "ok.sh", "exit 0")
    host = build(ws, settings(ws, str(hook)))
    assert host.config_for("hook_commands").max_output_bytes == 1_000_000
    with pytest.raises(ConfigError, match="max_output_bytes"):
        build(ws, settings(ws, str(hook)), max_output_bytes=0)


async def test_a_hook_that_cannot_exec_fails_closed(ws, outside):
    hook = script(outside, "gone.sh", "exit 0")
    host = build(ws, settings(ws, str(hook)))
    hook.unlink()
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert "could not start" in result.text
    assert "FileNotFoundError" in result.text


# -- dry runs ------------------------------------------------------------------------------------


class Denier:
    name = "denier"

    @hookimpl
    def dsh_tool_pre_execute(self, execution):
        return Deny("denied downstream")


async def test_a_dry_run_runs_no_hook_and_says_which_would_run(ws, outside):
    marker = outside / "ran"
    hook = script(outside, "touch.sh", f"touch {shlex.quote(str(marker))}")
    host = build(ws, settings(ws, str(hook)))
    events = []
    call = ToolExecutionInput(call_id="c1", name="echo", arguments={"text": "hi"})
    assert await host.registry.preview(call, trace=events.append) is None  # let through
    assert not marker.exists()
    said = [
        e.outcome
        for e in events
        if (e.plugin, e.stage) == ("hook_commands", "dsh_tool_pre_execute")
    ]
    assert said == [f"allow: would run hook {str(hook)!r} from hooks.json (not run: dry run)"]
    result = await host.call("echo", {"text": "hi"})  # a real call runs it
    assert result.text == "hi"
    assert marker.exists()


async def test_a_dry_run_keeps_a_downstream_denial_and_its_attribution(ws, outside):
    marker = outside / "ran"
    hook = script(outside, "touch.sh", f"touch {shlex.quote(str(marker))}")
    host = build(ws, settings(ws, str(hook)), plugins=(Denier(),))
    call = ToolExecutionInput(call_id="c1", name="echo", arguments={"text": "hi"})
    result = await host.registry.preview(call)
    assert result is not None
    assert (result.code, result.decided_by) == ("DENIED", "denier")
    assert not marker.exists()


# -- hostile input -------------------------------------------------------------------------------


async def test_a_cancelled_call_kills_the_hook_tree(ws, outside):
    pidfile, fifo = outside / "child.pid", outside / "started"
    os.mkfifo(fifo)
    hook = script(
        outside,
        "slow.sh",
        f"setsid sh -c 'echo $$ > {pidfile}; echo go > {fifo}; exec sleep 60' &\nwait",
    )
    host = build(ws, settings(ws, str(hook)))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def cancel_once_started() -> None:
                await trio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)
                nursery.cancel_scope.cancel()

            nursery.start_soon(cancel_once_started)
            await host.call("echo", {"text": "hi"})
    assert gone(int(pidfile.read_text()))


@pytest.mark.parametrize(
    "text",
    [
        "\ud800 lone surrogate",
        "\x1b[2J\x1b[H\r\x00 control characters",
        "x" * 5_000_000,  # larger than any pipe buffer
    ],
    ids=["surrogate", "controls", "huge"],
)
async def test_hostile_arguments_reach_the_hook_exactly(ws, outside, text):
    out = outside / "seen.json"
    code = outside / "seen.py"
    code.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        f"open({str(out)!r}, 'w').write(json.dumps(data['tool_input']['text']))\n"
    )
    ignores = script(outside, "ignores.sh", "exit 0")  # never reads its stdin
    host = build(ws, settings(ws, str(ignores), f"{sys.executable} {code}"))
    result = await host.call("echo", {"text": text})
    assert result.is_error is False
    assert json.loads(out.read_text()) == text


async def test_a_replaced_workspace_runs_no_hook(ws, outside):
    pwned = outside / "pwned"
    script(ws, ".claude/hooks/check.sh", "exit 0")
    host = build(ws, settings(ws, '"$CLAUDE_PROJECT_DIR"/.claude/hooks/check.sh'))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"  # control
    fake = outside / "fake"
    script(fake, ".claude/hooks/check.sh", f"touch {shlex.quote(str(pwned))}")
    ws.rename(outside / "away")
    ws.symlink_to(fake)
    result = await host.call("echo", {"text": "hi"})
    assert result.code == "DENIED"
    assert "was not run" in result.text
    assert "was replaced after the host started" in result.text
    assert not pwned.exists()


def test_a_settings_file_a_tool_could_rewrite_is_warned_about(ws, outside, caplog):
    hook = script(outside, "ok.sh", "exit 0")
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        build(ws, settings(ws, str(hook)), sandbox={"protect_config": False})
    assert "settings file 'hooks.json' lies in a writable root" in caplog.text
    caplog.clear()
    (ws / ".claude").mkdir()
    (ws / "hooks.json").rename(ws / ".claude" / "settings.json")
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        build(ws, ".claude/settings.json")
    others = [r.getMessage() for r in caplog.records]  # but what the environment drops
    assert [m for m in others if "writable root" in m and "environment entries" not in m] == []


@pytest.mark.parametrize(
    ("command", "code"),
    [("exit 2", "DENIED"), ("echo 'a\\tb'; exit 0", None), ("true", None), (": ok", None)],
)
async def test_shell_builtins_run_through_the_shell(ws, command, code):
    host = build(ws, settings(ws, command))
    assert (await host.call("echo", {"text": "hi"})).code == code


def test_a_plain_command_runs_directly_with_absolute_paths(ws, outside):
    script(ws, ".claude/hooks/check.py", "")
    exposure = Exposure((ws,), (ws / ".claude",))
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    launch = plan_launch(
        "python3 .claude/hooks/check.py --strict", cwd=str(ws), env=env, exposure=exposure,
        shell="/bin/sh",
    )  # fmt: skip
    assert launch.shell is False
    assert os.path.isabs(launch.argv[0])
    assert launch.argv[1:] == (str(ws / ".claude/hooks/check.py"), "--strict")
    snippet = plan_launch(
        "cat | python3 .claude/hooks/check.py", cwd=str(ws), env=env, exposure=exposure,
        shell="/bin/sh",
    )  # fmt: skip
    assert snippet.argv == ("/bin/sh", "-c", "cat | python3 .claude/hooks/check.py")
    assert str(ws / ".claude/hooks/check.py") in snippet.checked


def test_safe_path_drops_relative_and_exposed_entries(ws, outside):
    exposure = Exposure((ws,), (ws / ".claude",))
    path = f"{ws}/bin:.::bin:{outside}:{ws}/.claude/bin:/usr/bin"
    assert safe_path_env(path, exposure) == f"{outside}:{ws}/.claude/bin:/usr/bin"


def test_code_path_variables_keep_no_entry_a_tool_could_write(ws, outside):
    exposure = Exposure((ws,), (ws / ".claude",))
    (outside / "in-ws").symlink_to(ws)  # a name outside whose directory really is the workspace
    env = {
        "PATH": "/usr/bin",
        "PYTHONPATH": f"{ws}/lib:{outside}/lib::lib:{ws}/.claude/lib",
        "LD_LIBRARY_PATH": f"{outside}/in-ws/lib:/usr/lib",
        "LD_PRELOAD": f"{outside}/ok.so {ws}/evil.so:/usr/lib/x.so",
        "PYTHONUSERBASE": f"{ws}/.local",
        "BASH_ENV": f"{outside}/rc",
        "HOME": str(ws),  # not a code path: left alone
    }
    unconfined = unconfined_environment(env, exposure)
    safe, dropped = unconfined.env, unconfined.dropped
    assert safe == {
        "PATH": "/usr/bin",
        "PYTHONPATH": f"{outside}/lib:{ws}/.claude/lib",
        "LD_LIBRARY_PATH": "/usr/lib",
        "LD_PRELOAD": f"{outside}/ok.so /usr/lib/x.so",
        "BASH_ENV": f"{outside}/rc",
        "HOME": str(ws),
    }
    assert dropped["PYTHONPATH"] == (f"{ws}/lib", "(empty)", "lib")
    assert dropped["PYTHONUSERBASE"] == (f"{ws}/.local",)
    assert unconfined.home_exposed  # kept, but warned of at start


def test_options_that_load_code_are_dropped_and_every_other_variable_is_swept(ws, outside):
    """The named variables are a floor: options that load code go whenever set, and any other
    variable with a path token into a writable root (or ``./``, ``../``) goes too."""
    exposure = Exposure((ws,), (ws / ".claude",))
    options = {
        "NODE_OPTIONS": "--require ./pre.js",  # resolved against the cwd: the workspace
        "PERL5OPT": "-MEvil",
        "RUBYOPT": "-revil",
        "JAVA_TOOL_OPTIONS": "-javaagent:agent.jar",
        "JDK_JAVA_OPTIONS": "-Dx=1",
        "_JAVA_OPTIONS": "-Dy=2",
    }
    swept = {
        "GIT_CONFIG_GLOBAL": f"{ws}/gitconfig",
        "GIT_EXEC_PATH": f"{ws}/.claude/../gitexec",  # normalised: in the workspace
        "GIT_SSH_COMMAND": f"ssh -F {ws}/ssh_config",
        "XDG_CONFIG_HOME": f"{outside}/in-ws",  # a symlink outside, to the workspace
        "ZDOTDIR": str(ws),
        "GCONV_PATH": f"/usr/lib:{ws}/gconv",
        "EDITOR": "../../bin/editor",
        "DSH_ANYTHING": f"key={ws}/x",
        "PYTHONPLATLIBDIR": "./lib",
        "PYTHONHOME": f"/usr:{ws}/exec",  # prefix:exec_prefix, each checked
    }
    kept = {
        "PATH": "/usr/bin",
        "DSH_PROJECT_DIR": str(ws),
        "CLAUDE_PROJECT_DIR": str(ws),
        "PWD": str(ws),
        "OLDPWD": f"{ws}/sub",
        "HOME": str(outside),
        "LANG": "C.UTF-8",
        "GIT_DIR": f"{outside}/repo.git",
        "XDG_DATA_HOME": f"{ws}/.claude/data",  # under a protected path
        "TERM": "xterm",
    }
    (outside / "in-ws").symlink_to(ws)
    unconfined = unconfined_environment({**options, **swept, **kept}, exposure)
    assert unconfined.env == kept
    assert set(unconfined.dropped) == set(options) | set(swept)
    assert unconfined.dropped["GIT_SSH_COMMAND"] == (f"{ws}/ssh_config",)
    assert unconfined.dropped["GCONV_PATH"] == (f"{ws}/gconv",)
    assert not unconfined.home_exposed
    unconfined = unconfined_environment({"PYTHONHOME": "/usr", "PATH": "/usr/bin"}, exposure)
    assert unconfined.env == {"PYTHONHOME": "/usr", "PATH": "/usr/bin"}


async def test_a_hook_inherits_no_way_back_into_the_writable_roots(ws, outside, monkeypatch):
    seen = outside / "seen"
    hook = script(outside, "env.sh", f'echo "$PYTHONPATH|$LD_PRELOAD|$NODE_PATH" > {seen}')
    monkeypatch.setenv("PYTHONPATH", f"{ws}/lib:{outside}/lib")
    monkeypatch.setenv("LD_PRELOAD", f"{ws}/evil.so")
    monkeypatch.setenv("NODE_PATH", f"{ws}/node_modules")
    host = build(ws, settings(ws, str(hook)))
    assert (await host.call("echo", {"text": "hi"})).text == "hi"
    assert seen.read_text() == f"{outside}/lib||\n"


async def test_a_hook_inherits_no_option_or_file_that_leads_into_the_workspace(
    ws, outside, monkeypatch, caplog
):
    """Beyond the search paths: ``NODE_OPTIONS`` (``--require``), ``GIT_CONFIG_GLOBAL`` in
    the workspace... are not inherited, and the host says so once, at start."""
    seen = outside / "seen"
    hook = script(outside, "env.sh", f'echo "$NODE_OPTIONS|$GIT_CONFIG_GLOBAL|$LANG" > {seen}')
    monkeypatch.setenv("NODE_OPTIONS", "--require ./pre.js")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", f"{ws}/gitconfig")
    monkeypatch.setenv("LANG", "C.UTF-8")  # the control: the rest is inherited
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        host = build(ws, settings(ws, str(hook)))
    assert "hooks run unconfined without these environment entries" in caplog.text
    assert f"GIT_CONFIG_GLOBAL: {ws}/gitconfig" in caplog.text
    assert "NODE_OPTIONS: --require ./pre.js" in caplog.text
    assert (await host.call("echo", {"text": "hi"})).text == "hi"
    assert seen.read_text() == "||C.UTF-8\n"


def test_a_home_in_a_writable_root_is_warned_about(ws, outside, monkeypatch, caplog):
    hook = script(outside, "ok.sh", "exit 0")
    monkeypatch.setenv("HOME", str(ws / "home"))
    with caplog.at_level(logging.WARNING, "dsh_plugins_builtin.hook_commands"):
        build(ws, settings(ws, str(hook)))
    assert f"HOME ({ws / 'home'}) lies in a writable root of the sandbox" in caplog.text


async def test_the_runner_starts_without_the_hosts_environment(ws, outside, monkeypatch):
    """The runner, restarted whenever it went away, runs unconfined: started with the host's
    environment, an ``LD_PRELOAD`` into the workspace would load a planted library into it.
    It gets ``PATH`` only (as does each reaper it forks: the hook's parent)."""
    from dsh_plugins_builtin._hooks._process import HookRunner

    monkeypatch.setenv("DSH_TEST_RUNNER_MARKER", f"{ws}/libx.so")
    runner = HookRunner(sys.executable)
    runner.start()
    try:
        run = await runner.run(
            ["/bin/sh", "-c", 'tr "\\0" "\\n" < /proc/$PPID/environ'], stdin=b"",
            cwd=str(outside), env={"PATH": "/usr/bin:/bin"}, timeout=60, abort=AbortSignal(),
            max_output_bytes=100_000,
        )  # fmt: skip
    finally:
        runner.close()
    assert run.outcome == "exited", run
    assert run.stdout.decode().splitlines() == [f"PATH={os.defpath}"]


async def test_hooks_still_run_after_the_runner_went_away(ws, outside):
    hook = script(outside, "block.sh", "exit 2")
    host = build(ws, settings(ws, str(hook)))
    assert (await host.call("echo", {"text": "hi"})).code == "DENIED"
    host.pm.get_plugin("hook_commands").runner.close()  # as if the runner had died
    assert (await host.call("echo", {"text": "hi"})).code == "DENIED"


@pytest.mark.soak
async def test_parallel_calls_share_the_runner_and_leak_no_descriptor(ws, outside):
    count = soak_size(24, 400)
    for i in range(count):
        (ws / f"f{i}.txt").write_text(f"line {i}\n")
    guard = script(outside, "guard.sh", "grep -q f3.txt && { echo no f3 >&2; exit 2; }; exit 0")
    host = build(ws, settings(ws, str(guard), event="PreToolUse"), max_output_bytes=10_000)
    calls = [
        ToolExecutionInput(call_id=f"c{i}", name="read_file", arguments={"path": f"f{i}.txt"})
        for i in range(count)
    ]
    await host.registry.execute_batch(calls[:2])  # warm up
    before = len(os.listdir("/proc/self/fd"))
    results = await host.registry.execute_batch(calls, max_parallel=8)
    assert [r.code for r in results] == [("DENIED" if i == 3 else None) for i in range(count)]
    assert results[5].text == "     1\tline 5"
    assert len(os.listdir("/proc/self/fd")) == before
