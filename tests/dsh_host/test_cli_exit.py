"""The ``dsh`` process's quick exit (`dsh_host._cli._entry`, issue 27): the interpreter's
teardown is skipped, and nothing a finished command owes is.

Each test runs ``python -m dsh_host`` (the console script's entry) in a fresh workspace.
"""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

PLUGIN = """
import atexit, pathlib, threading, time
from dsh_host import hookimpl

OUT = pathlib.Path({out!r})


def late_thread():
    time.sleep(0.05)  # still running when main returns
    (OUT / "thread").write_text("joined")


class Teardown:
    def __del__(self):  # only the interpreter's teardown collects a module global
        (OUT / "teardown").write_text("ran")


KEPT = Teardown()


class Leaver:
    name = "leaver"

    @hookimpl
    def dsh_host_started(self, host):
        atexit.register(lambda: (OUT / "atexit").write_text("ran"))
        threading.Thread(target=late_thread, daemon=False).start()
"""


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    place = tmp_path / "workspace"
    place.mkdir()
    (place / "a.txt").write_text("hello\n" * 3000)
    return place


def dsh(workspace: pathlib.Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "dsh_host", *argv],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_whole_output_and_the_audit_row_are_there_after_a_quick_exit(workspace):
    done = dsh(workspace, "call", "read_file", '{"path": "a.txt", "limit": 3000}', "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # all of it: the streams were flushed
    assert "hello" in json.dumps(result)
    database = workspace.parent / "state" / "dsh" / "audit.sqlite3"
    with sqlite3.connect(database) as connection:
        (count,) = connection.execute("select count(*) from calls").fetchone()
    assert count == 1  # the writer committed the row on its way out


def test_the_status_of_a_failed_command_is_kept(workspace):
    assert dsh(workspace, "call", "no_such_tool", "{}").returncode == 2
    assert dsh(workspace, "call", "read_file", '{"path": "missing.txt"}').returncode == 1


def test_exit_handlers_and_non_daemon_threads_of_plugins_still_finish(workspace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (workspace / "leaver.py").write_text(PLUGIN.format(out=str(out)))
    done = dsh(workspace, "--plugin", "leaver:Leaver", "call", "read_file", '{"path": "a.txt"}')
    assert done.returncode == 0, done.stderr
    assert (out / "atexit").read_text() == "ran"
    assert (out / "thread").read_text() == "joined"
    assert not (out / "teardown").exists()  # the interpreter's teardown was skipped


def test_main_called_in_process_leaves_the_interpreter_alone(workspace):
    code = (
        "import atexit, os\n"
        "from dsh_host._cli._main import main\n"
        "assert main(['--version']) == 0\n"
        "atexit.register(lambda: os.write(1, b'still here\\n'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stdout.endswith("still here\n")


def test_a_closed_stdout_keeps_the_commands_status(monkeypatch):
    from dsh_host._cli import _entry

    exits: list[int] = []
    closed = open(os.devnull, "w")  # noqa: SIM115 (closed at once: flushing it raises)
    closed.close()
    monkeypatch.setattr(sys, "stdout", closed)
    monkeypatch.setattr(os, "_exit", exits.append)
    _entry._exit_now([3])
    assert exits == [3]  # as the interpreter: a closed stream is skipped, not status 120


COLLECTOR = """
import gc, pathlib
from dsh_host import hookimpl

OUT = pathlib.Path({out!r})
(OUT / "import").write_text(str(gc.isenabled()))


class Collector:
    name = "collector"

    @hookimpl
    def dsh_host_started(self, host):
        (OUT / "start").write_text(str(gc.isenabled()))

    @hookimpl
    def dsh_tool_result(self, execution, result):
        (OUT / "call").write_text(f"{{gc.isenabled()}} {{gc.get_freeze_count() > 0}}")
"""


def test_the_collector_pauses_for_the_start_and_runs_for_the_command(workspace, tmp_path):
    """Imports and the host's start run without the cyclic collector; the command runs with
    it (what the start made frozen), as a long ``dsh mcp serve`` needs."""
    out = tmp_path / "out"
    out.mkdir()
    (workspace / "collector.py").write_text(COLLECTOR.format(out=str(out)))
    argv = ["--plugin", "collector:Collector", "call", "read_file", '{"path": "a.txt"}']
    done = dsh(workspace, *argv)
    assert done.returncode == 0, done.stderr
    assert (out / "import").read_text() == "False"
    assert (out / "start").read_text() == "False"
    assert (out / "call").read_text() == "True True"


def test_main_called_in_process_leaves_the_collector_alone():
    code = (
        "import gc\n"
        "from dsh_host._cli._main import main\n"
        "assert main(['tools', '--no-entrypoints']) == 0\n"
        "assert gc.isenabled() and gc.get_freeze_count() == 0\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_console_script_pauses_the_collector_before_dsh_host_imports_anything():
    console = (
        "import gc, sys\n"
        "sys.orig_argv = [sys.executable, '-m', 'dsh_host', 'tools']\n"
        "import dsh_host\n"
        "assert not gc.isenabled()\n"
        "from dsh_host._cli._main import main\n"
        "assert main(['tools', '--no-entrypoints']) == 0\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 0\n"  # resumed once the host is built
    )
    library = "import gc, dsh_host\nassert gc.isenabled()\n"
    for code in (console, library):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
