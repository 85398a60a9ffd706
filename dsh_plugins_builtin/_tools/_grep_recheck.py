"""Whether a file ripgrep reported is still one the fence and the policy let grep show."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dsh_plugins_builtin._sandbox._errors import SandboxError
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
