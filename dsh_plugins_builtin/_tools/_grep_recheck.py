"""Whether a file ripgrep reported is still one the fence and the policy let grep show.

`Recheck` answers for one file; `Early` puts the files of a large output to it in a worker
thread while ripgrep still runs, so that little is left to check once it has ended.
"""

from __future__ import annotations

import contextlib
import os
import queue
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from dsh_plugins_builtin._sandbox._errors import SandboxError
from dsh_plugins_builtin._tools._ripgrep import RgMatch
from dsh_plugins_builtin._tools._search_support import (
    Policy,
)
from dsh_plugins_builtin._tools._support import Sandbox

_NOT_NAMES = ("", ".", "..")  # components that are no file's name (resolved in full if met)


def _decoded(name: str) -> str:
    """``name`` as it reads in ripgrep's output once decoded (bytes not UTF-8 as U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Recheck:
    """Is a file ripgrep reported still one the fence and the policy let us show?

    The search directory is real and fenced, so a path below it with no symlink in it is
    inside the fence: only a path whose real location differs (a symlink swapped in) is put
    to the fence again. Directories are resolved one component at a time below the search
    directory, each level once (one ``lstat``; a symlink is resolved in full); each file costs
    one ``lstat``. Policy is asked about each real path unless it is in ``allowed`` (real paths
    policy already let through during this call: ``dsh_path_denied`` is pure).

    The directories resolved are valid only for files ripgrep had reported (so read) before
    they were resolved: a directory swapped for a symlink afterwards would lead a later file
    through the old answer. Whoever asks about files ripgrep reports later calls `renew`
    first (`Early` before each batch, `._grep_rg` before the check at the end).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        cwd: Path,
        policy: Policy,
        allowed: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        self._sandbox = sandbox
        self._base = str(cwd).rstrip("/")
        self._policy = policy
        self._allowed = allowed
        self._dirs: dict[str, str | None] = {"": self._base}  # relative dir -> real (None: gone)

    def renew(self) -> Recheck:
        """Forget the directories resolved so far (see the class); itself."""
        self._dirs = {"": self._base}
        return self

    def _real_dir(self, rel: str) -> str | None:
        """The real path of the directory ``rel`` below the search directory (cached)."""
        known = self._dirs.get(rel, "")
        if known != "":
            return known
        parent, _, name = rel.rpartition("/")
        real_parent = self._real_dir(parent)
        real: str | None = None
        if real_parent is not None:
            candidate = f"{real_parent}/{name}"
            try:
                st = os.lstat(candidate)
            except OSError:
                st = None
            if st is not None and (stat.S_ISLNK(st.st_mode) or name in _NOT_NAMES):
                real = os.path.realpath(candidate)
            elif st is not None and stat.S_ISDIR(st.st_mode):
                real = candidate
        self._dirs[rel] = real
        return real

    def exact(self, rel: str) -> str | None:
        """The real name of the file ripgrep printed as ``rel``, whose bytes that are not UTF-8
        were decoded to U+FFFD: each such component is the one entry of its directory that
        decodes to it (``None`` when none or several do: nothing to vouch for)."""
        parts = rel.split("/")
        directory = self._base
        for index, part in enumerate(parts):
            if "\ufffd" in part:
                try:
                    names = os.listdir(directory)
                except OSError:
                    return None
                fits = [name for name in names if _decoded(name) == part]
                if len(fits) != 1:
                    return None
                parts[index] = fits[0]
            directory = f"{directory}/{parts[index]}"
        return "/".join(parts)

    def readable(self, rel: str) -> bool:
        directory, _, name = rel.rpartition("/")
        if name in _NOT_NAMES:
            return False  # ripgrep prints files; never vouch for a name that walks
        real_dir = self._real_dir(directory)
        if real_dir is None:
            return False  # gone since ripgrep read it: nothing to vouch for
        lexical_dir = f"{self._base}/{directory}" if directory else self._base
        real = f"{real_dir}/{name}"
        try:
            if stat.S_ISLNK(os.lstat(real).st_mode):
                real = os.path.realpath(real)
        except OSError:
            return False  # gone since ripgrep read it: nothing to vouch for
        if real_dir != lexical_dir or real != f"{lexical_dir}/{name}":
            try:
                self._sandbox.check_read(real)
            except SandboxError:
                return False
        # Not counted: ripgrep reports only files that matched, so a count here would tell
        # whether a withheld file holds the pattern (no sandbox hides it under full access).
        return real in self._allowed or not self._policy.denied(real, count=False)


class Early:
    """`Recheck` of the files ripgrep reports, in a worker thread while it still runs.

    ``grep``'s re-check (`._grep_rg`) used to begin once ripgrep had ended; for an output of
    many files it was most of what followed ripgrep. `take` (the output's ``seen``, on the
    event loop, `._ripgrep.RgStream`) hands each batch's new files to a thread started at the
    first batch, which asks `Recheck.readable` about each; `answers` waits for it and gives
    what it found. Each answer is still given after ripgrep reported that file (so after it
    read it), as the re-check at the end was; a file is asked about once either way. A name
    with bytes that are not UTF-8 (U+FFFD), or one whose question raised, is left to the
    re-check at the end, as is whatever `take` is not given (the output's last, small batch).
    Only for a search with no ``dsh_path_denied`` plugin: a plugin's walk decides first what
    is withheld, and what it let through is not asked again (`Recheck`'s ``allowed``).
    """

    def __init__(self, check: Recheck) -> None:
        self._check = check
        self._queue: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._asked: set[str] = set()
        self._answers: dict[str, bool] = {}
        self._ended: trio.Event | None = None  # set once the thread has ended (it started)
        self._token = trio.lowlevel.current_trio_token()
        self._forgotten = False
        self.check = check

    def take(self, matches: Sequence[RgMatch]) -> None:
        """Queue the files of ``matches`` not asked about yet (on the event loop)."""
        new = []
        for match in matches:
            rel = match.path
            if rel not in self._asked and "\ufffd" not in rel:
                self._asked.add(rel)
                new.append(rel)
        if not new:
            return
        self._queue.put(new)
        if self._ended is None:
            self._ended = trio.Event()
            trio.lowlevel.start_thread_soon(self._work, self._deliver)

    def stop(self) -> None:
        """No more files: the thread ends once it has asked about those queued."""
        self._queue.put(None)

    def forget(self) -> None:
        """The output taken is not the one shown (ripgrep runs again): `answers` is empty."""
        self._forgotten = True

    async def answers(self) -> Mapping[str, bool]:
        """`stop`, wait for the thread, and give its answers (file -> readable); after it,
        `check` is the event loop's again, its directories resolved anew (`Recheck.renew`)."""
        self.stop()
        if self._ended is None:
            return {}
        await self._ended.wait()
        self._check.renew()
        return {} if self._forgotten else self._answers

    def _work(self) -> None:
        readable, answers = self._check.readable, self._answers
        while (batch := self._queue.get()) is not None:
            self._check.renew()  # each batch's files were reported before it was handed on
            for rel in batch:
                try:
                    answers[rel] = readable(rel)
                except Exception:  # asked again at the end, where it is raised
                    continue

    def _deliver(self, _: object) -> None:  # the thread's outcome: nothing it raises
        ended = self._ended
        assert ended is not None
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(ended.set)
