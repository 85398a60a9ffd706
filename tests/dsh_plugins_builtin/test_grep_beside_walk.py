"""``grep`` with a path policy (issue 27, search): ripgrep runs beside the policy walk.

ripgrep starts on the whole directory while the walk asks policy about every file; its answer
is kept only when nothing was withheld. The first withheld file cancels it (its output is never
read) and ripgrep runs again, told to skip the withheld files. The re-check of what ripgrep
reports does not ask policy again about a path the walk already put to it.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import AbortSignal, Host, hookimpl
from dsh_plugins_builtin._tools import _ripgrep
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import processes_with, wait_gone
from tests.dsh_plugins_builtin.test_search_hostile import (
    WithholdSecrets,
    assert_nothing_secret,
    fake_rg,
)
from tests.dsh_plugins_builtin.test_tools_search import put

CEILING_S = 10.0  # a wall-clock ceiling on a wait that ends at once when the code is right


class _Counting:
    """A policy that withholds nothing and counts the questions about each path."""

    name = "counting_policy"

    def __init__(self, started: threading.Event | None = None) -> None:
        self.asked: Counter[str] = Counter()
        self.started = started
        self.saw_ripgrep: list[bool] = []

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        if self.started is not None and not self.saw_ripgrep:
            self.saw_ripgrep.append(self.started.wait(CEILING_S))
        self.asked[path] += 1
        return None


def _record_runs(host: Host, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Wrap the sandbox's ``run``: each call as ``[command, "done" | "cancelled"]``."""
    sandbox: Any = host.pm.get_plugin("sandbox")
    real = sandbox.run
    calls: list[list[str]] = []

    async def run(command: str, cwd: str | None = None, **kwargs: Any) -> Any:
        entry = [command, "running"]
        calls.append(entry)
        try:
            result = await real(command, cwd=cwd, **kwargs)
        except BaseException:  # trio.Cancelled, inside the sandbox's exception group
            entry[1] = "cancelled"
            raise
        entry[1] = "done"
        return result

    monkeypatch.setattr(sandbox, "run", run)
    return calls


def _policed(make_host: Any, ws: Path, policy: object) -> Host:
    config = {"host": {"workspace": str(ws)}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), policy, config=config)
    return host


async def test_ripgrep_starts_while_the_policy_walk_runs(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(ws, {"a.txt": "needle\n", "b/c.txt": "hay\nneedle\n"})
    started = threading.Event()
    policy = _Counting(started)
    host = _policed(make_host, ws, policy)
    calls = _record_runs(host, monkeypatch)
    sandbox: Any = host.pm.get_plugin("sandbox")
    real_run = sandbox.run

    async def run(command: str, cwd: str | None = None, **kwargs: Any) -> Any:
        started.set()  # the walk's first policy question waits for this
        return await real_run(command, cwd=cwd, **kwargs)

    monkeypatch.setattr(sandbox, "run", run)
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == "a.txt:1:needle\nb/c.txt:2:needle"
    assert policy.saw_ripgrep == [True]  # ripgrep was running before the walk asked policy
    assert [status for _, status in calls] == ["done"]  # nothing withheld: one run, kept


async def test_a_withheld_file_cancels_the_early_search_and_ripgrep_runs_again_without_it(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake ripgrep that never ends unless told to skip the secret: only a cancel stops it.
    script = (
        'case "$*" in\n'
        "  *'--glob=!/secrets/key.txt'*) printf 'README.md\\0001:needle in the readme\\n' ;;\n"
        "  *) exec sleep 1000 ;;\n"
        "esac\n"
    )
    rg = fake_rg(ws / ".venv" / "bin", script)  # visible in the sandbox
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"README.md": "needle in the readme\n", "secrets/key.txt": "TOKEN=hunter2 needle\n"})
    host = _policed(make_host, ws, WithholdSecrets(ws))
    calls = _record_runs(host, monkeypatch)
    parsed: list[str] = []
    parse = _ripgrep.parse_output
    monkeypatch.setattr(
        _ripgrep, "parse_output", lambda text, cut: parsed.append(text) or parse(text, cut)
    )
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == (
        "README.md:1:needle in the readme\n\n"
        "[1 file(s) withheld by policy: left out of this search, names and contents]"
    )
    assert [status for _, status in calls] == ["cancelled", "done"]
    assert "--glob=!/secrets" not in calls[0][0]
    assert "'--glob=!/secrets/key.txt'" in calls[1][0]
    assert len(parsed) == 1  # the cancelled search's output was never read
    assert_nothing_secret(result.text)


async def test_the_recheck_does_not_ask_policy_again_about_a_walked_file(
    make_host: Any, ws: Path
) -> None:
    put(ws, {f"d{i}/f{j}.txt": "needle\n" for i in range(3) for j in range(20)} | {"x.txt": "x\n"})
    policy = _Counting()
    host = _policed(make_host, ws, policy)
    result = await host.call("grep", {"pattern": "needle"})
    assert result.meta["files"] == 60
    real = os.path.realpath(ws)
    assert set(policy.asked) >= {f"{real}/d0/f0.txt", f"{real}/x.txt"}
    assert max(policy.asked.values()) == 1  # once per file, by the walk


async def test_with_a_policy_a_bad_glob_is_a_plain_argument_error(make_host: Any, ws: Path) -> None:
    put(ws, {"f.txt": "x\n"})
    host = _policed(make_host, ws, _Counting())
    result = await host.call("grep", {"pattern": "x", "glob": "[z-a]"})
    assert result.code == "INVALID_ARGS"
    assert result.text.startswith(
        """Error: invalid arguments: "glob" '[z-a]' is not a valid glob"""
    )


async def test_with_a_policy_an_aborted_search_kills_ripgrep(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "1000.4242421"  # a unique sleep, to find the process in /proc
    rg = fake_rg(ws / ".venv" / "bin", f"exec sleep {marker}\n")
    monkeypatch.setattr(_search_tools, "find_rg", lambda: rg)
    put(ws, {"f.txt": "needle\n"})
    host = _policed(make_host, ws, _Counting())
    signal = AbortSignal()
    results: list[Any] = []

    async def grep() -> None:
        results.append(await host.call("grep", {"pattern": "needle"}, signal=signal))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grep)
        with trio.fail_after(CEILING_S):
            while not (running := processes_with(marker)):
                await trio.lowlevel.checkpoint()
        signal.abort("enough")
    assert results[0].code == "ABORTED"
    await wait_gone(running)
    assert processes_with(marker) == []
