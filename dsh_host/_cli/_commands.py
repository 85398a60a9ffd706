"""``dsh plugins``, ``dsh tools``, ``dsh config check`` and ``dsh call``: what a host has, and
one call through it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

import trio

from .. import PluginStatus, TraceEvent, TrustedConfigs, printable
from ._common import (
    UsageError,
    build_host,
    debugging,
    dump,
    json_object,
    out,
    parse_json,
    stdout_style,
    unknown_tool,
    warn,
)
from ._completion import tool_names
from ._hint import approval_hint, needs_approval_hint
from ._render import (
    context_lines,
    decision_line,
    render_call,
    render_plugins,
    render_result,
    render_tools,
    result_title,
    trace_line,
)
from ._toml import dump_toml
from ._trustcmd import add_trust_parser

__all__ = ["add_inspect_parsers"]

# Codes of results whose tool never ran: their card is the error text, not a result card.
_NOT_RUN = frozenset(
    {"DENIED", "PLUGIN_FAILED", "ABORTED_BEFORE_DISPATCH", "UNKNOWN_TOOL", "INVALID_ARGS"}
)


# -- plugins, tools, config -----------------------------------------------------------------


def _cmd_plugins(args: argparse.Namespace) -> int:
    host = build_host(args, quiet=True)  # the listing shows failures itself
    for line in host.warnings:
        warn(f"dsh: warning: {printable(line)}")
    rows = host.plugins()
    if args.json:
        dump([row.to_json() for row in rows])
    else:
        for line in render_plugins(rows, host.config.describe(), stdout_style()):
            out(line)
        for row in rows if debugging() else ():
            if row.traceback:
                out(f"traceback of {row.name}:")
                for line in row.traceback.split("\n"):
                    out(f"    {printable(line)}")
    failed = any(row.status is PluginStatus.FAILED for row in rows)
    return 1 if args.check and failed else 0


def _cmd_tools(args: argparse.Namespace) -> int:
    host = build_host(args)
    schemas = host.registry.schemas()
    if args.json or args.format:
        method = {None: "to_json", "openai": "to_openai", "anthropic": "to_anthropic"}
        export = method.get(args.format, "to_mcp")
        dump([getattr(schema, export)() for schema in schemas])
        return 0
    owners = {s.name: host.registry.owner(s.name) for s in schemas}
    for line in render_tools(schemas, owners, stdout_style()):
        out(line)
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    host = build_host(args, config=args.path)
    config = host.config
    given = host.effective_config()
    tables: dict[tuple[str, ...], Any] = {
        ("host",): given["host"],
        ("plugins",): given["plugins"],
        **{("plugin", name): table for name, table in given["plugin"].items()},
    }
    status = {row.name: row.status for row in host.plugins()}
    notes = [
        f"[plugin.{name}] not checked: the plugin is "
        + (status[name].value if name in status else "not loaded (--no-entrypoints)")
        for name in sorted(config.tables)
        if status.get(name) is not PluginStatus.ENABLED
    ]
    names = ("DSH_CONFIG", "DSH_PLUGINS", "DSH_DISABLE_PLUGIN_AUTOLOAD")
    env = {key: os.environ[key] for key in names if key in os.environ}
    if args.json:
        effective = {".".join(path): table for path, table in tables.items()}
        dump({"source": config.source, "environment": env, "config": effective, "notes": notes})
        return 0
    if config.source is None:
        out("# no config file: built-in defaults (looked for --config, $DSH_CONFIG, ./dsh.toml")
        out("# and [tool.dsh] in ./pyproject.toml)")
    else:
        out(f"# config: {config.source} (valid)")
    for key, value in env.items():
        out(f"# environment: {key}={value}")
    for note in notes:
        out(f"# {note}")
    out("# effective configuration, defaults filled in:")
    for line in dump_toml(tables):
        out(line)
    return 0


# -- call -----------------------------------------------------------------------------------


def _cmd_call(args: argparse.Namespace) -> int:
    shell = 'pass one JSON object, quoted for the shell: dsh call NAME \'{"key": "value"}\''
    arguments = parse_json(args.arguments, "the arguments are", hint=shell)
    arguments = json_object(arguments, "the arguments")
    host = build_host(args)
    if host.registry.get(args.name) is None:
        raise UsageError(unknown_tool(host, args.name))
    events: list[TraceEvent] = []

    def trace(event: TraceEvent) -> None:
        events.append(event)
        if args.trace:
            warn(trace_line(event))

    result = trio.run(lambda: host.call(args.name, arguments, trace=trace))
    trace_text = result.meta.get("traceback") if isinstance(result.meta, Mapping) else None
    if isinstance(trace_text, str) and (args.trace or debugging()):
        warn(f"traceback of the {result.code} failure:")
        for line in trace_text.split("\n"):
            warn(f"    {printable(line)}")
    if args.json:
        dump(result.to_json())
    else:
        style = stdout_style()
        call_view = host.present_call(args.name, arguments)
        for line in render_call(call_view, style):
            out(line)
        out(decision_line(result, events, style))
        if result.code in _NOT_RUN:
            for line in result.text.split("\n"):
                out(f"  {style.paint(printable(line), 'red')}")
        else:
            view = host.present_result(args.name, arguments, result)
            for line in [*result_title(view, call_view.title, style), *render_result(view, style)]:
                out(line)
        for line in context_lines(result, style):
            out(line)
        if result.is_error:
            out(style.paint(f"  error code: {result.code}", "red"))
    if not needs_approval_hint(result):
        return 1 if result.is_error else 0
    permissions = host.config_for("permissions")
    allowed = getattr(permissions, "allow", None)  # the built-in's rules
    allowed = allowed if isinstance(allowed, tuple | list) else None
    covered = allowed
    if allowed is not None and getattr(permissions, "allow_defaults", False):
        defaults = getattr(type(host.pm.get_plugin("permissions")), "DEFAULTS", ())
        covered = (*defaults, *allowed)
    hint = approval_hint(
        args.name, result, host.config.source, allowed, _narrowest(args.name, arguments), covered
    )
    source = host.config.source
    if hint and source is not None and os.path.realpath(source) in TrustedConfigs().items():
        hint.append("      After a change, trust the file again (`dsh config trust`): dsh reads it only as you trusted it.")  # fmt: skip
    for line in hint:
        warn(line)
    return 1 if result.is_error else 0


def _narrowest(name: str, arguments: Any) -> tuple[str, ...] | None:
    """The narrowest allow rules for this call, from the built-in permission rules if present."""
    import importlib

    try:  # by name, as `_delegate` does: the core does not depend on the built-ins
        suggest = importlib.import_module("dsh_plugins_builtin._rules._suggest")
    except ImportError:  # pragma: no cover - dsh-host without its built-ins
        return None
    found: tuple[str, ...] | None = suggest.narrowest_rules(name, arguments)
    return found


def add_inspect_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: list[argparse.ArgumentParser]
) -> None:
    """The parsers of ``dsh plugins``, ``tools``, ``call`` and ``config check``."""
    p = sub.add_parser("plugins", parents=common, help="list plugins and their status")
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when any plugin failed to load (for CI)")  # fmt: skip
    p.set_defaults(handler=_cmd_plugins)

    p = sub.add_parser("tools", parents=common, help="list the tools a model is offered")
    p.add_argument("--json", action="store_true", help="print the schemas as JSON")
    p.add_argument("--format", choices=("openai", "anthropic", "mcp"),
                   help="print the tool list in this provider's JSON format")  # fmt: skip
    p.set_defaults(handler=_cmd_tools)

    p = sub.add_parser("call", parents=common, help="run one tool call through the pipeline")
    tool_arg = p.add_argument("name", metavar="NAME", help="the tool")
    tool_arg.completer = tool_names  # type: ignore[attr-defined]  # read by argcomplete
    p.add_argument("arguments", metavar="JSON", nargs="?", default="{}",
                   help="the arguments, a JSON object (default: {})")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result object as JSON")
    p.add_argument("--trace", action="store_true", help="print every pipeline step to stderr")
    p.set_defaults(handler=_cmd_call)

    p = sub.add_parser("config", parents=common, help="configuration commands")
    config_sub = p.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    p = config_sub.add_parser("check", parents=common,
                              help="validate a config file and print the effective configuration")  # fmt: skip
    p.add_argument("path", metavar="PATH", nargs="?", help="the file (default: as found)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_cmd_config)
    add_trust_parser(config_sub)
