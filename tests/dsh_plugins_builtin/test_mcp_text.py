"""What a mounted server wrote reaches clients and terminals with its control, bidi and other
unprintable characters escaped as ``\\uXXXX`` (newlines and tabs kept)."""

from __future__ import annotations

import json

import trio

from .test_mcp_isolation import mounted, raw  # noqa: F401 (a fixture)

UNSAFE = ("\x07", "\x1b", "\u202e", "\u200b")
SHOWN = r"ring\x07 \x1b[2Jclear \u202eevil \u200bhidden" + "\nnext\tline"


def test_a_tools_description_and_schema_text_are_escaped(mounted):  # noqa: F811
    host, _ = mounted({"h": raw("hostile")})
    tool = host.registry.get("mcp__h__bell")
    assert tool.description == SHOWN
    schema = json.loads(json.dumps(tool.parameters))
    assert schema["title"] == SHOWN
    assert schema["properties"]["text"]["description"] == SHOWN
    assert not any(c in json.dumps(schema, ensure_ascii=False) for c in UNSAFE)


def test_a_servers_error_message_is_escaped(mounted):  # noqa: F811
    host, _ = mounted({"h": raw("hostile")})
    result = trio.run(host.call, "mcp__h__bell", {"text": "x"})
    assert result.is_error
    assert not any(c in result.text for c in UNSAFE)
    assert r"\x1b[2Jclear \u202eevil \u200bhidden" in result.text
