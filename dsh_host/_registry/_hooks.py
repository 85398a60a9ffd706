"""pluggy markers for project ``dsh``, the plugin manager, and per-call hook dispatch.

pluggy is synchronous: it would hand back a coroutine from an ``async def`` implementation without
awaiting it. So the host reads each per-call hook's implementations in pluggy's call order
(``tryfirst`` first, then the most recently registered, ``trylast`` last), caches them until a
plugin is registered or unregistered, and calls and awaits them itself.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, final

import attrs
import pluggy

from ._markers import ENTRY_POINT_GROUP, IDLE_HOOKS, LAST_LINKS, PROJECT, hookimpl, hookspec

__all__ = [
    "ENTRY_POINT_GROUP",
    "IDLE_HOOKS",
    "LAST_LINKS",
    "PROJECT",
    "HookRelay",
    "Impl",
    "Plan",
    "hookimpl",
    "hookspec",
    "make_plugin_manager",
]


class _PluginManager(pluggy.PluginManager):
    """A `pluggy.PluginManager` that counts registrations, so cached orderings know when to refresh."""

    generation = 0
    _parsed: dict[tuple[int, str], tuple[object, Any]] | None = None
    """What `parse_hookimpl_opts` found for the plugin about to be registered: the host checks
    every attribute (`inspect_hooks`) and pluggy's `register` then asks again; static lookups
    of every attribute are a visible part of a cold start (issue 27)."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        if _STATIC_LOOKUP:
            if _unmarked(plugin, name, _MARKER):
                return None  # nothing pluggy's lookup could find there carries a marker
        elif name in _OBJECTS_OWN and _objects_own(plugin, name):
            return None  # a slot wrapper or builtin of `object`: never marked (about half of dir)
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = {}
        found = parsed.get((id(plugin), name))
        if found is not None and found[0] is plugin:
            return found[1]
        opts = super().parse_hookimpl_opts(plugin, name)
        parsed[(id(plugin), name)] = (plugin, opts)
        return opts

    def register(self, plugin: object, name: str | None = None) -> str | None:
        try:
            return super().register(plugin, name)
        finally:
            self._parsed = None  # asked once per registration: never stale for the next one
            self.generation += 1

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        try:
            return super().unregister(plugin, name)
        finally:
            self.generation += 1


_OBJECTS_OWN = frozenset(vars(object))
_MARKER = f"{PROJECT}_impl"  # the attribute `HookimplMarker` sets (`make_plugin_manager`'s)
_STATIC_LOOKUP = hasattr(pluggy._manager, "_static_hook_attr")
"""Whether this pluggy (1.7 on) finds hook implementations by a static lookup, which
`_unmarked` mirrors. An older one calls ``getattr`` (a property, ``__getattr__``), which no
shortcut can foresee: there only ``object``'s own names are answered without asking it."""
_CLASS_DICT = type.__dict__["__dict__"]  # a class's own namespace, as `inspect.getattr_static`
_CLASS_MRO = type.__dict__["__mro__"]  # a class's real MRO, as `inspect.getattr_static`
_BOUND_OR_WRAPPED = (staticmethod, classmethod, types.MethodType, types.MemberDescriptorType)
_ABSENT = object()


def _unmarked(plugin: object, name: str, marker: str) -> bool:
    """Whether pluggy's static lookup of *name* on the instance *plugin* surely finds no hook
    implementation: each value it could take (the instance's own, else any class's of the MRO)
    is neither a function holding the *marker* attribute nor a method, classmethod,
    staticmethod or slot (those, a class or module plugin and an odd ``__dict__`` are left to
    pluggy). Most of a plugin's ``dir`` (``object``'s builtins, its helpers, its attributes) is
    answered here with a few dict lookups instead of `inspect.getattr_static` (issue 27)."""
    if isinstance(plugin, type | types.ModuleType):
        return False
    own = _own_dict(plugin)
    if own is not None:
        if type(own) is not dict:
            return False
        value = own.get(name, _ABSENT)
        if value is not _ABSENT:  # pluggy takes the instance's own value as it is
            return _inert(value, marker)
    for klass in _CLASS_MRO.__get__(type(plugin)):
        namespace = _CLASS_DICT.__get__(klass)
        if type(namespace) is not types.MappingProxyType:
            return False
        value = namespace.get(name, _ABSENT)
        if value is not _ABSENT and not _inert(value, marker):
            return False
    return True


def _inert(value: object, marker: str) -> bool:
    """Whether pluggy reads no hook implementation from *value* (a function is read only
    when it holds *marker*: a function's attributes are its ``__dict__``)."""
    if isinstance(value, types.FunctionType):
        return marker not in value.__dict__
    return not isinstance(value, _BOUND_OR_WRAPPED)


def _objects_own(plugin: object, name: str) -> bool:
    """Whether *name* on the instance *plugin* is what `object` itself defines: not in the
    instance's ``__dict__`` nor in any class of its MRO but `object`. pluggy's static lookup
    then finds `object`'s slot wrapper or builtin, which no marker can be set on."""
    if isinstance(plugin, type | types.ModuleType):
        return False
    own = _own_dict(plugin)
    if isinstance(own, dict) and name in own:
        return False
    mro = type(plugin).__mro__
    return mro[-1] is object and all(name not in _CLASS_DICT.__get__(k) for k in mro[:-1])


def make_plugin_manager(specs: types.ModuleType | type) -> pluggy.PluginManager:
    """A fresh plugin manager with the hook specifications *specs* added (`dsh_host.hookspecs`).

    The specs are handed in by the host: they name values of every layer, so this module does
    not import them (the arrow would run back up).
    """
    pm = _PluginManager(PROJECT)
    pm.add_hookspecs(specs)
    return pm


@final
@attrs.frozen
class Impl:
    """One hook implementation, ready to call."""

    function: Callable[..., Any]
    plugin: str
    argnames: tuple[str, ...]
    waterfall: bool
    is_async: bool
    positional: Callable[..., Any] | None = None
    """The function taking the hook's arguments positionally, in the spec's order (``call_next``
    aside): the function itself when it takes all of them, else an adapter; ``None`` for a
    waterfall link. The pipeline's fast path calls this, with no kwargs dict."""

    async def __call__(self, **kwargs: Any) -> Any:
        """Call with the arguments this implementation accepts; await if needed."""
        result = self.call_sync(kwargs)
        if self.is_async or (result is not None and inspect.isawaitable(result)):
            result = await result
        return result

    def call_sync(self, kwargs: dict[str, Any]) -> Any:
        """Call without awaiting. pluggy's argnames are positional parameters, in order."""
        names = self.argnames
        if len(names) == 1:
            return self.function(kwargs[names[0]])
        if len(names) == 2:
            return self.function(kwargs[names[0]], kwargs[names[1]])
        return self.function(*[kwargs[name] for name in names])


@final
class Plan:
    """The per-call hooks' implementations, read once per change of the plugin set.

    ``plain_*`` is true when every implementation of that hook is a plain (synchronous,
    non-waterfall) function: the pipeline then calls them in a loop of its own, with no
    coroutine, kwargs dict or cancel scope per implementation. ``plain_execute``: every execute
    wrapper is a plain function (the pipeline first asks them all whether they pass the call
    on, `Pipeline._pass_over`). ``idle``: no per-call hook at all (a call with no trace, signal
    or guard then meets only its tool: `Pipeline._bare`).
    """

    __slots__ = (
        "execute",
        "guard",
        "idle",
        "plain_execute",
        "plain_guard",
        "plain_post",
        "plain_pre",
        "plain_result",
        "post",
        "pre",
        "result",
    )

    def __init__(self, relay: HookRelay) -> None:
        self.pre = relay.impls("dsh_tool_pre_execute")
        self.guard = relay.impls("dsh_tool_guard")
        self.execute = relay.impls("dsh_tool_execute")
        self.post = relay.impls("dsh_tool_post_execute")
        self.result = relay.impls("dsh_tool_result")
        self.plain_pre = _plain(self.pre)
        self.plain_guard = _plain(self.guard)
        self.plain_post = _plain(self.post)
        self.plain_result = _plain(self.result)
        self.plain_execute = all(not impl.is_async for impl in self.execute)
        self.idle = not (self.pre or self.guard or self.execute or self.post or self.result)


_NO_IMPLS: tuple[tuple[Impl, ...], bool, bool] = ((), False, False)


def _plain(impls: tuple[Impl, ...]) -> bool:
    return all(not impl.is_async and impl.positional is not None for impl in impls)


class HookRelay:
    """Ordered, cached implementations of each hook of one plugin manager."""

    def __init__(self, pm: pluggy.PluginManager | None) -> None:
        self.pm = pm
        # Per hook: its implementations, whether any is async, whether any takes call_next.
        self._cache: dict[str, tuple[tuple[Impl, ...], bool, bool]] = {}
        self._generation = -1
        self._plan: Plan | None = None
        self._plan_generation: int | None = None

    def plan(self) -> Plan:
        """The per-call hooks' implementations (cached until a plugin is (un)registered)."""
        plan = self._plan
        pm = self.pm
        generation = 0 if pm is None else getattr(pm, "generation", None)
        if plan is None or generation is None or generation != self._plan_generation:
            plan = self._plan = Plan(self)
            self._plan_generation = generation
        return plan

    def _facts(self, hook: str) -> tuple[tuple[Impl, ...], bool, bool]:
        pm = self.pm
        if pm is None:
            return _NO_IMPLS
        generation = getattr(pm, "generation", None)
        if generation is None or generation != self._generation:
            self._cache.clear()
            self._generation = generation if generation is not None else -1
        cached = self._cache.get(hook)
        if cached is None or generation is None:
            impls = self._collect(pm, hook)
            cached = self._cache[hook] = (
                impls,
                any(impl.is_async for impl in impls),
                any(impl.waterfall for impl in impls),
            )
        return cached

    def impls(self, hook: str) -> tuple[Impl, ...]:
        """Implementations of *hook* in call order (outermost / first asked first)."""
        return self._facts(hook)[0]

    def any_async(self, hook: str) -> bool:
        """Whether any implementation of *hook* is ``async def``."""
        return self._facts(hook)[1]

    def has_waterfall(self, hook: str) -> bool:
        """Whether an implementation of *hook* takes ``call_next``."""
        return self._facts(hook)[2]

    def may_suspend(self, hook: str) -> bool:
        """Whether an implementation of *hook* may suspend (``async``, or a waterfall link)."""
        _, is_async, waterfall = self._facts(hook)
        return is_async or waterfall

    @staticmethod
    def _collect(pm: pluggy.PluginManager, hook: str) -> tuple[Impl, ...]:
        caller = getattr(pm.hook, hook, None)
        if caller is None:
            return ()
        declared = caller.spec.argnames if caller.spec is not None else ()
        spec = tuple(name for name in declared if name != "call_next")
        out = []
        last: object = None  # the plugin of the last implementation in call order
        for impl in reversed(caller.get_hookimpls()):
            idle = getattr(impl.plugin, IDLE_HOOKS, None)
            if isinstance(idle, frozenset | set | tuple | list) and hook in idle:
                continue  # configured off: this plugin costs nothing per call for this hook
            if impl.hookwrapper or impl.wrapper:
                raise TypeError(
                    f"plugin {impl.plugin_name!r}: {hook} is called by dsh itself; "
                    "hookwrapper/wrapper implementations are not supported (take call_next instead)"
                )
            argnames = tuple(impl.argnames)
            waterfall = "call_next" in argnames
            last = impl.plugin
            out.append(
                Impl(
                    function=impl.function,
                    plugin=impl.plugin_name,
                    argnames=argnames,
                    waterfall=waterfall,
                    is_async=inspect.iscoroutinefunction(impl.function),
                    positional=None if waterfall else _positional(impl.function, argnames, spec),
                )
            )
        if out and out[-1].waterfall:
            alone = _last_link(last, hook, out[-1], spec)
            if alone is not None:  # nothing after it: the plain function it offers instead
                out[-1] = alone
        return tuple(out)


def _last_link(plugin: object, hook: str, link: Impl, spec: tuple[str, ...]) -> Impl | None:
    """The plain function *plugin* offers for its *hook* link when it is the last (`LAST_LINKS`),
    as an implementation; only for the plugin's own *hook* method (not another link of it, as
    ``specname`` makes), and only one taking some of the hook's arguments by name."""
    try:  # plugin code (a property, a mapping of its own): what fails offers nothing
        if link.function != getattr(plugin, hook, None):
            return None
        offered = getattr(plugin, LAST_LINKS, None)
        function = offered.get(hook) if isinstance(offered, Mapping) else None
        if not callable(function) or inspect.iscoroutinefunction(function):
            return None
        argnames = tuple(inspect.signature(function).parameters)
    except Exception:
        return None
    positional = _positional(function, argnames, spec)
    if positional is None:
        return None
    return Impl(function, link.plugin, argnames, False, False, positional)


def _positional(
    function: Callable[..., Any], argnames: tuple[str, ...], spec: tuple[str, ...]
) -> Callable[..., Any] | None:
    """*function*, called with the spec's arguments in order (pluggy lets it take a subset)."""
    if argnames == spec:
        return function
    if not set(argnames) <= set(spec):
        return None
    picks = tuple(spec.index(name) for name in argnames)
    return lambda *args: function(*[args[i] for i in picks])


def _own_dict(plugin: object) -> object:
    """The instance's own ``__dict__`` as `object` finds it (no ``__getattr__``), or ``None``."""
    try:
        return object.__getattribute__(plugin, "__dict__")
    except AttributeError:
        return None
