"""The ``dsh`` command line: list plugins and tools, run calls, check config.

Exit status: 0 success, 1 an error result, 2 bad usage (bad JSON, a config error, an unknown
tool or subcommand, a bad line in a calls file). User errors are one message on stderr, never a
traceback. ``main(argv)`` is the console script and is callable in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from .. import ConfigError, PluginStatus, TraceEvent, printable
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
from ._completion import add_completion_parser, autocomplete, plugin_names, tool_names
from ._render import (
    approval_hint,
    context_lines,
    decision_line,
    dump_toml,
    render_call,
    render_plugins,
    render_result,
    render_tools,
    result_title,
    trace_line,
)

__all__ = ["main", "make_parser"]

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
    for line in hint:
        warn(line)
    return 1 if result.is_error else 0


# -- the parser -----------------------------------------------------------------------------


def _version() -> str:
    try:
        return importlib.metadata.version("dsh-host")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _common(prefix: str) -> argparse.ArgumentParser:
    """Host options, accepted before the command and after it."""
    common = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS if prefix else None
    group = common.add_argument_group("host options")
    group.add_argument("--config", metavar="PATH", dest=f"{prefix}config", default=unset,
                       help="config file (default: $DSH_CONFIG, ./dsh.toml, or [tool.dsh] in "
                       "./pyproject.toml)")  # fmt: skip
    group.add_argument("--plugin", metavar="MODULE[:ATTR]", action="append",
                       dest=f"{prefix}plugin", default=unset if prefix else [],
                       help="also register this plugin, after the entry points (repeatable)")  # fmt: skip
    group.add_argument("--no-entrypoints", action="store_true", dest=f"{prefix}no_entrypoints",
                       default=unset if prefix else False,
                       help="load no installed plugins, only --plugin ones")  # fmt: skip
    disable = group.add_argument(
        "--disable", metavar="NAME", action="append", dest=f"{prefix}disable",
        default=unset if prefix else [],
        help="block this installed plugin for this run; a name or an fnmatch pattern "
        "(repeatable; also DSH_DISABLE_PLUGINS=a,b)",
    )  # fmt: skip
    disable.completer = plugin_names  # type: ignore[attr-defined]  # read by argcomplete
    return common


def make_parser() -> argparse.ArgumentParser:
    """The ``dsh`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="dsh", parents=[_common("")],
        description="A plugin host for the tool pipeline of LLM agent harnesses.",
        epilog="Exit status: 0 success, 1 an error result, 2 bad usage or configuration.",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"dsh-host {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an unexpected error (or DSH_DEBUG=1)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = [_common("sub_")]

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

    from ._run import add_run_parser  # here: _cli_run imports this module's helpers

    add_run_parser(sub, common)

    from ._scaffold import add_new_parser

    add_new_parser(sub)
    add_completion_parser(sub)

    p = sub.add_parser("config", parents=common, help="configuration commands")
    config_sub = p.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    p = config_sub.add_parser("check", parents=common,
                              help="validate a config file and print the effective configuration")  # fmt: skip
    p.add_argument("path", metavar="PATH", nargs="?", help="the file (default: as found)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_cmd_config)

    p = sub.add_parser("mcp", parents=common, help="serve the gated tools over MCP")
    mcp_sub = p.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    p = mcp_sub.add_parser("serve", parents=common,
                           help="a Model Context Protocol server on stdin/stdout (or HTTP)")  # fmt: skip
    p.add_argument("--workspace", metavar="DIR",
                   help="serve as if started in DIR: its dsh.toml and the default workspace "
                   "(MCP clients often start servers in an arbitrary directory)")  # fmt: skip
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                   "(a loopback HOST only, unless --public)")  # fmt: skip
    p.add_argument("--public", action="store_true",
                   help="allow a --http HOST that is not a loopback address (needs --token-file)")  # fmt: skip
    p.add_argument("--token-file", metavar="PATH",
                   help="--http clients must send a bearer token listed in PATH: one a line, "
                   "optionally followed by a scope name and allow=TOOL,... / deny=TOOL,...")  # fmt: skip
    p.add_argument("--list-all", action="store_true",
                   help="also list tools the configuration denies outright")  # fmt: skip
    p.add_argument("--max-message-bytes", type=int, metavar="N", default=16 * 1024 * 1024,
                   help="the longest message accepted, a stdio line or an HTTP body (default: 16 MiB)")  # fmt: skip
    p.set_defaults(handler=_cmd_mcp)

    p = sub.add_parser("hook", parents=common, help="answer an agent's hooks with dsh's policy")
    hook_sub = p.add_subparsers(dest="hook_command", metavar="AGENT", required=True)
    p = hook_sub.add_parser("claude", parents=common,
                            help="a Claude Code hook: PreToolUse, PermissionRequest, PostToolUse")  # fmt: skip
    p.add_argument("--max-bytes", type=int, metavar="N", default=4 * 1024 * 1024,
                   help="the largest payload read from stdin (default: 4 MiB)")  # fmt: skip
    p.set_defaults(handler=_cmd_hook)

    # Commands of built-in plugins; main() hands their arguments over unparsed.
    for name, summary in _DELEGATED.items():
        sub.add_parser(name, help=summary[2], add_help=False)
    return parser


# name -> (module, function, help): the command parses its own arguments.
_DELEGATED = {
    "audit": ("dsh_plugins_builtin.audit", "audit_command", "read the audit log of past calls"),
    "sandbox": (
        "dsh_plugins_builtin.sandbox",
        "sandbox_check_command",
        "`dsh sandbox check`: which sandbox backend works here, and why not the others",
    ),
}


_SANDBOX_HELP = """\
usage: dsh sandbox check [--json] [--config PATH]

Commands:
  check   which sandbox backend works on this machine, why not the others, and which one the
          configuration would use (`dsh sandbox check --help` for its options)"""


def _narrowest(name: str, arguments: Any) -> tuple[str, ...] | None:
    """The narrowest allow rules for this call, from the built-in permission rules if present."""
    import importlib

    try:  # by name, as `_delegate` does: the core does not depend on the built-ins
        suggest = importlib.import_module("dsh_plugins_builtin._rules._suggest")
    except ImportError:  # pragma: no cover - dsh-host without its built-ins
        return None
    found: tuple[str, ...] | None = suggest.narrowest_rules(name, arguments)
    return found


def _delegate(argv: Sequence[str]) -> int:
    """Run a built-in plugin's own command (``dsh audit ...``, ``dsh sandbox check ...``)."""
    import importlib

    name, rest = argv[0], list(argv[1:])
    if name == "sandbox":
        if rest and rest[0] in ("-h", "--help"):
            print(_SANDBOX_HELP)
            return 0
        if not rest or rest[0] != "check":
            warn("dsh sandbox: error: the only command is `dsh sandbox check [--json]`")
            return 2
        rest = rest[1:]
    module_name, function, _ = _DELEGATED[name]
    try:
        command = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        warn(f"dsh {name}: error: the built-in plugins are not importable here: {exc}")
        return 2
    status: int = command(rest)
    return status


def _cmd_hook(args: argparse.Namespace) -> int:
    from ._hook import cmd_hook_claude

    return cmd_hook_claude(args, build_host)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from .._mcp._service import run_serve_command

    return run_serve_command(args, build_host, UsageError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dsh`` with *argv* (default: ``sys.argv[1:]``); return the exit status.

    Nothing a user or the environment does prints a traceback: a closed pipe (``dsh tools |
    head -1``) exits quietly with 141, Ctrl-C prints one line and exits 130 (trio cancels what
    the command started), and anything unexpected is one line naming the error, exit 70.
    ``--debug`` or ``DSH_DEBUG=1`` adds the traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    _tolerant(sys.stdout)
    _tolerant(sys.stderr)
    debug = "--debug" in argv or debugging()
    argv = [arg for arg in argv if arg != "--debug"]
    try:
        return _main(argv)
    except BaseException as exc:
        status = _status_for(exc)
        if status is None:
            raise
        if debug:
            traceback.print_exc()
        if status == 130:
            warn("dsh: interrupted")
        elif status == 141:
            _silence_stdout()
        else:
            warn(
                f"dsh: internal error: {type(exc).__name__}: {printable(str(exc))} "
                "(run with --debug or DSH_DEBUG=1 for the traceback, and please report it)"
            )
        return status


def _status_for(exc: BaseException) -> int | None:
    """The exit status for an exception that reached `main` (``None``: let it go on)."""
    if isinstance(exc, BaseExceptionGroup):
        statuses = [_status_for(inner) for inner in exc.exceptions]
        for wanted in (130, 141):
            if wanted in statuses:
                return wanted
        return 70
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, BrokenPipeError):
        return 141
    if isinstance(exc, SystemExit | GeneratorExit):
        return None
    return 70


def _tolerant(stream: Any) -> None:
    """Let *stream* print what it cannot encode (lone surrogates from argv) as escapes."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(Exception):
            reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the exit flush cannot fail again."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _main(argv: list[str]) -> int:
    if argv and argv[0] in _DELEGATED:
        return _delegate(argv)
    parser = make_parser()
    autocomplete(parser)  # answers and exits when the shell asks for completions
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse reported
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        warn(f"dsh {args.command}: error: {exc}")
        return 2
    except ConfigError as exc:
        warn(f"dsh: config error: {exc}")
        return 2
    return status
