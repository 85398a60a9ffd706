"""An answer whose id is not spelt as dsh sent it (``" 1"`` for ``1``: the SDK would take it for
``1``) never reaches the session unchecked: it ends that request at once (third review)."""

from __future__ import annotations

import mcp_types as types
import trio

from dsh_plugins_builtin._mcp._guard import BAD_RESULT, Guard

from .test_mcp_isolation import mounted, raw  # noqa: F401 (a fixture)


def test_a_listing_answered_with_a_text_id_mounts_nothing_unchecked(mounted):  # noqa: F811
    host, plugin = mounted({"s": raw("strlist", timeout_ms=60_000)})
    assert not [t for t in host.registry.tools() if t.name.startswith("mcp__s__")]
    assert any("not spelt as sent" in note for note in plugin._mount.links["s"].guard.notes)


def test_a_call_answered_with_a_text_id_fails_at_once(mounted):  # noqa: F811
    host, _ = mounted({"s": raw("strcall", timeout_ms=1_000)})
    result = trio.run(host.call, "mcp__s__echo", {"text": "x"})
    assert result.code == "MCP_BAD_RESULT"  # not the timeout
    assert "not spelt as sent" in result.text


def _guard(*ids: int) -> Guard:
    guard = Guard("srv")
    for request_id in ids:
        params = {"name": "echo", "arguments": {}}
        guard.sent(
            types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/call", params=params)
        )
    return guard


def test_every_spelling_the_sdk_takes_for_a_pending_id_is_refused_and_forgotten():
    for spelt in ("7", " 7", "+7", "\u0667", 7.0, True):
        guard = _guard(7 if spelt is not True else 1)
        sent = {"jsonrpc": "2.0", "id": spelt, "result": {"content": []}}
        (message,) = guard.check(sent)
        assert isinstance(message, types.JSONRPCError), spelt
        assert message.error.code == BAD_RESULT
        assert not guard._pending


def test_an_answer_to_no_request_is_dropped_and_a_cancelled_request_forgotten():
    guard = _guard(1, 2)
    assert guard.check({"jsonrpc": "2.0", "id": "x", "result": {}}) == []
    assert guard.notes
    cancel = types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/cancelled", params={"requestId": 2}
    )
    guard.sent(cancel)
    assert list(guard._pending) == [1]
