"""Per-call round trip of a trivial tool through ``dsh mcp serve`` vs a plain MCP SDK server.

Both servers are real child processes on stdio, driven by the official SDK client
(``ClientSession.call_tool``), one call at a time, in the same run:

- ``plain``: the SDK's lowlevel ``Server`` with one ``echo`` tool, on the SDK's own stdio
  transport (no dsh at all);
- ``dsh``: ``dsh_host._mcp._service.serve_stdio`` over a host with the same ``echo`` tool and no plugins
  (the wire layer, the SDK session, the whole pipeline);
- ``dsh+stack``: as ``dsh``, with the installed built-in plugins loaded (permissions, guards,
  timeout, output budget, audit...), the default configuration plus a rule allowing ``echo``;
- ``mounted``: ``host.call("mcp__plain__echo", ...)`` in a process whose host
  (``open_host``, in one trio run: the sessions are tasks of that run) mounts the ``plain``
  server with the ``mcp`` plugin (no other plugins), unconfined (``sandbox = false``): the
  mounted tool through dsh, compared with the SDK client calling ``plain`` directly;
- ``mounted+sandbox``: as ``mounted``, with the server confined (the default: bubblewrap,
  seccomp, a read-only file system, its own namespaces).

Every client session, and each mounting host (a process that times its own rounds on request),
is opened once; then rounds alternate between the cases, so that load from elsewhere hits each
alike, and garbage collection is paused while a round is timed (in the measuring process: the
client, or the mounting host). The table shows the median of per-round means; ``--check``
prints, for each figure of issue 27 (and the confined row of issue 24), the best round over
``plain``'s best round (min) and the median round over ``plain``'s median round (median), and
the target, as rows ``| figure | min | median | target |``. Run
``python bench/bench_mcp.py [--calls N] [--rounds R] [--json | --check]``.
"""

from __future__ import annotations

import argparse
import contextlib
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
from dsh_host import open_host
from dsh_plugins_builtin.mcp import McpPlugin

sandbox = sys.argv[2] == "sandbox"
servers = {"plain": {"command": sys.executable, "args": [sys.argv[1]], "sandbox": sandbox}}
config = {"plugin": {"mcp": {"servers": servers}}}

async def timed(host, calls):
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    for _ in range(calls):
        result = await host.call("mcp__plain__echo", {"text": "hi"})
    elapsed = time.perf_counter() - started
    gc.enable()
    assert result.text == "hi", result
    return elapsed / calls

async def main():
    async with open_host(config, plugins=[McpPlugin()], entry_points=False) as host:
        await timed(host, 20)  # warm-up
        print("ready", flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):  # one round a line
            print(await timed(host, int(line)), flush=True)

trio.run(main)
"""


class _Mounted:
    """A process whose host mounts ``plain``: one round per request, timed in there."""

    def __init__(self, script: Path, plain: Path, sandbox: bool) -> None:
        argv = [sys.executable, str(script), str(plain), "sandbox" if sandbox else "none"]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline() != "ready\n":
            raise RuntimeError("the mounting host did not start")

    def round(self, calls: int) -> float:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


async def _round(session: ClientSession, calls: int) -> float:
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


async def _run(
    scripts: dict[str, tuple[Path, list[str]]],
    mounted: dict[str, _Mounted],
    rounds: int,
    calls: int,
) -> dict[str, list[float]]:
    """Every case once per round, in turn; the client sessions stay open throughout."""
    samples: dict[str, list[float]] = {name: [] for name in [*scripts, *mounted]}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, (script, args) in scripts.items():
            params = StdioServerParameters(command=sys.executable, args=[str(script), *args])
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await _round(session, 20)  # warm-up
            sessions[name] = session
        for _ in range(rounds):
            for name, session in sessions.items():
                samples[name].append(await _round(session, calls))
            for name, process in mounted.items():
                samples[name].append(process.round(calls))
    return samples


CHECKS = (
    ("mounted server's tool via `host.call` / plain SDK client", "mounted", 1.1),
    ("the same, server confined (bwrap) / plain SDK client", "mounted+sandbox", 1.1),
    ("`dsh mcp serve`, default stack / plain SDK server", "dsh+stack", 1.0),
)
"""The ``--check`` rows: (figure, case, target ratio to ``plain``)."""


def check_rows(samples: dict[str, list[float]]) -> list[str]:
    """The ``--check`` table: each figure's best round over ``plain``'s best, and its median
    round over ``plain``'s median (both measured in the same interleaved rounds)."""
    rows = ["| figure | min | median | target |", "|---|---|---|---|"]
    plain = samples["plain"]
    for figure, case, target in CHECKS:
        best = min(samples[case]) / min(plain)
        typical = statistics.median(samples[case]) / statistics.median(plain)
        rows.append(f"| {figure} | {best:.2f} | {typical:.2f} | <= {target} |")
    return rows


def main() -> None:
    """Run the benchmark and print a table (or ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="calls per round (default 200)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per server (default 15)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="print the ratios against targets")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, dsh = Path(tmp, "plain.py"), Path(tmp, "dsh_server.py")
        script = Path(tmp, "mounted.py")
        plain.write_text(textwrap.dedent(PLAIN))
        dsh.write_text(textwrap.dedent(DSH))
        script.write_text(textwrap.dedent(MOUNTED))
        scripts = {"plain": (plain, []), "dsh": (dsh, ["bare"]), "dsh+stack": (dsh, ["stack"])}
        mounted = {
            "mounted": _Mounted(script, plain, sandbox=False),
            "mounted+sandbox": _Mounted(script, plain, sandbox=True),
        }
        try:
            samples = anyio.run(_run, scripts, mounted, options.rounds, options.calls)
        finally:
            for process in mounted.values():
                process.close()
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
