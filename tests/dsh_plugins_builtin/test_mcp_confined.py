"""Mounted stdio servers run confined by default (issue 24 row 1).

The attack of the issue, with the guide's own example: the agent plants a nested repository
whose ``core.fsmonitor`` names a command, then has ``mcp-server-git`` run ``git status`` there.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio

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
    probe = (
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({str(ws / 'daemon.sock')!r}); print('CONNECTED')\n"
        "except OSError as e:\n    print('refused', e)\n"
    )
    (ws / "probe.py").write_text(probe)
    (ws / "sub" / "monitor.sh").write_text(
        f"#!/bin/sh\n{sys.executable} {ws / 'probe.py'} > {ws / 'scratch' / 'ran'}\n"
    )
    writable = {"writable_roots": ["scratch"]}
    sandbox = {"protected": []} if backend == "landlock" else None
    try:
        _git_status(ws, {"sandbox": False})
        assert (ws / "scratch" / "ran").read_text() == "CONNECTED\n"  # the control
        _git_status(ws, writable, backend=backend, sandbox=sandbox)
        assert (ws / "scratch" / "ran").read_text().startswith("refused")
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
