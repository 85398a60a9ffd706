"""``grep``'s per-match cost (issue 11): what ripgrep reports is re-checked cheaply, never less.

Each file ripgrep reports is checked again by its real path (`_grep_recheck.Recheck`): its
directory is resolved one level at a time below the (real, fenced) search directory, each level
once, and the file itself costs one ``lstat``; only a path whose real location differs from
its spelling is put to the fence again.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import Host, hookimpl
from dsh_plugins_builtin._tools import _grep_recheck, _grep_rg
from dsh_plugins_builtin._tools._search_support import Policy
from dsh_plugins_builtin.sandbox import SandboxDeniedError, SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import tools_host
from tests.dsh_plugins_builtin.test_tools_search import put


class _Fence:
    """A sandbox stand-in: records what is put to the fence; denies anything under ``out``."""

    def __init__(self, out: Path) -> None:
        self.out = str(out)
        self.asked: list[str] = []

    def check_read(self, path: str) -> Path:
        self.asked.append(path)
        if path.startswith(self.out + "/"):
            raise SandboxDeniedError(f"{path} is outside")
        return Path(path)


class _Deny:
    """A policy that withholds one real path (through the `Policy` seam)."""

    def __init__(self, denied: str) -> None:
        self.denied = denied

    def has_path_policy(self) -> bool:
        return True

    def path_denied(self, execution: Any, path: str, access: str) -> str | None:
        return "withheld" if path == self.denied else None


class _Ctx:
    execution = None


def test_each_directory_level_is_resolved_once_and_each_file_costs_one_lstat(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(ws, {f"a/b/f{i}.txt": "x\n" for i in range(3)} | {f"a/c/g{i}.txt": "x\n" for i in range(2)})
    fence = _Fence(ws.parent / "nowhere")
    check = _grep_recheck.Recheck(fence, ws, Policy(None, None))  # type: ignore[arg-type]
    lstats: list[str] = []
    real_lstat = os.lstat

    def counting(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        lstats.append(str(path))
        return real_lstat(path, *args, **kwargs)

    def no_realpath(*args: object, **kwargs: object) -> str:
        raise AssertionError("a path without a symlink was resolved in full")

    monkeypatch.setattr(os, "lstat", counting)
    monkeypatch.setattr(os.path, "realpath", no_realpath)
    reported = [f"a/b/f{i}.txt" for i in range(3)] + [f"a/c/g{i}.txt" for i in range(2)]
    assert all(check.readable(rel) for rel in reported * 2)
    # a, a/b, a/c once each; every file once per report.
    assert sorted(set(lstats)) == sorted(
        [str(ws / "a"), str(ws / "a/b"), str(ws / "a/c"), *(str(ws / r) for r in reported)]
    )
    assert len(lstats) == 3 + 2 * len(reported)
    assert fence.asked == []  # nothing differed from its spelling: no fence call


def test_a_symlinked_directory_or_a_climbing_name_is_judged_by_its_real_path(
    tmp_path: Path, ws: Path
) -> None:
    outside = tmp_path / "outside"
    put(outside, {"secret.txt": "s\n"})
    put(ws, {"a/ok.txt": "x\n", "top.txt": "x\n"})
    (ws / "a" / "link").symlink_to(outside)
    fence = _Fence(outside)
    policy = Policy(_Deny(str(ws / "top.txt")), _Ctx())  # type: ignore[arg-type]
    check = _grep_recheck.Recheck(fence, ws, policy)  # type: ignore[arg-type]
    assert check.readable("a/ok.txt")
    assert not check.readable("a/link/secret.txt")  # swapped in: the fence refuses it
    assert fence.asked == [str(outside / "secret.txt")]
    assert not check.readable("a/../top.txt")  # the policy sees the real path, not a/../
    assert not check.readable("a/..")  # not a file's name
    assert not check.readable("a/gone/x.txt")  # nothing there to vouch for


async def test_grep_resolves_and_rechecks_a_few_files_without_a_worker_thread(
    make_host: Any, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search root, the command's working directory and the re-check of a few reported
    files are a few ``lstat`` calls each: done on the event loop. Many files go to a thread."""
    many = _grep_rg._INLINE_RECHECKS + 1
    put(ws, {"f.txt": "needle\n"} | {f"many/m{i:03}.txt": "haystack\n" for i in range(many)})
    host: Host = tools_host(make_host, ws)
    assert (await host.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"
    hops: list[str] = []
    real = trio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    assert (await host.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"
    assert not {"search_root", "resolve_cwd", "_keep_allowed"} & set(hops)
    result = await host.call("grep", {"pattern": "haystack"})
    assert result.meta["files"] == many
    assert hops.count("_keep_allowed") == 1
    # With a path policy the re-check asks dsh_path_denied, which runs on worker threads only.
    hops.clear()
    policed: Host = make_host(
        ToolsPlugin(), SandboxPlugin(), _AllowAll(), config={"host": {"workspace": str(ws)}}
    )
    assert (await policed.call("grep", {"pattern": "needle"})).text == "f.txt:1:needle"
    assert hops.count("_keep_allowed") == 1


class _AllowAll:
    name = "allow_all"

    @hookimpl
    def dsh_path_denied(self, execution: Any, path: str, access: str) -> str | None:
        assert threading.current_thread() is not threading.main_thread()
        return None
