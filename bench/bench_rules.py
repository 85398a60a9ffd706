"""The cost of permission-rule matching per call, as a ratio to the bare pipeline.

Run with ``python bench/bench_rules.py [--quick] [--json]``.

Everything is measured in one process and one trio loop, round-robin batch by batch so that load
from elsewhere hits every case alike; a case's figure is the median per-call time over its
batches. Cases:

1. ``bare``: ``registry.execute`` of a valid call (the echo tool), a host with no plugins;
1b. ``link, no rules``: the same through one waterfall pre-execute plugin that matches nothing
   (what any plugin shaped like ``permissions`` costs, before matching a rule);
2. ``rules, echo``: the same call through the ``permissions`` plugin with a realistic rule set
   (allowed by a plain ``echo`` rule: the per-tool view lookup and nothing else);
3. ``rules, bash``: a ``bash``-named stand-in (the body echoes; nothing runs) with
   ``git status && git diff --stat``, a different command each call so the parse cache never
   hits: one tree-sitter parse, the strict second reader, the allow and deny views, the
   hidden-code checks, and the guard that makes deny and ask rules final (the rule set has
   both, so the guard runs on every call);
4. ``rules, bash cached``: the same command every call (the LRU cache hits);
5. ``rules, read_file``: a read of ``src/app/main.py``: two ``realpath`` and the path regexes;
6. ``path_denied``: one ``host.path_denied`` answer for a file a search meets (not a call).

The ratio column is each case's time over case 1's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from dsh_host import Allow, Host, ToolExecution, ToolExecutionInput, define_tool, hookimpl
from dsh_plugins_builtin.permissions import PermissionsPlugin

RULES = {
    "allow": [
        "echo", "read_file", "list_dir", "glob", "grep", "Bash(git status:*)", "Bash(git diff:*)",
        "Bash(ls:*)", "Bash(npm run test:*)", "Edit(src/**/*.py)",
    ],
    "ask": ["Bash(git push:*)", "Edit(src/generated/**)", "Read(*.env)"],
    "deny": [
        "Bash(rm:*)", "Bash(curl:*)", "Read(./secrets/**)", "Edit(.git/**)", "Read(~/.ssh/**)",
        "Read(//etc/shadow)",
    ],
}  # fmt: skip


class Waterfall:
    """A pre-execute link shaped like ``permissions`` (takes ``call_next``) that matches nothing:
    the cost of being a plugin at all, apart from matching rules."""

    name = "waterfall"

    @hookimpl
    async def dsh_tool_pre_execute(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]
    ) -> Any:
        await call_next()
        return Allow()


def tools() -> list[Any]:
    async def body(args: Any) -> str:
        return str(args.get("text") or args.get("command") or args.get("path"))

    def make(name: str, key: str, paths: dict[str, str] | None = None) -> Any:
        return define_tool(
            name=name, description=name, parameters={key: {"type": "string", "required": True}},
            execute=body, paths=paths,  # type: ignore[arg-type]
        )  # fmt: skip

    return [
        make("echo", "text"),
        make("bash", "command"),
        make("read_file", "path", {"path": "read"}),
    ]


def host(ws: Path, plugins: list[object]) -> Host:
    config = {"host": {"workspace": str(ws)}, "plugin": {"permissions": RULES}}
    if not plugins:
        config = {"host": {"workspace": str(ws)}}
    h = Host(config=config, plugins=plugins, load_entrypoints=False)
    for tool in tools():
        h.registry.register(tool)
    return h


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "src" / "app").mkdir(parents=True)
        (ws / "src" / "app" / "main.py").write_text("x")
        bare = host(ws, [])
        ruled = host(ws, [PermissionsPlugin()])
        linked = host(ws, [Waterfall()])
        counter = iter(range(10**9))

        def call(
            h: Host, name: str, arguments: Callable[[], dict[str, Any]]
        ) -> Callable[[], Awaitable[Any]]:
            async def one() -> Any:
                result = await h.registry.execute(
                    ToolExecutionInput(call_id="c", name=name, arguments=arguments())
                )
                assert not result.is_error, result.text
                return result

            return one

        execution = ToolExecution(call_id="c", name="grep", arguments={"pattern": "x"})
        meets = str((ws / "src" / "app" / "main.py").resolve())

        async def path_denied() -> Any:
            return ruled.path_denied(execution, meets, "read")

        cases: dict[str, Callable[[], Awaitable[Any]]] = {
            "bare": call(bare, "echo", lambda: {"text": "hi"}),
            "link, no rules": call(linked, "echo", lambda: {"text": "hi"}),
            "rules, echo": call(ruled, "echo", lambda: {"text": "hi"}),
            "rules, bash": call(
                ruled, "bash", lambda: {"command": f"git status && git diff --stat {next(counter)}"}
            ),
            "rules, bash cached": call(
                ruled, "bash", lambda: {"command": "git status && git diff"}
            ),
            "rules, read_file": call(ruled, "read_file", lambda: {"path": "src/app/main.py"}),
            "path_denied": path_denied,
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for one in cases.values():  # warm up
            for _ in range(50):
                await one()
        for _ in range(args.reps):
            for name, one in cases.items():
                started = time.perf_counter_ns()
                for _ in range(args.calls):
                    await one()
                samples[name].append((time.perf_counter_ns() - started) / args.calls / 1000)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "python": sys.version.split()[0],
        "calls_per_batch": args.calls,
        "batches": args.reps,
        "us_per_call": medians,
        "ratio_to_bare": {name: medians[name] / medians["bare"] for name in medians},
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None)
    args = parser.parse_args()
    args.reps = args.reps or (3 if args.quick else 9)
    args.calls = args.calls or (200 if args.quick else 1000)
    report = trio.run(run, args)
    if args.json:
        print(json.dumps(report))
        return
    print(f"{'case':22} {'us/call':>9} {'x bare':>8}")
    for name, us in report["us_per_call"].items():
        print(f"{name:22} {us:9.1f} {report['ratio_to_bare'][name]:8.2f}")


if __name__ == "__main__":
    main()
