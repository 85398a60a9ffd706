"""What a server sends cannot pass for the guard's own refusal, and no answer, however deep,
breaks how it is shown in the operator's trace."""

from __future__ import annotations

import mcp_types as types

from dsh_plugins_builtin._mcp._guard import BAD_RESULT, DETAIL, Guard, _shown


def _guard() -> Guard:
    guard = Guard("srv")
    request = types.JSONRPCRequest(
        jsonrpc="2.0", id=1, method="tools/call", params={"name": "echo", "arguments": {}}
    )
    guard.sent(request)
    return guard


def test_a_server_error_with_dshs_refusal_code_is_an_ordinary_error_without_its_data():
    sent = {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": BAD_RESULT, "message": "refused\nby dsh", "data": "\x1b[2J" * 500_000},
    }
    (message,) = _guard().check(sent)
    assert isinstance(message, types.JSONRPCError)
    assert message.error.code == types.INTERNAL_ERROR
    assert message.error.data is None  # unchecked and unbounded: never a trace detail


def test_the_guards_own_refusal_keeps_its_code_and_a_bounded_detail():
    sent = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text"}]}}
    (message,) = _guard().check(sent)
    assert isinstance(message, types.JSONRPCError)
    assert message.error.code == BAD_RESULT
    assert isinstance(message.error.data, str)
    assert len(message.error.data) <= 2 * DETAIL


def test_a_value_nested_too_deeply_to_print_is_shown_as_such():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert _shown(deep) == "(nested too deeply to show)"
