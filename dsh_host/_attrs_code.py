"""The methods attrs writes for each class, compiled once and kept beside dsh's bytecode.

attrs generates the source of every class's ``__init__``, ``__eq__``, ``__repr__``... at import
and compiles it, every time: a cold ``dsh`` compiles over a hundred such scripts (trio's
classes and dsh's), about a sixth of its start (issue 27). Python keeps no bytecode for them,
so the console script does (`install`): each script attrs compiles is looked up, by its exact
text, file name, compiler flags and optimization level (and the interpreter's bytecode magic
number, as a ``.pyc``), in ``attrs-code.<cache tag>.opt-N.bin``
in the ``__pycache__`` directory of this package (where `importlib.util.cache_from_source`
puts this module's own bytecode, ``PYTHONPYCACHEPREFIX`` included); a miss is compiled as
attrs would and written there at exit (`save`), atomically, and only when Python may write
bytecode (``-B`` / ``PYTHONDONTWRITEBYTECODE`` leave the file as it is).

The argument snapshot each tool's schema is written out as (`dsh_host._schema._snapcode`, about
25 scripts a start) is compiled through the same table (`compiled`).

Trust: the file is as trusted as the ``.pyc`` files beside it, which the interpreter runs
without any check but the source's mtime and size: whoever can write one can write the other.
It is never put in the state or cache directories, which a sandboxed command may be able to
write. A file that is unreadable, corrupt, oversized or not the expected shape is ignored.
Only the console script and ``python -m dsh_host`` install it (`console`: ``dsh_host``'s
``__init__`` asks, before its first attrs class; `~dsh_host._cli._entry.command` writes the file
at exit); ``dsh_host`` imported as a library never does.
"""

from __future__ import annotations
import __future__

import builtins
import contextlib
import functools
import marshal
import operator
import os
import sys
import types
from typing import Any, Final

__all__ = ["compiled", "console", "counts", "install", "save"]

MAX_BYTES: Final = 16 * 1024 * 1024
"""The largest file read (a larger one is ignored) and written (`save` drops old entries)."""
MAX_ENTRIES: Final = 1024
"""Scripts the file keeps: a start uses about 150; older ones (edited classes, another
version) give way to those a start used, at the next write."""

Key = tuple[str, str, int, int]  # (filename, source, flags, optimize)
_state: dict[str, Any] = {}


def console(argv: list[str]) -> bool:
    """Whether *argv* (`sys.orig_argv`) runs the ``dsh`` console script or ``python -m dsh_host``."""
    words = iter(argv[1:])
    for word in words:
        if word in ("-X", "-W"):
            next(words, None)  # its value
        elif word == "-m":
            return next(words, None) == "dsh_host"
        elif word == "-c" or word.startswith("--"):
            return False
        elif not word.startswith("-"):  # a script
            return os.path.basename(word) == "dsh"
    return False


_real_compile = builtins.compile
_FUTURES: Final = functools.reduce(
    operator.or_, (getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)
)


def install(path: str | None = None) -> None:
    """Serve attrs's compiles from the file at *path* (default: beside this package's bytecode).

    attrs's own classes are made while it is imported, before its module can be patched: if it
    is not imported yet, `compile` itself is replaced for that import only (`_while_importing`).
    """
    if _state:
        return
    path = path or _default_path()
    _state.update(path=path, known=_load(path), new={}, used={})
    previous = builtins.compile
    if "attr._make" not in sys.modules:
        builtins.compile = _while_importing
    try:
        import attr._make as make
    except ImportError:
        return
    finally:
        builtins.compile = previous
    if not hasattr(make, "_linecache_and_compile"):  # another attrs: leave it alone
        return
    inherited = 0  # the future flags attrs's own `compile` calls inherit from its module
    for name in __future__.all_feature_names:
        if getattr(make, name, None) is getattr(__future__, name):
            inherited |= getattr(__future__, name).compiler_flag
    _state.update(make=make, inherited=inherited)
    make.compile = _compile  # type: ignore[attr-defined]  # shadows the builtin in attr._make


def compiled(source: str, filename: str) -> types.CodeType:
    """*source* compiled for ``exec`` (no future flags): served from the file like attrs's
    scripts once `install` ran (the console script), else compiled. For the other scripts
    dsh writes at every start, a tool's argument snapshot (`dsh_host._schema._snapcode`): the
    same key (the exact text, *filename*, flags, optimization level), the same trust."""
    if not _state:
        code: types.CodeType = _real_compile(source, filename, "exec", 0, True)
        return code
    served: types.CodeType = _serve(source, filename, "exec", 0, -1)
    return served


def _while_importing(
    source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False,
    optimize: int = -1, *, _feature_version: int = -1,
) -> Any:  # fmt: skip
    """`compile` while attrs is imported: its scripts served, anything else compiled exactly as
    the builtin would (inheriting the caller's future flags as it does)."""
    if not dont_inherit:
        flags |= sys._getframe(1).f_code.co_flags & _FUTURES
    if (
        type(filename) is str
        and filename.startswith("<attrs generated ")
        and _feature_version == -1
    ):
        return _serve(source, filename, mode, flags, optimize)
    return _real_compile(
        source, filename, mode, flags, True, optimize, _feature_version=_feature_version
    )


def _default_path() -> str:
    import importlib.util

    here = importlib.util.cache_from_source(__file__)
    tag = f"{sys.implementation.cache_tag}.opt-{sys.flags.optimize}"
    return os.path.join(os.path.dirname(here), f"attrs-code.{tag}.bin")


def _load(path: str) -> dict[Key, tuple[types.CodeType, int | None]]:
    from importlib.util import MAGIC_NUMBER  # bytecode of another Python is never run

    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES or not data.startswith(MAGIC_NUMBER):
            return {}
        table = marshal.loads(data[len(MAGIC_NUMBER) :])
    except Exception:  # missing, unreadable, corrupt: compile as usual
        return {}
    if not isinstance(table, dict):
        return {}
    return {
        key: value
        for key, value in table.items()
        if isinstance(key, tuple) and len(key) == 4 and isinstance(value, tuple)
        and len(value) == 2 and type(value[0]) is types.CodeType
        and (value[1] is None or type(value[1]) is int)
    }  # fmt: skip


def _compile(
    source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False,
    optimize: int = -1,
) -> Any:  # fmt: skip
    """`compile` as attrs calls it, from the table when its exact script was compiled before."""
    if not dont_inherit:
        flags |= _state["inherited"]
    return _serve(source, filename, mode, flags, optimize)


def _serve(source: Any, filename: Any, mode: str, flags: int, optimize: int) -> Any:
    if mode != "exec" or type(source) is not str or type(filename) is not str:
        return _real_compile(source, filename, mode, flags, True, optimize)
    salt = _salt(filename)
    line = f" {salt},\n"  # how attrs writes the salt of a class's `__hash__`
    salted = salt is not None and line in source
    if salted:
        source_key = source.replace(line, " @,\n")
    else:
        source_key, salt = source, None
    key = (filename, source_key, flags, optimize)
    known = _state["known"].get(key)
    if known is not None:
        _state["used"][key] = known
        code, was = known
        return code if was is None or salt is None else _resalted(code, was, salt)
    code = _real_compile(source, filename, mode, flags, True, optimize)
    _state["new"][key] = (code, salt)
    return code


def _salt(filename: str) -> int | None:
    """The constant attrs puts first in the hash of the class its script *filename* is for:
    ``hash`` of the class's name, which Python salts anew in every process."""
    for prefix in ("<attrs generated methods ", "<attrs generated __hash__ "):
        if filename.startswith(prefix) and filename.endswith(">"):
            break
    else:
        return None
    name = filename[len(prefix) : -1]
    base, _, count = name.rpartition("-")  # a second class of that name: attrs adds "-N"
    if base and count.isdigit():
        name = base
    return hash(f"<attrs generated hash {name}>")


def _resalted(code: types.CodeType, was: int, salt: int) -> types.CodeType:
    """*code* with the salt of its ``__hash__`` function *was* replaced by *salt* (also inside
    a constant tuple: ``hash((salt,))`` of a class with no field to hash is folded into one).
    A code object holding no salt (``__init__``, ``__repr__``...) is returned as it is: only
    the ``__hash__`` function and the code holding it are made anew (a start resalts about a
    hundred classes)."""
    if was == salt:
        return code
    hashing = code.co_name == "__hash__"
    consts = code.co_consts
    swapped: list[Any] | None = None
    for index, value in enumerate(consts):
        if type(value) is types.CodeType:
            new = _resalted(value, was, salt)
        elif hashing:
            new = _swap(value, was, salt)
        else:
            continue
        if new is not value:
            if swapped is None:
                swapped = list(consts)
            swapped[index] = new
    return code if swapped is None else code.replace(co_consts=tuple(swapped))


def _swap(value: Any, was: int, salt: int) -> Any:
    """A constant of a ``__hash__`` function with the salt *was* replaced by *salt*."""
    if type(value) is int and value == was:
        return salt
    if type(value) is tuple:
        items = tuple(_swap(item, was, salt) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def counts() -> tuple[int, int]:
    """(scripts served from the file, scripts compiled) since `install`."""
    return (len(_state.get("used", ())), len(_state.get("new", ())))


def save() -> None:
    """Write what was compiled since `install` (with what the file held), if anything was."""
    new = _state.get("new")
    if not new or sys.dont_write_bytecode:
        return
    table = {**new, **_state["used"], **_state["known"]}  # what this start used, first
    if len(table) > MAX_ENTRIES:
        table = dict(list(table.items())[:MAX_ENTRIES])
    table, data = _fitting(table)
    path = _state["path"]
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "xb") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError:  # a read-only install: compile every time, as before
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    _state["known"], _state["new"], _state["used"] = table, {}, {}


def _fitting(table: dict[Key, Any]) -> tuple[dict[Key, Any], bytes]:
    """*table* and the file's bytes, the last (least recently used) entries dropped until they
    fit in `MAX_BYTES`: `_load` ignores a larger file, which every start would then rewrite."""
    from importlib.util import MAGIC_NUMBER

    items = list(table.items())
    data = MAGIC_NUMBER + marshal.dumps(table)
    while len(data) > MAX_BYTES:
        excess, dropped = len(data) - MAX_BYTES, 0
        while items and dropped < excess:  # an entry's own size, about what it adds
            dropped += len(marshal.dumps(items.pop()))
        table = dict(items)
        data = MAGIC_NUMBER + marshal.dumps(table)
    return table, data
