"""The pytest plugin installed with ``dsh-host`` (entry point ``pytest11``): dsh fixtures.

* ``dsh_tmp_workspace``: an empty workspace directory of the test's own.
* ``dsh_host``: a factory, ``dsh_host(*plugins, tools=..., config=...)``, building a `Host` with
  entry-point loading off and ``[host] workspace`` set to ``dsh_tmp_workspace``.

See `dsh_host.testing` for the rest of the kit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import Host
from .testing import make_host

__all__ = ["dsh_host", "dsh_tmp_workspace"]


@pytest.fixture
def dsh_tmp_workspace(tmp_path: Path) -> Path:
    """An empty workspace directory (its parent, the test's ``tmp_path``, stays outside it)."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def dsh_host(dsh_tmp_workspace: Path) -> Callable[..., Host]:
    """``dsh_host(*plugins, tools=(), config=None)``: a host rooted at ``dsh_tmp_workspace``."""

    def build(*plugins: object, tools: Any = (), config: Any = None) -> Host:
        return make_host(*plugins, tools=tools, config=config, workspace=dsh_tmp_workspace)

    return build
