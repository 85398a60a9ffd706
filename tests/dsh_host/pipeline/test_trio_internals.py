"""trio's private state the pipeline reads (`dsh_host._pipeline._trio_internals`), checked
against the installed trio: a release that moves any of it fails here, by name, instead of
silently making every stage eager (slower) or every lazy scope unentered."""

import trio

from dsh_host._pipeline._trio_internals import (
    CAN_ENTER_BELOW,
    cancel_status,
    enter_below,
    unshielded,
)


async def test_the_current_task_cancel_status_is_readable():
    status = cancel_status()
    assert status is not None, "trio's Task._cancel_status is gone: stages are eager again"
    assert status is trio.lowlevel.current_task()._cancel_status


async def test_a_cancel_status_knows_its_scope_and_its_parent():
    base = cancel_status()
    with trio.CancelScope() as scope:
        inner = cancel_status()
        assert inner is not base
        assert getattr(inner, "_scope", None) is scope, "trio's CancelStatus._scope moved"
        assert getattr(inner, "parent", None) is base, "trio's CancelStatus.parent moved"
        assert unshielded(inner, base)


async def test_a_shield_between_is_seen():
    base = cancel_status()
    with trio.CancelScope(shield=True), trio.CancelScope():
        assert not unshielded(cancel_status(), base)
    assert unshielded(base, base)


def test_outside_trio_there_is_no_status():
    assert cancel_status() is None


async def test_a_scope_entered_late_sits_below_the_base_and_above_later_scopes():
    base = cancel_status()
    late = trio.CancelScope()
    with trio.CancelScope() as own:
        inner = cancel_status()
        enter_below(late, base)
        assert cancel_status() is inner  # the task stays where it was
        assert getattr(inner, "parent", None) is not base
        late.cancel()
        assert own.cancel_called is False
        assert inner.effectively_cancelled, "trio's CancelStatus.parent setter moved"
    assert cancel_status() is not base  # `own` exited into `late`
    late.__exit__(None, None, None)
    assert cancel_status() is base


def test_this_trio_lets_a_scope_be_entered_late():
    assert CAN_ENTER_BELOW, (
        "trio's Task._activate_cancel_status or the CancelStatus.parent setter moved: bodies "
        "under a signal get their cancel scope eagerly again (slower, still correct)"
    )


async def test_the_cancel_status_is_read_without_calling_current_task(monkeypatch):
    # Read once per wrapped call: trio's thread-local run context directly, no call.
    expected = trio.lowlevel.current_task()._cancel_status

    def no(*args):
        raise AssertionError("current_task was called")

    monkeypatch.setattr(trio.lowlevel, "current_task", no)
    assert cancel_status() is expected
