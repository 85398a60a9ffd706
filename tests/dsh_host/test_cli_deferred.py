"""trio's TLS and DTLS modules, run on first use (`dsh_host._cli._deferred`, issue 27)."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import threading
import types
import warnings
from collections.abc import Iterator

import pytest

from dsh_host._cli import _deferred

from .test_cold_start import hook_after, modules_after


@pytest.fixture
def place(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A directory on the import path for modules of the test's own; they are forgotten after."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - before:
            del sys.modules[name]


def test_a_deferred_module_runs_on_the_first_use_of_a_name(place):
    (place / "counted.py").write_text(
        "import builtins\nbuiltins.RUNS = getattr(builtins, 'RUNS', 0) + 1\nVALUE = 1\n"
    )
    import builtins

    assert _deferred.defer("counted")
    import counted  # the import machinery reads its spec: nothing runs

    assert getattr(builtins, "RUNS", 0) == 0
    assert counted.__name__ == "counted"
    assert counted.__spec__.name == "counted"
    assert getattr(builtins, "RUNS", 0) == 0
    assert counted.VALUE == 1
    assert builtins.RUNS == 1
    assert type(counted) is types.ModuleType  # a plain module from then on
    assert sys.modules["counted"] is counted
    from counted import VALUE  # the same module, not run again

    assert (VALUE, builtins.RUNS) == (1, 1)
    del builtins.RUNS


def test_an_imported_module_a_package_or_a_missing_one_is_not_deferred(place):
    (place / "pkg").mkdir()
    (place / "pkg" / "__init__.py").write_text("")
    assert not _deferred.defer("pkg")
    assert not _deferred.defer("no_such_module_here")
    assert not _deferred.defer("os")
    assert "pkg" not in sys.modules
    assert "no_such_module_here" not in sys.modules


def test_a_module_whose_c_module_is_missing_is_imported_as_usual(place):
    """``try: import bz2`` (shutil's probe) fails where it would: not deferred."""
    (place / "needy.py").write_text("import no_such_c_module_here\n")
    assert not _deferred.defer("needy", needs="no_such_c_module_here")
    assert "needy" not in sys.modules
    with pytest.raises(ImportError):
        import needy  # noqa: F401


def test_setting_deleting_or_listing_a_name_runs_it_first(place):
    for name in ("set_first", "del_first", "dir_first"):
        (place / f"{name}.py").write_text("VALUE = 1\n")
        assert _deferred.defer(name)
    import del_first
    import dir_first
    import set_first

    set_first.OTHER = 2
    assert (set_first.VALUE, set_first.OTHER) == (1, 2)
    del del_first.VALUE
    assert not hasattr(del_first, "VALUE")
    assert "VALUE" in dir(dir_first)


def test_a_module_that_fails_is_taken_out_and_its_error_raised(place):
    (place / "broken.py").write_text("raise RuntimeError('broken at import')\n")
    assert _deferred.defer("broken")
    import broken

    with pytest.raises(RuntimeError, match="broken at import"):
        broken.anything  # noqa: B018
    assert "broken" not in sys.modules  # as a failed import leaves it
    with pytest.raises(RuntimeError, match="broken at import"):
        import broken  # imported again: runs again, fails again


def test_the_thread_running_a_module_sees_it_as_an_import_in_progress(place):
    """Code the module's own run calls (here: a module it imports, using a name bound so far)."""
    (place / "outer.py").write_text("FIRST = 1\nimport inner\nSECOND = inner.SEEN\n")
    (place / "inner.py").write_text("import outer\nSEEN = outer.FIRST\n")
    assert _deferred.defer("outer")
    import outer

    assert outer.SECOND == 1


class _NotedLock:
    """A deferred module's lock, noting each thread that asks for it (before it waits)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.asked: list[threading.Event] = []

    def __enter__(self) -> None:
        for event in self.asked:
            if not event.is_set():
                event.set()
                break
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_thread_using_a_module_another_runs_waits_for_it(place, monkeypatch):
    """The first use runs it; another thread's use meanwhile waits and sees the whole module."""
    (place / "slow.py").write_text(
        "import builtins\nbuiltins.STARTED.set()\nassert builtins.GO.wait(10)\nLAST = 'done'\n"
    )
    import builtins

    started, go = threading.Event(), threading.Event()
    monkeypatch.setattr(builtins, "STARTED", started, raising=False)
    monkeypatch.setattr(builtins, "GO", go, raising=False)
    lock = _NotedLock()
    first_asked, second_asked = threading.Event(), threading.Event()
    lock.asked = [first_asked, second_asked]
    assert _deferred.defer("slow")
    import slow

    monkeypatch.setitem(_deferred._locks, id(slow), lock)

    seen: dict[str, object] = {}

    def use(key: str) -> None:
        try:
            seen[key] = slow.LAST
        except AttributeError as exc:  # the module half-run: what the lock keeps from happening
            seen[key] = exc

    first = threading.Thread(target=use, args=("first",))
    first.start()
    assert started.wait(10)  # the first thread runs the module
    second = threading.Thread(target=use, args=("second",))
    second.start()
    assert second_asked.wait(10)  # the second thread waits for the lock
    go.set()
    for thread in (first, second):
        thread.join(10)
    assert seen == {"first": "done", "second": "done"}


def test_a_child_forked_while_another_thread_runs_a_module_runs_it_again(place, monkeypatch):
    """The thread holding the module's lock does not live on in a forked child: the child
    runs the module itself (it would wait for that lock for ever)."""
    (place / "forked.py").write_text(
        "import builtins, os\n"
        "if os.getpid() == builtins.PARENT:\n"
        "    builtins.STARTED.set()\n"
        "    assert builtins.GO.wait(10)\n"
        "LAST = os.getpid()\n"
    )
    import builtins

    started, go = threading.Event(), threading.Event()
    monkeypatch.setattr(builtins, "PARENT", os.getpid(), raising=False)
    monkeypatch.setattr(builtins, "STARTED", started, raising=False)
    monkeypatch.setattr(builtins, "GO", go, raising=False)
    assert _deferred.defer("forked")
    import forked

    runner = threading.Thread(target=lambda: forked.LAST)
    runner.start()
    try:
        assert started.wait(10)  # the module runs in that thread, holding its lock
        read, write = os.pipe()
        with warnings.catch_warnings():  # Python 3.12+: a fork beside a thread is what is tested
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: only this thread
            try:
                signal.alarm(10)  # waiting for the lock for ever: killed, nothing written
                os.write(write, str(forked.LAST).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            told = pipe.read()
        assert os.waitpid(pid, 0)[1] == 0
        assert told == str(pid).encode()  # run again in the child, by the child
    finally:
        go.set()
        runner.join(10)
    assert os.getpid() == forked.LAST


REFUSE_DEFERRED = (
    "import importlib.machinery, os\n"
    "real = importlib.machinery.SourceFileLoader.exec_module\n"
    "def refuse(loader, module):\n"
    f"    if module.__name__ in {tuple(_deferred.DEFERRED)!r}:\n"
    "        os.write(2, f'{module.__name__} ran'.encode())\n"
    "        os._exit(3)\n"
    "    real(loader, module)\n"
    "importlib.machinery.SourceFileLoader.exec_module = refuse\n"
)


def test_the_hook_of_the_console_script_runs_none_of_the_deferred_modules(tmp_path):
    """trio's import brings ssl, hmac, subprocess, selectors, bz2 and lzma (TLS streams, DTLS
    cookies, processes, archives): a hook uses none of them."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    hook_after(REFUSE_DEFERRED, workspace)


def test_trio_and_any_later_importer_share_the_deferred_modules_which_work():
    code = (
        "import types\n"
        "from dsh_host._cli import _deferred\n"
        "with _deferred.deferred() as deferred:\n"
        "    import trio\n"
        "assert deferred == list(_deferred.DEFERRED), deferred\n"
        "import hmac, ssl, sys\n"
        "assert type(ssl) is not types.ModuleType and type(hmac) is not types.ModuleType\n"
        "assert trio._ssl._stdlib_ssl is ssl is sys.modules['ssl']\n"
        "assert trio._dtls.hmac is hmac is sys.modules['hmac']\n"
        "context = ssl.create_default_context()\n"
        "assert isinstance(context, trio._ssl._stdlib_ssl.SSLContext)\n"
        "assert type(ssl) is types.ModuleType\n"
        "assert len(trio._dtls._make_cookie(b'k' * 32, b's' * 8, 0, ('a', 1), b'x')) == 32\n"
        "assert type(hmac) is types.ModuleType\n"
        "from ssl import SSLContext\n"
        "assert SSLContext is ssl.SSLContext\n"
        "import ctypes.util, subprocess\n"
        "assert trio._subprocess.subprocess is subprocess is ctypes.util.subprocess\n"
        "assert subprocess.run(['true'], check=False).returncode == 0\n"
        "assert type(subprocess) is types.ModuleType\n"
        "import bz2, lzma, selectors, shutil, socket\n"
        "assert socket.selectors is selectors\n"
        "assert bz2.decompress(bz2.compress(b'x')) == b'x' == lzma.decompress(lzma.compress(b'x'))\n"
        "assert 'bztar' in dict(shutil.get_archive_formats())\n"
        "with selectors.DefaultSelector() as chosen:\n"
        "    assert chosen.get_map() is not None\n"
    )
    modules_after(code)


def test_only_modules_not_imported_yet_are_deferred():
    code = (
        "import ssl, sys, types\n"
        "from dsh_host._cli import _deferred\n"
        "imported = set(sys.modules)  # ssl, and what it imports (socket, selectors)\n"
        "with _deferred.deferred() as deferred:\n"
        "    import trio\n"
        "assert deferred == [n for n in _deferred.DEFERRED if n not in imported], deferred\n"
        "assert 'ssl' not in deferred and 'selectors' not in deferred\n"
        "assert type(ssl) is types.ModuleType and trio._ssl._stdlib_ssl is ssl\n"
    )
    modules_after(code)
