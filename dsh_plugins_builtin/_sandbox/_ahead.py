"""The command's side of the Landlock fork server (`dsh_plugins_builtin._sandbox._forkserver`):
the request as a launcher reads it, and the command's process, forked the usual way or ahead
(`Ahead`), confining itself (`Prepared.confine_self`) and ``exec``\\ing."""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
from typing import Any, Final, NoReturn

from dsh_plugins_builtin._sandbox import _landlock, _mountns, _ruleset

__all__ = [
    "EARLY", "GO", "LAST", "MAX_REQUEST", "STALE_MOUNTS", "Ahead", "Early", "EarlyFailed",
    "command", "parse", "receive", "stdio", "warm",
]  # fmt: skip


class EarlyFailed(Exception):
    """A command forked ahead could not make its early mounts (`Early`). Its launcher has
    made the command's namespaces already, and cannot make them again: it must not take a
    request (the server then forks a fresh launcher for it)."""


MAX_REQUEST: Final = 60_000  # bytes of JSON in one request (larger ones fork the host)
GO: Final = b"g"  # the host's answer to HELLO: it holds the pidfd, the command may start
READY: Final = b"r"  # a command forked ahead: its early mounts (`Early`) are made
EARLY: list[tuple[tuple[Any, ...], ...]] = []
"""Set once in a kept view's server (`_forkserver.serve`): the first steps of every command's
mount plan there, which need nothing of the request (its ``/proc``, the parts of it made
read-only, its fresh directories in RAM): a command forked ahead carries them out while it
waits (`waiting`), and of a request's plan, which must begin with them, only the rest after."""
STALE_MOUNTS: Final = b"s"
"""What a command forked ahead writes on its exec-failure pipe when the mounts it made while it
waited (`Early`) no longer fit its request: nothing ran (the host starts it another way)."""
LAST: list[bytes] = []
"""In the fork server: the request it handed over last (`_forkserver`), which the processes it
forks ahead read while they wait (`warm`)."""


def receive(sock: socket.socket, count: int) -> tuple[bytes, list[int]]:
    """One message and the descriptors it carries (``b""``, none: torn, or the peer is gone)."""
    fds = array.array("i")
    data, ancillary, flags, _addr = sock.recvmsg(
        MAX_REQUEST, socket.CMSG_SPACE(count * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        return b"", []
    return data, list(fds)


class Ahead:
    """The command's process, forked by a spare launcher ahead, in the command's own PID and IPC
    namespaces (`Prepared.unshare`); it gets its request (`waiting`) while the host is told
    `HELLO`, confines itself, and ``exec``\\s once the host's `GO` comes, which it reads on the
    host's socket itself. A request without a mount plan runs there too."""

    def __init__(self, pid: int, sock: socket.socket, errors: int) -> None:
        self.pid = pid
        self.sock = sock
        self.errors = errors  # its exec failure (close-on-exec: EOF once it ran)

    @classmethod
    def fork(cls, spare_fd: int) -> Ahead | None:
        """``None`` when the namespaces cannot be made: the request then goes the usual way,
        which says why (exit 125) when it needs them.

        Raises:
            EarlyFailed: They were made, but its early mounts failed (`Early`).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        errors_r, errors_w = os.pipe2(os.O_CLOEXEC)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCHLD})
        try:
            _landlock.unshare_namespaces()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for fd in (ours.detach(), theirs.detach(), errors_r, errors_w):
                os.close(fd)
            return None
        pid = os.fork()  # failing, the spare exits (its namespaces are half made)
        if pid == 0:
            waiting(theirs, errors_w, mask, (ours.fileno(), errors_r, spare_fd))
        theirs.close()
        os.close(errors_w)
        if ours.recv(1) != READY:  # its early steps failed: it has exited
            os.waitpid(pid, 0)
            ours.close()
            os.close(errors_r)
            raise EarlyFailed
        return cls(pid, ours, errors_r)

    def start(self, data: bytes, ruleset: int, host: int) -> None:
        """Hand it the request, with the command's output (``1``), the ruleset, the
        launcher's working directory (the one it entered, never its name looked up again) and
        the host's socket, on which it waits for `GO`."""
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fds = array.array("i", (1, ruleset, here, host))
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        finally:
            os.close(here)


def warm(early: tuple[tuple[Any, ...], ...] = ()) -> None:
    """Read the server's last request (`LAST`) as the next one will be read, and drop what it
    gives, while waiting for that next one: in a process forked from the server, code runs for
    the first time (its interpreter's caches written) and objects are touched whose pages the
    server shares with it, and each such page is copied at its first write. Done here, that
    (about half a millisecond in each of the launcher and the command) is off the command's
    path. Nothing is applied: no descriptor is used, closed or kept."""
    if not LAST:
        return
    with contextlib.suppress(Exception):  # one this cannot read: the next request says so
        prepared = parse(LAST[0], -1)[2]
        if early and prepared.plan[: len(early)] == early:
            prepared.with_plan(prepared.plan[len(early) :], fresh=False, cwd="/")


class Early:
    """The mounts a command forked ahead makes while it waits, before its request: in a kept
    view, its fixed first steps (`EARLY`); elsewhere, its mount namespace (a copy of the host's)
    and the steps the server's last request's plan began with that make its ``/dev`` (a fresh
    tmpfs, the device nodes bound into it, its links; `LAST`), the same for every request of
    one host. At its request it checks they still fit (`fits`), else it runs nothing
    (`STALE_MOUNTS`: the host starts the command another way)."""

    def __init__(self, steps: tuple[tuple[Any, ...], ...]) -> None:
        self.steps = steps
        # The mount table it copies, opened before the copy: any change since is an event.
        self.table = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        # Nodes bound from dsh's own copies (a root host's, `_devnodes`): still those at the
        # request? One bound from the host's /dev cannot be looked up again here (the new
        # /dev covers it); only root can replace one, and the one bound is the host's own.
        self.sources = [
            (step[1], _identity(step[1]))
            for step in steps
            if step[0] == "bind" and not _in_dev(str(step[1]))
        ]
        _mountns.apply(_ruleset._libc(), steps, _landlock.Prepared.fail_early)

    @classmethod
    def here(cls) -> Early | None:
        """This server's early mounts, made now; ``None`` when it has none."""
        steps = EARLY[0] if EARLY else _dev_steps_of_last()
        return cls(steps) if steps else None

    def fits(self, plan: tuple[tuple[Any, ...], ...]) -> bool:
        """Whether *plan* begins with these steps and binds nothing from the host's ``/dev``
        after them, the table copied has not changed since (the copy would not show what was
        mounted or unmounted since), and each node bound from dsh's own is still the one there."""
        if plan[: len(self.steps)] != self.steps or _binds_from_dev(plan[len(self.steps) :]):
            return False
        watch = select.poll()
        watch.register(self.table, select.POLLPRI | select.POLLERR)
        if watch.poll(0):
            return False
        return all(_identity(source) == seen for source, seen in self.sources)


def _dev_steps_of_last() -> tuple[tuple[Any, ...], ...]:
    """The ``/dev`` steps the last request's plan began with (none without one, or when a bind
    after them comes from the host's ``/dev``)."""
    if not LAST:
        return ()
    with contextlib.suppress(Exception):
        plan = tuple(tuple(step) for step in json.loads(LAST[0]).get("plan", ()))
        count = 0
        for step in plan:
            if not _in_dev(str(step[2] if step[0] in ("bind", "symlink") else step[1])):
                break
            count += 1
        return () if _binds_from_dev(plan[count:]) else plan[:count]
    return ()


def _in_dev(path: str) -> bool:
    return path == "/dev" or path.startswith("/dev/")


def _binds_from_dev(steps: tuple[tuple[Any, ...], ...]) -> bool:
    """Whether a bind of *steps* comes from the host's ``/dev`` (a workspace in ``/dev/shm``):
    the command's own ``/dev``, made first, would hide it."""
    return any(step[0] == "bind" and _in_dev(str(step[1])) for step in steps)


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def waiting(sock: socket.socket, errors: int, mask: Any, close: tuple[int, ...]) -> NoReturn:
    """The command's process forked ahead: wait for the request, take the launcher's view
    (output, working directory), confine itself and wait for `GO` (`command`). Nothing comes
    (the launcher gave up, or is gone): it exits having run nothing."""
    try:
        # Dies with its launcher from here on: in a view, an orphan goes to the view's first
        # process, not to the server, and nothing would stop it. Its launcher waits for READY,
        # so it cannot have died before this.
        _landlock.die_with_parent()
        for fd in close:
            os.close(fd)
        early = Early.here()  # a failure: it exits (its launcher takes no request)
        sock.send(READY)
        _landlock.drop_early()
        warm(() if early is None else early.steps)
        data, fds = receive(sock, 4)
        if not data or len(fds) != 4:
            os._exit(0)
        out, ruleset, here, host = fds
        go = socket.socket(fileno=host)
        argv, env, prepared, cwd = parse(data, ruleset)
        if early is not None:
            if not early.fits(prepared.plan):
                os.write(errors, STALE_MOUNTS)
                os._exit(0)
            # The launcher's directory lies in another mount namespace than this one: its
            # path would be found by walking up from it, reading each directory on the way.
            # It is the request's, which the launcher entered.
            rest = prepared.plan[len(early.steps) :]
            prepared = prepared.with_plan(rest, fresh=False, cwd=cwd)
        stdio(out)
        os.fchdir(here)  # the launcher's: a directory swapped for a link since does not count
        os.close(here)
    except BaseException:
        os._exit(_landlock.EXIT_RUNNER_FAILURE)
    command(prepared, argv, env, mask, errors, (), go=go)


def stdio(out: int) -> None:
    """Standard input from an empty pipe (not the host's ``/dev/null``, whose mode a root
    command could change through ``/proc/self/fd/0``), output and errors to *out* (closed)."""
    empty, closed = os.pipe()
    os.close(closed)
    os.dup2(empty, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(empty)
    os.close(out)


def parse(data: bytes, ruleset: int) -> tuple[list[str], dict[str, str], _landlock.Prepared, str]:
    """A request: the command's ``argv``, environment, confinement and working directory."""
    request = json.loads(data)
    argv = [str(arg) for arg in request["argv"]]
    env = {str(k): str(v) for k, v in request["env"].items()}
    plan = tuple(tuple(step) for step in request.get("plan", ()))
    program = bytes.fromhex(request["program"])
    abi = int(request["abi"])
    if abi < 1 and not _landlock.VIEW:  # only a view's server confines by its mounts alone
        raise ValueError("a request without Landlock reached the host's fork server")
    limits = [(int(which), int(value)) for which, value in request.get("limits", ())]
    prepared = _landlock.Prepared(ruleset, program, abi, plan, limits)
    return argv, env, prepared, str(request["cwd"])


def command(
    prepared: _landlock.Prepared,
    argv: list[str],
    env: dict[str, str],
    mask: Any,
    errors: int,
    close: tuple[int, ...],
    go: socket.socket | None = None,
) -> NoReturn:
    """The command (forked by the launcher): confine, ``exec`` (once *go* says `GO`, when
    forked ahead); report an ``exec`` failure."""
    try:
        _landlock.die_with_parent()  # (again, forked ahead; at once, forked after GO)
        for fd in close:
            os.close(fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for number in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess's restore_signals
            signal.signal(number, signal.SIG_DFL)
        prepared.confine_self()  # on failure: a "landlock-run:" line on stderr, exit 125
        if go is not None and go.recv(len(GO)) != GO:
            os._exit(0)  # the host gave up: nothing of the command ran
        os.closerange(3, errors)
        os.closerange(errors + 1, 1 << 20)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(errors, str(exc.errno or 0).encode())
    finally:
        os._exit(127)
