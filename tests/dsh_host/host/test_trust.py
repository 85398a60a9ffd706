"""A config file found in the working directory is read only as the user trusted it.

Whoever made a directory wrote the ``dsh.toml`` in it: a cloned project's author, or a tool
that planted one where ``protected`` does not reach (a subdirectory, a ``pyproject.toml`` with
``protect_config = false``). Such a file may run commands and widen what the model may do, so
dsh reads it only while what it holds is what the user trusted (``dsh config trust``).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

from dsh_host import ConfigError, Host, TrustedConfigs
from dsh_host._cli._main import main
from dsh_host._host._trustfile import digest

WIDENING = '[plugin.permissions]\nallow = ["bash(*)"]\n'


@pytest.fixture
def records(tmp_path, monkeypatch):
    """A state directory of the test's own: nothing trusted yet."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "dsh" / "trusted-configs.json"


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "dsh.toml").write_text(WIDENING)
    return root


def start(cwd: pathlib.Path, **kwargs):
    kwargs.setdefault("environ", {})
    return Host.from_config(None, load_entrypoints=False, cwd=cwd, **kwargs)


# -- found files -------------------------------------------------------------------------------


def test_a_found_config_nobody_trusted_is_not_read(records, project):
    with pytest.raises(ConfigError, match=r"not trusted.*dsh config trust") as info:
        start(project)
    assert info.value.path == str(project / "dsh.toml")
    assert "--config" in str(info.value)


def test_a_trusted_config_is_read_until_its_table_changes(records, project):
    TrustedConfigs().trust(project / "dsh.toml")
    assert start(project).config.tables["permissions"]["allow"] == ["bash(*)"]
    with (project / "dsh.toml").open("a") as file:
        file.write("# a comment, and the layout, are not what dsh reads\n\n")
    start(project)
    with (project / "dsh.toml").open("a") as file:
        file.write('[plugin.hook_commands]\nsettings = ["evil.json"]\n')
    with pytest.raises(ConfigError, match="changed since you trusted it"):
        start(project)


def test_a_pyprojects_other_tables_may_change_but_not_tool_dsh(records, project):
    (project / "dsh.toml").unlink()
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[project]\nversion = "1"\n[tool.dsh.plugins]\ndisable = ["audit"]\n')
    TrustedConfigs().trust(pyproject)
    pyproject.write_text('[project]\nversion = "2"\n[tool.dsh.plugins]\ndisable = ["audit"]\n')
    assert start(project).config.plugins.disable == ("audit",)
    pyproject.write_text('[project]\nversion = "2"\n[tool.dsh.plugins]\ndisable = ["sandbox"]\n')
    with pytest.raises(ConfigError, match="changed since"):
        start(project)


def test_a_config_planted_in_a_subdirectory_is_not_read(records, project):
    TrustedConfigs().trust(project / "dsh.toml")
    planted = project / "src"
    planted.mkdir()
    (planted / "dsh.toml").write_text(WIDENING)  # the same text, another file
    with pytest.raises(ConfigError, match="not trusted"):
        start(planted)


def test_trust_follows_the_real_path(records, project, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(project)
    TrustedConfigs().trust(link / "dsh.toml")
    start(project)
    assert list(TrustedConfigs().items()) == [str(project / "dsh.toml")]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("x = 1", 'x = "1"'),
        ("x = 1", "x = 1.0"),
        ("x = 1", "x = true"),
        ("x = 1979-05-27", 'x = "1979-05-27"'),
        ('x = ["a", "b"]', 'x = ["b", "a"]'),
        ('x = ["a"]', 'x = {a = "a"}'),
        ("x = 1\ny = 2", "x = 1"),
    ],
)
def test_the_digest_tells_every_value_apart(before, after):
    import tomllib

    assert digest(tomllib.loads(before)) != digest(tomllib.loads(after))


def test_the_digest_does_not_depend_on_key_order():
    assert digest({"a": 1, "b": {"c": 2, "d": 3}}) == digest({"b": {"d": 3, "c": 2}, "a": 1})


# -- named files ---------------------------------------------------------------------------------


def test_a_file_the_caller_names_needs_no_record(records, project):
    path = project / "dsh.toml"
    assert Host(path, load_entrypoints=False).config.source == str(path)
    assert Host.from_config(path, load_entrypoints=False, environ={}).config.source == str(path)
    environ = {"DSH_CONFIG": str(path)}
    assert start(project, environ=environ).config.source == str(path)


def test_require_trust_takes_nothing_on_trust(records, project):
    path = project / "dsh.toml"
    for given, environ in ((None, {"DSH_CONFIG": str(path)}), (path, {})):
        with pytest.raises(ConfigError, match="not trusted"):
            Host.from_config(
                given, load_entrypoints=False, cwd=project, environ=environ, require_trust=True
            )
    TrustedConfigs().trust(path)
    Host.from_config(
        None, load_entrypoints=False, environ={"DSH_CONFIG": str(path)}, require_trust=True
    )


# -- the records ---------------------------------------------------------------------------------


def test_records_are_private_and_written_whole(records, project):
    TrustedConfigs().trust(project / "dsh.toml")
    assert os.stat(records).st_mode & 0o777 == 0o600
    assert os.stat(records.parent).st_mode & 0o777 == 0o700
    data = json.loads(records.read_text())
    assert data == {
        "version": 1,
        "configs": {
            str(project / "dsh.toml"): digest({"plugin": {"permissions": {"allow": ["bash(*)"]}}})
        },
        "files": {str(project / "dsh.toml"): {}},  # its plugins name no file
    }
    names = sorted(p.name for p in records.parent.iterdir() if "trusted" in p.name)
    assert names == ["trusted-configs.json", "trusted-configs.lock"]  # no temporary left


@pytest.mark.parametrize("what", ["file", "directory"])
def test_records_others_may_write_are_not_believed(records, project, what):
    TrustedConfigs().trust(project / "dsh.toml")
    os.chmod(records if what == "file" else records.parent, 0o620 if what == "file" else 0o777)
    with pytest.raises(ConfigError, match="may be written by other users") as info:
        start(project)
    assert "not trusted" in str(info.value)
    with pytest.raises(ConfigError, match="cannot record"):  # nor added to
        TrustedConfigs().trust(project / "dsh.toml")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_records_another_user_owns_are_not_believed(records, project):
    TrustedConfigs().trust(project / "dsh.toml")
    os.chown(records, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to another user"):
        start(project)


def test_a_record_file_that_is_a_link_is_not_followed(records, project, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    key = str(project / "dsh.toml")
    elsewhere.write_text(json.dumps({"version": 1, "configs": {key: digest(
        {"plugin": {"permissions": {"allow": ["bash(*)"]}}})}}))  # fmt: skip
    records.parent.mkdir(parents=True)
    records.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="cannot be read"):
        start(project)


@pytest.mark.parametrize("state", [None, "relative/state"])
def test_without_a_state_directory_nothing_is_trusted(project, monkeypatch, state):
    import dsh_host._host._trustfile

    monkeypatch.setattr(dsh_host._host._trustfile, "state_dir", lambda: state)
    monkeypatch.chdir(project)
    with pytest.raises(ConfigError, match="no state directory"):
        start(project)
    with pytest.raises(ConfigError, match="no state directory"):
        TrustedConfigs().trust(project / "dsh.toml")
    assert not (project / "relative").exists()


def test_a_record_file_that_is_not_json_is_replaced(records, project):
    records.parent.mkdir(parents=True, mode=0o700)
    records.write_text("{ not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        start(project)
    TrustedConfigs().trust(project / "dsh.toml")
    start(project)


def test_a_file_that_is_not_toml_is_not_trusted(records, tmp_path):
    path = tmp_path / "dsh.toml"
    path.write_text("[plugin.permissions\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        TrustedConfigs().trust(path)
    assert not records.exists()


def test_revoke_forgets(records, project):
    trust = TrustedConfigs()
    trust.trust(project / "dsh.toml")
    assert trust.revoke(project / "dsh.toml") is True
    assert trust.revoke(project / "dsh.toml") is False
    assert trust.state(project / "dsh.toml") == "untrusted"


# -- the command line ----------------------------------------------------------------------------


def run(capsys, *argv):
    status = main(["--no-entrypoints", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_dsh_config_trust_records_lists_and_revokes(records, project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    status, _, err = run(capsys, "tools")
    assert status == 2
    assert f"`dsh config trust {project / 'dsh.toml'}`" in err
    status, out, _ = run(capsys, "config", "trust")
    assert (status, out.split()[:2]) == (0, ["trusted", str(project / "dsh.toml")])
    assert run(capsys, "tools")[0] == 0
    (project / "dsh.toml").write_text(WIDENING + "deny = []\n")
    status, out, _ = run(capsys, "config", "trust", "--list")
    assert out == f"changed   {project / 'dsh.toml'}\n"
    assert "changed since you trusted it" in run(capsys, "tools")[2]
    (project / "dsh.toml").write_text("[plugin.permissions\n")  # no longer TOML
    assert run(capsys, "config", "trust", "--list")[1] == f"changed   {project / 'dsh.toml'}\n"
    text = WIDENING + "deny = []\n"
    (project / "dsh.toml").unlink()
    assert run(capsys, "config", "trust", "--list")[1] == f"missing   {project / 'dsh.toml'}\n"
    (project / "dsh.toml").write_text(text)
    assert run(capsys, "config", "trust", "--revoke")[1] == f"revoked {project / 'dsh.toml'}\n"
    assert run(capsys, "config", "trust", "--list")[1] == ""


def test_dsh_config_trust_with_nothing_to_trust_says_so(records, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    status, _, err = run(capsys, "config", "trust")
    assert status == 2
    assert "no config file here to trust" in err


def test_records_kept_inside_the_project_do_not_vouch_for_it(project, monkeypatch):
    # A project's Claude Code settings set its hooks' environment: an XDG_STATE_HOME inside
    # the project would name records the project shipped.
    monkeypatch.setenv("XDG_STATE_HOME", str(project / ".state"))
    TrustedConfigs().trust(project / "dsh.toml")  # as a project could ship it
    with pytest.raises(ConfigError, match="lies inside the directory of the file"):
        start(project)
    monkeypatch.setenv("XDG_STATE_HOME", str(project.parent / "state"))
    TrustedConfigs().trust(project / "dsh.toml")
    start(project)


def test_a_config_in_the_home_directory_is_vouched_for_by_records_below_it(tmp_path, monkeypatch):
    import pwd

    home = tmp_path / "home"
    (home / ".local" / "state").mkdir(parents=True)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: types.SimpleNamespace(pw_dir=str(home)))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    (home / "dsh.toml").write_text(WIDENING)
    TrustedConfigs().trust(home / "dsh.toml")
    start(home)


def test_an_mcp_server_started_in_an_untrusted_project_does_not_serve(
    records, project, monkeypatch, capsys
):
    # MCP clients start `dsh mcp serve` wherever they like: the project's file is not read.
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    monkeypatch.chdir(project.parent)  # --workspace enters the project: back after the test
    status, out, err = run(capsys, "mcp", "serve", "--workspace", str(project))
    assert (status, out) == (2, "")
    assert f"{project / 'dsh.toml'}: not trusted" in err


def test_the_digest_does_not_load_openssl():
    # `hashlib` loads OpenSSL: 2.5 ms of each `dsh hook claude` that finds its config (issue 27)
    code = "import sys; from dsh_host._host._trustfile import digest; digest({}); print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "hashlib" not in done.stdout
    assert "_hashlib" not in done.stdout


def test_records_made_at_once_are_all_kept(records, tmp_path):
    # Each `dsh config trust` reads the records and writes them again: without a lock, two at
    # once keep only one of their records.
    paths = []
    for n in range(24):
        path = tmp_path / f"p{n}" / "dsh.toml"
        path.parent.mkdir()
        path.write_text(f"[host]\nhook_timeout = {n + 1}\n")
        paths.append(path)
    code = (
        "import sys\nfrom dsh_host import TrustedConfigs\n"
        "for path in sys.argv[1:]:\n    TrustedConfigs().trust(path)\n"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(records.parent.parent)}
    running = [
        subprocess.Popen([sys.executable, "-c", code, *map(str, paths[n::6])], env=env)
        for n in range(6)
    ]
    assert [process.wait(timeout=60) for process in running] == [0] * 6
    assert sorted(TrustedConfigs().items()) == sorted(map(str, paths))
