"""bwrap views kept alive: one sandbox per view, and each command started inside it.

Every bwrap call used to build the command's whole view afresh: the namespaces, then about
forty mounts (the private tmp, the host's socket directories hidden, the roots, the protected
paths, ``deny_read``, the parts of ``/proc`` made read-only), then tear it all down, for
``bash -c true`` as for anything else: about 2.3 times a raw ``bwrap ... true`` (issue 27).
Most of that does not change from one command to the next.

So a view's first command starts bwrap once with that view, holding it: its command is
``cat`` (found outside every writable root, under the seccomp filter), waiting on a pipe of
the host's. A fork server (`dsh_plugins_builtin._sandbox._forkserver`, a ``python -I -S`` of
the standard library, started on the host) enters its namespaces (``setns``) and starts that
view's commands (`_forkclient.ForkServer`). Each command still gets, in its own process,
everything that was per command (`split`): its own PID, IPC and network namespaces
(loopback only, brought up; the host's network where the view shares it), for an ordinary
user its own user namespace, its own mount namespace with a fresh ``/proc`` whose kernel
settings are bound read-only over themselves, a ``/dev/pts`` and sized directories in RAM of
its own, an empty read-only tmpfs over each protected path that does not exist yet (the host
takes and gives back those mount points as before), its working directory, environment and
resource limits, every capability dropped, the seccomp filter, a session of its own, and a
supervisor (the server's launcher) that kills every descendant when it ends. The server holds
every capability in the view's user namespace, and none outside it; the command holds none.

A view is keyed by the bwrap command line a fresh call would run (without its working
directory and the protected paths that are missing, which each command mounts itself), with
each pinned root as the directory it is (device, inode), not a descriptor number: whatever
changes what a command would see (a ``deny_read`` match appearing, a protected path created,
a root replaced, the memory limit) makes another key, and so another view. What changes under
a view without changing its key (the host mounting something, which propagates into it, or
removing or renaming what a mask covers, which detaches the mask) changes the view's mount
table: its server watches it and from then on answers `_forkserver.STALE`; the command is
started the old way and the next call builds a new view. The host watches its own mount
table too (a private ``/`` propagates nothing): a change there makes every view stale. At most `MAX_VIEWS` live at once,
the least recently used idle one closed for a new one (none idle: a command starts the old
way).
Nothing here is needed for a command to run: a view that cannot be used is skipped.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import select
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from dsh_plugins_builtin._sandbox._forkclient import ForkServer, trusted_interpreter
from dsh_plugins_builtin._sandbox._landlock import _CLONE_NEWNET, Prepared
from dsh_plugins_builtin._sandbox._run import Output, Sink, Unstarted, run
from dsh_plugins_builtin._sandbox._seccomp import filter_bpf
from dsh_plugins_builtin._sandbox._viewhold import View as _View
from dsh_plugins_builtin._sandbox._viewhold import hold as _hold
from dsh_plugins_builtin._sandbox._viewline import Split, split
from dsh_plugins_builtin._sandbox._which import on_path_outside

__all__ = [
    "EAGER",
    "ENABLED",
    "MAX_VIEWS",
    "Lease",
    "Programs",
    "Views",
    "in_view",
    "programs",
    "shared",
]

ENABLED = True  # bwrap commands start in a kept view when one can be used (tests turn it off)
EAGER = False  # a view at a key's first command, not its second (tests: every command in one)
MAX_VIEWS: Final = 4
_FAILURES: Final = 3  # views that would not start before the process stops trying
_SEEN: Final = 64  # keys remembered as met once


class Lease:
    """One command's use of a view: its `server`, the `plan` and `cwd` it runs with."""

    def __init__(self, views: Views, view: _View, parts: Split) -> None:
        self.server = view.server
        self.plan = parts.plan
        self.cwd = parts.cwd
        self._views = views
        self._view = view

    def release(self) -> None:
        self._views.release(self._view)


class Views:
    """The views of one host process (`shared`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[tuple[Any, ...], _View] = {}
        self._seen: dict[tuple[Any, ...], None] = {}  # keys met once (the last `_SEEN`)
        self._starting: set[tuple[Any, ...]] = set()
        self._owner = os.getpid()
        self._failures = 0
        self.broken: str | None = None
        self.asked = 0  # commands that could have run in a view (their line has one)
        self.used = 0  # of those, the ones that did
        self._mounts: select.poll | None = None  # the host's mount table's changes
        self._mounts_fd = -1
        self._generation = 0  # how many changes of the host's mount table were seen

    async def lease(
        self, argv: Sequence[str], missing: Collection[Path], *, network: bool, using: Programs
    ) -> Lease | None:
        """A view for a command whose fresh bwrap line would be *argv* (its pinned roots
        open: they are bound from these descriptors if the view starts now); ``None``: start
        it the old way. A view is made the second time its key is met (a one-off command, as
        ``dsh call`` runs, does not pay for one), in a worker thread (the host goes on)."""
        parts = split(argv, missing, network=network)
        if parts is None:
            return None
        key = parts.key
        with self._lock:
            self.asked += 1
            if os.getpid() != self._owner:  # a forked copy of the host: its views are not its
                self._views, self._seen, self._starting = {}, {}, set()
                self._owner, self._mounts = os.getpid(), None
            self._notice_host_mounts()
            kept: _View | None = self._views.pop(key, None)
            if kept is not None and kept.usable:
                self._views[key] = kept  # the most recently used last
                kept.busy += 1
                return Lease(self, kept, parts)
            if kept is not None:
                self._views[key] = kept
                self._drop(key, kept)
            if self.broken is not None or key in self._starting:
                return None
            if not self._again(key) and not EAGER:
                return None
            idle = [k for k, v in self._views.items() if not v.busy]
            if len(self._views) + len(self._starting) >= MAX_VIEWS:
                if not idle:
                    return None
                self._drop(idle[0], self._views[idle[0]])  # the least recently used idle one
            self._starting.add(key)
            born = self._generation  # the host's mounts as the view's bwrap will copy them
        try:
            view: _View | None = await trio.to_thread.run_sync(self._start, parts, using)
        finally:
            with self._lock:
                self._starting.discard(key)
        if view is None:
            return None
        with self._lock:
            self._notice_host_mounts()
            if born != self._generation:  # the host's mounts changed while it was made: it may
                _close_later(view)  # hold what they no longer do (a command meanwhile saw it)
                return None
            old = self._views.pop(key, None)
            if old is not None:  # made meanwhile by a command in another thread
                self._drop(key, old)
            self._views[key] = view
            view.busy += 1
        return Lease(self, view, parts)

    def _notice_host_mounts(self) -> None:
        """A change of the host's mount table makes every view stale, the ones being made too
        (their `_generation` is older: `lease`)."""
        if self._host_mounts_changed():
            self._generation += 1
            for each in self._views.values():
                each.server.stale = True

    def _host_mounts_changed(self) -> bool:
        """Whether the host's mount table changed since the last look (under the lock). A
        view's own watch sees what propagates into it and the masks detached in it; where the
        host's ``/`` does not propagate (a private root, as in many containers), a host mount
        or unmount changes nothing there, and a view would keep showing what the host took
        away: every view is stale then."""
        if self._mounts is None:
            try:
                fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
            if self._mounts_fd >= 0:
                os.close(self._mounts_fd)
            self._mounts_fd = fd
            self._mounts = select.poll()
            self._mounts.register(fd, select.POLLPRI | select.POLLERR)
            self._mounts.poll(0)  # each change is reported once: this one is the table as it is
            return True
        return bool(self._mounts.poll(0))

    def _again(self, key: tuple[Any, ...]) -> bool:
        """Whether *key* was met before (and remember it)."""
        if key in self._seen:
            return True
        self._seen[key] = None
        while len(self._seen) > _SEEN:
            del self._seen[next(iter(self._seen))]
        return False

    def _start(self, parts: Split, using: Programs) -> _View | None:
        held = _hold(parts, using.cat)
        if held is None:
            self._failed("bwrap would not hold the view")
            return None
        holder, pidfd, table = held
        flags = 0 if "--share-net" in parts.head else _CLONE_NEWNET
        early = json.dumps([list(step) for step in parts.early])
        server = ForkServer(view=(flags, pidfd, early, table), executable=using.python)
        try:
            started = server.start()
        finally:
            os.close(pidfd)  # the server has its own copy
        view = _View(holder, server)
        if not started:
            view.close()
            self._failed(f"the view's server would not start: {server.broken}")
            return None
        return view

    def _failed(self, why: str) -> None:
        with self._lock:
            self._failures += 1
            if self._failures >= _FAILURES:
                self.broken = why

    def _drop(self, key: tuple[Any, ...], view: _View) -> None:
        """Forget *view* (under the lock); close it now if idle, else when released."""
        if self._views.get(key) is view:
            del self._views[key]
        if view.busy == 0:
            _close_later(view)

    def release(self, view: _View) -> None:
        with self._lock:
            view.busy -= 1
            broken = view.server.broken
            if view.busy == 0 and (not view.usable or view not in self._views.values()):
                for key, kept in list(self._views.items()):
                    if kept is view:
                        del self._views[key]
                _close_later(view)
        if broken is not None:  # it died, or would not answer
            self._failed(f"a view's server failed: {broken}")

    def close(self) -> None:
        with self._lock:
            views, self._views = list(self._views.values()), {}
        if os.getpid() == self._owner:
            for view in views:
                view.close()


def _close_later(view: _View) -> None:
    """Close *view* off the caller's thread (ending bwrap and the server takes milliseconds)."""
    threading.Thread(target=view.close, name="dsh-view-close", daemon=True).start()


_shared = Views()
atexit.register(_shared.close)


def shared() -> Views:
    """The process's views."""
    return _shared


@attrs.frozen
class Programs:
    """What a view runs on the host's word: the `python` its server is started with, and the
    `cat` that holds it."""

    python: str
    cat: str


def programs(writable: Collection[Path], protected: Collection[Path]) -> Programs | None:
    """The programs a view runs (`Programs`), or ``None`` (no view) where a command could have
    written one of them: the server's interpreter (`_forkclient.trusted_interpreter`), and
    ``cat``, the first on ``PATH`` outside every writable root (a project's ``.venv/bin`` on
    ``PATH`` may hold one a command planted), which holds the view as long as it lives."""
    python = trusted_interpreter(writable, protected)
    if python is None:
        return None
    cat = _cat(tuple(writable), os.environ.get("PATH", os.defpath))
    return None if cat is None else Programs(python, cat)


@functools.lru_cache(maxsize=16)
def _cat(writable: tuple[Path, ...], path: str) -> str | None:
    found, _ = on_path_outside("cat", writable)
    return None if found is None else str(found[0])


async def in_view(
    line: Sequence[str],
    missing: Collection[Path],
    *,
    argv: list[str],
    env: dict[str, str],
    timeout: float | None,
    cap: int,
    sink: Sink | None,
    limits: tuple[tuple[int, int], ...],
    network: bool,
    using: Programs | None,
) -> tuple[Output, int | None, bool] | None:
    """Run *argv* in the view of the fresh bwrap *line* (`_bwrap.bwrap_argv`, the pinned roots
    open), with *using* (`programs`); ``None`` when no view could start it (nothing ran: start
    it the old way)."""
    if not ENABLED or using is None:
        return None
    views = shared()
    lease = await views.lease(line, missing, network=network, using=using)
    if lease is None:
        return None
    views.used += 1
    try:
        prepared = _prepared(network, lease.plan, limits)
        return await run(
            argv, cwd=Path(lease.cwd), env=env, timeout=timeout, cap=cap, landlock=prepared,
            sink=sink, server=lease.server,
        )  # fmt: skip
    except Unstarted:  # its holder or server is gone, or it is stale: not used again
        lease.server.stale = True
        return None
    finally:
        lease.release()


@functools.lru_cache(maxsize=64)
def _prepared(
    network: bool, plan: tuple[tuple[Any, ...], ...], limits: tuple[tuple[int, int], ...]
) -> Prepared:
    """A view's request: its plan, the limits and the filter, no Landlock (made once each)."""
    return Prepared(-1, filter_bpf(not network), 0, plan, limits)
