"""pytest-asyncio beside pytest-trio's trio mode.

``trio_mode = true`` makes pytest-trio mark every ``async def`` test ``trio``, so a test marked
``@pytest.mark.asyncio`` would be run by trio. pytest-asyncio (strict mode: only marked tests)
runs it instead once its ``trio`` mark is dropped here, after pytest-trio marked it.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("asyncio") is not None:
            item.own_markers[:] = [mark for mark in item.own_markers if mark.name != "trio"]
