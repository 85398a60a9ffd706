"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

from typing import Any

import pytest
import trio


class ScopeLog(list):  # type: ignore[type-arg]
    """The trio cancel scopes one task entered after `watch`."""

    task: Any = None

    def watch(self) -> None:
        self.task = trio.lowlevel.current_task()
        self.clear()


@pytest.fixture
def scopes(monkeypatch: pytest.MonkeyPatch) -> ScopeLog:
    """Cancel scopes the test's task enters after ``scopes.watch()`` (not pytest-trio's own)."""
    log = ScopeLog()
    enter = trio.CancelScope.__enter__

    def counting(self: trio.CancelScope) -> trio.CancelScope:
        if log.task is not None and trio.lowlevel.current_task() is log.task:
            log.append(self)
        return enter(self)

    monkeypatch.setattr(trio.CancelScope, "__enter__", counting)
    return log
