"""`dsh_host.aio` under pytest-asyncio, beside pytest-trio's trio mode (see ``conftest.py``)."""

from __future__ import annotations

import asyncio

import pytest
import sniffio

import dsh_host.aio
from tests.conftest import make_echo

pytest.importorskip("pytest_asyncio")  # the test extra installs it


class Tools:
    @dsh_host.hookimpl
    def dsh_register_tools(self, register):
        register(make_echo())


@pytest.mark.asyncio
async def test_the_asyncio_host_under_pytest_asyncio():
    assert sniffio.current_async_library() == "asyncio"
    assert asyncio.get_running_loop() is not None
    async with dsh_host.aio.open_host(plugins=[Tools()], entry_points=False) as host:
        result = await host.call("echo", {"text": "from pytest-asyncio"})
    assert result.content[0].text == "from pytest-asyncio"


async def test_an_unmarked_async_test_is_still_a_trio_test():
    assert sniffio.current_async_library() == "trio"
