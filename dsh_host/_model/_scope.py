"""An agent's scope, and the per-scope filter over global tools (re-exported by `._values`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import final

import attrs

__all__ = ["Scope", "ToolRestriction"]


@final
@attrs.frozen
class Scope:
    """An agent's scope key; a scope sees its ancestors' tools, guards and restrictions."""

    name: str
    parent: Scope | None = None

    def chain(self) -> tuple[Scope, ...]:
        """This scope's ancestors, farthest first, then the scope itself."""
        out: list[Scope] = []
        scope: Scope | None = self
        while scope is not None:
            out.append(scope)
            scope = scope.parent
        return tuple(reversed(out))


def _optional_names(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError("ToolRestriction names must be a list of tool names, not a string")
    return frozenset(value)


@final
@attrs.frozen
class ToolRestriction:
    """A per-scope filter over global tools: ``allow`` keeps only those, ``deny`` removes those."""

    allow: frozenset[str] | None = attrs.field(default=None, converter=_optional_names)
    deny: frozenset[str] | None = attrs.field(default=None, converter=_optional_names)

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and (
            self.deny is None or name not in self.deny
        )
