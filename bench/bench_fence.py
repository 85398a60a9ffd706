"""read_file of a 1.4 KB file through the tools and sandbox plugins vs a plain ``open().read()``.

    python bench/bench_fence.py [--rounds 7] [--calls 2000]

Prints the best (minimum) time per read over the rounds, for: a plain ``open().read()``, the
``read_file`` body (fence, pinned-root check, race-free open, numbered lines), and a whole
``host.call("read_file")`` (the pipeline around it), and their ratios to the plain read.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from dsh_host import Host
from dsh_plugins_builtin import _file_tools
from dsh_plugins_builtin.sandbox import SandboxPlugin
from dsh_plugins_builtin.tools import ToolsPlugin


def best(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """The fastest time per call over ``rounds`` rounds of ``calls`` calls (seconds)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
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

    def body() -> None:
        _file_tools._read_file(tools, {"path": "a.txt"})

    async def calls() -> float:
        rounds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.calls // 4):
                await host.call("read_file", {"path": "a.txt"})
            rounds.append((time.perf_counter() - start) / (args.calls // 4))
        return min(rounds)

    t_plain = best(plain, args.calls, args.rounds)
    t_body = best(body, args.calls, args.rounds)
    t_call = trio.run(calls)
    print(f"plain open().read(): {t_plain * 1e6:8.1f} us")
    print(f"read_file body:      {t_body * 1e6:8.1f} us  ({t_body / t_plain:.1f}x)")
    print(f"host.call(read_file):{t_call * 1e6:8.1f} us  ({t_call / t_plain:.1f}x)")


if __name__ == "__main__":
    main()
