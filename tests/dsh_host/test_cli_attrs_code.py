"""The console script's cache of attrs-generated methods (`dsh_host._attrs_code`, issue 27).

Each test runs fresh interpreters, with bytecode written under a temporary
``PYTHONPYCACHEPREFIX`` and a different hash seed each (attrs salts every ``__hash__``).
"""

from __future__ import annotations

import marshal
import os
import pathlib
import subprocess
import sys

VERIFY = """
import gc, linecache, types
import attr
from dsh_host import _attrs_code as A
A.install()
import dsh_host._host._host, trio

def same(a, b):  # all but the column positions (a salt's digits may be fewer or more)
    keys = ("co_code", "co_names", "co_varnames", "co_flags", "co_argcount", "co_firstlineno",
            "co_exceptiontable", "co_name", "co_filename")
    if [getattr(a, k) for k in keys] != [getattr(b, k) for k in keys]:
        return False
    if list(a.co_lines()) != list(b.co_lines()) or len(a.co_consts) != len(b.co_consts):
        return False
    return all(same(x, y) if isinstance(x, types.CodeType) else type(x) is type(y) and x == y
               for x, y in zip(a.co_consts, b.co_consts))

checked = differ = 0
for cls in [o for o in gc.get_objects() if isinstance(o, type) and attr.has(o)]:
    for name, value in vars(cls).items():
        code = getattr(value, "__code__", None)
        if code is None or not code.co_filename.startswith("<attrs generated methods"):
            continue
        script = "".join(linecache.cache[code.co_filename][2])
        fresh = compile(script, code.co_filename, "exec", A._state["inherited"], True)
        nested = [c for c in fresh.co_consts if getattr(c, "co_name", None) == name]
        checked += 1
        differ += not (nested and same(nested[0], code))
hits, misses = A.counts()
print(hits, misses, checked, differ)
"""


def run(tmp_path: pathlib.Path, seed: int, *argv: str, write: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "PYTHON"))}
    env |= {"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"), "PYTHONHASHSEED": str(seed)}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def cache_files(tmp_path: pathlib.Path) -> list[pathlib.Path]:
    return list((tmp_path / "pyc").rglob("attrs-code.*.bin"))


def test_a_second_start_compiles_no_attrs_method_again(tmp_path):
    run(tmp_path, 1, "-m", "dsh_host", "tools", "--no-entrypoints")
    assert len(cache_files(tmp_path)) == 1  # written at exit
    hits, misses, checked, differ = map(int, run(tmp_path, 2, "-c", VERIFY).split())
    assert misses == 0
    assert hits > 50  # trio's classes and the host's
    assert checked > 100
    assert differ == 0  # what the file gave is what attrs would have compiled


def test_without_the_file_attrs_compiles_as_usual(tmp_path):
    hits, misses, _, differ = map(int, run(tmp_path, 3, "-c", VERIFY).split())
    assert hits == 0
    assert misses > 50
    assert differ == 0


def test_a_corrupt_file_or_another_pythons_is_ignored(tmp_path):
    run(tmp_path, 1, "-m", "dsh_host", "tools", "--no-entrypoints")
    (path,) = cache_files(tmp_path)
    table = path.read_bytes()[4:]
    assert marshal.loads(table)  # what the next start would use...
    for data in (b"\x00\x00\r\n" + table, b"\xe3 not marshal data"):  # ...with another magic
        path.write_bytes(data)
        hits, misses, _, differ = map(int, run(tmp_path, 2, "-c", VERIFY).split())
        assert (hits, differ) == (0, 0)
        assert misses > 50


def test_nothing_is_written_when_python_writes_no_bytecode(tmp_path):
    run(tmp_path, 1, "-m", "dsh_host", "tools", "--no-entrypoints", write=False)
    assert cache_files(tmp_path) == []


def test_importing_dsh_host_leaves_attrs_alone(tmp_path):
    code = "import dsh_host, attr._make\nassert 'compile' not in vars(attr._make)\n"
    run(tmp_path, 1, "-c", code + "dsh_host.Host\nassert 'compile' not in vars(attr._make)\n")


def test_only_the_console_script_and_python_m_dsh_host_serve_from_the_file():
    from dsh_host._attrs_code import console

    assert console(["/usr/bin/python3", "/venv/bin/dsh", "call", "x"])
    assert console(["python", "-m", "dsh_host", "hook", "claude"])
    assert console(["python", "-X", "importtime", "-B", "-m", "dsh_host"])
    assert not console(["python", "-c", "import dsh_host", "-m", "dsh_host"])
    assert not console(["python", "-m", "pytest", "dsh"])
    assert not console(["python", "/home/me/my_tool.py", "dsh"])
    assert not console(["python"])


def test_the_classes_of_dsh_host_itself_come_from_the_file(tmp_path):
    """``dsh_host``'s ``__init__`` installs it before its first attrs class, under the console
    script: nothing of dsh is compiled on a second start (attrs's own classes are, before)."""
    run(tmp_path, 1, "-m", "dsh_host", "tools", "--no-entrypoints")
    probe = (
        "import runpy, sys\n"
        "sys.orig_argv = [sys.executable, '-m', 'dsh_host']\n"
        "import dsh_host, dsh_host._host._host\n"
        "from dsh_host import _attrs_code\n"
        "print(*_attrs_code.counts())\n"
    )
    hits, misses = map(int, run(tmp_path, 2, "-c", probe).split())
    assert misses == 0
    assert hits > 70


def test_the_file_keeps_what_a_start_used_first(tmp_path, monkeypatch):
    """Scripts of classes no start defines any more (edited, another version) give way."""
    from dsh_host import _attrs_code

    path = tmp_path / "attrs-code.bin"
    stale = {
        (f"<attrs generated methods old.C{i}>", "pass", 0, -1): (compile("pass", "x", "exec"), None)
        for i in range(5)
    }
    magic = __import__("importlib.util").util.MAGIC_NUMBER
    path.write_bytes(magic + __import__("marshal").dumps(stale))
    monkeypatch.setattr(_attrs_code, "MAX_ENTRIES", 3)
    monkeypatch.setattr(_attrs_code, "_state", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    _attrs_code.install(str(path))
    make = _attrs_code._state["make"]
    try:
        import attrs

        @attrs.frozen
        class Fresh:
            x: int

        assert hash(Fresh(1)) == hash(Fresh(1))
    finally:
        del make.compile
    assert _attrs_code.counts() == (0, 1)
    _attrs_code.save()
    kept = _attrs_code._load(str(path))
    assert len(kept) == 3
    assert next(iter(kept))[0].endswith("Fresh>")


def test_the_file_stays_small_enough_to_be_read_again(tmp_path, monkeypatch):
    """A table past MAX_BYTES was written whole, then ignored by every start, which rewrote it:
    the least recently used entries give way until the file fits."""
    from dsh_host import _attrs_code

    path = tmp_path / "attrs-code.bin"
    script = "X = {!r}\n"
    stale = {
        (f"<snapshot old {i}>", script.format(f"{i}" * 4000), 0, -1): (
            compile(script.format(f"{i}" * 4000), f"<snapshot old {i}>", "exec"),
            None,
        )
        for i in range(4)
    }
    magic = __import__("importlib.util").util.MAGIC_NUMBER
    path.write_bytes(magic + marshal.dumps(stale))
    limit = 40_000
    assert path.stat().st_size < limit
    monkeypatch.setattr(_attrs_code, "MAX_BYTES", limit)
    monkeypatch.setattr(_attrs_code, "_state", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    _attrs_code.install(str(path))
    del _attrs_code._state["make"].compile
    assert len(_attrs_code._state["known"]) == 4
    for name in "abc":
        _attrs_code.compiled(script.format(name * 4000), f"<snapshot {name}>")
    assert _attrs_code.counts() == (0, 3)
    _attrs_code.save()
    assert path.stat().st_size <= limit
    kept = _attrs_code._load(str(path))  # read, not ignored
    names = [key[0] for key in kept]
    assert names[:3] == ["<snapshot a>", "<snapshot b>", "<snapshot c>"]  # this start's first
    assert 3 < len(kept) < 7  # then as many of the older as fit
    assert names[3:] == [f"<snapshot old {i}>" for i in range(len(kept) - 3)]


DUMP = """
import gc, marshal, sys, types
sys.orig_argv = [sys.executable, "-m", "dsh_host"]  # the console script: installed at once
import dsh_host, dsh_host._host._host, trio
from dsh_host import _attrs_code

def parts(code):  # all but the column positions
    consts = tuple(parts(c) if isinstance(c, types.CodeType) else (type(c).__name__, c)
                   for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_flags, code.co_argcount,
            code.co_exceptiontable, tuple(code.co_lines()), code.co_name, consts)

seen = {}
for f in gc.get_objects():
    code = getattr(f, "__code__", None) if isinstance(f, types.FunctionType) else None
    if code is not None and code.co_filename.startswith("<attrs generated "):
        seen[f"{code.co_filename} {f.__qualname__}"] = parts(code)
sys.stdout.buffer.write(marshal.dumps((seen, _attrs_code.counts())))
_attrs_code.save()
"""


def dump(
    tmp_path: pathlib.Path, seed: int, cache: str
) -> tuple[dict[str, object], tuple[int, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "PYTHON"))}
    env |= {"PYTHONPYCACHEPREFIX": str(tmp_path / cache), "PYTHONHASHSEED": str(seed)}
    done = subprocess.run([sys.executable, "-c", DUMP], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    seen, counts = marshal.loads(done.stdout)
    return seen, counts


def test_attrs_own_classes_and_every_class_come_out_as_compiled(tmp_path):
    """attrs's own classes (made while it is imported, `compile` replaced for that import only)
    and every other: the same code as a start without the file, under another hash seed."""
    written, _ = dump(tmp_path, 5, "warm")
    with_file, (hits, misses) = dump(tmp_path, 6, "warm")
    without, (none, compiled) = dump(tmp_path, 6, "cold")
    assert (misses, none) == (0, 0)
    assert hits == compiled > 100
    assert any(name.startswith("<attrs generated __hash__ attr.") for name in without)
    assert with_file == without  # the salts of seed 6, not those of seed 5
    assert written != without
    import builtins

    assert builtins.compile.__module__ == "builtins"


SNAPSHOTS = """
import builtins, sys
from dsh_host import _attrs_code as A
A.install()
from dsh_host import define_tool
from dsh_host._schema import _snapcode
seen = []
real = A._real_compile
A._real_compile = lambda source, filename, *a, **k: (seen.append(filename), real(source, filename, *a, **k))[1]
tool = define_tool(name="t", description="d", parameters={"path": {"type": "string", "required": True},
    "n": {"type": "integer"}}, execute=lambda a: a)
assert tool.snapshot is not None and tool.snapshot({"path": "x", "n": 1}) == {"path": "x", "n": 1}
assert tool.snapshot({"path": 1}) is None
A.save()
print(seen.count("<string>"))
"""


def test_a_second_start_compiles_no_argument_snapshot_again(tmp_path):
    """A tool's generated argument snapshot (`_snapcode`) is compiled once, then served from the
    file like attrs's scripts (about half of a tool's registration: ~25 of them at a start)."""
    assert run(tmp_path, 1, "-c", SNAPSHOTS).split() == ["1"]
    assert run(tmp_path, 2, "-c", SNAPSHOTS).split() == ["0"]


def test_resalting_makes_anew_only_the_code_holding_the_salt():
    """A start resalts about a hundred classes: their ``__init__``, ``__repr__``... hold no salt
    and are served as they are; the ``__hash__`` (and the script holding it) gets the new one."""
    import types

    from dsh_host._attrs_code import _resalted

    source = (
        "def __init__(self, x):\n    self.x = x\n"
        "def __hash__(self):\n    return hash((\n        12345,\n        self.x,\n    ))\n"
        "def __eq__(self, other):\n    return (12345,) == other\n"
    )
    script = compile(source, "<attrs generated methods m.C>", "exec")
    resalted = _resalted(script, 12345, 678)
    before = {c.co_name: c for c in script.co_consts if isinstance(c, types.CodeType)}
    after = {c.co_name: c for c in resalted.co_consts if isinstance(c, types.CodeType)}
    assert after["__init__"] is before["__init__"]
    assert after["__eq__"] is before["__eq__"]  # not a __hash__: its 12345 is its own
    assert after["__hash__"] is not before["__hash__"]
    namespace: dict[str, object] = {}
    exec(resalted, namespace)
    holder = types.SimpleNamespace(x=7)
    assert namespace["__hash__"](holder) == hash((678, 7))  # type: ignore[operator]
    assert _resalted(script, 12345, 12345) is script
