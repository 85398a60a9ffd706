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
server's first process, in its mount namespace) and says, in a few microseconds, whether each
place is still a mount point there and each absent entry still absent (`Watch.moved`). The
``mcp`` plugin asks before a call is sent and after its answer came
(`dsh_plugins_builtin._mcp._tooldef`), and restarts the server in a fresh sandbox when the
answer is no.
"""

from __future__ import annotations

import os
import select
import threading
import time

import attrs

from .._sandbox import _viewtable

__all__ = ["SLACK_NS", "Hiding", "Watch", "absent", "first_child"]

SLACK_NS = 1_000_000_000
"""A directory whose times are newer than this at a check is not trusted to show a change."""
_PRIVATE = ("/dev/", "/proc/")


@attrs.frozen
class Hiding:
    """What a confined server's sandbox hides, as planned when it was started.

    Attributes:
        places: Where its mounts are (each one must be a mount point in its table).
        absent: The ``deny_read`` entries that did not exist then (nothing covers them).
    """

    places: frozenset[str]
    absent: tuple[str, ...]


def absent(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Those of *paths* that do not exist now (not even as a dangling link)."""
    return tuple(path for path in paths if not os.access(path, os.F_OK, follow_symlinks=False))


def first_child(pid: int) -> int:
    """The first child of process *pid* (bwrap's, or the Landlock launcher's: the process that
    made the server's mount namespace); `ProcessLookupError` when it has none."""
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as file:
        children = file.read().split()
    if not children:
        raise ProcessLookupError(f"process {pid} has no child")
    return int(children[0])


class Watch:
    """A running server's mount table, checked against its `Hiding` (`moved`).

    Reading the table (tens of microseconds for a few dozen mounts) and looking up every
    absent entry is the exact check. It is skipped while nothing it looks at can have
    changed: no mount event came (``POLLPRI`` on the table), and no directory that holds a
    hidden place, an absent entry or one of their ancestors changed (a rename, a new or
    replaced entry changes its directory's times; no program can set a change time back). A
    directory changed within `SLACK_NS` of a check may change again within the same tick of
    the file system's clock with the same times: until it is older, every check is exact.
    """

    def __init__(self, pid: int, hiding: Hiding) -> None:
        """Open the table of process *pid* (in the server's mount namespace); raise `OSError`
        when it cannot be read, and `ValueError` when it does not show every place already."""
        self._lock = threading.Lock()  # `moved` may run in two threads, `close` in a third
        self._fd = os.open(f"/proc/{pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        self.hiding = hiding
        try:
            self._table = _viewtable.read(self._fd)
            self._points = _viewtable.mount_points(self._table)
            self._events = select.poll()
            self._events.register(self._fd, select.POLLPRI | select.POLLERR)
            self._events.poll(0)  # (reading it again reports only changes after this)
        except BaseException:
            os.close(self._fd)
            raise
        if not hiding.places <= self._points:
            self.close()
            raise ValueError("its sandbox is not as planned (a hidden path moved as it started)")
        self._dirs: tuple[tuple[str, tuple[int, int]], ...] = ()  # () : check exactly
        self._stamp()

    def moved(self) -> str | None:
        """``None`` while the sandbox hides what it did at the start; else what changed."""
        with self._lock:
            if self._fd < 0:
                return "it was restarted meanwhile"
            if self._dirs and not self._events.poll(0) and _same(self._dirs):
                return None
            why = self._exact()
            if why is None:
                self._stamp()
            return why

    def _exact(self) -> str | None:
        try:
            table = _viewtable.read(self._fd)
        except OSError:
            return "it ended"
        if not table:
            return "it ended"
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

    def _stamp(self) -> None:
        """Stamp the directories that hold the places and absent entries, and theirs up to
        ``/`` (a missing one's making changes the one that holds it); trusted only when none
        changed within `SLACK_NS`."""
        now = time.time_ns()
        dirs: dict[str, tuple[int, int]] = {}
        for path in (*self.hiding.places, *self.hiding.absent):
            if path.startswith(_PRIVATE):
                continue  # in the sandbox's own /dev or /proc: the host has no name there
            while path != "/":
                path = os.path.dirname(path)
                if path in dirs:
                    break
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if now - st.st_ctime_ns < SLACK_NS:  # (a change time is never set back)
                    self._dirs = ()
                    return
                dirs[path] = (st.st_ino, st.st_ctime_ns)
        self._dirs = tuple(dirs.items())

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _same(dirs: tuple[tuple[str, tuple[int, int]], ...]) -> bool:
    """Whether each of *dirs* is the same directory, with the same change time."""
    lstat = os.lstat
    try:
        for path, (ino, ctime) in dirs:
            st = lstat(path)
            if st.st_ctime_ns != ctime or st.st_ino != ino:
                return False
    except OSError:
        return False
    return True


def _covering(new: set[str], places: frozenset[str]) -> bool:
    """Whether a mount point in *new* is one of *places* or a directory above one."""
    for point in new:
        below = point.rstrip("/") + "/"
        if any(place == point or place.startswith(below) for place in places):
            return True
    return False
