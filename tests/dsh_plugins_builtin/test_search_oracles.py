"""The search tools' withheld count names nothing inside a withheld directory, and their reads
follow no symlink swapped in mid-search (review C of the search tools).

* A ``deny_read`` directory (``~/.ssh``) is left out whole by the walks, before any
  ``.gitignore`` (which the model can write) or grep's ``glob`` applies, and counts once:
  a count of its files that the query keeps would spell their names.
* ripgrep's re-check drops a withheld file it reports without counting it: under
  ``danger-full-access`` nothing hides ``~/.ssh`` from ripgrep, and a count there would say
  whether a credential holds the pattern.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host, hookimpl
from dsh_plugins_builtin._tools import _grep as _grep_tool
from dsh_plugins_builtin._tools import _search as _search_tools
from dsh_plugins_builtin._tools import _walk
from dsh_plugins_builtin._tools._walk import walk_files
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import tools_host
from tests.dsh_plugins_builtin.test_tools_search import engine, put

__all__ = ["engine"]  # the fixture, shared with test_tools_search

SECRET = "PRIVATE-KEY-1"


class WithholdPrivate:
    """A path policy (it makes ripgrep's engine run the policy walk) withholding ``private/``."""

    name = "private_policy"

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        return "private/ is withheld" if "/private/" in path else None


@pytest.fixture
def home(ws: Path) -> Path:
    put(ws, {".ssh/id_rsa": SECRET + "\n", ".ssh/known_hosts": "HOSTS\n", "notes.txt": "KEY\n"})
    return ws


def denying_host(make_host: Any, ws: Path, *extra: object, **sandbox: Any) -> Host:
    sandbox.setdefault("deny_read", [str(ws / ".ssh")])
    config = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": sandbox}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), *extra, config=config)
    return host


@pytest.mark.parametrize(
    "gitignore",
    ["", "/.ssh/*\n!/.ssh/id_r*\n", "/.ssh/*\n!/.ssh/zz*\n", "/.ssh/*\n!/.ssh/k*\n", "/.ssh/\n"],
)
async def test_a_gitignore_cannot_spell_names_in_a_denied_directory(
    make_host: Any, home: Path, gitignore: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(home, {".gitignore": gitignore, ".ssh/.gitignore": "*\n"})
    read: list[str] = []
    load = _walk.load_gitignore
    monkeypatch.setattr(_walk, "load_gitignore", lambda d: read.append(d) or load(d))
    host = denying_host(make_host, home)
    result = await host.call("glob", {"pattern": "**/*"})
    assert result.meta["withheld"] == 1  # ~/.ssh, once, whatever .gitignore keeps of it
    assert result.text.split("\n\n")[0] == ".gitignore\nnotes.txt"
    assert not any(".ssh" in directory for directory in read)  # its .gitignore is not read


@pytest.mark.parametrize("with_policy", [False, True])
@pytest.mark.parametrize("glob", ["**/.ssh/id_r*", "**/.ssh/id_x*", "**/*.txt", "*.md"])
async def test_greps_glob_cannot_spell_names_in_a_denied_directory(
    make_host: Any, home: Path, engine: str, glob: str, with_policy: bool
) -> None:
    extra = (WithholdPrivate(),) if with_policy else ()
    host = denying_host(make_host, home, *extra)
    result = await host.call("grep", {"pattern": "zzz", "glob": glob})
    walked = engine == "builtin" or with_policy  # else ripgrep, with ~/.ssh hidden from it
    assert result.meta.get("withheld", 0) == (1 if walked else 0), result.text
    assert SECRET not in result.text
    assert "id_rsa" not in result.text


@pytest.mark.parametrize("pattern", ["PRIVATE-KEY-[0-4]", "PRIVATE-KEY-[5-9]", "HOSTS"])
async def test_ripgreps_recheck_does_not_count_what_matched_in_a_denied_file(
    make_host: Any, home: Path, pattern: str
) -> None:
    host = denying_host(make_host, home, mode="danger-full-access")
    result = await host.call("grep", {"pattern": pattern, "include_ignored": True})
    assert result.text == f"No matches for {pattern!r} in ."
    assert "withheld" not in result.meta
    assert result.meta["count"] == 0


async def test_the_builtin_engine_follows_no_directory_swapped_for_a_symlink(
    make_host: Any, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search_tools, "find_rg", lambda: None)
    put(tmp_path, {"outside/id_rsa": SECRET + "\n"})
    put(ws, {"d/id_rsa": "decoy\n"})
    search = _grep_tool.local_search

    def racing(*args: Any) -> Any:  # a concurrent writer swaps d/ once it has been listed
        os.rename(ws / "d", ws / "d.old")
        os.symlink(tmp_path / "outside", ws / "d")
        return search(*args)

    monkeypatch.setattr(_grep_tool, "local_search", racing)
    host = tools_host(make_host, ws)
    result = await host.call("grep", {"pattern": "PRIVATE"})
    assert result.text == "No matches for 'PRIVATE' in ."


def test_the_walk_follows_no_directory_swapped_for_a_symlink(ws: Path, tmp_path: Path) -> None:
    put(tmp_path, {"outside/secret.txt": "x\n"})
    put(ws, {"a.txt": "a\n", "d/b.txt": "b\n"})
    real = Path(os.path.realpath(ws))
    walk = walk_files(real, top=real)
    assert next(walk)[0] == "a.txt"
    os.rename(ws / "d", ws / "d.old")  # d/ was listed; swapped before the walk enters it
    os.symlink(tmp_path / "outside", ws / "d")
    assert [rel for rel, _ in walk] == []


class OldSandbox(SandboxPlugin):
    """A sandbox plugin written against the protocol before ``read_only``."""

    async def run(  # type: ignore[override]
        self, command: str, cwd: str | None = None, timeout: float | None = None, sink: Any = None
    ) -> Any:
        return await super().run(command, cwd=cwd, timeout=timeout, sink=sink)


async def test_ripgrep_runs_in_a_sandbox_plugin_whose_run_lacks_read_only(
    make_host: Any, ws: Path
) -> None:
    put(ws, {"a.txt": "needle\n"})
    config = {"host": {"workspace": str(ws)}}
    host: Host = make_host(ToolsPlugin(), OldSandbox(), config=config)
    result = await host.call("grep", {"pattern": "needle"})
    assert result.text == "a.txt:1:needle"


async def test_glob_refuses_a_lone_surrogate(make_host: Any, ws: Path) -> None:
    host = tools_host(make_host, ws)
    result = await host.call("glob", {"pattern": "\udcff*"})
    assert result.code == "INVALID_ARGS"
    assert '"pattern"' in result.text


async def test_a_symlinked_gitignore_is_not_followed(
    make_host: Any, home: Path, tmp_path: Path
) -> None:
    # Its lines would steer the results: an oracle on a file the host reads unconfined.
    (home / ".gitignore").symlink_to(home / ".ssh" / "id_rsa")  # a line: PRIVATE-KEY-1
    put(tmp_path, {"lines": "*.txt\n"})
    (home / "sub").mkdir()
    (home / "sub" / ".gitignore").symlink_to(tmp_path / "lines")
    put(home, {"sub/a.txt": "x\n", SECRET: "x\n"})
    host = denying_host(make_host, home)
    result = await host.call("glob", {"pattern": "**/*"})
    shown = result.text.split("\n\n")[0].split("\n")
    assert shown == [SECRET, "notes.txt", "sub/.gitignore", "sub/a.txt"]  # .gitignore: withheld
