"""The audit plugin on PostgreSQL (issue 26, point 3), against a real server.

``DSH_TEST_POSTGRES_URL`` names a database these tests may empty (``.ci/run`` starts a
throwaway server on 127.0.0.1 and sets it); without it they skip. ``DSH_TEST_POSTGRES_CTL`` is
the ``pg_ctl`` command line of that server, for the restart test (``.ci/run`` sets it too).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shlex
import subprocess
import threading
import urllib.parse
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
import trio

from dsh_host import ConfigError
from dsh_plugins_builtin.audit import AuditPlugin, audit_command
from tests.conftest import make_echo

URL = os.environ.get("DSH_TEST_POSTGRES_URL")
CTL = os.environ.get("DSH_TEST_POSTGRES_CTL")
LOGGER = "dsh_plugins_builtin.audit"

pytestmark = pytest.mark.skipif(
    URL is None, reason="no PostgreSQL server configured (DSH_TEST_POSTGRES_URL; .ci/run sets it)"
)


@pytest.fixture(autouse=True)
def empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    import psycopg  # the postgres extra: a configured server without it is an error, not a skip

    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS calls, health, dsh_audit_meta")


def query(sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(URL) as connection:
        return connection.execute(sql).fetchall()


def stored(url: str = "", **table: Any) -> dict[str, Any]:
    return {"plugin": {"audit": {"url": url or URL, **table}}}


def password() -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(URL).password or "")


def dsh_audit(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = audit_command(list(argv))
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_rows_go_to_postgresql_with_every_column_and_redaction(make_host, durability):
    plugin = AuditPlugin()
    host = make_host(plugin, tools=[make_echo()], config=stored(durability=durability))
    await host.call("echo", {"text": "hi", "api_token": "s3cret\x00"}, call_id="c1")
    await host.call("nope", {}, call_id="c2")
    plugin.close()
    rows = query(
        "SELECT call_id, tool, arguments, outcome, workspace, host_id FROM calls ORDER BY id"
    )
    assert [r[:2] for r in rows] == [("c1", "echo"), ("c2", "nope")]
    assert json.loads(rows[0][2]) == {"api_token": "[REDACTED]", "text": "hi"}
    assert rows[1][3] == "UNKNOWN_TOOL"
    assert rows[0][4] == os.path.realpath(host.workspace)
    assert rows[0][5] == plugin._writer.host_id
    assert query("SELECT value FROM dsh_audit_meta") == [("2",)]


async def test_dsh_audit_reads_the_postgresql_store_and_never_prints_the_password(make_host):
    plugin = AuditPlugin()
    host = make_host(plugin, tools=[make_echo()], config=stored(durability="sync"))
    await host.call("echo", {"text": "one"}, call_id="c1")
    plugin.close()
    status, out, err = dsh_audit("--json", "--all", "--db", URL)
    assert (status, err) == (0, "")
    assert json.loads(out)["call_id"] == "c1"
    status, out, _ = dsh_audit("--health", "--db", URL)
    assert status == 0
    assert "calls recorded: 1" in out
    assert password() not in out
    assert ":***@" in out
    wrong = URL.replace(urllib.parse.quote(password()), "not-the-password-x")
    status, out, err = dsh_audit("--db", wrong)
    assert status == 1
    assert "not-the-password-x" not in err
    assert err.startswith("dsh audit: cannot read postgresql://")


async def test_an_unreachable_server_loses_rows_loudly_without_the_password(make_host, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    parts = urllib.parse.urlsplit(URL)
    with trio.socket.socket() as probe:  # a port nothing listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{port}").geturl()
    plugin = AuditPlugin()
    host = make_host(
        plugin, tools=[make_echo()], config=stored(dead, durability="sync", reconnect_ms=100)
    )
    assert not (await host.call("echo", {"text": "x"})).is_error
    plugin.close()
    assert plugin._writer.lost_total == 1
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "(unreachable)" in messages
    assert password() not in messages
    assert f"dsh:***@127.0.0.1:{port}" in messages


async def test_a_required_audit_refuses_calls_while_the_server_is_unreachable(make_host):
    parts = urllib.parse.urlsplit(URL)
    dead = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:1").geturl()
    plugin = AuditPlugin()
    config = stored(dead, required=True, reconnect_ms=0)
    host = make_host(plugin, tools=[make_echo()], config=config)
    refused = await host.call("echo", {"text": "x"})
    assert refused.code == "DENIED"
    assert password() not in refused.text
    plugin.close()


def test_path_and_url_together_are_a_config_error(make_host, tmp_path):
    with pytest.raises(ConfigError, match="path and url are both set"):
        make_host(AuditPlugin(), config=stored(path=str(tmp_path / "a.sqlite3")))
    with pytest.raises(ConfigError) as caught:
        make_host(AuditPlugin(), config=stored("mysql://u:pw@127.0.0.1/x"))
    assert "pw" not in str(caught.value).replace("postgresql", "")


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_server_restart_mid_load_loses_no_row_of_a_returned_call(make_host, durability):
    """Every call that returned has its row (sync: when it returns; async: after the flush),
    and no row twice, although the server restarts while calls are being recorded."""
    assert CTL, "DSH_TEST_POSTGRES_CTL must name the server's pg_ctl (.ci/run sets it)"
    plugin = AuditPlugin()
    host = make_host(plugin, tools=[make_echo()], config=stored(durability=durability))
    returned: list[str] = []
    restarted = threading.Event()

    def restart() -> None:
        subprocess.run([*shlex.split(CTL), "restart", "-m", "fast"], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        restarted.set()

    async def one(i: int) -> None:
        result = await host.call("echo", {"text": str(i)}, call_id=f"r{i}")
        if not result.is_error:
            returned.append(f"r{i}")

    calls, after = 0, 0
    async with trio.open_nursery() as nursery:
        while after < 1_000:
            if calls == 500:  # recording is under way: restart the server under it
                assert plugin.flush(60)
                nursery.start_soon(
                    trio.to_thread.run_sync, restart
                )  # load until the restart is over, and 1,000 calls past it
            async with trio.open_nursery() as wave:
                for _ in range(100):
                    wave.start_soon(one, calls)
                    calls += 1
            after += 100 if restarted.is_set() else 0
            await trio.sleep(0.001)
    assert calls >= 1_100
    assert plugin.flush(120)
    assert plugin._writer.lost_total == 0
    plugin.close()
    ids = [call_id for (call_id,) in query("SELECT call_id FROM calls")]
    assert len(ids) == len(set(ids))  # nothing recorded twice
    assert set(returned) <= set(ids)
    assert len(returned) == calls
    assert plugin._writer.store.reconnects >= 1
