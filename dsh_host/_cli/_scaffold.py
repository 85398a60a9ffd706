"""``dsh new plugin NAME``: write a ready plugin distribution that installs and passes its test."""

from __future__ import annotations

import argparse
import keyword
import re
import textwrap
from pathlib import Path

__all__ = ["KINDS", "add_new_parser", "write_plugin"]

KINDS = ("tool", "policy", "wrapper")
_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")


def _pyproject(name: str, package: str, kind: str) -> str:
    return f'''\
[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "dsh-{name}"
version = "0.1.0"
description = "A dsh {kind} plugin."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["dsh-host", "attrs>=24.1"]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-trio>=0.8"]

# The entry-point name is the plugin's name in dsh.toml ([plugins] enable/disable,
# [plugin.{name}]) and in result.decided_by.
[project.entry-points."dsh.plugins"]
{name} = "{package}.plugin:Plugin"

[tool.hatch.build.targets.wheel]
packages = ["src/{package}"]

[tool.pytest.ini_options]
trio_mode = true  # dsh is trio all the way: async tests run under pytest-trio
'''


_TOOL = '''\
"""The ``{name}`` plugin: one tool, ``{tool}``, configured by ``[plugin.{name}]``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from dsh_host import GenericCallView, Host, ToolCallKind, ToolRunContext, hookimpl, tool


@attrs.frozen
class Config:
    """``[plugin.{name}]`` in dsh.toml."""

    greeting: str = "Hello"


@attrs.frozen
class Args:
    """What the model passes to ``{tool}``; the JSON Schema is derived from these fields."""

    name: str = attrs.field(metadata={{"description": "Who to greet"}})


class Plugin:
    """Registers ``{tool}``; the body reads this plugin's configuration."""

    name = "{name}"

    def __init__(self) -> None:
        self.config = Config()

    @hookimpl
    def dsh_plugin_config(self) -> type[Config]:
        return Config

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        plugin = self

        @tool(
            name="{tool}",
            present_call=lambda args: GenericCallView(
                title=f"Greet {{args.name}}", kind=ToolCallKind.OTHER
            ),
            is_concurrency_safe=lambda args: True,
        )
        async def body(args: Args, ctx: ToolRunContext) -> str:
            """Greet someone by name."""
            return f"{{plugin.config.greeting}}, {{args.name}}!"

        register(body)
'''

_TOOL_TEST = """\
from dsh_host.testing import make_host

from {package}.plugin import Plugin


async def test_the_tool_greets_with_the_configured_greeting():
    host = make_host(Plugin(), config={{"plugin": {{"{name}": {{"greeting": "Hi"}}}}}})
    result = await host.call("{tool}", {{"name": "Ada"}})
    assert (result.is_error, result.text) == (False, "Hi, Ada!")


async def test_missing_arguments_are_named():
    result = await make_host(Plugin()).call("{tool}", {{}})
    assert result.code == "INVALID_ARGS"
    assert "name" in result.text
"""

_POLICY = '''\
"""The ``{name}`` plugin: deny tool calls whose arguments mention a banned word.

The rule is a **guard** (``dsh_tool_guard``): guards run after every allowed call, whoever
allowed it, can only deny, and the first reason denies, so no other plugin, at any position,
can undo this denial. That is the safe shape for a rule that must hold. Do not answer ``Allow``
from a ``tryfirst`` ``dsh_tool_pre_execute``: the first decision wins there, so an early
``Allow`` skips every policy after it (the built-in ``permissions`` re-checks the user's deny
and ask rules in its own guard, but other plugins' denials and the default are skipped).
"""

from __future__ import annotations

import attrs

from dsh_host import Host, ToolExecution, canonical_json, hookimpl


@attrs.frozen
class Config:
    """``[plugin.{name}]`` in dsh.toml."""

    banned: tuple[str, ...] = ("password",)


class Plugin:
    """A monotonic policy: a guard that denies, which no other plugin can turn into an allow."""

    name = "{name}"

    def __init__(self) -> None:
        self.config = Config()

    @hookimpl
    def dsh_plugin_config(self) -> type[Config]:
        return Config

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)

    @hookimpl
    def dsh_tool_guard(self, execution: ToolExecution) -> str | None:
        text = canonical_json(execution.arguments).lower()
        for word in self.config.banned:
            if word.lower() in text:
                return f"the arguments mention {{word!r}} (banned by [plugin.{name}])"
        return None  # no objection: the call goes on as the other policies decided
'''

_POLICY_TEST = """\
from dsh_host import Allow, hookimpl
from dsh_host.testing import make_host, simulate, stub_tool

from {package}.plugin import Plugin


class EagerAllow:
    \"\"\"Another plugin that allows everything before anyone else is asked.\"\"\"

    name = "eager"

    @hookimpl(tryfirst=True)
    def dsh_tool_pre_execute(self, execution):
        return Allow()


async def test_a_banned_word_is_denied_and_attributed():
    host = make_host(Plugin(), tools=[stub_tool("bash")])
    decision = await simulate(host, "bash", {{"command": "echo $PASSWORD"}})
    assert (decision.allowed, decision.decided_by) == (False, "{name}")


async def test_no_other_plugin_can_undo_the_denial():
    host = make_host(Plugin(), EagerAllow(), tools=[stub_tool("bash")])
    decision = await simulate(host, "bash", {{"command": "echo $PASSWORD"}})
    assert (decision.allowed, decision.decided_by) == (False, "{name}")


async def test_other_calls_pass():
    host = make_host(Plugin(), tools=[stub_tool("bash")])
    assert (await simulate(host, "bash", {{"command": "ls"}})).allowed
"""

_WRAPPER = '''\
"""The ``{name}`` plugin: an execute wrapper that adds a context note to slow calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from dsh_host import HookContext, Host, ToolExecution, ToolExecutionResult, hookimpl


@attrs.frozen
class Config:
    """``[plugin.{name}]`` in dsh.toml."""

    slow_ms: float = 1000.0


class Plugin:
    """Wraps every call; a wrapper must always return the result of ``call_next`` or its own."""

    name = "{name}"

    def __init__(self) -> None:
        self.config = Config()

    @hookimpl
    def dsh_plugin_config(self) -> type[Config]:
        return Config

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self.config = host.config_for(self)

    @hookimpl
    async def dsh_tool_execute(
        self,
        execution: ToolExecution,
        call_next: Callable[[], Awaitable[ToolExecutionResult]],
    ) -> ToolExecutionResult:
        started = trio.current_time()  # trio's clock, so tests can use a mock clock
        result = await call_next()
        ms = (trio.current_time() - started) * 1000
        if ms < self.config.slow_ms:
            return result
        note = HookContext(f"{{execution.name}} took {{ms:.0f}} ms", source=self.name)
        return attrs.evolve(result, additional_contexts=(*result.additional_contexts, note))
'''

_WRAPPER_TEST = """\
import trio

from dsh_host import define_tool
from dsh_host.testing import make_host, stub_tool

from {package}.plugin import Plugin


async def slow_body(args):
    await trio.sleep(2)  # virtual time: the autojump clock makes this instant
    return "done"


SLOW = define_tool(name="slow", description="takes 2 s", parameters={{}}, execute=slow_body)


async def test_a_slow_call_gets_a_note_and_a_fast_one_does_not(autojump_clock):
    config = {{"plugin": {{"{name}": {{"slow_ms": 1000}}}}}}
    host = make_host(Plugin(), tools=[SLOW, stub_tool("fast")], config=config)
    slow = await host.call("slow", {{}})
    assert [c.source for c in slow.additional_contexts] == ["{name}"]
    assert "slow took 2000 ms" in slow.additional_contexts[0].content[0].text
    assert (await host.call("fast", {{}})).additional_contexts == ()
"""

_README = """\
# dsh-{name}

A [dsh](https://pypi.org/project/dsh-host/) {kind} plugin.

```console
$ pip install -e '.[test]'
$ python -m pytest
$ dsh plugins            # lists `{name}`
```

Configure it in `dsh.toml`, then trust the file (`dsh config trust`: dsh reads a `dsh.toml` it
finds only as you trusted it):

```toml
[plugin.{name}]
{config_line}
```
"""


_TEMPLATES = {
    "tool": (_TOOL, _TOOL_TEST, 'greeting = "Hello"'),
    "policy": (_POLICY, _POLICY_TEST, 'banned = ["password", "secret"]'),
    "wrapper": (_WRAPPER, _WRAPPER_TEST, "slow_ms = 1000"),
}


def write_plugin(name: str, kind: str, parent: Path) -> Path:
    """Write the distribution ``dsh-NAME`` of a *kind* plugin under *parent*; return its folder.

    Raises:
        ValueError: *name* is not a plugin name, *kind* is unknown, or the folder exists.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a plugin name: use lower-case letters, digits and single "
            "'-' or '_' between them, starting with a letter (e.g. 'weather' or 'git-guard')"
        )
    if kind not in _TEMPLATES:
        raise ValueError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    package = "dsh_" + name.replace("-", "_")
    if keyword.iskeyword(package):  # pragma: no cover - "dsh_" prefixes every name
        raise ValueError(f"{package!r} is a Python keyword")
    root = parent / f"dsh-{name}"
    if root.exists():
        raise ValueError(f"{root} already exists; choose another name or remove it first")
    module, test, config_line = _TEMPLATES[kind]
    fields = {"name": name, "package": package, "tool": name.replace("-", "_"), "kind": kind}
    files = {
        "pyproject.toml": _pyproject(name, package, kind),
        "README.md": _README.format(config_line=config_line, **fields),
        f"src/{package}/__init__.py": f'"""The dsh plugin distribution dsh-{name}."""\n',
        f"src/{package}/py.typed": "",
        f"src/{package}/plugin.py": module.format(**fields),
        "tests/test_plugin.py": test.format(**fields),
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def add_new_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``dsh new plugin NAME [--kind K] [--dir DIR]`` to the ``dsh`` parser."""
    p = sub.add_parser("new", help="start something new: a plugin distribution")
    new_sub = p.add_subparsers(dest="new_command", metavar="WHAT", required=True)
    p = new_sub.add_parser(
        "plugin",
        help="write a ready plugin distribution (pyproject, module, test, README)",
        description=textwrap.dedent(
            """\
            Write dsh-NAME/: a distribution with the entry point, a plugin module of the chosen
            kind, a test that uses dsh_host.testing, and a README. Then:
            cd dsh-NAME && pip install -e '.[test]' && python -m pytest"""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="the plugin's name, e.g. weather or git-guard")
    p.add_argument("--kind", choices=KINDS, default="tool",
                   help="tool (a tool with config), policy (a monotonic guard rule) or wrapper "
                   "(an execute wrapper); default: tool")  # fmt: skip
    p.add_argument("--dir", type=Path, default=Path("."), help="where to write it (default: .)")
    p.set_defaults(handler=_cmd_new)


def _cmd_new(args: argparse.Namespace) -> int:
    import sys

    try:
        root = write_plugin(args.name, args.kind, args.dir)
    except (ValueError, OSError) as exc:
        print(f"dsh new plugin: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {root}/ ({args.kind} plugin '{args.name}'). Next:")
    print(f"  cd {root} && pip install -e '.[test]' && python -m pytest")
    return 0
