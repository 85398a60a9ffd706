"""Diff hunks of a write or an edit, for ``result.meta`` (the card shows them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["META_DIFF_MAX_CHARS", "diff_hunks", "split_lines"]

META_DIFF_MAX_CHARS = 256 * 1024  # larger diffs are left out of result.meta (the card falls back)
_DIFF_WORK_MAX = 25_000_000  # line pairs SequenceMatcher may compare before we give up on hunks


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` ends a line."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


Opcode = tuple[str, int, int, int, int]


def _opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    limit = min(len(a), len(b))
    p = 0
    while p < limit and a[p] == b[p]:
        p += 1
    s = 0
    while s < limit - p and a[-1 - s] == b[-1 - s]:
        s += 1
    ma, mb = a[p : len(a) - s], b[p : len(b) - s]
    codes: list[Opcode] = [("equal", 0, p, 0, p)] if p else []
    if len(ma) * len(mb) > _DIFF_WORK_MAX:
        codes.append(("replace", p, p + len(ma), p, p + len(mb)))
    else:
        import difflib  # the first edit's diff, not every start

        matcher = difflib.SequenceMatcher(None, ma, mb, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, i1 + p, i2 + p, j1 + p, j2 + p))
    if s:
        codes.append(("equal", len(a) - s, len(a), len(b) - s, len(b)))
    return codes


def _groups(codes: list[Opcode], n: int) -> Iterator[list[Opcode]]:
    """difflib's ``get_grouped_opcodes`` over precomputed opcodes."""
    if not codes:
        return
    if codes[0][0] == "equal":
        _, i1, i2, j1, j2 = codes[0]
        codes[0] = ("equal", max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes[-1][0] == "equal":
        _, i1, i2, j1, j2 = codes[-1]
        codes[-1] = ("equal", i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def diff_hunks(path: str, old: str, new: str, context: int = 3) -> list[dict[str, Any]] | None:
    """The changed hunks of ``old -> new`` with ``context`` lines around each, for a diff card.

    Returns:
        ``[{"path", "old_text", "new_text", "old_start", "new_start"}, ...]`` (1-based starts), or
        ``None`` when the hunks are too large to keep in ``result.meta``.
    """
    a, b = split_lines(old), split_lines(new)
    hunks: list[dict[str, Any]] = []
    size = 0
    for group in _groups(_opcodes(a, b), context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        old_text, new_text = "".join(a[i1:i2]), "".join(b[j1:j2])
        size += len(old_text) + len(new_text)
        if size > META_DIFF_MAX_CHARS:
            return None
        hunks.append(
            {
                "path": path,
                "old_text": old_text,
                "new_text": new_text,
                "old_start": i1 + 1,
                "new_start": j1 + 1,
            }
        )
    return hunks
