"""Per-call round trip of a trivial tool through ``dsh mcp serve`` vs a plain MCP SDK server.

Both servers are real child processes on stdio, driven by the official SDK client
(``ClientSession.call_tool``), one call at a time, in the same run:

- ``plain``: the SDK's lowlevel ``Server`` with one ``echo`` tool, on the SDK's own stdio
  transport (no dsh at all);
- ``dsh``: ``dsh_host._mcp._service.serve_stdio`` over a host with the same ``echo`` tool and no plugins
  (the wire layer, the SDK session, the whole pipeline);
- ``dsh+stack``: as ``dsh``, with the installed built-in plugins loaded (permissions, guards,
  timeout, output budget, audit...), the default configuration plus a rule allowing ``echo``;
- ``mounted``: ``host.call("mcp__plain__echo", ...)`` in a process whose host mounts the
  ``plain`` server with the ``mcp`` plugin (no other plugins), unconfined (``sandbox =
  false``): the mounted tool through dsh, compared with the SDK client calling ``plain``
  directly;
- ``mounted+sandbox``: as ``mounted``, with the server confined (the default: bubblewrap,
  seccomp, a read-only file system, its own namespaces).

Rounds alternate between the servers so that load from elsewhere hits each alike; garbage
collection is paused while a round is timed (in the measuring process: the client, or the
mounting host). The table shows the median of per-round means; ``--check`` prints, for each
figure of issue 27 (and the confined row of issue 24), the ratio of each round's mean to the
``plain`` mean of the same round, its min and median over the rounds, and the target, as rows
``| figure | min | median | target |``. Run
``python bench/bench_mcp.py [--calls N] [--rounds R] [--json | --check]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

PLAIN = """
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(name="echo", description="echo", input_schema={
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[TOOL])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text=params.arguments["text"])])

server = Server("plain", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""

DSH = """
import sys
import trio
from dsh_host import Host, define_tool
from dsh_host._mcp._service import serve_stdio

async def echo(args):
    return args["text"]

stack = sys.argv[1] == "stack"
config = {"plugin": {"permissions": {"allow": ["echo"]}}} if stack else None
host = Host(config, load_entrypoints=stack)
host.registry.register(define_tool(name="echo", description="echo",
    parameters={"text": {"type": "string", "required": True}}, execute=echo))
trio.run(serve_stdio, host)
"""


MOUNTED = """
import gc, sys, time, trio
from dsh_host import Host
from dsh_plugins_builtin.mcp import McpPlugin

plugin = McpPlugin()
sandbox = sys.argv[3] == "sandbox"
servers = {"plain": {"command": sys.executable, "args": [sys.argv[1]], "sandbox": sandbox}}
host = Host({"plugin": {"mcp": {"servers": servers}}}, plugins=[plugin], load_entrypoints=False)

async def main(calls):
    for _ in range(20):
        await host.call("mcp__plain__echo", {"text": "hi"})
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    for _ in range(calls):
        result = await host.call("mcp__plain__echo", {"text": "hi"})
    elapsed = time.perf_counter() - started
    gc.enable()
    assert result.text == "hi", result
    print(elapsed / calls)

trio.run(main, int(sys.argv[2]))
plugin.close()
"""


def _mounted_round(script: Path, plain: Path, calls: int, sandbox: bool) -> float:
    out = subprocess.run(
        [sys.executable, str(script), str(plain), str(calls), "sandbox" if sandbox else "none"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.strip())


async def _round(script: Path, args: list[str], calls: int) -> float:
    params = StdioServerParameters(command=sys.executable, args=[str(script), *args])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(20):  # warm-up
            await session.call_tool("echo", {"text": "hi"})
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            for _ in range(calls):
                result = await session.call_tool("echo", {"text": "hi"})
            elapsed = time.perf_counter() - started
        finally:
            gc.enable()
        assert result.content[0].text == "hi", result  # type: ignore[union-attr]
    return elapsed / calls


CHECKS = (
    ("mounted server's tool via `host.call` / plain SDK client", "mounted", 1.1),
    ("the same, server confined (bwrap) / plain SDK client", "mounted+sandbox", 1.1),
    ("`dsh mcp serve`, default stack / plain SDK server", "dsh+stack", 1.0),
)
"""The ``--check`` rows: (figure, case, target ratio to ``plain``)."""


def check_rows(samples: dict[str, list[float]]) -> list[str]:
    """The ``--check`` table: each figure's per-round ratio to ``plain``, min and median."""
    rows = ["| figure | min | median | target |", "|---|---|---|---|"]
    for figure, case, target in CHECKS:
        ratios = [
            value / plain for value, plain in zip(samples[case], samples["plain"], strict=True)
        ]
        rows.append(
            f"| {figure} | {min(ratios):.2f} | {statistics.median(ratios):.2f} | <= {target} |"
        )
    return rows


def main() -> None:
    """Run the benchmark and print a table (or ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="calls per round (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per server (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="print the ratios against targets")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, dsh = Path(tmp, "plain.py"), Path(tmp, "dsh_server.py")
        mounted = Path(tmp, "mounted.py")
        plain.write_text(textwrap.dedent(PLAIN))
        dsh.write_text(textwrap.dedent(DSH))
        mounted.write_text(textwrap.dedent(MOUNTED))
        cases = {"plain": (plain, []), "dsh": (dsh, ["bare"]), "dsh+stack": (dsh, ["stack"])}
        names = [*cases, "mounted", "mounted+sandbox"]
        samples: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(options.rounds):
            for name, (script, args) in cases.items():
                samples[name].append(anyio.run(_round, script, args, options.calls))
            for sandbox in (False, True):
                name = "mounted+sandbox" if sandbox else "mounted"
                samples[name].append(_mounted_round(mounted, plain, options.calls, sandbox))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratios = {name: medians[name] / medians["plain"] for name in medians}
    if options.check:
        print("\n".join(check_rows(samples)))
        return
    if options.json:
        print(json.dumps({"median_s": medians, "ratio": ratios, "samples_s": samples}))
        return
    print(f"{'case':<16} {'per call':>10} {'x plain':>8}")
    for name in samples:
        print(f"{name:<16} {medians[name] * 1e6:>8.0f}us {ratios[name]:>8.2f}")


if __name__ == "__main__":
    main()
