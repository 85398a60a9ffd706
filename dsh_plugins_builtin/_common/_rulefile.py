"""Adding allow rules to the config file a host was started with (the approval prompt's
"always allow"), keeping the rest of the file as it was written (comments, order, layout).

The file is edited with `tomlkit` (a TOML library that round-trips a document) and replaced
atomically (a temporary file beside it, its mode copied, then renamed over it), so a reader
never sees half a file. Refused, with a sentence saying why and what to do instead, when there
is no such file (a host configured from a dict or the built-in defaults), when the path is a
symbolic link or not a regular file, when the host's user may not write it, or when it does
not parse.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["RuleFileError", "add_allow_rules"]


class RuleFileError(Exception):
    """Why the rules were not written (the message says what to do)."""


def add_allow_rules(source: str | None, rules: Sequence[str]) -> list[str]:
    """Append *rules* to ``[plugin.permissions] allow`` of the config file *source*.

    ``pyproject.toml`` gets them under ``[tool.dsh.plugin.permissions]``. Rules the list holds
    already are not repeated. Returns the rules added.

    Raises:
        RuleFileError: nothing was written (see the module docstring).
    """
    import tomlkit  # the approval prompt's "always" answer only

    if source is None:
        raise RuleFileError(
            "the host was not started from a config file (built-in defaults, or a dict), so "
            "there is no file to add the rule to; pass --config or create dsh.toml"
        )
    path = Path(source)
    _check_writable(path)
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomlkit.exceptions.ParseError) as exc:
        raise RuleFileError(f"{path} cannot be read as TOML ({exc}); nothing was written") from None
    keys = ("tool", "dsh", "plugin", "permissions") if path.name == "pyproject.toml" else (
        "plugin", "permissions")  # fmt: skip
    table: Any = document
    for key in keys:
        if key not in table:
            table[key] = tomlkit.table(is_super_table=key != "permissions")
        table = table[key]
    allow = table.get("allow")
    if allow is None:
        allow = table["allow"] = tomlkit.array()
    added = [rule for rule in dict.fromkeys(rules) if rule not in allow]
    allow.extend(added)
    _replace(path, tomlkit.dumps(document))
    return added


def _check_writable(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise RuleFileError(f"{path}, the file the host was started with, is gone") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise RuleFileError(
            f"{path} is not a regular file (a symbolic link?); add the rule to the file it "
            "points to by hand"
        )
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise RuleFileError(
            f"{path} is protected from this user (it may not write the file or its "
            "directory); add the rule by hand as its owner"
        )


def _replace(path: Path, text: str) -> None:
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
