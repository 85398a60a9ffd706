"""Whether a confined server's sandbox still hides what it hid when the server started.

A command gets a sandbox made for it; a mounted server keeps the one it started in, for hours.
What that sandbox hides was decided then, and the host may change it under a running server:

- renaming what is hidden (``mv ~/.aws ~/.aws-old; mkdir ~/.aws``), or a directory above it:
  a mask is a mount on a directory entry, not on a name, so it goes with the renamed entry and
  the path shows the new one (no mount event comes of a rename);
- rewriting a hidden file by renaming a new one over it (what editors and credential tools
  do: ``docker login``, ``~/.claude.json``): the kernel detaches the mask from the file that
  went;
- making a ``deny_read`` entry that was missing at the start (``aws configure``): nothing hid
  it, since there was nothing to hide.

`Hiding` is what a server's sandbox was planned to hide: where its mounts go (`places`: the
bwrap line's, or the Landlock mount plan's) and the ``deny_read`` entries missing when it was
planned (`absent`). `Watch` holds the server's mount table (``/proc/PID/mountinfo`` of the
server's first process, in its mount namespace) and says whether each place is still a mount
point there, no mount came over one, and each absent entry is still absent (`Watch.moved`).
The ``mcp`` plugin asks before a call is sent and after its answer came
(`dsh_plugins_builtin._mcp._tooldef`), and restarts the server in a fresh sandbox when the
answer is no. A server also reads when no call is under way (a background task, a poll of
its own), so `Watch.sentinel` asks as soon as something happens: a thread blocks on the same
events and, when the sandbox moved, has the server killed and restarted at once rather than
at the next call (what a ``deny_read`` glob covers has no event: that stays at calls).

Reading the table (tens of microseconds for a few dozen mounts) and looking up every absent
entry is the exact check. It runs only when something it looks at may have changed: a mount
event (``POLLPRI`` on the table) or an inotify event on a directory that holds a place, an
absent entry or one of their directories up to ``/`` (an entry made, removed or renamed there,
or the directory itself renamed or removed). The directories are watched before the exact
check that arms them, so nothing can change unseen in between; otherwise a check is one
``poll`` of two descriptors. Where inotify cannot be had (no instance or watch left for the
user, a directory on the way it may pass through but not read), every check is exact.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from .._sandbox import _ruleset, _viewtable
from .._sandbox._denyglob import matching
from .._sandbox._errors import SandboxUnavailable

__all__ = ["ENDED", "PACE", "RESTARTED", "Hiding", "Watch", "absent", "first_child"]

PACE = 0.002
"""Seconds between two checks of the sentinel, at least: events that come meanwhile are one."""
ENDED = "it ended"
RESTARTED = "it was restarted meanwhile"

_PRIVATE = ("/dev/", "/proc/")  # the sandbox's own /dev and /proc: the host has no names there
# inotify(7): an entry made, removed or moved in or out of a directory; the directory itself
# removed or moved; a directory only, never through a link.
_IN_EVENTS = 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


@attrs.frozen
class Hiding:
    """What a confined server's sandbox hides, as planned when it was started.

    Attributes:
        places: Where its mounts are (each one must be a mount point in its table).
        absent: The ``deny_read`` entries that did not exist then (nothing covers them).
        patterns: The ``deny_read`` globs (`_sandbox._denyglob`), matched again at each check:
            what one covers may be made anywhere under its literal directory, which no event
            of a few watched directories tells.
        keep: The roots a glob never hides (the server's writable roots).
        matched: What the globs covered then (each hidden by its sandbox).
    """

    places: frozenset[str]
    absent: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    matched: frozenset[str] = frozenset()

    def new_match(self) -> str | None:
        """Why the sandbox no longer hides what the globs cover: a path one covers now that
        it did not then; ``None`` when there is none (or no glob). A walk of each glob's
        directory: blocking, so not part of `Watch.moved` (`_tooldef._moved` runs it in a
        worker thread)."""
        if not self.patterns:
            return None
        try:
            now = matching(self.patterns, [Path(root) for root in self.keep])
        except SandboxUnavailable as exc:
            return f"what its deny_read globs cover cannot be checked ({exc})"
        for path, _ in now:
            if str(path) not in self.matched:
                return f"{path}, covered by a deny_read glob, was made since it started"
        return None

    def directories(self) -> list[str]:
        """The existing directories that hold a place or an absent entry, and theirs up to
        ``/`` (one that is missing is made in one of them), each after the one that holds it:
        watched in this order, a directory replaced after its parent is watched makes an
        event there, and one replaced before is watched as it is now."""
        out: dict[str, None] = {}
        for path in (*self.places, *self.absent):
            if path.startswith(_PRIVATE):
                continue
            while path != "/":
                path = os.path.dirname(path)
                if path in out:
                    break
                if os.path.isdir(path):
                    out[path] = None
        return sorted(out, key=lambda path: (path != "/", path.count("/")))


def absent(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Those of *paths* that do not exist now (not even as a dangling link)."""
    return tuple(path for path in paths if not os.access(path, os.F_OK, follow_symlinks=False))


def first_child(pid: int) -> int:
    """The first child of process *pid* (bwrap's, or the Landlock launcher's: the process that
    made the server's mount namespace); `ProcessLookupError` when it has none."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as file:
            children = [int(child) for child in file.read().split()]
    except FileNotFoundError:  # a kernel built without CONFIG_PROC_CHILDREN: ask every process
        children = sorted(_children(pid))
    if not children:
        raise ProcessLookupError(f"process {pid} has no child")
    return children[0]


def _children(pid: int) -> list[int]:
    """The processes whose parent is *pid*, from each one's ``/proc/PID/stat``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the name, which may hold spaces
        if len(fields) > 1 and fields[1] == str(pid).encode():
            found.append(int(entry))
    return found


class Watch:
    """A running server's mount table, checked against its `Hiding` (`moved`)."""

    def __init__(self, pid: int, hiding: Hiding) -> None:
        """Open the table of process *pid* (in the server's mount namespace); raise `OSError`
        when it cannot be read, and `ValueError` when it does not show every place already."""
        self._lock = threading.Lock()  # `moved` may run in two threads, `close` in a third
        self.hiding = hiding
        self._pid = pid
        self._stop = -1  # the write end of the sentinel's pipe: closed, the sentinel ends
        self._fd = os.open(f"/proc/{pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        self._notify = -1
        try:
            self._table = _viewtable.read(self._fd)
            self._points = _viewtable.mount_points(self._table)
            self._events = select.poll()
            self._events.register(self._fd, select.POLLPRI | select.POLLERR)
            self._events.poll(0)  # (reading it again reports only changes after this)
            self._notify = _inotify()
            if self._notify >= 0:
                self._events.register(self._notify, select.POLLIN)
        except BaseException:
            self.close()
            raise
        if not hiding.places <= self._points:
            self.close()
            raise ValueError("its sandbox is not as planned (a hidden path moved as it started)")
        self._armed = False
        self._arm()

    def moved(self) -> str | None:
        """``None`` while the sandbox hides what it did at the start; else what changed."""
        with self._lock:
            if self._fd < 0:
                return RESTARTED
            if self._armed and not self._events.poll(0):
                return None
            if self._notify < 0:
                return self._exact()
            return self._arm()

    def _arm(self) -> str | None:
        """Watch the directories anew (what came before is read and dropped), then check
        exactly: the answer stands until the next event."""
        self._armed = False
        if self._notify >= 0:
            _drain(self._notify)
            if not _watch_all(self._notify, self.hiding.directories()):
                os.close(self._notify)  # no watch left for this user: exact checks from now
                self._events.unregister(self._notify)
                self._notify = -1
        why = self._exact()
        self._armed = why is None and self._notify >= 0
        return why

    def _exact(self) -> str | None:
        try:
            table = _viewtable.read(self._fd)
        except OSError:
            return ENDED
        if not table:
            return ENDED
        if table != self._table:
            points = _viewtable.mount_points(table)
            if not self.hiding.places <= points:
                return "a path its sandbox hides was renamed, replaced or removed on the host"
            if _covering(points - self._points, self.hiding.places):
                return "the host mounted a file system over a path its sandbox hides"
            self._table, self._points = table, points  # an automounter's, say: nothing moved
        for path in self.hiding.absent:
            if os.access(path, os.F_OK, follow_symlinks=False):
                return f"{path}, hidden by deny_read, was made since it started"
        return None

    def sentinel(self, on_moved: Callable[[str], object]) -> None:
        """Check in a thread of its own each time something happens that could move the
        sandbox (a mount event, an entry made, removed or renamed in a watched directory),
        not only when a call asks; call *on_moved* with what moved, once, from that thread.
        It ends then, when the server ends, or at `close`.

        Raises:
            OSError: the server's mount table cannot be opened again.
        """
        # Its own descriptor of the table: each open file keeps its own "changed since" mark,
        # so the sentinel's poll does not take the event from the calls' check (nor theirs).
        table = os.open(f"/proc/{self._pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with self._lock:
                notify = os.dup(self._notify) if self._notify >= 0 else -1
                wake, self._stop = os.pipe2(os.O_CLOEXEC)
        except BaseException:
            os.close(table)
            raise
        threading.Thread(
            target=self._sentinel, args=(table, notify, wake, on_moved), daemon=True,
            name=f"dsh-mcp-watch-{self._pid}",
        ).start()  # fmt: skip

    def _sentinel(
        self, table: int, notify: int, wake: int, on_moved: Callable[[str], object]
    ) -> None:
        try:
            events = select.poll()
            events.register(table, select.POLLPRI | select.POLLERR)
            events.poll(0)  # (only changes after this are reported)
            events.register(wake, select.POLLIN)
            if notify >= 0:
                events.register(notify, select.POLLIN)
            while True:
                why = self.moved()  # first at once: what came before the table was opened
                checked = time.monotonic()
                if why is not None:
                    if why not in (ENDED, RESTARTED):
                        on_moved(why)
                    return
                if notify >= 0 and self._notify < 0:  # checks are exact from now: no events
                    events.unregister(notify)
                    os.close(notify)
                    notify = -1
                ready = dict(events.poll())
                if wake in ready or ready.get(table, 0) & (select.POLLHUP | select.POLLNVAL):
                    return
                # A directory on the way that changes all the time (a build's files in /tmp)
                # costs one exact check per PACE, not one per event.
                time.sleep(max(0.0, checked + PACE - time.monotonic()))
        finally:
            for fd in (table, notify, wake):
                if fd >= 0:
                    os.close(fd)

    def close(self) -> None:
        with self._lock:
            for fd in (self._fd, self._notify, self._stop):
                if fd >= 0:
                    os.close(fd)  # (the sentinel's pipe closed: it wakes and ends)
            self._fd = self._notify = self._stop = -1


def _inotify() -> int:
    """A new inotify descriptor (non-blocking), or -1 where there is none to be had."""
    fd: int = _ruleset._libc().inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    return fd if fd >= 0 else -1


def _watch_all(fd: int, directories: list[str]) -> bool:
    """Watch each of *directories*; false when one cannot be (no watch left for the user, a
    directory it may pass through but not read, a link to one): every check is exact then.
    One that went meanwhile needs no watch: its removal was seen in the directory that holds
    it, watched before it."""
    libc = _ruleset._libc()
    flags = _IN_EVENTS | _IN_ONLYDIR | _IN_DONT_FOLLOW
    for path in directories:
        failed = libc.inotify_add_watch(fd, os.fsencode(path), flags) < 0
        if failed and ctypes.get_errno() != errno.ENOENT:
            return False
    return True


def _drain(fd: int) -> None:
    """Read and drop every event queued on *fd*."""
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:  # (events are not looked at: any one means "check")
            return


def _covering(new: set[str], places: frozenset[str]) -> bool:
    """Whether a mount point in *new* is one of *places* or a directory above one."""
    for point in new:
        below = point.rstrip("/") + "/"
        if any(place == point or place.startswith(below) for place in places):
            return True
    return False
