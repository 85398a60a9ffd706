"""A call's arguments are encoded once: ``audit`` records the text ``guards`` made."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import trio

from dsh_host import ToolExecutionInput
from dsh_host._model._json import freeze
from dsh_plugins_builtin._audit import _redact
from dsh_plugins_builtin._common import _canonical
from dsh_plugins_builtin.audit import AuditPlugin
from dsh_plugins_builtin.guards import GuardsPlugin
from tests.conftest import make_echo


def _recorded(db: Path) -> list[str]:
    connection = sqlite3.connect(db)
    try:
        return [row[0] for row in connection.execute("SELECT arguments FROM calls ORDER BY id")]
    finally:
        connection.close()


def test_the_writer_encodes_no_arguments_guards_encoded(make_host, tmp_path, monkeypatch):
    encoded: list[Any] = []
    real = _redact.canonical

    def counted(value: Any) -> str:
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(_redact, "canonical", counted)
    db = tmp_path / "audit.sqlite3"
    audit = AuditPlugin()
    config = {"plugin": {"audit": {"path": str(db)}}}
    host = make_host(audit, GuardsPlugin(), tools=[make_echo()], config=config)
    calls = [
        {"text": "hi", "n": [1, {"é": None}]},
        {"text": "x", "api_key": "s3cret"},  # redacted: the writer encodes the redacted copy
    ]

    async def main() -> None:
        for i, arguments in enumerate(calls):
            call = ToolExecutionInput(call_id=f"c{i}", name="echo", arguments=arguments)
            await host.registry.execute(call)

    trio.run(main)
    assert audit.flush(30)
    audit.close()
    assert _recorded(db) == [
        '{"n":[1,{"é":null}],"text":"hi"}',
        '{"api_key":"[REDACTED]","text":"x"}',
    ]
    assert len(encoded) == 1  # only the redacted copy: the first call's text was guards'
    assert json.loads(_recorded(db)[1])["api_key"] == "[REDACTED]"


def test_a_known_text_is_not_used_for_arguments_with_a_secret():
    secret = freeze({"password": "p", "a": 1}, "arguments")
    known = _canonical.canonical(secret)
    assert _redact.arguments_json(secret, known) == '{"a":1,"password":"[REDACTED]"}'
    plain = freeze({"a": 1}, "arguments")
    assert _redact.arguments_json(plain, _canonical.canonical(plain)) == '{"a":1}'
