"""Standard modules trio's import brings for what no dsh start uses, run on first use (issue 27).

trio's ``__init__`` imports all of trio: ``trio.SSLStream`` (with `ssl`, and OpenSSL's
initialisation behind it), ``trio.DTLSEndpoint`` (with `hmac`, for its cookies, and `hashlib`)
and ``trio.run_process`` (with `subprocess`, which `ctypes.util` imports too, for
``find_library``'s fallbacks, with `shutil` and its compression modules), about a fifteenth of
a cold ``dsh`` start. No start uses them: a command's process is started by a tool, later, and
a hook or a read starts none. While the console script imports trio (`deferred`), each of
`DEFERRED` not imported yet is put in `sys.modules` as a module whose code runs on the first
use of any of its names, by whichever code uses it first; the module is then what the import
would have made, the same object for every importer (trio's, and any later ``import ssl``).
What the import machinery reads of a module (`MACHINERY`: its spec, its name...) is answered
without running it.

A thread that uses a name while another runs the module waits for it to finish (each module
has a lock of its own); the thread running it sees the module as an import in progress shows
it (the names it has bound so far). A module that fails to run is taken out of `sys.modules`,
as a failed import is, and the error is raised to the code that used it. Only a plain module
is deferred, never a package (importing a submodule would use it); and none of `DEFERRED`
imports a module that uses it (they import the standard library's own, and C), so a first use
never waits on an import that waits for it. In a forked child, a module another thread was
running is run again by its first user there (`_after_fork`).

The standard library's `importlib.util.LazyLoader` is made for this, but before Python 3.12.3
two threads using a module it defers may both run it (and 3.11 is supported): hence this.

Only the console script defers them (as it answers trio's question about ``pthread``,
`dsh_host._cli._pthread`); ``dsh_host`` imported as a library never does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

__all__ = ["DEFERRED", "MACHINERY", "defer", "deferred"]

DEFERRED: Final = {
    "ssl": "_ssl",
    "hmac": None,
    "subprocess": "_posixsubprocess",
    "selectors": "select",
    "bz2": "_bz2",
    "lzma": "_lzma",
}
"""Each deferred module, with the C module it needs (deferred only where that one is found, so
that ``try: import bz2`` still fails where it would). trio's TLS (``trio._ssl``) and DTLS
(``trio._dtls``) imports; its child processes' (``trio._subprocess``, and `ctypes.util`'s, for
``find_library``'s fallbacks); `socket`'s, for ``sendfile`` (and `subprocess`'s); and the
compression modules `shutil` (imported by `ctypes.util`) looks for, for its archives: used
only when a TLS stream, a DTLS endpoint, a process or an archive is made."""

MACHINERY: Final = frozenset(
    ("__name__", "__loader__", "__package__", "__spec__", "__path__", "__file__", "__cached__")
)
"""What the import system sets on a module before its code runs (`importlib.util.module_from_spec`),
and reads of it (``import ssl`` reads its spec): answered without running it."""

_locks: dict[int, threading.RLock] = {}  # id(module) -> its lock, while it is deferred
_running: dict[int, int] = {}  # id(module) -> the thread running it


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: the first use of a name runs it (`_run`)."""

    def __getattribute__(self, name: str) -> Any:
        if name in MACHINERY or _running.get(id(self)) == threading.get_ident():
            return types.ModuleType.__getattribute__(self, name)
        _run(self)
        return getattr(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        _run(self)
        types.ModuleType.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        _run(self)
        types.ModuleType.__delattr__(self, name)

    def __dir__(self) -> Iterable[str]:
        _run(self)
        return types.ModuleType.__dir__(self)


def _run(module: types.ModuleType) -> None:
    """Run *module*'s code once (the first caller; the others wait), then make it a plain module."""
    key = id(module)
    lock = _locks.get(key)
    if lock is None:
        return  # it ran meanwhile
    with lock:
        if type(module) is not _Deferred or key in _running:
            return  # another thread ran it meanwhile, or this one is running it
        spec = object.__getattribute__(module, "__spec__")
        _running[key] = threading.get_ident()
        try:
            spec.loader.exec_module(module)
        except BaseException:
            if sys.modules.get(spec.name) is module:
                del sys.modules[spec.name]  # as a failed import leaves it
            raise
        else:
            object.__setattr__(module, "__class__", types.ModuleType)
            del _locks[key]
        finally:
            del _running[key]


def _after_fork() -> None:
    """In a forked child, where only the forking thread lives on: a lock another thread held
    is made anew, and a module it was running is run again by its next user."""
    for key in _locks:
        _locks[key] = threading.RLock()
    _running.clear()


os.register_at_fork(after_in_child=_after_fork)


def defer(name: str, needs: str | None = None) -> bool:
    """Put module *name* in `sys.modules`, to run on first use; ``False`` if it is imported
    already, or is not a plain module (a package, a loader's own kind of module), or the C
    module it *needs* is not found: then it is left to be imported as usual."""
    if name in sys.modules or (needs is not None and importlib.util.find_spec(needs) is None):
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is not None:
        return False  # not found, or a package (importing a submodule would run it anyway)
    module = importlib.util.module_from_spec(spec)
    if type(module) is not types.ModuleType:
        return False  # a loader that makes its own kind of module
    _locks[id(module)] = threading.RLock()
    object.__setattr__(module, "__class__", _Deferred)
    sys.modules[name] = module
    return True


@contextlib.contextmanager
def deferred(names: Mapping[str, str | None] = DEFERRED) -> Iterator[list[str]]:
    """While in the block (trio's import), *names* not imported yet are deferred (`defer`,
    each with the C module it needs); the value: those that were. They stay deferred after
    it, until their first use."""
    yield [name for name, needs in names.items() if defer(name, needs)]
