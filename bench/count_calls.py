"""Python function calls per tool call on the hot paths: a figure the shared machine cannot blur.

``python bench/count_calls.py`` counts, with `sys.setprofile`, the Python-level calls one tool
call makes through `bench_pipeline.py`'s cases (a bare registry, four trivial plugins, the
default stack, ``read_file``, an invalid call, a call of a 1,000-call ``execute_batch``). Timing
on a busy machine moves by tens of percent between runs; this count moves only when the code
does, so a refactoring that adds a step to every call shows here first.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import bench_pipeline as bp  # beside this file: ``python bench/count_calls.py``
import trio

import dsh_host


def count(run: Callable[[], Awaitable[Any]], calls: int, times: int = 100) -> float:
    """Python calls per tool call of *run* (which makes *calls* tool calls), after a warm-up."""
    seen = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen[0] += 1

    async def go() -> None:
        await run()
        await run()
        sys.setprofile(profile)
        try:
            for _ in range(times):
                await run()
        finally:
            sys.setprofile(None)

    trio.run(go)
    return seen[0] / (calls * times)


def main() -> None:
    where = pathlib.Path(tempfile.mkdtemp())
    bare = dsh_host.ToolRegistry()
    bare.register(bp._echo_tool())
    plugins4 = bp._host([bp.PreExecute(), bp.Guard(), bp.ExecuteWrapper(), bp.PostExecute()])
    default = bp._default_stack(where / "on", audit=True)
    tools = bp._default_stack(where / "read", audit=False)
    (where / "read" / "ws" / "notes.txt").write_text("x" * 69 + "\n")

    def call(registry: dsh_host.ToolRegistry, name: str, arguments: Any) -> Any:
        input = dsh_host.ToolExecutionInput(call_id="call-1", name=name, arguments=arguments)
        return lambda: registry.execute(input)

    many = [
        dsh_host.ToolExecutionInput(call_id=f"call-{i}", name="echo", arguments=bp.VALID_ARGS)
        for i in range(1000)
    ]
    rows = [
        ("valid call, no plugins", call(bare, "echo", bp.VALID_ARGS), 1),
        ("4 trivial plugins", call(plugins4.registry, "echo", bp.VALID_ARGS), 1),
        ("default stack, audit on", call(default.registry, "echo", bp.VALID_ARGS), 1),
        ("read_file, default stack", call(tools.registry, "read_file", {"path": "notes.txt"}), 1),
        ("invalid call, no plugins", call(bare, "echo", bp.INVALID_ARGS), 1),
        ("execute_batch, per call", lambda: bare.execute_batch(many), len(many)),
    ]
    for label, run, calls in rows:
        times = 3 if calls > 1 else 100
        print(f"{label:28s} {count(run, calls, times):8.1f}")


if __name__ == "__main__":
    main()
