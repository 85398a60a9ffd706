"""Rows that answer a user's questions (issue 26, point 2): who decided (allows too), who
approved, which workspace and host run, and ``dsh audit``'s filters."""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_host import Allow, ApprovalOutcome, Ask, Deny, ToolExecution, hookimpl
from dsh_plugins_builtin._audit._query import parse_time
from dsh_plugins_builtin.audit import AuditPlugin, audit_command
from tests.conftest import make_echo
from tests.trusted import write_config


@pytest.fixture(autouse=True)
def private_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "audit" / "calls.sqlite3"


class Policy:
    """Allows ``echo`` by a rule, asks for ``asked``, denies ``no``."""

    name = "policy"

    @hookimpl
    def dsh_tool_pre_execute(self, execution: Any) -> Allow | Ask | Deny | None:
        text = execution.arguments.get("text")
        if text == "no":
            return Deny("no", detail="rule echo(no) in dsh.toml")
        if text in ("asked", "refused", "unanswered"):
            return Ask("why", detail="rule echo(ask) in dsh.toml")
        return Allow(detail="rule echo in dsh.toml")


class Approver:
    name = "approver"

    @hookimpl
    def dsh_tool_approve(self, request: Any) -> ApprovalOutcome | None:
        text = request.execution.arguments["text"]
        if text == "unanswered":
            return None
        return ApprovalOutcome.ALLOWED_ONCE if text == "asked" else ApprovalOutcome.REJECTED


def read(db: Path) -> list[dict[str, Any]]:
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute("SELECT * FROM calls ORDER BY id")]
    finally:
        connection.close()


async def test_the_rule_that_decided_and_who_approved_are_recorded(make_host, db):
    plugin = AuditPlugin()
    config = {"plugin": {"audit": {"path": str(db), "durability": "sync"}}}
    host = make_host(plugin, Policy(), Approver(), tools=[make_echo()], config=config)
    for text in ("yes", "no", "asked", "refused", "unanswered"):
        await host.call("echo", {"text": text})
    plugin.close()
    found = [(r["outcome"], r["rule"], r["approved_by"]) for r in read(db)]
    assert found == [
        ("ok", "rule echo in dsh.toml", None),  # allows name their rule too
        ("DENIED", "rule echo(no) in dsh.toml", None),
        ("ok", "rule echo(ask) in dsh.toml", "approver"),  # the approver that allowed it
        ("DENIED", "rule echo(ask) in dsh.toml", "approver"),
        ("DENIED", "rule echo(ask) in dsh.toml", "unavailable"),
    ]
    assert plugin._started == {}  # the rule is noted with the start, and gone with it


@pytest.fixture
async def two_workspaces(make_host, db, tmp_path, monkeypatch) -> tuple[Path, Path]:
    """Calls from two hosts in two workspaces into one database."""
    here, there = tmp_path / "here", tmp_path / "there"
    for workspace, texts in ((here, ("a", "no", "b")), (there, ("c",))):
        workspace.mkdir()
        plugin = AuditPlugin()
        config = {
            "host": {"workspace": str(workspace)},
            "plugin": {"audit": {"path": str(db), "durability": "sync"}},
        }
        host = make_host(plugin, Policy(), tools=[make_echo(), make_echo("other")], config=config)
        for i, text in enumerate(texts):
            await host.call(
                "other" if text == "b" else "echo", {"text": text}, call_id=f"{text}{i}"
            )
        plugin.close()
    monkeypatch.chdir(here)
    return here, there


def shown(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert audit_command(["--json", *argv]) == 0
    return [json.loads(line)["arguments"]["text"] for line in capsys.readouterr().out.splitlines()]


async def test_dsh_audit_shows_the_current_workspace_unless_told(two_workspaces, db, capsys):
    here, there = two_workspaces
    assert shown(capsys, "--db", str(db)) == ["a", "no", "b"]
    assert shown(capsys, "--db", str(db), "--workspace", str(there)) == ["c"]
    assert shown(capsys, "--db", str(db), "--all") == ["a", "no", "b", "c"]
    rows = read(db)
    assert {r["workspace"] for r in rows} == {os.path.realpath(here), os.path.realpath(there)}
    assert len({r["host_id"] for r in rows}) == 2  # one per host run


async def test_dsh_audit_filters_by_outcome_tool_call_and_time(two_workspaces, db, capsys):
    base = ["--db", str(db), "--all"]
    assert shown(capsys, *base, "--denied") == ["no"]
    assert shown(capsys, *base, "--outcome", "ok") == ["a", "b", "c"]
    assert shown(capsys, *base, "--tool", "other") == ["b"]
    assert shown(capsys, *base, "--call", "c0") == ["c"]
    assert shown(capsys, *base, "--since", "1h") == ["a", "no", "b", "c"]
    assert shown(capsys, *base, "--until", "2000-01-01") == []
    assert shown(capsys, *base, "--since", "2000-01-01T00:00+02:00") == ["a", "no", "b", "c"]


def test_a_bad_time_is_refused_with_what_is_accepted(db, capsys):
    assert audit_command(["--db", str(db), "--since", "yesterday"]) == 2
    err = capsys.readouterr().err
    assert "'yesterday' is not a time" in err
    assert "30m, 2h, 7d" in err


def test_times_are_compared_in_the_stored_utc_form():
    assert parse_time("2026-05-09T09:00+02:00") == "2026-05-09T07:00:00.000Z"
    assert parse_time("2026-05-09") == "2026-05-09T00:00:00.000Z"


async def test_dsh_audit_says_when_another_workspace_has_the_calls(two_workspaces, db, capsys):
    empty = two_workspaces[0].parent / "empty"
    empty.mkdir()
    assert audit_command(["--db", str(db), "--workspace", str(empty)]) == 0
    assert "--all shows every workspace" in capsys.readouterr().err


async def test_dsh_audit_in_a_subdirectory_shows_the_workspace_that_holds_it(
    two_workspaces, db, capsys, monkeypatch
):
    here, _ = two_workspaces
    (here / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(here / "src" / "deep")
    assert shown(capsys, "--db", str(db)) == ["a", "no", "b"]
    assert shown(capsys, "--db", str(db), "--workspace", ".") == []  # an explicit DIR is exact


async def test_audit_abstains_at_pre_execute_with_a_plain_function(make_host, db):
    """The rule and whether the call asked are read back from ``execution.pre_decision`` by the
    observer: audit's pre-execute hook is no waterfall link (no coroutine per call)."""
    plugin = AuditPlugin()
    config = {"plugin": {"audit": {"path": str(db), "durability": "sync"}}}
    host = make_host(plugin, Policy(), tools=[make_echo()], config=config)
    assert "call_next" not in inspect.signature(plugin.dsh_tool_pre_execute).parameters
    (mine,) = [i for i in host.registry.hooks.plan().pre if i.plugin == "audit"]
    assert mine.positional is not None
    assert not mine.is_async
    execution = ToolExecution(call_id="c", name="echo", arguments={"text": "x"})
    async with trio.open_nursery():  # a trio run: audit reads its clock
        assert plugin.dsh_tool_pre_execute(execution) is None
    await host.call("echo", {"text": "yes"})
    plugin.close()
    assert [r["rule"] for r in read(db)] == ["rule echo in dsh.toml"]


@pytest.mark.parametrize(
    ("toml", "env", "why"),
    [
        ("[plugin.audit]\nenabled = false\n", {}, "[plugin.audit] enabled = false in "),
        ('[plugins]\ndisable = ["aud*"]\n', {}, "it is blocked by [plugins] disable in "),
        ('[plugins]\nenable = ["tools"]\n', {}, "it is not listed in [plugins] enable in "),
        ("", {"DSH_DISABLE_PLUGINS": "x,audit"}, "it is blocked by DSH_DISABLE_PLUGINS"),
        ("", {"DSH_PLUGINS": "tools"}, "it is not listed in DSH_PLUGINS"),
        ("", {"DSH_DISABLE_PLUGIN_AUTOLOAD": "1"}, "DSH_DISABLE_PLUGIN_AUTOLOAD is set"),
    ],
)
async def test_dsh_audit_finding_nothing_says_when_the_audit_plugin_is_off_here(
    two_workspaces, db, capsys, monkeypatch, toml, env, why
):
    here = two_workspaces[0].parent / "off"
    here.mkdir()
    write_config(here / "dsh.toml", toml)
    monkeypatch.chdir(here)
    for name in ("DSH_CONFIG", "DSH_PLUGINS", "DSH_DISABLE_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert audit_command(["--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "no calls recorded in workspace" in err
    assert f"dsh audit: note: the audit plugin is off here ({why}" in err
    assert "no call made under this configuration is recorded; turn it on" in err
    assert audit_command(["--db", str(here / "none.sqlite3")]) == 1  # no database: said too
    assert "the audit plugin is off here" in capsys.readouterr().err
    write_config(here / "dsh.toml", "")
    for name in env:
        monkeypatch.delenv(name)
    assert audit_command(["--db", str(db)]) == 0
    assert "off here" not in capsys.readouterr().err  # on: nothing more is said


async def test_dsh_audit_reads_the_database_the_configuration_records_into(
    two_workspaces, db, capsys, monkeypatch, tmp_path
):
    here, _ = two_workspaces
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    monkeypatch.delenv("DSH_AUDIT_URL", raising=False)
    write_config(here / "dsh.toml", f'[plugin.audit]\npath = "{db}"\n')
    assert audit_command(["--json"]) == 0  # the configured path, not the default one
    out, err = capsys.readouterr()
    assert [json.loads(line)["arguments"]["text"] for line in out.splitlines()] == ["a", "no", "b"]
    assert f"dsh audit: reading {db} ([plugin.audit] in {here / 'dsh.toml'})" in err  # whose
    write_config(here / "dsh.toml", "")
    assert audit_command([]) == 1  # the default database: none there
    assert "cannot read" in capsys.readouterr().err
    elsewhere = tmp_path / "elsewhere.toml"  # named by --config, as `dsh --config X audit` does
    elsewhere.write_text(f'[host]\nworkspace = "{here}"\n[plugin.audit]\npath = "{db.name}"\n')
    (here / db.name).write_bytes(db.read_bytes())
    assert shown(capsys, "--config", str(elsewhere)) == ["a", "no", "b"]
    assert audit_command(["--config", str(elsewhere), "--db", str(tmp_path / "none")]) == 1
    assert "cannot read" in capsys.readouterr().err  # --db first
    assert audit_command(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "dsh audit: config error:" in capsys.readouterr().err
