"""Where a path argument points: every absolute spelling of it, as the rules match paths.

`Place` holds the workspace (as given and with symlinks resolved, resolved once at start) and
answers, per path argument, its lexical and real absolute paths (`targets`), resolving only
what lies below the workspace (`realpath`), and whether a path lies inside it (`inside`).
"""

from __future__ import annotations

import os
import posixpath
import stat
from typing import Any, final

from ._grammar import normalise

__all__ = ["Place"]


@final
class Place:
    """The workspace's spellings, and the resolution of path arguments against them."""

    def __init__(self, workspace: tuple[str, ...]) -> None:
        self.workspace = workspace

    def targets(self, value: Any) -> tuple[str, ...] | None:
        """Every absolute spelling of one path argument (absent: the workspace root)."""
        if value is None:
            value = "."
        if not isinstance(value, str) or "\x00" in value:
            return None
        spelled = [value, os.path.expanduser(value)] if value.startswith("~") else [value]
        out: list[str] = []
        for text in spelled:
            for root in self.workspace[:1]:
                joined = posixpath.join(root, text)
                lexical = normalise(joined)
                out.append(lexical)
                try:
                    out.append(self.realpath(lexical))
                    if ".." in text.split("/"):  # the kernel follows l before l/..: so does this
                        out.append(os.path.realpath(joined))
                except (OSError, ValueError):
                    return None
        return tuple(dict.fromkeys(out))

    def realpath(self, lexical: str) -> str:
        """``os.path.realpath(lexical)``, resolving only what lies below the workspace.

        The workspace's own real path was resolved once, at start (`workspace`, as every rule
        here assumes); below it, a component that exists and is no symbolic link is taken as
        it is (one ``lstat``). Anything else (a link, a missing component, a path outside the
        workspace) is resolved in full by ``os.path.realpath``, so the answer is always
        ``os.path.realpath``'s as of the workspace the host started with.
        """
        root = self.workspace[0]
        if lexical == root:
            return self.workspace[-1]
        if root == "/" or not lexical.startswith(root) or lexical[len(root)] != "/":
            return os.path.realpath(lexical)
        path = self.workspace[-1].rstrip("/")
        for part in lexical[len(root) + 1 :].split("/"):
            path = f"{path}/{part}"
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                return os.path.realpath(lexical)
            if stat.S_ISLNK(mode):
                return os.path.realpath(lexical)
        return path

    def inside(self, path: str) -> bool:
        return any(
            path == root or path.startswith(root.rstrip("/") + "/") for root in self.workspace
        )
