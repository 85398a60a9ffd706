"""What a confined command must not change beyond its own processes and files: the machine's
kernel settings, and the resource limits of every process in its namespace (a review found a
root command writing ``/proc/sys``, and code written into bwrap's unlimited init through
``/proc/1/mem``). Every backend, as root here and as ``nobody`` through
`test_escapes_unprivileged.py`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.dsh_plugins_builtin.test_escapes_boundary import bash, boundary_host

SETTING = "/proc/sys/kernel/printk_ratelimit"  # harmless, and written back with its own value


async def test_the_kernels_settings_cannot_be_written(
    make_host: Any, ws: Path, backend: str
) -> None:
    if not os.path.exists(SETTING):
        pytest.skip(f"this kernel has no {SETTING}")
    host = boundary_host(make_host, ws, backend)
    result = await host.call(
        "bash", {"command": f'v=$(cat {SETTING}) && echo "$v" > {SETTING} && echo WROTE'}
    )
    assert "WROTE" not in result.text  # refused: read-only (bwrap), outside the roots (Landlock)
    if backend == "bwrap":  # read-only mounts, whoever the command runs as
        shown = (await bash(host, "cat /proc/self/mountinfo")).text
        mounted = {line.split()[4]: line.split()[5] for line in shown.splitlines()[1:]}
        for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"):
            if os.path.exists(path):
                assert mounted.get(path, "").startswith("ro"), (path, mounted.get(path))


LIMITED = "for p in /proc/[0-9]*; do echo \"$p $(grep -E '^Max (address space|file size)' $p/limits | tr -s ' ' | cut -d' ' -f4 | tr '\\n' ' ')\"; done"
"""Each process of the namespace with its file size and address space limits."""


def assert_limited(text: str) -> None:
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("/proc/")]
    assert any(row[0] == "/proc/1" for row in rows), text  # the command, or the relay
    for row in rows:  # (a process gone meanwhile shows no figures)
        assert row[1:] in ([], [str(3 << 20), str(700 << 20)]), (row, text)


async def test_every_process_of_the_namespace_has_the_limits(
    make_host: Any, ws: Path, backend: str
) -> None:
    limits = {"memory_mib": 700, "file_size_mib": 3}
    host = boundary_host(make_host, ws, backend, limits=limits)
    assert_limited((await bash(host, LIMITED)).text)


async def test_behind_the_proxy_every_process_has_the_limits_too(make_host: Any, ws: Path) -> None:
    # the relay (a network list needs bwrap) starts before the command's shell
    limits = {"memory_mib": 700, "file_size_mib": 3}
    network = {"network": ["api.test"], "network_hosts": {"api.test": "127.0.0.1"}}
    host = boundary_host(make_host, ws, "bwrap", limits=limits, **network)
    shown = (await bash(host, LIMITED)).text
    assert shown.count("/proc/") >= 2, shown  # the relay (the first process), the shell
    assert_limited(shown)


async def test_deny_read_globs_hide_what_the_file_tools_refuse_from_every_command(
    make_host: Any, ws: Path, backend: str
) -> None:
    # The globs were expanded once, at start, with glob.glob: dot-names and deeper files (which
    # the file tools' fnmatch covers: its * crosses /) stayed readable, and so did later ones.
    for name in (".b.key", ".certs/d.key", "sub/e.key", "sub/deeper/f.key", "plain.txt"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(f"SECRET-{name}\n" if name.endswith(".key") else "fine\n")
    host = boundary_host(make_host, ws, backend, deny_read=["*.key"])
    names = ".b.key .certs/d.key sub/e.key sub/deeper/f.key plain.txt"
    shown = (await host.call("bash", {"command": f"cat {names} 2>&1; echo made > new.key"})).text
    assert "SECRET" not in shown
    assert "fine" in shown  # the control: the command reads what no glob covers
    assert (ws / "new.key").read_text() == "made\n"
    (ws / "new.key").write_text("SECRET-new\n")  # made since: covered before the next command
    again = (await host.call("bash", {"command": "cat new.key; ln new.key copy.txt"})).text
    assert "SECRET" not in again
    read = await host.call("read_file", {"path": "copy.txt"})
    assert "SECRET" not in read.text


@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
async def test_memory_in_ram_backed_directories_is_bounded(
    make_host: Any, ws: Path, backend: str, mode: str
) -> None:
    # What a command writes to a tmpfs is memory its address-space limit does not count: each
    # one it may write holds at most memory_mib; /dev itself and, read-only, all are read-only.
    # (Landlock refuses every write outside the roots: none of them is writable there.)
    host = boundary_host(make_host, ws, backend, mode=mode, limits={"memory_mib": 64})
    shown = await bash(
        host,
        "for d in /dev/shm /run /var/tmp; do [ -d $d ] || continue; "
        "head -c 100M /dev/zero > $d/fill 2>/dev/null; "
        'echo "$d $(stat -c %s $d/fill 2>/dev/null || echo none)"; done; '
        "touch /dev/made 2>/dev/null && echo DEV-WRITABLE; echo done",
    )
    rows = [line.split() for line in shown.text.splitlines() if line.startswith("/")]
    assert rows, shown.text
    for directory, size in rows:
        if mode == "read-only" or backend == "landlock":
            assert size == "none", (directory, shown.text)
        else:
            assert size != "none", (directory, shown.text)  # writable, as before
    held = sum(int(size) for _, size in rows if size != "none")
    assert held <= 64 << 20, shown.text  # together: each one held the whole limit before
    assert "DEV-WRITABLE" not in shown.text
    assert "done" in shown.text


async def test_the_way_to_a_workspace_under_tmp_cannot_be_swapped_for_a_link(
    make_host: Any, backend: str
) -> None:
    # The workspace lies under the host's /tmp, so the directory holding it is a plain
    # directory of the private tmp: renamed and replaced by a link, the next command's mount
    # point was made through it on the host (bwrap), or every later command refused (Landlock).
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="dsh-test-way-", dir="/tmp"))
    try:
        (top / "ws").mkdir()
        (top / "outside").mkdir()
        top.chmod(0o755)
        host = boundary_host(make_host, top / "ws", backend)
        swap = f"mv {top} /tmp/moved && ln -s /oldroot{top}/outside {top} && echo swapped"
        swapped = (await bash(host, swap)).text
        if backend == "bwrap":  # a mount point (bound from what the host checked): busy
            assert "swapped" not in swapped, swapped
        else:  # Landlock: the host repairs it before the next command
            assert "swapped" in swapped, swapped
        after = await host.call("bash", {"command": "pwd; echo still-works"})
        assert not after.is_error, after.text
        assert "still-works" in after.text
        assert list((top / "outside").iterdir()) == []  # nothing made outside the roots
    finally:
        shutil.rmtree(top, ignore_errors=True)


async def test_a_command_cannot_change_the_hosts_device_nodes(
    make_host: Any, ws: Path, backend: str
) -> None:
    # /dev/null and the others were the host's own nodes, bound in: a root command owns them
    # and its chmod changed the host's. Never chmod-ed here unless it must fail.
    from dsh_plugins_builtin._sandbox._devnodes import NAMES, nodes

    host = boundary_host(make_host, ws, backend)
    names = [name for name in NAMES if os.path.exists(f"/dev/{name}")]
    listing = "; ".join(f"echo {n} $(stat -c '%d %i %a' /dev/{n})" for n in names)
    if os.geteuid() != 0:  # the host's nodes are root's: a chmod fails, whatever is bound
        refused = await bash(host, "chmod 600 /dev/null 2>/dev/null || echo refused")
        assert "refused" in refused.text
        return
    own = nodes()
    assert own is not None
    (own / "null").chmod(0o600)  # as a command left it: made again before the next one
    shown = await bash(host, listing)
    words = [line.split() for line in shown.text.splitlines()]
    rows = {w[0]: w[1:] for w in words if len(w) == 4 and w[0] in names}
    assert set(rows) == set(names), shown.text
    for name in names:
        st = os.stat(f"/dev/{name}")
        assert rows[name][:2] != [str(st.st_dev), str(st.st_ino)], (name, shown.text)
        assert rows[name][2] == "666", (name, shown.text)


async def test_no_host_file_is_reachable_through_proc_links(
    make_host: Any, ws: Path, backend: str
) -> None:
    # /proc/1/exe was the host's bwrap binary (bwrap's init), /proc/self/fd/0 the host's
    # /dev/null: a root command chmod-ed both. Compared by inode, never chmod-ed here.
    host = boundary_host(make_host, ws, backend)
    shown = await bash(
        host,
        "for p in /proc/[0-9]*; do for l in $p/exe $p/fd/*; do "
        "stat -L -c '%d %i %n' $l 2>/dev/null; done; done",
    )
    reached = {
        tuple(line.split()[:2]) for line in shown.text.splitlines() if len(line.split()) == 3
    }
    assert reached, shown.text
    for path in ("/dev/null", "/usr/bin/bwrap", shutil.which("bwrap") or "/usr/bin/bwrap"):
        if os.path.exists(path):
            st = os.stat(path)
            assert (str(st.st_dev), str(st.st_ino)) not in reached, (path, shown.text)


@pytest.mark.parametrize("mode", ["0311", "000"])
async def test_a_glob_cannot_be_blinded_by_an_unlistable_directory(
    make_host: Any, ws: Path, backend: str, mode: str
) -> None:
    # chmod 0311 kept the directory's names from the walk (the host cannot list it), not from
    # a command that knows them: the command is refused instead. (Root lists it anyway.)
    (ws / "secrets").mkdir()
    (ws / "secrets" / "api.key").write_text("SECRET-API\n")
    host = boundary_host(make_host, ws, backend, deny_read=["*.key"])
    await bash(host, f"chmod {mode} secrets")
    try:
        command = "chmod 0755 secrets; cat secrets/api.key"  # what it can undo, it undoes
        result = await host.call("bash", {"command": command})
        assert "SECRET" not in result.text
        if os.geteuid() != 0:
            assert result.is_error
            assert "cannot be listed" in result.text
    finally:
        (ws / "secrets").chmod(0o755)


HOST_SCRIPT = """
import sys, trio
from dsh_plugins_builtin._sandbox import _forkclient
from dsh_host import testing
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
ws, backend, forking, marker = sys.argv[1:5]
if forking == "1":
    _forkclient.ENABLED = False
sandbox = {"backend": backend}
if backend == "landlock":
    sandbox |= {"protected": [], "protect_install": False, "protect_config": False}
host = testing.make_host(
    ToolsPlugin(), SandboxPlugin(),
    config={"host": {"workspace": ws}, "plugin": {"sandbox": sandbox}},
)
command = f"echo started > fifo; exec -a {marker} sleep 57"
trio.run(host.call, "bash", {"command": command, "timeout_ms": 120_000})
"""


async def test_a_command_does_not_outlive_a_host_killed_outright(
    ws: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under Landlock the launcher (or the supervisor the host forked) was left supervising
    # under init when the host was SIGKILLed: the command ran on. Now it dies with the host.
    import signal
    import subprocess
    import sys
    import uuid

    import trio

    from dsh_plugins_builtin._sandbox import _forkclient
    from tests.dsh_plugins_builtin.conftest import processes_with, wait_gone

    marker = f"dsh-outlive-{uuid.uuid4().hex[:12]}"
    os.mkfifo(ws / "fifo")
    forking = "0" if _forkclient.ENABLED else "1"  # the backend fixture's Landlock variant
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, str(ws), backend, forking, marker],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        started = await trio.to_thread.run_sync(lambda: (ws / "fifo").read_text())
        assert started == "started\n"
        with trio.fail_after(20):
            while not processes_with(marker):  # exec'd right after the line above
                await trio.sleep(0)
        host.send_signal(signal.SIGKILL)
        host.wait()
        await wait_gone(processes_with(marker), within=20)
    finally:
        host.kill()
        host.wait()
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
    assert not processes_with(marker)


async def test_the_relay_cannot_be_ended_or_written_from_inside(make_host: Any, ws: Path) -> None:
    # The relay is the namespace's first process behind a network list: Python's SIGINT
    # handler let `kill -INT 1` end it, and its memory (it holds the control socket) was
    # writable through /proc/1/mem.
    network = {"network": ["api.test"], "network_hosts": {"api.test": "127.0.0.1"}}
    host = boundary_host(make_host, ws, "bwrap", **network)
    shown = await bash(
        host, "grep SigIgn /proc/1/status; : 2>/dev/null >> /proc/1/mem && echo MEM-WRITABLE"
    )
    ignored = int(shown.text.split("SigIgn:")[1].split()[0], 16)
    assert ignored & (1 << (2 - 1)), shown.text  # SIGINT: ignored, no handler to end it
    assert "MEM-WRITABLE" not in shown.text, shown.text


UNCOUNTED = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def tried(name, call):
    try:
        got = call()
    except OSError as exc:
        got, code = -1, exc.errno
    else:
        code = ctypes.get_errno()
    print(name, "refused" if got == -1 and code == errno.ENOSYS else f"MADE {got} {code}")
tried("memfd", lambda: os.memfd_create("balloon"))
tried("shm", lambda: libc.shmget(0, 1 << 20, 0o1600))
tried("msg", lambda: libc.msgget(0, 0o1600))
tried("sem", lambda: libc.semget(0, 4, 0o1600))
"""


async def test_memory_no_address_space_limit_counts_cannot_be_held(
    make_host: Any, ws: Path, backend: str
) -> None:
    # memory_mib is each process's address space: a memfd, System V shared memory, message
    # queues and semaphore sets hold memory no mapping counts (a review held 1 GiB in one
    # memfd under memory_mib = 256). They fail as on a kernel without them.
    (ws / "uncounted.py").write_text(UNCOUNTED)
    host = boundary_host(make_host, ws, backend, limits={"memory_mib": 256})
    shown = (await bash(host, "python3 uncounted.py")).text
    for name in ("memfd", "shm", "msg", "sem"):
        assert f"{name} refused" in shown, shown


async def test_a_command_cannot_dump_core(make_host: Any, ws: Path, backend: str) -> None:
    # The hard core limit was left as it was: `ulimit -c unlimited`, then a crash, started the
    # host's core_pattern helper (a pipe: systemd-coredump, apport) outside every namespace.
    host = boundary_host(make_host, ws, backend)
    shown = (
        await bash(host, "ulimit -H -c; ulimit -c unlimited 2>/dev/null && echo RAISED; echo ok")
    ).text
    assert shown.split() == ["0", "ok"], shown
