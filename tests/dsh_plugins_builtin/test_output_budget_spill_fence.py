"""Spill files are dsh's own state, and the notice never sends the model to a file it cannot read.

A reviewer found the default spill directory (``~/.cache/dsh-spill``) outside every root the
file tools may read, so ``read_file`` refused the file the notice named, while ``bash`` could
``cat ~/.cache/dsh-spill/*``: the full outputs of earlier calls, of every workspace. The default
spill directory is now hidden like the audit database (`dsh_state`), and the notice tells the
model to read the file only where the sandbox's fence lets the tools read it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dsh_host import Host
from dsh_plugins_builtin.output_budget import OutputBudgetPlugin, bound_text
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin

SAVED = re.compile(r"The full output was saved for the user in (\S+), which the tools cannot read")
READ_IT = re.compile(r"The full output is saved in (\S+): read it in parts with read_file")
BIG = "python3 -c \"print('y' * 3000)\""


@pytest.fixture
def home(ws: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspace is the (fake) home, so the default spill directory lies inside it."""
    monkeypatch.setenv("HOME", str(ws))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return ws


def _host(make_host: Any, ws: Path, backend: str, **budget: Any) -> Host:
    sandbox: dict[str, Any] = {"backend": backend}
    if backend == "landlock":  # it refuses protected paths inside a writable root
        sandbox.update(protected=[], protect_install=False, protect_config=False)
    config = {
        "host": {"workspace": str(ws)},
        "plugin": {
            "sandbox": sandbox,
            "output_budget": {"max_inline_bytes": 1000, **budget},
        },
    }
    host: Host = make_host(ToolsPlugin(), SandboxPlugin(), OutputBudgetPlugin(), config=config)
    return host


async def test_bash_cannot_read_any_spill_file_of_the_default_directory(
    make_host: Any, home: Path, backend: str
) -> None:
    other = home / ".cache" / "dsh-spill" / "bash-c1-0123456789abcdef.txt"
    other.parent.mkdir(parents=True)
    other.write_text("ANOTHER-WORKSPACE-OUTPUT\n")
    host = _host(make_host, home, backend)
    big = await host.call("bash", {"command": BIG})
    match = SAVED.search(big.text)
    assert match is not None, big.text
    mine = Path(match[1])
    assert mine.parent == other.parent
    assert mine.read_text().count("y") == 3000  # saved in full, for the user
    shown = await host.call(
        "bash", {"command": f"cat {other} {mine} ~/.cache/dsh-spill/*; echo done"}
    )
    assert "done" in shown.text, shown.text
    assert "ANOTHER-WORKSPACE-OUTPUT" not in shown.text
    assert "y" * 100 not in shown.text
    listed = await host.call("bash", {"command": "ls -a ~/.cache/dsh-spill; echo done"})
    assert "done" in listed.text, listed.text
    assert "0123456789abcdef" not in listed.text  # not even the names
    refused = await host.call("read_file", {"path": str(mine)})
    assert refused.error is not None
    assert refused.error.code == "SANDBOX_DENIED"


async def test_the_notice_says_to_read_the_file_only_where_the_tools_can(
    make_host: Any, ws: Path, backend: str
) -> None:
    host = _host(make_host, ws, backend, spill_dir=".dsh/spill")
    big = await host.call("bash", {"command": BIG})
    match = READ_IT.search(big.text)
    assert match is not None, big.text
    read = await host.call("read_file", {"path": match[1], "limit": 1})
    assert not read.is_error, read.text
    assert "yyyy" in read.text


def test_the_notice_for_a_file_the_tools_cannot_read_suggests_narrowing_the_call() -> None:
    text = bound_text(b"z" * 5000, 900, "/x/spill.txt", readable=False)
    assert len(text.encode()) <= 900
    assert "saved for the user in /x/spill.txt, which the tools cannot read" in text
    assert "narrow the call: read_file with offset/limit, a narrower grep pattern" in text
    assert "read it in parts" not in text
