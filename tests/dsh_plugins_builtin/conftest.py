"""Fixtures shared by the built-in plugin tests: a workspace, sandbox backends, a tools host."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import Host
from dsh_plugins_builtin import sandbox as sandbox_module
from dsh_plugins_builtin._sandbox import _forkclient, _starting, _views
from dsh_plugins_builtin._sandbox._confine import probe_backends
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


@pytest.fixture
def ws(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """An empty workspace directory (under the test's tmp_path, which stays outside it).

    For the ``bwrap-in-a-view`` backend, in ``/var/lib`` where it can be made (as root; the
    unprivileged re-run has a ``$TMPDIR`` outside ``/tmp`` too): a workspace under ``/tmp``
    gets no kept view (`_viewline`), and the test would not run in one."""
    callspec = getattr(request.node, "callspec", None)
    in_a_view = callspec is not None and callspec.params.get("backend") == "bwrap-in-a-view"
    if not in_a_view or not os.access("/var/lib", os.W_OK):
        path = tmp_path / "ws"
        path.mkdir()
        yield path
        return
    parent = Path(tempfile.mkdtemp(prefix="dsh-view-", dir="/var/lib"))
    path = parent / "ws"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(params=["bwrap", "bwrap-in-a-view", "landlock", "landlock-forking-the-host"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each confinement backend, bwrap both ways (a fresh bwrap per command, and every command
    started in a kept view, `_views`), Landlock both ways: commands started by the fork server
    (the usual way) and by forking the host (its fallback). On CI (``CI=true``) one that does not
    work here fails the test loudly; elsewhere it is skipped with the probe's reason."""
    name: str = request.param
    views = _views.shared()
    monkeypatch.setattr(_views, "ENABLED", name == "bwrap-in-a-view")
    monkeypatch.setattr(_views, "EAGER", name == "bwrap-in-a-view")
    asked, used = views.asked, views.used
    if name == "bwrap-in-a-view":
        name = "bwrap"
    if name == "landlock-forking-the-host":
        name = "landlock"
        monkeypatch.setattr(_forkclient, "ENABLED", False)
    # The escape tests run with network = false, which Landlock honours only via "landlock-net".
    reason = probe_backends()["landlock-net" if name == "landlock" else name]
    if reason is None and name == "landlock" and _forkclient.ENABLED:
        reason = _forkclient.shared().broken
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"sandbox backend {name!r} must work on CI but does not: {reason}")
        pytest.skip(f"sandbox backend {name!r} does not work here: {reason}")
    yield name
    if name == "landlock" and _forkclient.ENABLED:  # it did not fall back meanwhile
        assert _forkclient.shared().broken is None
    if _views.ENABLED:  # commands ran in a view (all but one that met a view being made)
        assert views.broken is None
        assert views.used - used >= min(views.asked - asked, 1)


def tools_host(make_host: Any, ws: Path, **sandbox: Any) -> Host:
    """A host with the tools and sandbox plugins, rooted at *ws*; *sandbox* is its table."""
    if sandbox.get("backend") == "landlock":  # Landlock cannot keep .git & co. read-only,
        sandbox.setdefault("protected", [])  # nor dsh's own installation if it lies in /tmp
        sandbox.setdefault("protect_install", False)
        sandbox.setdefault("protect_config", False)  # nor dsh.toml, pyproject.toml & co.
    config: dict[str, Any] = {"host": {"workspace": str(ws)}, "plugin": {"sandbox": sandbox}}
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), config=config)
    return host


def processes_with(marker: str) -> list[int]:
    """The pids of every live process whose command line contains *marker*."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


async def wait_gone(pids: list[int], within: float = 10) -> None:
    """Wait (event-driven, bounded) until each process has exited; a pidfd polls readable then."""
    with trio.fail_after(within):
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                await trio.lowlevel.wait_readable(fd)
            finally:
                os.close(fd)


def patch_probes(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    """Make the sandbox plugin and ``dsh sandbox check`` see *fake* as `probe_backends`."""
    for module in (sandbox_module, _starting):
        monkeypatch.setattr(module, "probe_backends", fake)
