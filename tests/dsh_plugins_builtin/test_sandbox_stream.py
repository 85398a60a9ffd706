"""A command's output streamed as it arrives (issue 27, search): the run's ``sink``.

The sink is handed each piece of output in order, at most the output limit in all. When it
answers "enough", or more than the limit comes, the command is stopped as at a timeout: every
process of it killed and reaped (bwrap's PID namespace seen gone) before the run returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_plugins_builtin._sandbox._confine import run_confined
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy
from dsh_plugins_builtin._sandbox._output import Output
from tests.dsh_plugins_builtin.conftest import processes_with

CEILING_S = 10.0  # a wall-clock ceiling on a run that ends at once when the code is right


def _policy(ws: Path, backend: str | None) -> tuple[SandboxPolicy, str]:
    if backend is None:
        return SandboxPolicy("danger-full-access", ws, protected=()), "none"
    return SandboxPolicy("workspace-write", ws, protected=()), backend


def _collect(into: list[bytes]) -> Callable[[bytes], bool]:
    """A sink that keeps every piece and never has enough."""

    def sink(data: bytes) -> bool:
        into.append(data)
        return False

    return sink


@pytest.fixture(params=[True, False], ids=["confined", "unconfined"])
def where(request: pytest.FixtureRequest, ws: Path, backend: str) -> tuple[SandboxPolicy, str]:
    """Each backend, and no confinement (once: the backend is not used then)."""
    if not request.param and backend != "bwrap":
        pytest.skip("unconfined: run once")
    return _policy(ws, backend if request.param else None)


async def test_a_sink_that_has_enough_stops_the_command_and_it_is_reaped(
    ws: Path, where: tuple[SandboxPolicy, str]
) -> None:
    policy, backend = where
    marker = f"stream-{uuid.uuid4().hex}"
    pieces: list[bytes] = []

    def sink(data: bytes) -> bool:
        pieces.append(data)
        return sum(map(len, pieces)) >= 10_000

    with trio.fail_after(CEILING_S):  # the command alone would never end
        result = await run_confined(
            f"exec yes {marker}",
            cwd=ws, policy=policy, backend=backend, timeout=None, max_output_bytes=10**7,
            sink=sink,
        )  # fmt: skip
    assert result.timed_out is False
    assert result.exit_code is None  # killed, by the run
    assert result.truncated is False  # what came after "enough" is not counted
    assert result.total_bytes == sum(map(len, pieces))
    data = b"".join(pieces)
    assert len(data) >= 10_000
    assert data.startswith(f"{marker}\n{marker}\n".encode())
    assert processes_with(marker) == []  # killed and reaped before the run returned


async def test_past_the_limit_the_sink_gets_nothing_more_and_the_command_stops(
    ws: Path, where: tuple[SandboxPolicy, str]
) -> None:
    policy, backend = where
    marker = f"1000.{uuid.uuid4().int % 10**9}"  # a unique sleep, to find it in /proc
    pieces: list[bytes] = []
    with trio.fail_after(CEILING_S):
        result = await run_confined(
            f"head -c 50000 /dev/zero; exec sleep {marker}",
            cwd=ws, policy=policy, backend=backend, timeout=None, max_output_bytes=3000,
            sink=_collect(pieces),
        )  # fmt: skip
    assert b"".join(pieces) == b"\0" * 3000  # exactly the limit, in order
    assert result.truncated is True
    assert result.timed_out is False
    assert processes_with(marker) == []


async def test_a_sink_that_fails_stops_the_command_and_the_error_propagates(ws: Path) -> None:
    policy, backend = _policy(ws, None)
    marker = f"stream-{uuid.uuid4().hex}"

    def sink(data: bytes) -> bool:
        raise ValueError("cannot read this")

    with trio.fail_after(CEILING_S), pytest.RaisesGroup(ValueError, flatten_subgroups=True):
        await run_confined(
            f"exec yes {marker}", cwd=ws, policy=policy, backend=backend, timeout=None, sink=sink
        )
    assert processes_with(marker) == []


def test_output_hands_the_sink_the_limit_and_keeps_head_and_tail() -> None:
    got: list[bytes] = []
    out = Output(10, _collect(got))
    assert out.feed(b"abcd") is False
    assert out.feed(b"efghijkl") is True  # more than 10 bytes: stop
    assert out.feed(b"mnop") is False  # already stopping: said once, and dropped
    assert got == [b"abcd", b"efghij"]
    assert out.truncated is True
    assert out.head == bytearray(b"abcde")
    assert out.tail == bytearray(b"hijkl")
    assert out.total == 12
