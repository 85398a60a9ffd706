"""`ToolTable`: global and scoped tools with their restrictions and guards; it runs nothing."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import attrs

from .._model._values import Guard, Scope, ToolRestriction
from .._schema._tool import ToolDefinition, ToolSchema

__all__ = ["ToolTable"]


@attrs.define
class _Layer:
    tools: dict[str, ToolDefinition] = attrs.Factory(dict)
    owners: dict[str, str | None] = attrs.Factory(dict)
    restrictions: list[ToolRestriction] = attrs.Factory(list)
    guards: list[tuple[Guard, str]] = attrs.Factory(list)


class ToolTable:
    """Tools by name, per scope, with the restrictions and guards that apply to them.

    A scope sees the global tools, then its ancestors' (farthest first), then its own, each
    shadowing same-named ones before it. Restrictions on a scope or its ancestors filter what it
    inherits, never its own tools. Guards on a scope apply to it and its descendants.

    The table only: it runs nothing. `dsh_host.ToolRegistry` (built in ``_host``, above the
    pipeline) is this table with the pipeline handed to it.
    """

    def __init__(self) -> None:
        self._global = _Layer()
        self._scoped: dict[Scope, _Layer] = {}
        # Caches per scope go with the scope object (weak keys), so 10,000 short-lived agent
        # scopes leave nothing behind; what was registered *into* a scope stays until
        # `close_scope`.
        self._views: weakref.WeakKeyDictionary[Scope, dict[str, ToolDefinition]] = (
            weakref.WeakKeyDictionary()
        )
        self._guard_cache: weakref.WeakKeyDictionary[Scope, tuple[tuple[Guard, str], ...]] = (
            weakref.WeakKeyDictionary()
        )
        self._global_guards: tuple[tuple[Guard, str], ...] | None = None
        self.listeners: list[Callable[[], None]] = []
        """Called (on the host's thread) after each change of tools, restrictions or guards."""

    # -- tools -----------------------------------------------------------------------------

    def _layer(self, scope: Scope | None) -> _Layer:
        if scope is None:
            return self._global
        layer = self._scoped.get(scope)
        if layer is None:
            layer = self._scoped[scope] = _Layer()
        return layer

    def _changed(self) -> None:
        self._views.clear()
        self._guard_cache.clear()
        self._global_guards = None
        for listener in tuple(self.listeners):
            listener()

    def close_scope(self, scope: Scope) -> None:
        """Forget *scope* and its descendants: their tools, restrictions, guards and caches.

        Call it when an agent's scope ends. Caches alone need no call (they are held weakly and
        go with the scope object); what was registered into the scope stays until this call.
        """
        gone = [s for s in self._scoped if scope in s.chain()]
        for each in gone:
            del self._scoped[each]
        if gone:
            self._changed()
        else:
            self._views.pop(scope, None)
            self._guard_cache.pop(scope, None)

    def open_scopes(self) -> int:
        """How many scopes hold registered tools, restrictions or guards (for leak checks)."""
        return len(self._scoped)

    def register(
        self, tool: ToolDefinition, scope: Scope | None = None, *, owner: str | None = None
    ) -> Callable[[], None]:
        """Add *tool* to *scope* (global when ``None``); return a function that removes it.

        Raises:
            ValueError: the scope already has a tool of that name (the message names both owners).
            TypeError: *tool* is not a `ToolDefinition`.
        """
        if not isinstance(tool, ToolDefinition):
            raise TypeError(
                f"register() takes a ToolDefinition (from define_tool or @tool), not {tool!r}"
            )
        layer = self._layer(scope)
        if tool.name in layer.tools:
            where = "globally" if scope is None else f"in scope {scope.name!r}"
            first = layer.owners.get(tool.name)
            by = f" by plugin {first!r}" if first else ""
            again = f"; plugin {owner!r} registered it again" if owner else ""
            raise ValueError(
                f"tool {tool.name!r} is already registered {where}{by}{again}. "
                "Disable one of the plugins, or register the variant in an agent scope."
            )
        layer.tools[tool.name] = tool
        layer.owners[tool.name] = owner
        self._changed()

        def unregister() -> None:
            if layer.tools.get(tool.name) is tool:
                del layer.tools[tool.name]
                del layer.owners[tool.name]
                self._changed()

        return unregister

    def _view(self, scope: Scope) -> dict[str, ToolDefinition]:
        view = self._views.get(scope)
        if view is not None:
            return view
        chain = scope.chain()
        inherited = dict(self._global.tools)
        restrictions: list[ToolRestriction] = []
        for ancestor in chain:
            layer = self._scoped.get(ancestor)
            if layer is None:
                continue
            restrictions.extend(layer.restrictions)
            if ancestor is not scope:
                inherited.update(layer.tools)
        view = {n: t for n, t in inherited.items() if all(r.admits(n) for r in restrictions)}
        own = self._scoped.get(scope)
        if own is not None:
            view.update(own.tools)
        self._views[scope] = view
        return view

    def get(self, name: str, scope: Scope | None = None) -> ToolDefinition | None:
        """The tool *name* as *scope* sees it, or ``None`` (unknown, restricted or out of scope)."""
        if scope is None:
            return self._global.tools.get(name)
        return self._view(scope).get(name)

    def tools(self, scope: Scope | None = None) -> tuple[ToolDefinition, ...]:
        """Every tool *scope* sees, in registration order."""
        view = self._global.tools if scope is None else self._view(scope)
        return tuple(view.values())

    def owner(self, name: str, scope: Scope | None = None) -> str | None:
        """The plugin that registered *name* in *scope*'s own layer, if known."""
        layer = self._global if scope is None else self._scoped.get(scope)
        return None if layer is None else layer.owners.get(name)

    def schemas(self, scope: Scope | None = None) -> list[ToolSchema]:
        """Fresh model-facing schemas (``name``, ``description``, ``parameters`` only)."""
        return [tool.schema for tool in self.tools(scope)]

    # -- restrictions and guards -----------------------------------------------------------

    def restrict(self, restriction: ToolRestriction, scope: Scope) -> Callable[[], None]:
        """Filter the tools *scope* (and its descendants) inherit; return a function that lifts it.

        Raises:
            ValueError: no scope was given, the restriction is empty, or it names a tool the
                scope does not inherit (the message lists the ones it does).
        """
        if scope is None:
            raise ValueError(
                "restrict() needs a scope: a global restriction would hide tools from every "
                "agent; deny the tool for the intended scope instead"
            )
        if restriction.allow is None and restriction.deny is None:
            raise ValueError("ToolRestriction() is empty: pass allow=[...] and/or deny=[...]")
        inherited = set(self._global.tools)
        for ancestor in scope.chain()[:-1]:
            layer = self._scoped.get(ancestor)
            if layer is not None:
                inherited.update(layer.tools)
        named = (restriction.allow or frozenset()) | (restriction.deny or frozenset())
        unknown = sorted(named - inherited)
        if unknown:
            known = ", ".join(sorted(inherited)) or "(none)"
            noun = "tool" if len(unknown) == 1 else "tools"
            listed = ", ".join(f'"{n}"' for n in unknown)
            raise ValueError(f"restrict() names unknown global {noun} {listed}; known: {known}")
        layer = self._layer(scope)
        layer.restrictions.append(restriction)
        self._changed()

        def lift() -> None:
            if restriction in layer.restrictions:
                layer.restrictions.remove(restriction)
                self._changed()

        return lift

    def add_guard(
        self, guard: Guard, scope: Scope | None = None, *, name: str | None = None
    ) -> Callable[[], None]:
        """Add a guard ``guard(execution) -> reason | None``; return a function that removes it.

        Guards run after pre-execute allowed a call, global ones first, then each scope on the
        chain (farthest first); the first reason denies, and ``decided_by`` is *name* (default:
        the function's qualified name).
        """
        entry = (guard, name or str(getattr(guard, "__qualname__", None) or repr(guard)))
        layer = self._layer(scope)
        layer.guards.append(entry)
        self._changed()

        def remove() -> None:
            if entry in layer.guards:
                layer.guards.remove(entry)
                self._changed()

        return remove

    def guards_for(self, scope: Scope | None) -> tuple[tuple[Guard, str], ...]:
        """The guards that apply to a call in *scope*, in the order they run."""
        if scope is None:
            if self._global_guards is None:
                self._global_guards = tuple(self._global.guards)
            return self._global_guards
        cached = self._guard_cache.get(scope)
        if cached is not None:
            return cached
        out = list(self._global.guards)
        for ancestor in scope.chain():
            layer = self._scoped.get(ancestor)
            if layer is not None:
                out.extend(layer.guards)
        self._guard_cache[scope] = result = tuple(out)
        return result
