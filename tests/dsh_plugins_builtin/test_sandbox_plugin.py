"""The ``sandbox`` plugin alone: config, policy, its methods, ``dsh sandbox check``; and the
``tools`` plugin's fail-closed handling of a missing, broken or foreign sandbox plugin."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dsh_host import ConfigError, Host, hookimpl
from dsh_plugins_builtin import sandbox as sandbox_module
from dsh_plugins_builtin._sandbox import _starting
from dsh_plugins_builtin._sandbox._fence import writable_roots
from dsh_plugins_builtin.sandbox import (
    SandboxConfig,
    SandboxDeniedError,
    SandboxPlugin,
    SandboxUnavailableError,
    sandbox_check_command,
)
from dsh_plugins_builtin.tools import ToolsPlugin
from tests.dsh_plugins_builtin.conftest import patch_probes
from tests.trusted import trust


def started(make_host: Any, ws: Path, **table: Any) -> SandboxPlugin:
    plugin = SandboxPlugin()
    make_host(plugin, config={"host": {"workspace": str(ws)}, "plugin": {"sandbox": table}})
    return plugin


# -- config and policy ---------------------------------------------------------------------------


def test_config_defaults() -> None:
    assert SandboxConfig() == SandboxConfig(
        mode="workspace-write",
        writable_roots=None,
        read_roots=(),
        network=False,
        backend="auto",
        env_allow=(),
        max_output_bytes=64_000,
    )


def test_default_policy(make_host: Any, ws: Path) -> None:
    plugin = started(make_host, ws)
    policy = plugin.policy
    assert (policy.mode, policy.workspace, policy.network) == ("workspace-write", ws, False)
    roots = writable_roots(policy)
    assert plugin.tmp is not None
    assert roots == (ws.resolve(), plugin.tmp.resolve())  # the workspace and the private tmp
    assert oct(plugin.tmp.stat().st_mode & 0o777) == "0o700"
    assert plugin.mode == "workspace-write"
    assert plugin.workspace == ws


def test_configured_policy(make_host: Any, ws: Path) -> None:
    (ws / "out").mkdir()
    plugin = started(
        make_host,
        ws,
        mode="read-only",
        writable_roots=["out", "~"],
        read_roots=["/etc"],
        network=True,
    )
    policy = plugin.policy
    assert policy.writable_roots == (ws / "out", Path.home())
    assert policy.read_roots == (Path("/etc"),)
    assert (policy.mode, policy.network) == ("read-only", True)


def test_relative_workspace_is_made_absolute(make_host: Any, ws: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(ws.parent)
    plugin = SandboxPlugin()
    make_host(plugin, config={"host": {"workspace": "ws"}})
    assert plugin.workspace == ws


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"mode": "yolo"}, "key 'mode'"),
        ({"backend": "docker"}, "key 'backend'"),
        ({"max_output_bytes": 0}, "max_output_bytes must be between 1 and 67108864"),
        ({"writable_roots": [""]}, "writable_roots entries must be non-empty paths"),
        ({"env_allow": [""]}, "env_allow entries must be non-empty names"),
        ({"network": "no"}, "key 'network'"),
        ({"writeable_roots": ["x"]}, "writeable_roots"),
    ],
)
def test_bad_config_is_a_config_error(
    make_host: Any, ws: Path, table: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=r"\[plugin\.sandbox\]") as info:
        started(make_host, ws, **table)
    assert fragment in str(info.value)


# -- methods -------------------------------------------------------------------------------------


async def test_methods_map_fence_denials(make_host: Any, ws: Path) -> None:
    plugin = started(make_host, ws, writable_roots=["."])
    assert plugin.check_read("a.txt") == ws.resolve() / "a.txt"
    with pytest.raises(
        SandboxDeniedError, match=r'read of "/etc/passwd" denied: .* workspace-write'
    ):
        plugin.check_read("/etc/passwd")
    with pytest.raises(SandboxDeniedError, match="outside the writable roots"):
        plugin.check_write("../x")
    plugin.write_text("d/f.txt", "hi")
    assert (ws / "d/f.txt").read_text() == "hi"
    with pytest.raises(SandboxDeniedError):
        plugin.write_text("/etc/dsh-never", "x")
    assert not Path("/etc/dsh-never").exists()


async def test_an_unstarted_plugin_refuses_everything(ws: Path) -> None:
    plugin = SandboxPlugin()
    for call in (lambda: plugin.check_read("x"), lambda: plugin.write_text("x", "y")):
        with pytest.raises(SandboxUnavailableError, match="was not started by a host"):
            call()
    with pytest.raises(SandboxUnavailableError):
        await plugin.run("touch ran", cwd=str(ws))
    assert not (ws / "ran").exists()


async def test_tools_fail_closed_when_the_sandbox_failed_to_start(make_host: Any, ws: Path) -> None:
    class Broken(SandboxPlugin):
        @hookimpl
        def dsh_host_started(self, host: Host) -> None:
            raise RuntimeError("cannot build the policy")

    host = make_host(ToolsPlugin(), Broken(), config={"host": {"workspace": str(ws)}})
    assert [row.status.value for row in host.plugins() if row.name == "sandbox"] == ["failed"]
    result = await host.call("write_file", {"path": "f.txt", "content": "x"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert "the sandbox plugin failed to start and was removed" in result.text
    assert not (ws / "f.txt").exists()


async def test_tools_fail_closed_with_a_foreign_sandbox_plugin(make_host: Any, ws: Path) -> None:
    class Impostor:
        name = "sandbox"

        @hookimpl  # a plugin must implement a hook to be registered
        def dsh_host_started(self) -> None:
            pass

        def check_read(self, path: str) -> Path:
            return Path("/")

    host = make_host(ToolsPlugin(), Impostor(), config={"host": {"workspace": str(ws)}})
    result = await host.call("bash", {"command": "touch ran"})
    assert result.code == "SANDBOX_UNAVAILABLE"
    assert "does not provide check_read, check_write, write_text and run" in result.text
    denied = await host.call("read_file", {"path": "/etc/hostname"})
    assert denied.code == "SANDBOX_DENIED"  # the impostor's permissive check_read is not used
    assert not (ws / "ran").exists()


# -- dsh sandbox check ---------------------------------------------------------------------------

PROBES_OK = {"bwrap": None, "landlock": None, "landlock-net": None}
PROBES_NONE = {
    "bwrap": "bwrap is not installed (not found on PATH)",
    "landlock": "the probe exited 125: landlock-run: ENOSYS",
    "landlock-net": "the probe exited 125: landlock-run: ENOSYS",
}


def installed(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Pretend these built-in plugins are the only ``dsh.plugins`` entry points."""
    real = importlib.metadata.entry_points
    fake = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(
            name, f"dsh_plugins_builtin.{name}:{name.title()}Plugin", "dsh.plugins"
        )
        for name in names
    )

    def entry_points(**params: Any) -> Any:
        if params.get("group") == "dsh.plugins":
            return fake.select(**{k: v for k, v in params.items() if k != "group"})
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory as the working directory, and no plugin installed through entry points."""
    monkeypatch.chdir(tmp_path)
    for name in ("DSH_CONFIG", "DSH_DISABLE_PLUGIN_AUTOLOAD", "DSH_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    installed(monkeypatch)
    return tmp_path


def write_config(project: Path, table: str) -> Path:
    path = project / "dsh.toml"
    path.write_text(f'[host]\nworkspace = "."\n\n[plugin.sandbox]\n{table}\n')
    return trust(path)


def test_check_reports_backends_and_choice(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    config = write_config(project, 'mode = "workspace-write"')
    assert sandbox_check_command([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "sandbox backends on this machine:",
        "  bwrap                       works",
        "  landlock                    works",
        "  landlock (network = false)  works",
    ]
    assert f"config: {config}" in out
    assert "[plugin.sandbox] mode = workspace-write, backend = auto, network = false" in out
    assert out[-1] == "bash commands would run confined by: bwrap"
    assert any(line.startswith("bwrap binary: /") and "PATH" in line for line in out)


def test_check_says_whether_dsh_s_own_installation_is_writable(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    venv = project / "venv"
    (venv / "lib").mkdir(parents=True)
    elsewhere = Path(tempfile.gettempdir()).parent / "usr-lib-python-nowhere"
    fake = lambda modules: (venv / "lib", venv, elsewhere)  # noqa: E731
    monkeypatch.setattr(_starting, "install_paths", fake)
    write_config(project, 'mode = "workspace-write"')
    assert sandbox_check_command([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        f"dsh's own installation and import path, read-only to every tool and command: {venv}"
        in out
    )
    assert not any(line.startswith("WARNING") for line in out)
    write_config(project, "protect_install = false")
    assert sandbox_check_command(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["install"] == {
        "protected": [], "exposed": [str(venv)],
    }  # fmt: skip
    assert sandbox_check_command([]) == 0
    warning = [line for line in capsys.readouterr().out.splitlines() if "WARNING" in line]
    assert warning == [
        "WARNING: dsh's own installation or import path is writable by tools and commands "
        f"(protect_install = false), so they can plant code the next run executes: {venv}"
    ]


def test_check_lists_the_import_path_in_the_workspace_as_protected(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    monkeypatch.setattr(_starting, "install_paths", lambda modules: ())
    monkeypatch.syspath_prepend(str(project / "src"))  # PYTHONPATH=src, or an editable install
    write_config(project, 'mode = "workspace-write"')
    assert sandbox_check_command(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["install"] == {
        "protected": [str(project / "src")], "exposed": [],
    }  # fmt: skip


def test_the_sandbox_finds_the_code_of_every_plugin_the_host_loaded(tmp_path: Path) -> None:
    import sys

    class Local:  # a plugin from this test module: its top-level package is `tests`
        name = "local"

        @hookimpl  # a plugin must implement a hook to be registered
        def dsh_host_started(self) -> None:
            pass

    sandbox = SandboxPlugin()
    config = {"host": {"workspace": str(tmp_path)}}
    Host(config, plugins=[sandbox, Local()], load_entrypoints=False, environ={})
    assert Path(sys.modules["tests"].__path__[0]) in sandbox.install
    assert Path(sandbox_module.__file__).parent in sandbox.install  # dsh's own


def test_check_names_the_configured_bwrap_and_refuses_one_in_the_workspace(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    real = shutil.which("bwrap") or "/usr/bin/bwrap"
    write_config(project, f'bwrap = "{real}"')
    assert sandbox_check_command(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bwrap"]["why"] == f'configured: [plugin.sandbox] bwrap = "{real}"'
    planted = project / "bwrap"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    write_config(project, f'bwrap = "{planted}"')
    assert sandbox_check_command([]) == 2
    err = capsys.readouterr().err
    assert "key 'bwrap'" in err
    assert "lies in a writable root" in err
    write_config(project, 'bwrap = "bwrap"')
    assert sandbox_check_command([]) == 2
    assert "is not an absolute path" in capsys.readouterr().err


def test_check_json_when_nothing_works(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_NONE))
    write_config(project, 'backend = "auto"')
    assert sandbox_check_command(["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["backends"]["bwrap"] == {"usable": False, "reason": PROBES_NONE["bwrap"]}
    assert report["chosen"] is None
    assert "bwrap: bwrap is not installed" in report["problem"]
    assert "apt-get install bubblewrap" in report["problem"]
    assert report["workspace"] == str(project)


def test_check_landlock_only_and_danger(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    probes = {**PROBES_NONE, "landlock": None, "landlock-net": None}
    patch_probes(monkeypatch, lambda bwrap=None: probes)
    # The config file in the workspace is protected too: only read-only leaves Landlock usable.
    write_config(project, 'mode = "read-only"')
    assert sandbox_check_command(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chosen"] == "landlock"
    # .git & co. in writable roots and no bwrap: Landlock cannot enforce it, an error at start.
    write_config(project, "network = false")
    assert sandbox_check_command(["--json"]) == 2
    err = capsys.readouterr().err
    assert "[plugin.sandbox], key 'protected'" in err
    assert "Landlock cannot keep a path read-only" in err
    write_config(project, 'mode = "danger-full-access"\nbackend = "none"')
    assert sandbox_check_command([]) == 0
    assert "bash runs UNCONFINED (danger-full-access)" in capsys.readouterr().out


def test_check_says_where_landlock_commands_start_from(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    probes = {**PROBES_NONE, "landlock": None, "landlock-net": None}
    patch_probes(monkeypatch, lambda bwrap=None: probes)
    write_config(project, 'mode = "read-only"')
    monkeypatch.setattr(sandbox_module, "probe_fork_server", lambda: None)
    assert sandbox_check_command([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "landlock commands would start from: the fork server"
    )
    monkeypatch.setattr(sandbox_module, "probe_fork_server", lambda: "sys.executable is unknown")
    assert sandbox_check_command(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fork_server"] == {"usable": False, "reason": "sys.executable is unknown"}
    assert sandbox_check_command([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "landlock commands would start from: a fork of the host (sys.executable is unknown)"
    )


def test_the_fork_server_probe_runs_true_through_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_plugins_builtin._sandbox import _confine, _forkclient

    if _confine.probe_backends()["landlock"] is not None:
        pytest.skip("landlock unusable here")
    fresh = _forkclient.ForkServer()
    monkeypatch.setattr(_forkclient, "_shared", fresh)
    try:
        assert _confine.probe_fork_server() is None
        assert fresh._proc is not None
    finally:
        fresh.close()
    broken = _forkclient.ForkServer()
    broken.broken = "it exited"
    monkeypatch.setattr(_forkclient, "_shared", broken)
    assert _confine.probe_fork_server() == "it exited"
    monkeypatch.setattr(_forkclient, "ENABLED", False)
    assert _confine.probe_fork_server() == "the fork server is switched off"


def test_check_backend_none_and_a_config_error(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    write_config(project, 'backend = "none"')
    assert sandbox_check_command(["--json"]) == 1
    assert 'backend \\"none\\" cannot confine' in capsys.readouterr().out
    config = write_config(project, 'mode = "yolo"')
    assert sandbox_check_command(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh sandbox check: config error:")
    assert "key 'mode'" in err


def test_check_when_the_plugin_is_installed_but_blocked(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed(monkeypatch, "sandbox")
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    (project / "dsh.toml").write_text('[plugins]\ndisable = ["sandbox"]\n')
    trust(project / "dsh.toml")
    assert sandbox_check_command(["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["enabled"] is False
    assert report["problem"].startswith("the sandbox plugin is blocked")
    assert "fail closed with SANDBOX_UNAVAILABLE" in report["problem"]


def test_check_says_what_lies_next_to_a_commands_files(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22: the private tmp, the protected config files, what cannot be read, the
    environment names (never their values) and the limits."""
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    monkeypatch.setenv("DATABASE_URL", "postgres://u:pw@db/app")
    monkeypatch.setenv("HOME", str(project))
    write_config(project, 'deny_read = ["secrets/*"]\n[plugin.sandbox.limits]\nprocesses = 99')
    assert sandbox_check_command(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tmp"] is not None
    assert report["writable_roots"] == [str(project.resolve()), report["tmp"]]
    assert str(project / "dsh.toml") in report["config_files"]["protected"]
    assert str(project / "pyproject.toml") in report["config_files"]["protected"]
    assert "~/.ssh" in report["deny_read"]
    assert str(project / "secrets/*") in report["deny_read"]
    assert "PATH" in report["env"]
    assert "DATABASE_URL" not in report["env"]
    assert report["limits"]["processes"] == 99
    assert report["processes_enforced"] is (os.geteuid() != 0)
    assert sandbox_check_command([]) == 0
    out = capsys.readouterr().out
    assert "private tmp (commands' /tmp and TMPDIR, the file tools' /tmp): /" in out
    assert "config files the next run reads, read-only: " in out
    assert "pw@" not in out
    assert "core dumps: none (hard limit 0)" in out
    from dsh_plugins_builtin._sandbox import _check

    monkeypatch.setattr(_check, "core_helper", lambda: "/usr/lib/systemd/systemd-coredump")
    assert sandbox_check_command([]) == 0
    out = capsys.readouterr().out
    assert "the kernel start /usr/lib/systemd/systemd-coredump on the host" in out


def test_check_names_the_hosts_core_helper(tmp_path: Path) -> None:
    # A crash of a command still starts a pipe core_pattern's helper on the host (it is told
    # the limit is 0): `dsh sandbox check` says which one.
    from dsh_plugins_builtin._sandbox._check import core_helper

    pattern = tmp_path / "core_pattern"
    pattern.write_text("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h\n")
    assert core_helper(str(pattern)) == "/usr/lib/systemd/systemd-coredump"
    pattern.write_text("core\n")
    assert core_helper(str(pattern)) is None
    assert core_helper(str(tmp_path / "missing")) is None
    pattern.write_text("|\n")
    assert core_helper(str(pattern)) is None


def test_check_names_the_host_sockets_it_covers(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host daemon's socket in the workspace: covered for each command, and said so."""
    patch_probes(monkeypatch, lambda bwrap=None: dict(PROBES_OK))
    write_config(project, "")
    with socket.socket(socket.AF_UNIX) as daemon:
        daemon.bind(str(project / "daemon.sock"))
        daemon.listen(1)
        assert sandbox_check_command(["--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        # (other host sockets outside the masked directories are listed too: not asserted)
        assert str(project.resolve() / "daemon.sock") in report["sockets_covered"]
        assert sandbox_check_command([]) == 0
        out = capsys.readouterr().out
    covered = next(line for line in out.splitlines() if "covered for each command" in line)
    assert str(project.resolve() / "daemon.sock") in covered.split(": ", 1)[1].split(", ")


def test_the_plugin_class_stays_small() -> None:
    """Issue 21: no class over ~15 methods; starting (policy, enforceability) lives in
    `_starting`, the fence's error translation in module functions."""
    members = [
        name
        for name, value in vars(SandboxPlugin).items()
        if callable(value) or isinstance(value, property)
    ]
    assert len(members) <= 15, members
