"""How a call and its result want to be shown: provider-neutral cards a UI switches on by ``card``.

Presenters are pure functions of the call's arguments (and result); they return one of these views,
or ``None`` to fall back to the generic card.

The union of card kinds is **open**. Every card has a ``card`` tag and a ``title``; besides the
seed's three kinds (``generic``, ``terminal``, ``diff``), dsh has ``read`` and ``search`` result
cards, and later versions may add more. A consumer that meets a kind it does not know shows it
as a generic card: the card's ``title`` and the result's own content. The CLI and the MCP server
follow that rule.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Literal, TypeAlias, final

import attrs

from ._content import ContentBlock, to_content
from ._json import freeze, thaw

__all__ = [
    "CallView",
    "DiffCallView",
    "DiffResultView",
    "FileDiff",
    "FileLocation",
    "GenericCallView",
    "GenericResultView",
    "ReadResultView",
    "ResultView",
    "SearchResultView",
    "TerminalCallView",
    "TerminalResultView",
    "ToolCallKind",
    "view_to_json",
]


class ToolCallKind(enum.StrEnum):
    """Picks an icon for a generic card."""

    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    FETCH = "fetch"
    OTHER = "other"


@final
@attrs.frozen
class FileLocation:
    """A file a call reads or changes; ``line`` is 1-based."""

    path: str
    line: int | None = None


@final
@attrs.frozen
class FileDiff:
    """One file's change; ``old_text`` is ``None`` for a new file."""

    path: str
    old_text: str | None
    new_text: str


def _content(value: Any) -> tuple[ContentBlock, ...]:
    return to_content(value)


def _locations(value: Iterable[FileLocation]) -> tuple[FileLocation, ...]:
    return tuple(value)


def _diffs(value: Iterable[FileDiff]) -> tuple[FileDiff, ...]:
    return tuple(value)


def _lines(value: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    return tuple((int(n), str(t)) for n, t in value)


def _matches(value: Iterable[tuple[str, int, str]]) -> tuple[tuple[str, int, str], ...]:
    return tuple((str(p), int(n), str(t)) for p, n, t in value)


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@final
@attrs.frozen(kw_only=True)
class GenericCallView:
    """The default pending card: a title, an icon kind, and the raw input."""

    title: str
    kind: ToolCallKind = ToolCallKind.OTHER
    raw_input: Any = attrs.field(default=None, converter=freeze)
    content: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_content)
    locations: tuple[FileLocation, ...] = attrs.field(default=(), converter=_locations)
    card: Literal["generic"] = attrs.field(default="generic", init=False)


@final
@attrs.frozen(kw_only=True)
class TerminalCallView:
    """A shell command about to run; ``title`` is the command."""

    title: str
    description: str | None = None
    cwd: str | None = None
    card: Literal["terminal"] = attrs.field(default="terminal", init=False)


@final
@attrs.frozen(kw_only=True)
class DiffCallView:
    """A file create or edit about to happen."""

    title: str
    diffs: tuple[FileDiff, ...] = attrs.field(converter=_diffs)
    locations: tuple[FileLocation, ...] = attrs.field(default=(), converter=_locations)
    card: Literal["diff"] = attrs.field(default="diff", init=False)


@final
@attrs.frozen(kw_only=True)
class GenericResultView:
    """The default completed card: a title and the content."""

    title: str | None = None
    content: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_content)
    card: Literal["generic"] = attrs.field(default="generic", init=False)


@final
@attrs.frozen(kw_only=True)
class TerminalResultView:
    """A finished command: its output and either an ``exit_code`` or the ``signal`` that ended it."""

    title: str | None = None
    output: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    card: Literal["terminal"] = attrs.field(default="terminal", init=False)


@final
@attrs.frozen(kw_only=True)
class DiffResultView:
    """A finished file change: the applied hunks, or the whole file when it is new."""

    title: str | None = None
    diffs: tuple[FileDiff, ...] = attrs.field(converter=_diffs)
    card: Literal["diff"] = attrs.field(default="diff", init=False)


@final
@attrs.frozen(kw_only=True)
class ReadResultView:
    """Lines read from a file: ``lines`` are ``(number, text)`` pairs, numbered from 1."""

    path: str
    offset: int
    lines: tuple[tuple[int, str], ...] = attrs.field(converter=_lines)
    total_lines: int
    title: str | None = None
    card: Literal["read"] = attrs.field(default="read", init=False)


@final
@attrs.frozen(kw_only=True)
class SearchResultView:
    """Search hits: ``matches`` are ``(path, line, text)``, or ``paths`` for a file search."""

    title: str | None = None
    matches: tuple[tuple[str, int, str], ...] = attrs.field(default=(), converter=_matches)
    paths: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    truncated: bool = False
    total: int = 0
    card: Literal["search"] = attrs.field(default="search", init=False)


CallView: TypeAlias = GenericCallView | TerminalCallView | DiffCallView
ResultView: TypeAlias = (
    GenericResultView | TerminalResultView | DiffResultView | ReadResultView | SearchResultView
)
CALL_VIEWS = (GenericCallView, TerminalCallView, DiffCallView)
RESULT_VIEWS = (
    GenericResultView,
    TerminalResultView,
    DiffResultView,
    ReadResultView,
    SearchResultView,
)


def view_to_json(view: CallView | ResultView) -> dict[str, Any]:
    """A plain JSON object for a view, its ``card`` tag first.

    The ``card`` tag is the discriminator a UI switches on. The union is open: treat a kind you
    do not know as ``generic`` (show its ``title`` and the result's content).
    """

    def plain(value: Any) -> Any:
        if attrs.has(type(value)):
            if hasattr(value, "to_json"):
                return value.to_json()
            return {f.name: plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return thaw(value)

    body = {f.name: plain(getattr(view, f.name)) for f in attrs.fields(type(view))}
    return {"card": body.pop("card"), **body}
