"""Issue 22: what a command can reach *next to* its own files stays inside the boundary.

One test (or a few) per row of the issue's table, through ``host.call("bash", ...)`` on every
backend (``bwrap``, ``landlock`` from the fork server and forking the host), each with a
control where the check could otherwise not fail. Tests make their own sockets, terminals,
processes and home directories; none touches the machine's. `test_escapes_unprivileged.py`
runs this module again as ``nobody``.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import tty
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._sandbox._env import looks_secret
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import processes_with, wait_gone


def boundary_host(make_host: Any, ws: Path, backend: str, **sandbox: Any) -> Host:
    """The default configuration (private tmp, default deny_read, env and limits); Landlock
    gets no protected paths (it refuses them inside a writable root)."""
    if backend == "landlock":
        sandbox.setdefault("protected", [])
        sandbox.setdefault("protect_install", False)
        sandbox.setdefault("protect_config", False)
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {"sandbox": {"backend": backend, **sandbox}},
    }
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    return host


async def bash(host: Host, command: str) -> Any:
    result = await host.call("bash", {"command": command, "timeout_ms": 60_000})
    assert not result.is_error, result.text
    return result


@pytest.fixture
def host_tmp() -> Iterator[Path]:
    """A directory of the test's own in the host's /tmp (where tmux and X11 keep sockets)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-test-host-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


@pytest.fixture
def unix_server(host_tmp: Path) -> Iterator[Path]:
    """A listening Unix socket standing for a tmux server or an ssh-agent (world-connectable)."""
    path = host_tmp / "server.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(8)
    try:
        yield path
    finally:
        server.close()


_CONNECT = (
    "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); "
    'exec("try: s.connect(sys.argv[1]); print(\\"CONNECTED\\")\\nexcept OSError as e: print(e)")'
    "' "
)


# -- row 1: host Unix sockets through a shared /tmp; a private /tmp ------------------------------


async def test_row1_a_host_socket_in_tmp_is_out_of_reach(
    make_host: Any, ws: Path, backend: str, unix_server: Path
) -> None:
    host = boundary_host(make_host, ws, backend)
    result = await bash(host, _CONNECT + str(unix_server))
    assert "CONNECTED" not in result.text
    relative = os.path.relpath(unix_server, ws)  # through the working directory's parents
    assert "CONNECTED" not in (await bash(host, _CONNECT + relative)).text
    # Control: listed in allow_unix_sockets, the same socket is reachable.
    allowed = boundary_host(make_host, ws, backend, allow_unix_sockets=[str(unix_server)])
    assert "CONNECTED" in (await bash(allowed, _CONNECT + str(unix_server))).text


async def test_row1_a_command_keeps_its_own_sockets(make_host: Any, ws: Path, backend: str) -> None:
    host = boundary_host(make_host, ws, backend)
    own = (
        'python3 -c \'import socket,os; p=os.environ["TMPDIR"]+"/own.sock"; '
        "srv=socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(1); "
        'c=socket.socket(socket.AF_UNIX); c.connect(p); a,_=srv.accept(); c.send(b"hi"); '
        "print(a.recv(2).decode(), int(socket.socketpair()[0].family))'"
    )
    assert "hi 1" in (await bash(host, own)).text


def _listening(path: Path) -> socket.socket:
    """A host daemon's listening Unix socket at *path* (world-connectable, non-blocking)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(8)
    server.setblocking(False)
    return server


@pytest.fixture
def daemon() -> Iterator[Callable[[Path], Path]]:
    """Listening Unix sockets of a host daemon (not the command's), bound at the given paths."""
    servers: list[socket.socket] = []

    def listen(path: Path) -> Path:
        servers.append(_listening(path))
        return path

    yield listen
    for server in servers:
        server.close()


async def test_row1_a_host_socket_anywhere_else_in_view_is_out_of_reach(
    make_host: Any,
    ws: Path,
    backend: str,
    host_tmp: Path,
    daemon: Callable[[Path], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not only the socket directories: a daemon's socket in the workspace (a language
    server's), one bound through a symlink, one in a read-only root (dsh's installation), each
    refused; the command's own sockets there keep working, and a listed one is reachable."""
    from dsh_plugins_builtin._sandbox import _starting

    (ws / "run").mkdir()
    (ws / "link").symlink_to(ws / "run")
    monkeypatch.setattr(_starting, "install_paths", lambda modules=(): (host_tmp,))
    sockets = [
        daemon(ws / "lsp.sock"),
        daemon(ws / "link" / "spaced name.sock"),
        daemon(host_tmp / "docker.sock"),
    ]
    host = boundary_host(make_host, ws, backend)
    for path in sockets:
        assert "CONNECTED" not in (await bash(host, _CONNECT + f"'{path}'")).text, path
    own = (
        'python3 -c \'import socket; srv=socket.socket(socket.AF_UNIX); srv.bind("own.sock"); '
        'srv.listen(1); c=socket.socket(socket.AF_UNIX); c.connect("own.sock"); print("OWN")\''
    )
    assert "OWN" in (await bash(host, own)).text
    # Control: each is reachable once listed.
    allowed = boundary_host(make_host, ws, backend, allow_unix_sockets=[str(p) for p in sockets])
    for path in sockets:
        assert "CONNECTED" in (await bash(allowed, _CONNECT + f"'{path}'")).text, path


async def test_row1_a_host_socket_behind_a_closed_directory_is_left_as_it_is(
    make_host: Any, ws: Path, backend: str, daemon: Callable[[Path], Path]
) -> None:
    """A socket in a directory the command may not pass through (PostgreSQL keeps its own in a
    ``0700`` directory of its user) is out of its reach already: the command runs (neither
    bwrap nor the Landlock child could reach it to cover it), and cannot connect."""
    closed = ws / "closed"
    closed.mkdir()
    path = daemon(closed / "db.sock")
    closed.chmod(0o700)
    if os.geteuid() == 0:  # another user's, as PostgreSQL's is (root's would be passable to
        os.chown(closed, 65534, 65534)  # bwrap's setup, which keeps root's capabilities)
    else:
        closed.chmod(0)
    try:
        host = boundary_host(make_host, ws, backend)
        result = await bash(host, _CONNECT + str(path))
        assert "CONNECTED" not in result.text
        assert "Permission denied" in result.text
    finally:
        closed.chmod(0o755)


async def test_row1_host_socket_names_are_not_passed(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("TMUX", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "XDG_RUNTIME_DIR")
    for name in names:
        monkeypatch.setenv(name, f"/tmp/dsh-test-{name.lower()}")
    host = boundary_host(make_host, ws, backend, env={"inherit": "all"})
    text = (await bash(host, "env")).text
    for name in names:
        assert f"{name}=" not in text


async def test_row1_commands_get_a_private_tmp(
    make_host: Any, ws: Path, backend: str, host_tmp: Path
) -> None:
    name = f"dsh-test-{uuid.uuid4().hex}"
    host = boundary_host(make_host, ws, backend)
    result = await bash(
        host, f"echo $TMPDIR; echo mine > /tmp/{name}; ls {host_tmp} 2>/dev/null | wc -l"
    )
    assert result.text.splitlines()[0] == "/tmp"
    assert not Path("/tmp", name).exists()  # not in the host's /tmp
    assert result.text.splitlines()[1] == "0"  # the host's /tmp is out of view
    seen = await host.call("read_file", {"path": f"/tmp/{name}"})  # the file tools' /tmp
    assert not seen.is_error, seen.text
    assert "mine" in seen.text
    plugin = host.pm.get_plugin("sandbox")
    assert plugin.tmp is not None
    assert (plugin.tmp / name).read_text() == "mine\n"


async def test_every_file_tool_sees_the_private_tmp_at_tmp_as_commands_do(
    make_host: Any, ws: Path, backend: str
) -> None:
    """grep and glob search ``/tmp`` (they used to resolve it twice and fail), and every tool
    shows a file there as ``/tmp/...``, a path bash and the file tools both read back."""
    host = boundary_host(make_host, ws, backend)
    await bash(host, "mkdir -p /tmp/d && echo needle > /tmp/d/hay.txt")
    for tool, args in (
        ("grep", {"pattern": "needle", "path": "/tmp"}),
        ("grep", {"pattern": "needle", "path": "/tmp/d/hay.txt"}),
        ("glob", {"pattern": "**/*.txt", "path": "/tmp"}),
        ("list_dir", {"path": "/tmp/d"}),
        ("write_file", {"path": "/tmp/d/new.txt", "content": "needle"}),
    ):
        result = await host.call(tool, args)
        assert not result.is_error, (tool, result.text)
        assert "/tmp/d/" in result.text or tool == "list_dir", (tool, result.text)
        assert "dsh-ptmp" not in result.text, (tool, result.text)
    plugin = host.pm.get_plugin("sandbox")
    real = plugin.tmp / "d" / "hay.txt"  # the host's spelling reads the same file
    assert "needle" in (await host.call("read_file", {"path": str(real)})).text
    assert "needle" in (await bash(host, "cat /tmp/d/new.txt")).text
    # A path that climbs out of /tmp means what it means to a command: not the private tmp's
    # parent (``/tmp/dsh-ptmp-x/../etc``), but ``/etc``.
    climbed = await host.call("read_file", {"path": "/tmp/d/../../etc/hostname"})
    assert '(resolves to "/etc/hostname")' in climbed.text, climbed.text
    back = await host.call("read_file", {"path": "/tmp/d/../../tmp/d/hay.txt"})
    assert "needle" in back.text, back.text  # out of /tmp and back in: the private tmp


async def test_dsh_installed_under_the_host_tmp_stays_in_view_read_only(
    make_host: Any, ws: Path, backend: str, host_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hiding the host's /tmp must not hide dsh's own installation (a virtual environment
    under /tmp, with the ``rg`` the grep tool runs): it stays in view, read-only."""
    from dsh_plugins_builtin._sandbox import _starting

    tool = host_tmp / "tool"
    tool.write_text("#!/bin/sh\necho runtime-ok\n")
    tool.chmod(0o755)
    monkeypatch.setattr(_starting, "install_paths", lambda modules=(): (host_tmp,))
    host = boundary_host(make_host, ws, backend)
    result = await bash(host, f"{tool}; touch {host_tmp}/planted 2>/dev/null || echo refused")
    assert result.text.splitlines() == ["runtime-ok", "refused"]
    assert not (host_tmp / "planted").exists()


# -- row 2: credentials ---------------------------------------------------------------------------


@pytest.fixture
def home(ws: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspace is the (fake) home, with credentials in it, as when an agent runs in ~."""
    for rel, text in {
        ".ssh/id_rsa": "PRIVATE-KEY-1",
        ".aws/credentials": "AWS-SECRET-2",
        ".netrc": "NETRC-PASSWORD-3",
        ".config/gh/hosts.yml": "GH-TOKEN-4",
        "keys/deploy.key": "CUSTOM-KEY-5",
    }.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setenv("HOME", str(ws))
    return ws


async def test_row2_credentials_are_unreadable(make_host: Any, home: Path, backend: str) -> None:
    host = boundary_host(make_host, home, backend, deny_read=["keys/*.key"])
    result = await bash(
        host,
        "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc ~/.config/gh/hosts.yml keys/deploy.key;"
        " echo done",
    )
    for secret in ("PRIVATE-KEY-1", "AWS-SECRET-2", "NETRC-PASSWORD-3", "GH-TOKEN-4", "CUSTOM"):
        assert secret not in result.text
    refused = await host.call("read_file", {"path": ".ssh/id_rsa"})
    assert refused.is_error
    assert "~/.ssh is in deny_read" in refused.text
    refused = await host.call("read_file", {"path": "keys/deploy.key"})
    assert "deny_read" in refused.text
    # Control: without the defaults the same command reads them.
    open_host = boundary_host(make_host, home, backend, deny_read_defaults=False)
    assert "PRIVATE-KEY-1" in (await bash(open_host, "cat ~/.ssh/id_rsa")).text


_AGENT_SECRETS = {
    ".codex/auth.json": "CODEX-TOKEN-6",
    ".claude.json": "CLAUDE-OAUTH-7",
    ".gemini/oauth_creds.json": "GEMINI-TOKEN-8",
    ".cache/huggingface/token": "HF-TOKEN-9",
    ".pgpass": "PGPASS-10",
    ".bash_history": "export TOKEN=HISTORY-11",
    ".python_history": "key = 'PYHIST-12'",
}


async def test_row2_agent_tokens_db_passwords_and_shell_histories_are_unreadable(
    make_host: Any, home: Path, backend: str
) -> None:
    """The class beside ``~/.ssh``: other agents' and model hubs' tokens, database password
    files, shell and REPL histories (a reviewer read each through bash)."""
    for rel, text in _AGENT_SECRETS.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    host = boundary_host(make_host, home, backend)
    result = await bash(
        host, "cat " + " ".join(f"~/{rel}" for rel in _AGENT_SECRETS) + "; echo done"
    )
    assert "done" in result.text
    for text in _AGENT_SECRETS.values():
        assert text not in result.text
    for rel in _AGENT_SECRETS:
        refused = await host.call("read_file", {"path": rel})
        assert "deny_read" in refused.text, rel


@pytest.mark.parametrize("engine", ["ripgrep", "in-process"])
async def test_row2_the_search_tools_show_no_credential_by_name_or_content(
    make_host: Any, home: Path, backend: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``glob`` and ``grep`` come upon files nobody named: under ``deny_read`` they leave each
    out, name and content, and say one was withheld, whichever engine searches (ripgrep in the
    sandbox, or in-process where ripgrep is missing: it read ``~/.ssh/id_rsa`` before)."""
    from dsh_plugins_builtin._tools import _search

    if engine == "in-process":
        monkeypatch.setattr(_search, "find_rg", lambda: None)
    (home / "notes.txt").write_text("no KEY here\n")
    host = boundary_host(make_host, home, backend, deny_read=["keys/*.key"])
    found = await host.call("grep", {"pattern": "KEY|SECRET|TOKEN", "include_ignored": True})
    assert not found.is_error, found.text
    assert "notes.txt" in found.text  # the control: the search ran
    for leak in ("id_rsa", "PRIVATE-KEY-1", "AWS-SECRET-2", "GH-TOKEN-4", "deploy.key"):
        assert leak not in found.text, (leak, found.text)
    listed = await host.call("glob", {"pattern": "**/*", "include_ignored": True})
    assert "notes.txt" in listed.text
    for name in ("id_rsa", "credentials", "hosts.yml", "deploy.key", ".netrc"):
        assert name not in listed.text, (name, listed.text)
    assert "withheld" in listed.text, listed.meta


async def test_row2_shadow_is_unreadable_even_as_root(
    make_host: Any, ws: Path, backend: str
) -> None:
    host = boundary_host(make_host, ws, backend)
    result = await bash(host, "cat /etc/shadow 2>/dev/null | wc -c")
    assert result.text.split()[0] == "0"


# -- row 3: secrets in the environment --------------------------------------------------------


async def test_row3_the_environment_is_an_allowlist(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:hunter2@db.example/app")
    monkeypatch.setenv("GH_PAT", "ghp_" + "A1b2C3d4" * 5)
    monkeypatch.setenv("PROJECT_COLOR", "blue")
    monkeypatch.setenv("PROJECT_DSN", "mysql://app:s3cret@db/app")
    host = boundary_host(make_host, ws, backend)
    text = (await bash(host, "env")).text
    assert "hunter2" not in text
    assert "ghp_" not in text
    assert "PROJECT_COLOR" not in text  # not a core name
    assert "PATH=" in text
    assert "TMPDIR=/tmp" in text
    configured = boundary_host(
        make_host, ws, backend, env={"include": ["PROJECT_*"], "set": {"MODE": "sandboxed"}}
    )
    text = (await bash(configured, "env")).text
    assert "PROJECT_COLOR=blue" in text
    assert "MODE=sandboxed" in text
    assert "s3cret" not in text  # a URL with a password is not inherited through a glob
    everything = boundary_host(make_host, ws, backend, env={"inherit": "all"})
    assert "hunter2" not in (await bash(everything, "env")).text


def test_row3_secret_values_are_recognised_whatever_their_name() -> None:
    assert looks_secret("postgres://u:pw@host/db")
    assert looks_secret("ghp_" + "x" * 36)
    assert looks_secret("AKIAABCDEFGHIJKLMNOP")
    assert looks_secret("Zk3Jq9Lm2Np8Rt5Vx7Bc4Df6Gh1Kw0Ys")
    assert not looks_secret("/usr/local/bin:/usr/bin")
    assert not looks_secret("en_US.UTF-8")
    assert not looks_secret("https://example.com/path")


# -- row 4: the host process is reachable -------------------------------------------------------


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the test's own, standing for the host (same user, outside the sandbox)."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_row4_other_processes_are_out_of_reach(
    make_host: Any, ws: Path, backend: str, bystander: subprocess.Popen[bytes]
) -> None:
    pid = bystander.pid
    before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    niceness = os.getpriority(os.PRIO_PROCESS, pid)
    host = boundary_host(make_host, ws, backend)
    result = await bash(
        host,
        f"prlimit --pid {pid} --fsize=1:1; renice -n 19 -p {pid}; taskset -p 1 {pid}; "
        f"cat /proc/{pid}/cmdline; ls /proc | grep -cx {pid}; prlimit --pid $$ --nofile=64:64;"
        " ulimit -S -n 64 && echo own-limit-ok",
    )
    assert resource.prlimit(pid, resource.RLIMIT_FSIZE) == before
    assert os.getpriority(os.PRIO_PROCESS, pid) == niceness
    assert "sleep" not in result.text  # its command line
    assert "own-limit-ok" in result.text  # its own limits stay its own to lower


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int, str]]:
    """A pseudo-terminal the test opened (never a real terminal), raw so reads need no newline."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        yield master, slave, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


_STANDARD_DEV = {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout"}
_STANDARD_DEV |= {"stderr", "ptmx", "pts", "shm", "core"}  # bwrap adds core -> /proc/kcore


async def test_row4_the_hosts_devices_are_out_of_view(
    make_host: Any, ws: Path, backend: str
) -> None:
    """A command gets a ``/dev`` of its own on both backends: none of the host's disks, input
    devices, consoles or loop devices (under Landlock, which lets a command read every file,
    root read a whole disk this way, whatever deny_read said); the standard nodes and links
    still work (``<(...)`` needs ``/dev/fd``)."""
    host_only = sorted(set(os.listdir("/dev")) - _STANDARD_DEV)
    assert host_only  # the control: this machine's /dev has more than the standard nodes
    host = boundary_host(make_host, ws, backend)
    result = await bash(
        host,
        "ls -A /dev; cat <(echo fd-ok); echo out-ok > /dev/stdout; "
        "head -c 3 /dev/zero | wc -c; echo gone > /dev/null && echo null-ok",
    )
    lines = result.text.splitlines()
    seen = set(lines[: lines.index("fd-ok")])
    assert seen <= _STANDARD_DEV, seen - _STANDARD_DEV
    assert lines[lines.index("fd-ok") :] == ["fd-ok", "out-ok", "3", "null-ok"]


@pytest.mark.parametrize("tool", ["read_file", "grep", "list_dir", "glob"])
async def test_row4_no_file_tool_reads_the_processes_even_with_every_root_readable(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    """File tools run in the host: ``/proc/self`` is the host, ``/proc/PID`` every process of
    its user, with their environment (a ``DATABASE_URL`` with its password), command lines and
    open files, and the rest of ``/proc`` the host's kernel (``kallsyms``' real addresses to
    root, ``keys``, ``kmsg``, whose read consumes the log). A command has a ``/proc`` of its
    own; no file tool reads any of the host's, even with ``read_roots = ["/"]``."""
    monkeypatch.setenv("DSH_TEST_SECRET", "postgres://u:hunter2@db/x")
    host = boundary_host(make_host, ws, "bwrap", read_roots=["/"])
    args = {
        "read_file": lambda p: {"path": p},
        "grep": lambda p: {"pattern": "hunter2", "path": p},
        "list_dir": lambda p: {"path": p},
        "glob": lambda p: {"pattern": "*", "path": p},
    }[tool]
    # the control: a file outside the workspace, readable through "/"
    with tempfile.NamedTemporaryFile(prefix="dsh-test-control-", dir="/var/tmp") as outside:
        Path(outside.name).write_text("control-ok\n")
        control = await host.call("read_file", {"path": outside.name})
        assert not control.is_error, control.text
        assert "control-ok" in control.text, control.text
    for path in ("/proc/self/environ", "/proc/self", f"/proc/{os.getpid()}/cmdline",
                 "/proc/thread-self/environ", "/proc/self/fd", "/proc", "/proc/version",
                 "/proc/kallsyms", "/proc/sys", "/proc/sys/kernel/hostname"):  # fmt: skip
        if tool in ("list_dir", "glob") and os.path.isfile(path):
            continue
        if tool == "read_file" and os.path.isdir(path):
            continue
        result = await host.call(tool, args(path))
        assert result.is_error, (path, result.text)
        assert "in /proc, the processes and kernel of this machine" in result.text, result.text
        assert "hunter2" not in result.text


@pytest.mark.parametrize("tool", ["read_file", "grep", "list_dir"])
async def test_row4_no_file_tool_opens_a_device_even_with_every_root_readable(
    make_host: Any, ws: Path, tool: str
) -> None:
    """A file tool runs in the host: opening a device there may act before any check of what
    was opened (a terminal, a watchdog that reboots the machine when closed)."""
    host = boundary_host(make_host, ws, "bwrap", read_roots=["/"])
    args = {"read_file": "path", "grep": "path", "list_dir": "path"}[tool]
    extra = {"pattern": "x"} if tool == "grep" else {}
    for path in ("/dev/null", "/dev/zero", "/dev/tty", "/dev"):
        if tool == "read_file" and path == "/dev":
            continue
        result = await host.call(tool, {args: path, **extra})
        assert result.is_error, (path, result.text)
        assert "a device of this machine" in result.text, result.text


@pytest.mark.parametrize("engine", ["ripgrep", "in-process"])
async def test_row4_a_search_of_proc_is_refused(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """Searching ``/proc`` itself would walk into every ``/proc/PID`` and the host's kernel
    files: refused as a whole, name and content (a walk from ``/`` leaves each file in it out,
    as a ``deny_read`` entry is: the in-process engine would otherwise open every file the walk
    meets, devices under ``/dev`` included)."""
    from dsh_plugins_builtin._tools import _search

    if engine == "in-process":
        monkeypatch.setattr(_search, "find_rg", lambda: None)
    host = boundary_host(make_host, ws, "bwrap", read_roots=["/"])
    (ws / "version").write_text("control\n")
    control = await host.call("glob", {"pattern": "version", "path": str(ws)})
    assert control.text.splitlines()[0] == "version", control.text
    for pattern in ("*/environ", "version"):
        listed = await host.call("glob", {"pattern": pattern, "path": "/proc"})
        assert listed.is_error, listed.text
        assert "in /proc, the processes and kernel" in listed.text, listed.text
    found = await host.call("grep", {"pattern": "PATH=", "path": "/proc", "glob": "environ"})
    assert found.is_error, found.text
    assert not re.search(r"environ:\d", found.text), found.text


async def test_a_workspace_on_dev_shm_is_read_as_any_other(make_host: Any) -> None:
    """The control of the two above: what lies in the workspace or a writable root is the
    user's own, wherever it is (a workspace on the ``/dev/shm`` tmpfs)."""
    ws = Path(tempfile.mkdtemp(prefix="dsh-test-ws-", dir="/dev/shm"))
    try:
        (ws / "a.txt").write_text("hello\n")
        host = boundary_host(make_host, ws, "bwrap")
        for tool, args in (("read_file", {"path": "a.txt"}), ("list_dir", {"path": "."})):
            result = await host.call(tool, args)
            assert not result.is_error, result.text
        denied = await host.call("read_file", {"path": "/dev/zero"})
        assert "a device of this machine" in denied.text
    finally:
        for child in ws.iterdir():
            child.unlink()
        ws.rmdir()


async def test_row4_another_terminal_is_unreadable(
    make_host: Any, ws: Path, backend: str, pty_pair: tuple[int, int, str]
) -> None:
    master, _, path = pty_pair
    os.write(master, b"typed-password\n")
    host = boundary_host(make_host, ws, backend)
    read = (
        "python3 -c 'import os,sys\ntry:\n fd=os.open(sys.argv[1], os.O_RDONLY|os.O_NONBLOCK|"
        'os.O_NOCTTY); print("READ", os.read(fd, 64))\nexcept OSError as e: print(e)\' '
    )
    result = await bash(host, read + path)
    assert "typed-password" not in result.text
    assert "READ" not in result.text


# -- row 5: survivors -----------------------------------------------------------------------


async def test_row5_a_command_cannot_talk_the_reaper_out_of_it(
    make_host: Any, ws: Path, backend: str
) -> None:
    marker = f"{3000 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    host = boundary_host(make_host, ws, backend)
    await bash(
        host,
        "for p in $(ls /proc | grep -E '^[0-9]+$'); do prlimit --pid $p --nofile=0:0 "
        f"--nproc=1:1 2>/dev/null; done; (setsid sleep {marker} </dev/null >/dev/null 2>&1 &);"
        " echo started",
    )
    try:
        await wait_gone(processes_with(marker), within=20)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
    assert not processes_with(marker)
    assert "again" in (await bash(host, "echo again")).text  # the fork server still serves


# -- row 6: resource limits ----------------------------------------------------------------------


async def test_row6_a_memory_balloon_is_bounded_and_named(
    make_host: Any, ws: Path, backend: str
) -> None:
    host = boundary_host(make_host, ws, backend, limits={"memory_mib": 256})
    results: dict[str, Any] = {}

    async def balloon() -> None:
        results["balloon"] = await host.call(
            "bash", {"command": "python3 -c 'b = bytearray(1 << 30); print(len(b))'"}
        )

    async def ping() -> None:
        results["ping"] = await host.call("bash", {"command": "echo pong"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(balloon)
        nursery.start_soon(ping)
    assert "pong" in results["ping"].text  # the host answered meanwhile
    text = results["balloon"].text
    assert "1073741824" not in text
    assert "memory_mib = 256" in text


async def test_row6_a_file_fill_is_bounded_and_named(
    make_host: Any, ws: Path, backend: str
) -> None:
    host = boundary_host(make_host, ws, backend, limits={"file_size_mib": 1})
    result = await host.call("bash", {"command": "head -c 3000000 /dev/zero > big"})
    assert (ws / "big").stat().st_size <= 1024 * 1024
    assert "file_size_mib = 1" in result.text


async def test_row6_a_fork_bomb_is_bounded(make_host: Any, ws: Path, backend: str) -> None:
    if os.geteuid() == 0:
        # The kernel never applies RLIMIT_NPROC to uid 0; the documented limit, asserted:
        from dsh_plugins_builtin._sandbox._limits import LimitsConfig, ulimit_prefix

        assert "-u 64" in ulimit_prefix(LimitsConfig(processes=64))
        return
    host = boundary_host(make_host, ws, backend, limits={"processes": 40})
    results: dict[str, Any] = {}

    async def bomb() -> None:
        results["bomb"] = await host.call(
            "bash",
            {"command": "for i in $(seq 200); do sleep 5 & done; wait; echo end"},
        )

    async def ping() -> None:
        results["ping"] = await host.call("bash", {"command": "echo pong"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bomb)
        nursery.start_soon(ping)
    assert "pong" in results["ping"].text
    assert "processes = 40" in results["bomb"].text


# -- row 7: configuration the agent can plant ---------------------------------------------------


async def test_row7_the_next_runs_config_cannot_be_planted(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (ws / "perms").mkdir()
    (ws / "perms" / "settings.json").write_text("{}\n")
    monkeypatch.setenv("HOME", str(ws))
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": {"backend": backend},
            "permissions": {"import": ["perms/settings.json"]},
        },
    }
    if backend == "landlock":  # it cannot keep them read-only: it refuses to start, naming them
        with pytest.raises(ConfigError, match=r"config files the next dsh run reads: .*pyproject"):
            make_host(ToolsPlugin(), SandboxPlugin(), config=config)
        return
    host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    planted = '[tool.dsh.plugin.sandbox]\\nmode = "danger-full-access"\\n'
    await bash(
        host,
        f"printf '{planted}' >> pyproject.toml; printf '{planted}' > dsh.toml; "
        'echo \'{"permissions": {"allow": ["Bash"]}}\' > perms/settings.json; '
        "mkdir -p .claude; echo '{}' > .claude/settings.json; echo done",
    )
    assert "danger" not in (ws / "pyproject.toml").read_text()
    assert not (ws / "dsh.toml").is_file()
    assert (ws / "perms" / "settings.json").read_text() == "{}\n"
    assert not (ws / ".claude" / "settings.json").exists()


async def test_row7_a_protected_name_that_is_a_symlink_cannot_be_pointed_elsewhere(
    make_host: Any, ws: Path, tmp_path: Path, backend: str
) -> None:
    """``.git`` linked to a directory beside it, ``dsh.toml`` linked from a dotfiles directory
    outside every root: the targets are read-only, but the links lie in the writable workspace,
    where a command could point them at a config of its own."""
    (ws / "realgit").mkdir()
    (ws / "realgit" / "config").write_text("[core]\n")
    (ws / ".git").symlink_to("realgit")
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "dsh.toml").write_text("[plugin.sandbox]\n")
    (ws / "dsh.toml").symlink_to(dotfiles / "dsh.toml")
    if backend == "landlock":  # it cannot keep them read-only: it refuses to start, naming them
        with pytest.raises(ConfigError, match=re.escape(f"{ws}/realgit, {ws} lie inside")):
            boundary_host(make_host, ws, backend, protected=[".git", "dsh.toml"])
        return  # (the dotfiles are read-only to it anyway: not named)
    host = boundary_host(make_host, ws, backend)
    await host.call(
        "bash",
        {
            "command": "mkdir evil; printf '[core]\\n\\tfsmonitor = touch pwned\\n' > "
            "evil/config; ln -sfn evil .git; rm -f dsh.toml; "
            "printf '[plugin.sandbox]\\nmode = \"danger-full-access\"\\n' > dsh.toml; echo done"
        },
    )
    assert os.readlink(ws / ".git") == "realgit"
    assert os.readlink(ws / "dsh.toml") == str(dotfiles / "dsh.toml")
    assert (dotfiles / "dsh.toml").read_text() == "[plugin.sandbox]\n"
    assert not (ws / "evil").exists()


@pytest.mark.parametrize("where", ["src", "."], ids=["inside-a-root", "the-root-itself"])
async def test_row7_no_module_can_be_planted_on_the_next_runs_import_path(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A directory on Python's import path that lies in a writable root (an editable install's
    source, ``PYTHONPATH``, where ``python -m`` ran): a module planted there runs at the next
    dsh start, unconfined. ``subprocess`` imports ``msvcrt`` when it finds one, at every
    start; ``copy`` imports ``org.python.core``."""
    entry = ws if where == "." else ws / where
    entry.mkdir(exist_ok=True)
    (ws / "src" / "pkg").mkdir(parents=True, exist_ok=True)
    monkeypatch.syspath_prepend(str(entry))
    if backend == "landlock":  # it cannot keep them read-only: it refuses to start, naming them
        with pytest.raises(ConfigError, match=f"{re.escape(str(entry))} lie inside writable roots"):
            boundary_host(make_host, ws, backend, protect_install=True)
        return
    plant = (
        f"echo 'import os' > {entry}/msvcrt.py; mkdir -p {entry}/org/python; "
        f"echo 'x = 1' > {ws}/src/pkg/mod.py; echo done"
    )
    exposed = boundary_host(make_host, ws, backend, protect_install=False)
    await bash(exposed, plant)  # the control: without the protection, the plant works
    assert (entry / "msvcrt.py").exists()
    assert (entry / "org").is_dir()
    (entry / "msvcrt.py").unlink()
    (entry / "org" / "python").rmdir()
    (entry / "org").rmdir()
    host = boundary_host(make_host, ws, backend)
    result = await bash(host, plant)
    assert "Read-only file system" in result.text
    assert not (entry / "msvcrt.py").exists()
    assert not (entry / "org").exists()
    denied = await host.call("write_file", {"path": str(entry / "msvcrt.py"), "content": "1"})
    assert denied.is_error
    assert "a directory on Python's import path" in denied.text
    assert not (entry / "msvcrt.py").exists()


def test_a_mount_point_is_never_made_through_a_planted_symlink(tmp_path: Path) -> None:
    """A command may leave a symlink in the private tmp where the next Landlock command's
    mount points are made (before Landlock applies): it is refused, never followed."""
    from dsh_plugins_builtin._sandbox import _mountns

    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "pytest-of-someone").symlink_to(target)
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        _mountns._target(str(tmp_path / "tmp" / "pytest-of-someone" / "ws"), directory=True)
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        _mountns._target(str(tmp_path / "tmp" / "pytest-of-someone" / "f.sock"), directory=False)
    assert list(target.iterdir()) == []
    made = _mountns._target(str(tmp_path / "tmp" / "real" / "ws"), directory=True)  # control
    os.close(made)
    assert (tmp_path / "tmp" / "real" / "ws").is_dir()


# -- what a command hides can be renamed out of hiding: rows 1, 2 and 7, the class --------------


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


async def test_row1_a_covered_socket_cannot_be_renamed_into_reach(
    make_host: Any, ws: Path, backend: str
) -> None:
    """A host socket in a workspace directory is covered by /dev/null at its name, in each
    command's own view: renaming the directory (on the host) showed it to the next command
    under the new name. Every directory between the root and it is a mount point now."""
    (ws / "sub" / "deeper").mkdir(parents=True)
    server = _listening(ws / "sub" / "deeper" / "lsp.sock")
    try:
        host = boundary_host(make_host, ws, backend)
        moved = await host.call("bash", {"command": "mv sub sub2 || mv sub/deeper sub/d2"})
        assert "busy" in moved.text.lower(), moved.text
        for spelled in ("sub/deeper/lsp.sock", "sub2/deeper/lsp.sock", "sub/d2/lsp.sock"):
            assert "CONNECTED" not in (await bash(host, _CONNECT + spelled)).text
        assert not _accepted(server)
        assert (ws / "sub" / "deeper" / "lsp.sock").exists()  # nothing was moved on the host
    finally:
        server.close()


async def test_row1_a_socket_in_a_closed_directory_of_its_own_is_covered(
    make_host: Any, ws: Path, backend: str
) -> None:
    """A directory the command's own user owns is no barrier: it may ``chmod`` it open."""
    closed = ws / "closed"
    closed.mkdir()
    server = _listening(closed / "s.sock")
    closed.chmod(0o600)
    try:
        host = boundary_host(make_host, ws, backend)
        result = await bash(host, "chmod 700 closed; " + _CONNECT + "closed/s.sock")
        assert "CONNECTED" not in result.text
        assert not _accepted(server)
    finally:
        closed.chmod(0o700)
        server.close()


async def test_row2_a_denied_file_cannot_be_renamed_into_view(
    make_host: Any, ws: Path, backend: str
) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / ".env").write_text("API_KEY=hunter2\n")
    host = boundary_host(make_host, ws, backend, deny_read=["sub/.env"])
    result = await host.call(
        "bash", {"command": "mv sub sub2; cat sub2/.env sub/.env; cp -r sub sub3; cat sub3/.env"}
    )
    assert "hunter2" not in result.text, result.text
    assert (ws / "sub" / ".env").read_text() == "API_KEY=hunter2\n"


@pytest.mark.parametrize("backend", ["bwrap"], indirect=True)  # Landlock refuses protected paths
async def test_row7_a_nested_protected_path_cannot_be_renamed_away(
    make_host: Any, ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python/src`` on the import path (a monorepo's PYTHONPATH) and ``build/lib`` (not made
    yet): renaming ``python`` took the read-only mount with it and let a command make its own
    ``python/src``; a missing ``build`` made on the way was as open."""
    (ws / "python" / "src").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(ws / "python" / "src"))
    monkeypatch.syspath_prepend(str(ws / "build" / "lib"))
    host = boundary_host(make_host, ws, backend)
    await host.call(
        "bash",
        {
            "command": "mv python p2; mkdir -p python/src; echo 'import os' > python/src/msvcrt.py;"
            " mkdir -p build/lib; echo 'import os' > build/lib/msvcrt.py"
        },
    )
    assert not (ws / "python" / "src" / "msvcrt.py").exists()
    assert not (ws / "build" / "lib" / "msvcrt.py").exists()
    assert not (ws / "p2").exists()
    await bash(host, "echo fine > python/notes.txt")  # the control: the rest of python/ is open
    assert (ws / "python" / "notes.txt").read_text() == "fine\n"


async def test_a_workspace_on_dev_shm_is_a_commands_own_too(make_host: Any, backend: str) -> None:
    """Landlock's /dev of its own was mounted after the roots, hiding a root under /dev."""
    ws = Path(tempfile.mkdtemp(prefix="dsh-test-ws-", dir="/dev/shm"))
    try:
        (ws / "a.txt").write_text("hello\n")
        host = boundary_host(make_host, ws, backend)
        result = await bash(host, "cat a.txt; echo made > b.txt")
        assert "hello" in result.text
        assert (ws / "b.txt").read_text() == "made\n"
    finally:
        shutil.rmtree(ws, ignore_errors=True)


def test_a_landlock_step_that_only_hides_makes_nothing(tmp_path: Path) -> None:
    """A socket or deny_read entry gone between the plan and the mount: nothing to hide, and
    nothing may be made in its place on the host (a file where a daemon's socket was)."""
    from dsh_plugins_builtin._sandbox import _mountns

    gone = tmp_path / "run" / "daemon.sock"
    with pytest.raises(FileNotFoundError):
        _mountns._target(str(gone), directory=False, make=False)
    assert not (tmp_path / "run").exists()
    os.close(_mountns._target(str(gone), directory=False))  # the control: a mount point is made
    assert gone.exists()


async def test_a_command_cannot_change_the_repository_at_all(make_host: Any, ws: Path) -> None:
    """docs/plugins/sandbox.md, "Why the agent cannot commit": all of .git stays read-only
    (a partial list would leave .git/commondir, which points git elsewhere, to be planted)."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "a.txt").write_text("a\n")
    before = sorted(p.name for p in (ws / ".git").iterdir())
    host = boundary_host(make_host, ws, "bwrap")
    git = "git -c user.email=a@b.c -c user.name=agent"
    result = await host.call(
        "bash",
        {
            "command": f"{git} add a.txt; {git} commit -qm one; echo /x > .git/commondir;"
            " echo x > .git/hooks/pre-commit; mv .git .git2"
        },
    )
    assert "Read-only file system" in result.text
    assert sorted(p.name for p in (ws / ".git").iterdir()) == before
    assert not (ws / ".git2").exists()
