"""`ToolExecution`'s token and signal: made on first read, once, by a descriptor."""

from __future__ import annotations

import attrs
import pytest

from dsh_host import AbortSignal, ToolExecution
from dsh_host._model._values import CallToken


def _execution(signal: AbortSignal | None = None) -> ToolExecution:
    return ToolExecution._make("call-1", "echo", {}, None, None, signal, False)


def test_the_token_and_signal_are_made_on_first_read_without_a_failed_lookup():
    # No __getattr__: a first read is a descriptor's call, not a failed lookup, an
    # AttributeError and a fallback (about 450 ns of every call that reads the token).
    assert "__getattr__" not in vars(ToolExecution)
    execution = _execution()
    assert "token" not in execution.__dict__
    assert "signal" not in execution.__dict__
    token = execution.token
    assert type(token) is CallToken
    assert execution.__dict__["token"] is token
    assert execution.token is token  # once made, the instance's own value
    signal = execution.signal
    assert isinstance(signal, AbortSignal)
    assert not signal.aborted
    assert execution.signal is signal is execution.__dict__["signal"]


def test_a_copy_a_passed_signal_and_an_unknown_name_read_as_before():
    execution = _execution()
    copy = attrs.evolve(execution, name="other")
    assert copy.token is execution.token
    assert copy.signal is execution.signal
    given = AbortSignal()
    assert _execution(given).signal is given
    made = ToolExecution(call_id="c", name="echo", arguments={})
    assert type(made.token) is CallToken
    assert made.token is not execution.token
    with pytest.raises(AttributeError, match="nothing"):
        _ = made.nothing  # type: ignore[attr-defined]
