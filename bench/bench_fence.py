"""read_file of a 1.4 KB file through the tools and sandbox plugins vs a plain ``open().read()``.

    python bench/bench_fence.py [--rounds 7] [--calls 2000]

Prints the best (minimum) time per read over the rounds, for: a plain ``open().read()``, the
``read_file`` body (fence, pinned-root check, race-free open, numbered lines; a small file is
read on the event loop, so the body is awaited directly), and a whole
``host.call("read_file")`` (the pipeline around it), and their ratios to the plain read.
Rounds of the three are interleaved and garbage collection is paused while timing.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from dsh_host import Host
from dsh_plugins_builtin._tools import _read as _file_tools
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


async def best(fn: Callable[[], object], calls: int) -> float:
    """The time per call of one round of ``calls`` calls (seconds); awaits what ``fn`` returns."""
    start = time.perf_counter()
    for _ in range(calls):
        value = fn()
        if inspect.isawaitable(value):
            await value
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    ws = Path(tempfile.mkdtemp()) / "ws"
    ws.mkdir()
    target = ws / "a.txt"
    target.write_text(("x" * 69 + "\n") * 20)  # 1,400 bytes, 20 lines
    tools = ToolsPlugin()
    host = Host(
        config={"host": {"workspace": str(ws)}, "plugin": {"sandbox": {}}},
        plugins=[tools, SandboxPlugin()],
        load_entrypoints=False,
    )
    assert type(tools.sandbox()).__name__ == "SandboxPlugin"

    def plain() -> None:
        with open(target) as handle:
            handle.read()

    cases: dict[str, Callable[[], object]] = {
        "plain": plain,
        "body": lambda: _file_tools._read_file(tools, {"path": "a.txt"}),
        "call": lambda: host.call("read_file", {"path": "a.txt"}),
    }

    async def run() -> dict[str, float]:
        times: dict[str, list[float]] = {name: [] for name in cases}
        for fn in cases.values():  # warm up
            await best(fn, 10)
        gc.collect()
        gc.disable()
        try:
            for _ in range(args.rounds):
                for name, fn in cases.items():
                    times[name].append(await best(fn, args.calls // 4))
        finally:
            gc.enable()
        return {name: min(values) for name, values in times.items()}

    t = trio.run(run)
    t_plain, t_body, t_call = t["plain"], t["body"], t["call"]
    print(f"plain open().read(): {t_plain * 1e6:8.1f} us")
    print(f"read_file body:      {t_body * 1e6:8.1f} us  ({t_body / t_plain:.1f}x)")
    print(f"host.call(read_file):{t_call * 1e6:8.1f} us  ({t_call / t_plain:.1f}x)")


if __name__ == "__main__":
    main()
