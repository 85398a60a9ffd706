"""Mounted stdio servers run confined by default (issue 24 row 1).

The attack of the issue, with the guide's own example: the agent plants a nested repository
whose ``core.fsmonitor`` names a command, then has ``mcp-server-git`` run ``git status`` there.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin
from dsh_plugins_builtin.sandbox import SandboxPlugin

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture
def outside():
    """A directory outside the workspace and outside /tmp (a stand-in for the home directory)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-mcp-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


def _plant(ws: Path, outside: Path) -> Path:
    """The agent's work: a nested repository whose fsmonitor writes outside and inside."""
    for args in (["init", "-q", str(ws)], ["init", "-q", str(ws / "sub")]):
        subprocess.run(["git", *args], check=True)
    (ws / "sub" / "a.txt").write_text("hello")
    hook = ws / "sub" / "monitor.sh"
    hook.write_text(
        "#!/bin/sh\n"
        f"echo pwned > {outside}/bashrc\n"
        f"echo pwned > {ws}/pwned\n"
        f"echo ran > {ws}/scratch/ran\n"
    )
    hook.chmod(0o755)
    subprocess.run(
        ["git", "-C", str(ws / "sub"), "config", "core.fsmonitor", str(hook)], check=True
    )
    (ws / "scratch").mkdir()
    return ws / "sub"


def _git_status(ws: Path, server: dict, backend: str | None = None, sandbox=None) -> str:
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": sandbox or {},
            "mcp": {
                "servers": {
                    "git": {
                        "command": sys.executable,
                        "args": ["-m", "mcp_server_git", "--repository", str(ws)],
                        **server,
                    }
                }
            },
        },
    }
    host = Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
    try:
        assert plugin.status()["git"]["status"] == "running", plugin.status()
        if backend is not None:
            assert plugin.status()["git"]["confined"] == backend
        result = trio.run(host.call, "mcp__git__git_status", {"repo_path": str(ws / "sub")})
        return result.text
    finally:
        plugin.close()


def test_the_control_unconfined_the_planted_command_writes_outside(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    _git_status(ws, {"sandbox": False})
    assert (outside / "bashrc").exists()  # the attack is real: this is what confinement stops


def test_confined_with_no_writable_roots_the_planted_command_writes_nothing(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    text = _git_status(ws, {})
    assert "a.txt" in text  # the server worked
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()
    assert not (ws / "scratch" / "ran").exists()


def test_confined_the_planted_command_runs_but_writes_only_its_writable_roots(tmp_path, outside):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    _git_status(ws, {"writable_roots": ["scratch"]})
    assert (ws / "scratch" / "ran").read_text() == "ran\n"  # it ran, inside the sandbox
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()


@pytest.fixture
def landlock_only(monkeypatch):
    """Bubblewrap unusable: a confined server must run under the sandbox's Landlock backend."""
    from dsh_plugins_builtin._mcp import _confine
    from dsh_plugins_builtin._sandbox._ruleset import landlock_abi

    if landlock_abi() < 4:
        pytest.skip("needs Landlock ABI 4 or later")
    monkeypatch.setattr(_confine, "resolve_bwrap", lambda policy: (None, "disabled by the test"))


def test_under_landlock_the_planted_command_writes_nothing(tmp_path, outside, landlock_only):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    text = _git_status(ws, {}, backend="landlock")
    assert "a.txt" in text  # the server worked
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()
    assert not (ws / "scratch" / "ran").exists()


def test_under_landlock_a_writable_root_with_protected_paths_is_refused(
    tmp_path, outside, landlock_only
):
    """Landlock cannot keep ``scratch/.git`` read-only inside the writable ``scratch``: the
    server is refused (never started unconfined), as the sandbox refuses such a command."""
    ws = tmp_path / "ws"
    _plant(ws, outside)
    plugin = McpPlugin()
    server = {"command": sys.executable, "args": ["-m", "mcp_server_git"]}
    config = {"mcp": {"servers": {"git": {**server, "writable_roots": ["scratch"]}}}}
    Host(
        {"host": {"workspace": str(ws)}, "plugin": config},
        plugins=[SandboxPlugin(), plugin],
        load_entrypoints=False,
    )
    state = plugin.status()["git"]
    plugin.close()
    assert state["status"] == "failed"
    assert "nor Landlock" in state["error"]
    assert "[plugin.sandbox] protected = []" in state["error"]


def test_under_landlock_the_planted_command_writes_only_its_writable_roots(
    tmp_path, outside, landlock_only
):
    ws = tmp_path / "ws"
    _plant(ws, outside)
    writable = {"writable_roots": ["scratch"]}
    _git_status(ws, writable, backend="landlock", sandbox={"protected": []})
    assert (ws / "scratch" / "ran").read_text() == "ran\n"  # it ran, inside the sandbox
    assert not (outside / "bashrc").exists()
    assert not (ws / "pwned").exists()


def test_without_bubblewrap_or_landlock_a_confined_server_is_refused(tmp_path, monkeypatch):
    from dsh_plugins_builtin._mcp import _confine
    from dsh_plugins_builtin._sandbox._landlock import LandlockUnavailable

    def unavailable(*args):
        raise LandlockUnavailable("no Landlock on this kernel (the test says)")

    monkeypatch.setattr(_confine, "resolve_bwrap", lambda policy: (None, "not installed"))
    monkeypatch.setattr(_confine, "landlock_prepared", unavailable)
    plugin = McpPlugin()
    server = {"command": sys.executable, "args": ["-m", "mcp_server_git"]}
    Host(
        {"host": {"workspace": str(tmp_path)}, "plugin": {"mcp": {"servers": {"git": server}}}},
        plugins=[SandboxPlugin(), plugin],
        load_entrypoints=False,
    )
    state = plugin.status()["git"]
    plugin.close()
    assert state["status"] == "failed"  # never started unconfined
    assert "not installed" in state["error"]
    assert "no Landlock on this kernel" in state["error"]
    assert "sandbox = false" in state["error"]


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_confined_server_cannot_reach_a_host_socket_beside_it(
    tmp_path, outside, backend, request
):
    """Issue 22 row 1 for mounted servers: a host daemon's socket in the workspace is covered
    for the server's command as for ``bash``'s; unconfined, the same hook reaches it."""
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    ws = tmp_path / "ws"
    _plant(ws, outside)
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    daemon.bind(str(ws / "daemon.sock"))
    daemon.listen(8)
    probe = (  # (refused at socket() since a server makes no Unix socket, but for this:)
        "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n"
        f"    s.connect({str(ws / 'daemon.sock')!r}); print('CONNECTED')\n"
        "except OSError as e:\n    print('refused', e)\n"
    )
    (ws / "probe.py").write_text(probe)
    (ws / "sub" / "monitor.sh").write_text(
        f"#!/bin/sh\n{sys.executable} {ws / 'probe.py'} > {ws / 'scratch' / 'ran'}\n"
    )
    writable = {"writable_roots": ["scratch"], "unix_sockets": True}  # covered, not refused
    sandbox = {"protected": []} if backend == "landlock" else None
    try:
        _git_status(ws, {"sandbox": False})
        assert (ws / "scratch" / "ran").read_text() == "CONNECTED\n"  # the control
        _git_status(ws, writable, backend=backend, sandbox=sandbox)
        assert (ws / "scratch" / "ran").read_text().startswith("refused [Errno 111]")
    finally:
        daemon.close()


def _recording_server(tmp_path, backend, record, sandbox, env=None):
    """A confined ``mcp_server_git`` whose first process runs *record* (in a workspace with a
    writable ``scratch``) before it starts the server; its host's mcp plugin, started."""
    ws = tmp_path / "ws"
    (ws / "scratch").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    server = {
        "command": "sh",
        "args": ["-c", f'{record}; exec "$0" "$@"', sys.executable, "-m", "mcp_server_git"],
        "writable_roots": ["scratch"],
        "cwd": str(ws),
        "env": env or {},
    }
    sandbox = {"backend": backend, **sandbox}
    if backend == "landlock":
        sandbox |= {"protected": [], "protect_install": False, "protect_config": False}
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": sandbox, "mcp": {"servers": {"git": server}}},
    }
    Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
    return ws, plugin


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_confined_server_runs_under_the_sandboxs_limits(tmp_path, backend):
    # A mounted server ran with no rlimit and unsized tmpfs: what a command may not use, a
    # hostile server could. Its first process now sets [plugin.sandbox.limits] before it starts.
    record = "cat /proc/self/limits > scratch/limits; df -B1 --output=size /dev/shm > scratch/shm"
    limits = {"limits": {"memory_mib": 900, "file_size_mib": 7}}
    ws, plugin = _recording_server(tmp_path, backend, record, limits)
    try:
        status = plugin.status()["git"]
        assert status["status"] == "running", status
        limits_seen = (ws / "scratch" / "limits").read_text()
        assert f"Max address space         {900 << 20}" in limits_seen, limits_seen
        assert f"Max file size             {7 << 20}" in limits_seen, limits_seen
        if backend == "bwrap":  # (Landlock refuses writes to /dev/shm altogether)
            assert int((ws / "scratch" / "shm").read_text().split()[-1]) <= 900 << 20
    finally:
        plugin.close()


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_confined_server_gets_the_environment_a_command_gets(tmp_path, backend, monkeypatch):
    # A confined server got the host's whole environment minus secret-looking names and
    # values, where a command gets the [plugin.sandbox.env] allowlist: a password in a plainly
    # named variable reached a server (and any model it runs commands for).
    monkeypatch.setenv("DEPLOY_PASS", "hunter2")
    monkeypatch.setenv("MY_TOOL_HOME", "wanted")
    env_table = {"env": {"include": ["MY_TOOL_HOME"]}}
    ws, plugin = _recording_server(
        tmp_path, backend, "env > scratch/env", env_table, env={"SERVER_OWN": "given"}
    )
    try:
        assert plugin.status()["git"]["status"] == "running", plugin.status()
        text = (ws / "scratch" / "env").read_text()
        names = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        assert "DEPLOY_PASS" not in names  # not a core name: never inherited
        assert "hunter2" not in text
        assert names.get("SERVER_OWN") == "given"  # the server's own env table
        assert names.get("MY_TOOL_HOME") == "wanted"  # [plugin.sandbox.env] include
        assert "PATH" in names
    finally:
        plugin.close()


RAW = str(Path(__file__).with_name("raw_mcp_server.py"))
# The raw server needs only the standard library: the system's interpreter runs it where there
# is one, since dsh's may lie in a home the sandbox hides from another user (/root's pyenv).
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _moved_dir(ws: Path) -> Path:
    """``mv secrets old; mkdir secrets``: the mask goes with the renamed directory."""
    (ws / "secrets").rename(ws / "old")
    (ws / "secrets").mkdir()
    return ws / "secrets" / "key"


def _moved_above(ws: Path) -> Path:
    """A directory above the hidden one renamed, and the path made again."""
    (ws / "conf").rename(ws / "conf-old")
    (ws / "conf" / "keys").mkdir(parents=True)
    return ws / "conf" / "keys" / "key"


def _replaced_file(ws: Path) -> Path:
    """A hidden file rewritten the way editors and credential tools do: a new file renamed
    over it (the mask on the old file is detached)."""
    (ws / ".env.new").write_text("old")
    (ws / ".env.new").replace(ws / ".env")
    return ws / ".env"


def _made_later(ws: Path) -> Path:
    """A ``deny_read`` entry that did not exist when the server started (``aws configure``)."""
    (ws / "later").mkdir()
    return ws / "later" / "key"


MOVES = {
    "the hidden directory renamed": _moved_dir,
    "a directory above it renamed": _moved_above,
    "the hidden file replaced": _replaced_file,
    "the hidden path made after the start": _made_later,
}


def _hidden_workspace(tmp_path: Path) -> tuple[Path, list[str]]:
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key").write_text("SECRET-1")
    (ws / "conf" / "keys").mkdir(parents=True)
    (ws / "conf" / "keys" / "key").write_text("SECRET-1")
    (ws / ".env").write_text("SECRET-1")
    (ws / "plain.txt").write_text("in view")
    deny = [str(ws / name) for name in ("secrets", "conf/keys", ".env", "later")]
    return ws, deny


def _cat_host(
    ws: Path, deny: list[str], backend: str, *args: str, env: dict[str, str] | None = None
) -> tuple[Host, McpPlugin]:
    sandbox: dict = {"deny_read": deny, "backend": backend}
    if backend == "landlock":
        sandbox |= {"protected": [], "protect_install": False, "protect_config": False}
    plugin = McpPlugin()
    server = {"command": PYTHON, "args": [RAW, "cat", *args], "env": env or {}}
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": sandbox, "mcp": {"servers": {"s": server}}},
    }
    host = Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
    assert plugin.status()["s"]["status"] == "running", plugin.status()
    return host, plugin


def _cat(host: Host, path: Path):
    return trio.run(host.call, "mcp__s__echo", {"text": str(path)})


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_host_socket_that_starts_listening_after_the_server_is_out_of_its_reach(
    tmp_path, backend, request
):
    """Each command's sandbox covers the host sockets listening when it starts; a server's
    sandbox runs on, so a daemon started later (Docker Desktop's socket in the home directory)
    was in its view. A confined server makes no Unix socket now, unless its table says
    ``unix_sockets = true``: the second server shows that is what it takes."""
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    ws = tmp_path / "ws"
    ws.mkdir()
    sandbox: dict = {"backend": backend}
    if backend == "landlock":
        sandbox |= {"protected": [], "protect_install": False, "protect_config": False}
    daemons: list[socket.socket] = []
    try:
        for allowed, expected in ((False, "refused [Errno 13] pair x"), (True, "CONNECTED pair x")):
            plugin = McpPlugin()
            server = {"command": PYTHON, "args": [RAW, "connect"], "unix_sockets": allowed}
            config = {
                "host": {"workspace": str(ws)},
                "plugin": {"sandbox": sandbox, "mcp": {"servers": {"s": server}}},
            }
            host = Host(config, plugins=[SandboxPlugin(), plugin], load_entrypoints=False)
            try:
                assert plugin.status()["s"]["confined"] == backend, plugin.status()
                shown = "; Unix sockets allowed" if allowed else ""
                assert f"confined ({backend}{shown})" in plugin.dsh_plugin_status()[0]
                late = ws / f"late-{allowed}.sock"  # listening after the server started
                daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                daemons.append(daemon)
                daemon.bind(str(late))
                daemon.listen(8)
                assert _cat(host, late).text == expected
            finally:
                plugin.close()
    finally:
        for daemon in daemons:
            daemon.close()


@pytest.mark.parametrize("move", list(MOVES))
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_confined_server_never_reads_what_the_host_put_where_a_hidden_path_was(
    tmp_path, backend, move, request
):
    """A server lives long, and its sandbox hides paths as they were when it started. When
    the host renames what is hidden (or a directory above it), rewrites a hidden file by
    renaming a new one over it, or makes a ``deny_read`` entry that was missing, the mask no
    longer covers the path: the server's next call would read the new secret there. dsh
    checks before each call and restarts the server in a fresh sandbox, transparently."""
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, backend)
    try:
        path = MOVES[move](ws)
        path.write_text("SECRET-2")
        first, second = _cat(host, path), _cat(host, path)
        assert "SECRET" not in first.text, first
        assert not first.is_error, first  # restarted before the call: it went to the new one
        assert "SECRET" not in second.text, second
        status = plugin.status()["s"]
        assert status["status"] == "running"
        assert len(status["restarts"]) == 1, status
        [line] = [line for line in plugin.dsh_plugin_status() if line.startswith("server s:")]
        assert "restarted 1 time (last: " in line, line
        assert _cat(host, ws / "plain.txt").text == "in view"
    finally:
        plugin.close()


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_file_a_deny_read_glob_covers_made_after_the_start_is_never_read(
    tmp_path, backend, request, monkeypatch
):
    # A command's sandbox matches the deny_read globs again when it starts; a server's was
    # matched once, so a key made later where a glob covers it was in its view.
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    from dsh_plugins_builtin._mcp._watch import Hiding

    walked_in: list[threading.Thread] = []
    real = Hiding.new_match

    def new_match(self: Hiding) -> str | None:
        walked_in.append(threading.current_thread())
        return real(self)

    monkeypatch.setattr(Hiding, "new_match", new_match)
    ws = tmp_path / "ws"
    (ws / "keys").mkdir(parents=True)
    (ws / "keys" / "old.pem").write_text("SECRET-1")
    (ws / "plain.txt").write_text("in view")
    host, plugin = _cat_host(ws, [str(ws / "keys" / "*.pem")], backend)
    try:
        assert _cat(host, ws / "plain.txt").text == "in view"
        assert "SECRET" not in _cat(host, ws / "keys" / "old.pem").text  # covered at the start
        (ws / "keys" / "new.pem").write_text("SECRET-2")  # `openssl genrsa`, say
        assert "SECRET-2" not in _cat(host, ws / "keys" / "new.pem").text
        (restart,) = plugin.status()["s"]["restarts"]
        assert "new.pem, covered by a deny_read glob, was made since it started" in restart
        assert _cat(host, ws / "plain.txt").text == "in view"  # no restart for nothing new
        assert len(plugin.status()["s"]["restarts"]) == 1
        # the walks (before each call and after its answer) block: never on the event loop
        assert len(walked_in) >= 8
        assert threading.main_thread() not in walked_in
    finally:
        plugin.close()


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_server_is_stopped_when_a_hidden_path_moves_with_no_call_under_way(
    tmp_path, backend, request
):
    """A server reads when it likes, not only during a call (a background task, a poll of
    its own): checking at calls left it the time until the next one with the moved path in
    view. The watch's sentinel sees the move itself, and the server is killed at once (no
    grace) and started again in a new sandbox, with no call made."""
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    from dsh_plugins_builtin._mcp import _stdio
    from dsh_plugins_builtin._mcp._watch import first_child

    # A grace of an hour, and a server that outlives its stdin and SIGTERM: only a kill at
    # once ends it within the wait below.
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setattr(_stdio, "GRACE", 3600.0)
    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, backend, env={"RAW_LINGER": "1"})
    link = plugin._mount.links["s"]
    try:
        old = link._pid
        ends = [os.pidfd_open(pid) for pid in (old, first_child(old))]  # the sandbox, the server
        try:
            _moved_dir(ws)
            for pidfd in ends:  # (readable once the process has ended: an event, not a timer)
                assert select.select([pidfd], [], [], 30)[0], "it still runs after the move"
        finally:
            for pidfd in ends:
                os.close(pidfd)
        assert link.restarts == [
            "a path its sandbox hides was renamed, replaced or removed on the host"
        ]
        assert _cat(host, ws / "plain.txt").text == "in view"  # (after the restart under way)
        assert link._pid != old
        assert plugin.status()["s"]["status"] == "running"
    finally:
        monkeypatch.setattr(_stdio, "GRACE", 0.2)  # the new one ends with the host as usual
        plugin.close()
    sentinels = [t for t in threading.enumerate() if t.name.startswith("dsh-mcp-watch-")]
    for thread in sentinels:
        thread.join(10)
    assert not [thread for thread in sentinels if thread.is_alive()], (
        "a sentinel outlived its watch"
    )


def _call_while_moving(host: Host, ws: Path, call: Any) -> Any:
    """*call* (a tool call whose server first reads the FIFO ``ws/go``), with the hidden
    directory moved and its new key written while the server waits on the FIFO."""
    fifo = ws / "go"

    def release() -> None:
        file = open(fifo, "w")  # noqa: SIM115  # opens once the server has the call and reads
        try:
            (_moved_dir(ws)).write_text("SECRET-2")
            file.write("go")
            file.close()
        except BrokenPipeError:  # the watch's sentinel saw the move and killed it first
            with contextlib.suppress(BrokenPipeError):
                file.close()

    async def main() -> Any:
        done = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: call(done))
            await trio.to_thread.run_sync(release)
        return done[0]

    os.mkfifo(fifo)
    return main


@pytest.mark.parametrize("sentinel", ["sentinel", "no sentinel"])
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_an_answer_read_after_the_hidden_path_moved_is_withheld(
    tmp_path, backend, request, sentinel
):
    """The host moves a hidden directory while the server handles a call: what it answers
    may hold the new secret, so the answer is withheld, with a code saying why, and the
    server is restarted for the next call. With the watch's sentinel the server is usually
    killed at the move itself (the call is cut off, with the same code); without it (the
    check after the answer alone, as where the sentinel is slower) the answer is withheld."""
    if backend == "landlock":
        request.getfixturevalue("landlock_only")
    if sentinel == "no sentinel":
        from dsh_plugins_builtin._mcp._watch import Watch

        request.getfixturevalue("monkeypatch").setattr(Watch, "sentinel", lambda *_: None)
    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, backend)
    text = f"{ws / 'go'}\n{ws / 'secrets' / 'key'}"

    async def call(done: list[Any]) -> None:
        done.append(await host.call("mcp__s__echo", {"text": text}))

    try:
        result = trio.run(_call_while_moving(host, ws, call))
        assert result.is_error, result
        assert result.error.code == "MCP_SERVER_RESTARTED", result
        assert "SECRET" not in result.text
        assert "Call the tool again" in result.text
        if sentinel == "no sentinel":
            assert "so its answer was withheld" in result.text, result.text
        after = _cat(host, ws / "secrets" / "key")
        assert "SECRET" not in after.text, after
        assert plugin.status()["s"]["status"] == "running"
    finally:
        plugin.close()


def test_under_open_host_a_moved_hidden_path_restarts_the_server_in_the_run(tmp_path, capfd):
    """The same check where the sessions are tasks of the host's own trio run (`_native`)."""
    import dsh_host

    ws, deny = _hidden_workspace(tmp_path)
    plugin = McpPlugin()
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"deny_read": deny},
            "mcp": {"servers": {"s": {"command": PYTHON, "args": [RAW, "cat"]}}},
        },
    }

    async def main() -> tuple[Any, Any, Any]:
        async with dsh_host.open_host(
            config, plugins=[SandboxPlugin(), plugin], entry_points=False
        ) as host:
            assert plugin.status()["s"]["confined"] == "bwrap", plugin.status()
            before = await host.call("mcp__s__echo", {"text": str(ws / ".env")})
            _replaced_file(ws).write_text("SECRET-2")
            after = await host.call("mcp__s__echo", {"text": str(ws / ".env")})
            return before, after, plugin.status()["s"]

    before, after, status = trio.run(main)
    assert "SECRET" not in before.text + after.text, (before, after)
    assert after.text == before.text, (before, after)
    assert not after.is_error, after
    assert status["status"] == "running"
    assert "MCP server 's' restarted" in capfd.readouterr().err


def test_calls_that_find_the_hidden_path_moved_at_once_share_one_restart(tmp_path, capfd):
    """Three calls at once after a move: one restart, and each call goes to the new server
    (none is refused as the old session ends and the new one starts)."""
    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, "bwrap")
    try:
        _moved_dir(ws).write_text("SECRET-2")

        async def main() -> list[Any]:
            done: list[Any] = []

            async def one() -> None:
                done.append(await host.call("mcp__s__echo", {"text": str(ws / "secrets/key")}))

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(one)
            return done

        results = trio.run(main)
        assert [r.is_error for r in results] == [False] * 3, results
        assert all("SECRET" not in r.text for r in results), results
        assert capfd.readouterr().err.count("MCP server 's' restarted") == 1
    finally:
        plugin.close()


def test_what_the_watch_of_a_server_already_restarted_found_restarts_nothing(tmp_path):
    """The sentinel and a call can both find one move; whichever comes second, after the
    restart, holds the old server's watch: asking with it must not restart the new server."""
    import functools

    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, "bwrap")
    link = plugin._mount.links["s"]
    try:
        old = link.watch
        _moved_dir(ws)
        assert _cat(host, ws / "plain.txt").text == "in view"  # restarted (by either)
        assert len(link.restarts) == 1
        assert link.watch is not old
        why = "a path its sandbox hides was renamed, replaced or removed on the host"
        trio.run(link.runner.run, functools.partial(link.restart, why, old))
        assert len(link.restarts) == 1, link.restarts
        assert plugin.status()["s"]["status"] == "running"
    finally:
        plugin.close()


def test_a_call_made_while_the_server_restarts_waits_for_it(tmp_path, monkeypatch):
    """A call that starts after the old server has ended and before the new one answers goes
    to the new one, instead of failing as "not running"."""
    from dsh_plugins_builtin._mcp._watch import Watch

    monkeypatch.setattr(Watch, "sentinel", lambda *_: None)  # the call finds the move here
    ws, deny = _hidden_workspace(tmp_path)
    gate = ws / "gate"
    host, plugin = _cat_host(ws, deny, "bwrap", str(gate))
    key = {"text": str(ws / "secrets/key")}
    try:
        _moved_dir(ws).write_text("SECRET-2")
        os.mkfifo(gate)  # the server started anew waits on it

        async def main() -> list[Any]:
            done: list[Any] = []

            async def one() -> None:
                done.append(await host.call("mcp__s__echo", key))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one)  # finds the move, and restarts the server
                opened = await trio.to_thread.run_sync(open, gate, "w")  # the new one starts
                assert plugin.status()["s"]["status"] == "restarting"
                nursery.start_soon(one)
                await trio.testing.wait_all_tasks_blocked()
                opened.close()
            return done

        results = trio.run(main)
        assert [r.is_error for r in results] == [False, False], results
        assert all("SECRET" not in r.text for r in results), results
    finally:
        plugin.close()


@pytest.mark.parametrize("move", list(MOVES))
def test_a_move_is_found_by_the_directories_watched_without_reading_the_mount_table(tmp_path, move):
    """A check reads the server's mount table only after a mount event or an inotify event on
    a directory on the way to a hidden path or a missing entry (`_watch`): armed, it reads
    nothing, and each move is still found before the call is sent."""
    ws, deny = _hidden_workspace(tmp_path)
    # The missing entry apart (its directory is not the one the others move in), so that each
    # move is found through the directories of its own place.
    later = tmp_path / "apart" / "later"
    later.parent.mkdir()
    deny[-1] = str(later)
    host, plugin = _cat_host(ws, deny, "bwrap")
    try:
        watch = plugin._mount.links["s"].watch
        assert watch is not None
        assert watch.moved() is None
        assert watch._armed, "the directories are watched: the table is not read"
        if move == "the hidden path made after the start":
            later.mkdir()  # (in /tmp, which the server does not see anyway: no call made)
            assert watch.moved() is not None
            return
        path = MOVES[move](ws)
        path.write_text("SECRET-2")
        assert watch.moved() is not None
        first = _cat(host, path)
        assert "SECRET" not in first.text, first
        assert not first.is_error, first
    finally:
        plugin.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting on the host takes root")
def test_a_file_system_the_host_mounts_over_a_hidden_paths_directory_is_found(tmp_path):
    """A mount on the host above a hidden path propagates into the server's view (where the
    host's mounts propagate) and covers the mask there: a mount event, which is checked."""
    ws, deny = _hidden_workspace(tmp_path)
    # The workspace a shared mount of its own, as on a host whose mounts propagate (systemd
    # makes / shared); a container's / is often private, and then nothing would propagate.
    subprocess.run(["mount", "--bind", str(ws), str(ws)], check=True)
    subprocess.run(["mount", "--make-shared", str(ws)], check=True)
    mounted = False
    try:
        host, plugin = _cat_host(ws, deny, "bwrap")
        try:
            subprocess.run(["mount", "-t", "tmpfs", "dsh-test", str(ws / "conf")], check=True)
            mounted = True
            (ws / "conf" / "keys").mkdir()
            (ws / "conf" / "keys" / "key").write_text("SECRET-2")
            result = _cat(host, ws / "conf" / "keys" / "key")
            assert "SECRET" not in result.text, result
            assert not result.is_error, result
        finally:
            plugin.close()
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(ws / "conf")], check=True)
        subprocess.run(["umount", "-l", str(ws)], check=True)


def test_without_inotify_every_check_is_exact(tmp_path, monkeypatch):
    """Where the user has no inotify instance left, each check reads the table and looks up
    the missing entries: slower, never blind."""
    from dsh_plugins_builtin._mcp import _watch

    monkeypatch.setattr(_watch, "_inotify", lambda: -1)
    ws, deny = _hidden_workspace(tmp_path)
    host, plugin = _cat_host(ws, deny, "bwrap")
    try:
        watch = plugin._mount.links["s"].watch
        assert watch is not None
        assert watch.moved() is None
        assert not watch._armed
        for move in MOVES.values():
            path = move(ws)
            path.write_text("SECRET-2")
            result = _cat(host, path)
            assert "SECRET" not in result.text, (move, result)
    finally:
        plugin.close()


def test_the_directories_are_watched_each_after_the_one_that_holds_it(tmp_path):
    """Watched top down, a directory replaced after its parent is watched makes an event in
    the parent; watched bottom up, one replaced in between would be watched in its old self,
    and what is made in the new one never seen."""
    from dsh_plugins_builtin._mcp._watch import Hiding

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    hiding = Hiding(frozenset({str(tmp_path / "a/b/hidden")}), (str(tmp_path / "c/d/absent"),))
    dirs = hiding.directories()
    assert dirs[0] == "/"
    assert str(tmp_path / "a" / "b") in dirs
    assert str(tmp_path / "c") in dirs
    assert str(tmp_path / "c" / "d") not in dirs  # missing: its making is seen in c
    for i, path in enumerate(dirs):
        assert all(other not in dirs[i + 1 :] for other in Path(path).parents), dirs


def test_a_server_restarted_with_other_tools_has_them_mounted(tmp_path):
    """The server started anew lists its tools again; a tool it lists now is mounted, as after
    ``tools/list_changed``, and calls to it reach it."""
    ws, deny = _hidden_workspace(tmp_path)
    flag = ws / "more-tools"
    host, plugin = _cat_host(ws, deny, "bwrap", str(ws / "no-gate"), str(flag))
    try:
        assert plugin.status()["s"]["tools"] == ["mcp__s__echo"]
        flag.write_text("")
        _moved_dir(ws).write_text("SECRET-2")
        assert not _cat(host, ws / "plain.txt").is_error  # found the move: restarted
        assert plugin.status()["s"]["tools"] == ["mcp__s__echo", "mcp__s__extra"]
        extra = trio.run(host.call, "mcp__s__extra", {"text": str(ws / "plain.txt")})
        assert extra.text == "in view", extra
    finally:
        plugin.close()


def test_a_directory_that_cannot_be_watched_makes_every_check_exact(tmp_path):
    """inotify must read a directory to watch it. One on the way that cannot be watched (a
    home of mode 711 seen by another user; a link to one; no watch left) must not go
    unwatched while the checks trust the others: every check is exact then. One that is gone
    needs no watch."""
    import errno

    from dsh_plugins_builtin._mcp import _watch

    fd = _watch._inotify()
    assert fd >= 0
    try:
        assert _watch._watch_all(fd, [str(tmp_path / "gone")])  # ENOENT: seen where it was
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        assert _watch._watch_all(fd, [str(tmp_path / "link")]) is False  # not followed
        if os.geteuid() != 0:  # root reads any directory
            locked = tmp_path / "locked"
            locked.mkdir(mode=0o311)
            assert not os.access(locked, os.R_OK)
            assert _watch._watch_all(fd, [str(locked)]) is False, errno.EACCES
    finally:
        os.close(fd)


def test_a_servers_first_process_is_found_without_the_kernels_children_list(monkeypatch):
    """Without ``/proc/PID/task/PID/children`` (a kernel built without it), the process in
    the server's namespace is found from every process's parent, not left unchecked or
    refused."""
    from dsh_plugins_builtin._mcp import _watch

    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "child.stdin.close()\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())
        assert _watch.first_child(parent.pid) == child
        real_open = open

        def no_children_list(path, *args, **kwargs):
            if str(path).endswith("/children"):
                raise FileNotFoundError(path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr("builtins.open", no_children_list)
        assert _watch.first_child(parent.pid) == child
    finally:
        monkeypatch.undo()
        parent.stdin.close()
        parent.wait()
        parent.stdout.close()
