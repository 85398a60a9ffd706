"""The ``dsh`` command line: list plugins and tools, run calls, check config.

Exit status: 0 success, 1 an error result, 2 bad usage (bad JSON, a config error, an unknown
tool or subcommand, a bad line in a calls file). User errors are one message on stderr, never a
traceback. ``main(argv)`` is the console script and is callable in-process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import ConfigError, printable
from .._gc import resume as resume_gc
from ._common import (
    HOOK_MAX_BYTES,
    UsageError,
    build_host,
    debugging,
    warn,
)

if TYPE_CHECKING:  # argparse loads with a parser: `dsh hook claude` needs none (`_plain_hook`)
    import argparse

__all__ = ["COMMANDS", "command_of", "main", "make_parser"]

# -- the parser -----------------------------------------------------------------------------


def _version() -> str:
    import importlib.metadata  # only for --version: slow to import (issue 27)

    try:
        return importlib.metadata.version("dsh-host")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _version_action() -> type[argparse.Action]:
    """``--version``'s action: the installed version, looked up only when asked for."""
    import argparse

    class _Version(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
            sys.stdout.write(f"dsh-host {_version()}\n")
            parser.exit()

    return _Version


def _common(prefix: str) -> argparse.ArgumentParser:
    """Host options, accepted before the command and after it."""
    import argparse

    from ._completion import plugin_names  # with a parser: a plain `dsh hook claude` has none

    common = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS if prefix else None
    group = common.add_argument_group("host options")
    group.add_argument("--config", metavar="PATH", dest=f"{prefix}config", default=unset,
                       help="config file (default: $DSH_CONFIG, ./dsh.toml, or [tool.dsh] in "
                       "./pyproject.toml; a file found here is read once trusted: dsh config "
                       "trust)")  # fmt: skip
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


COMMANDS = ("plugins", "tools", "call", "config", "run", "new", "completion", "mcp", "hook")
"""The subcommands `make_parser` builds (besides the delegated ``audit`` and ``sandbox``)."""

_VALUED = ("--config", "--plugin", "--disable")  # host options that take the next word


def _command_at(argv: Sequence[str]) -> int | None:
    """Where the first word of *argv* that is not an option or an option's value stands."""
    words = iter(enumerate(argv))
    for at, word in words:
        if word in ("--", "-h", "--help"):  # help lists every command
            return None
        if word.startswith("--") and "=" not in word and any(v.startswith(word) for v in _VALUED):
            next(words, None)  # its value (argparse takes `--conf` for `--config` too)
        elif not word.startswith("-"):
            return at
    return None


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand *argv* names (its first word that is not an option or an option's
    value), if it is one of `COMMANDS`."""
    at = _command_at(argv)
    return argv[at] if at is not None and argv[at] in COMMANDS else None


class _Skipped:
    """A subcommand's parser this run does not build: every call on it does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


class _Only:
    """The subparsers action, adding only *wanted*'s parser (the others cost a cold start)."""

    def __init__(self, sub: Any, wanted: str) -> None:
        self._sub, self._wanted = sub, wanted

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        return self._sub.add_parser(name, **kwargs) if name == self._wanted else _Skipped()


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``dsh`` argument parser; with *command* (one of `COMMANDS`) only that subcommand's
    parser, which parses its command line as the whole parser would (help listing every
    command, an unknown command's error and shell completion use the whole parser)."""
    import argparse

    from ._completion import add_completion_parser

    parser = argparse.ArgumentParser(
        prog="dsh", parents=[_common("")],
        description="A plugin host for the tool pipeline of LLM agent harnesses.",
        epilog="Exit status: 0 success, 1 an error result, 2 bad usage or configuration.",
    )  # fmt: skip
    parser.add_argument(
        "--version",
        action=_version_action(),
        nargs=0,
        help="show program's version number and exit",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an unexpected error (or DSH_DEBUG=1)")  # fmt: skip
    sub: Any = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is not None:
        sub = _Only(sub, command)
    common = [_common("sub_")]

    if command in (None, "plugins", "tools", "call", "config"):  # imported only for their own
        from ._commands import add_inspect_parsers

        add_inspect_parsers(sub, common)
    if command in (None, "run"):
        from ._run import add_run_parser

        add_run_parser(sub, common)
    if command in (None, "new"):
        from ._scaffold import add_new_parser

        add_new_parser(sub)
    add_completion_parser(sub)

    _add_agent_parsers(sub, common)

    # Commands of built-in plugins; main() hands their arguments over unparsed.
    for name, summary in _DELEGATED.items():
        sub.add_parser(name, help=summary[2], add_help=False)
    return parser


def _add_agent_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: list[argparse.ArgumentParser]
) -> None:
    """``dsh mcp serve`` and ``dsh hook claude``: dsh's policy for another agent or client."""
    p = sub.add_parser("mcp", parents=common, help="serve the gated tools over MCP")
    mcp_sub = p.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    p = mcp_sub.add_parser("serve", parents=common,
                           help="a Model Context Protocol server on stdin/stdout (or HTTP)")  # fmt: skip
    p.add_argument("--workspace", metavar="DIR",
                   help="serve as if started in DIR: its dsh.toml and the default workspace "
                   "(MCP clients often start servers in an arbitrary directory)")  # fmt: skip
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                   "(a loopback HOST only, unless --public); every client sends a bearer "
                   "token: --token-file's, or one made at start in a private file named on stderr")  # fmt: skip
    p.add_argument("--public", action="store_true",
                   help="allow a --http HOST that is not a loopback address (needs --token-file)")  # fmt: skip
    p.add_argument("--token-file", metavar="PATH",
                   help="--http clients must send a bearer token listed in PATH (mode 0600, not a "
                   "symlink): one a line, optionally followed by a scope name and "
                   "allow=TOOL,... / deny=TOOL,...")  # fmt: skip
    p.add_argument("--list-all", action="store_true",
                   help="also list tools the configuration denies outright")  # fmt: skip
    p.add_argument("--max-message-bytes", type=int, metavar="N", default=16 * 1024 * 1024,
                   help="the longest message accepted, a stdio line or an HTTP body (default: 16 MiB)")  # fmt: skip
    p.set_defaults(handler=_cmd_mcp)

    p = sub.add_parser("hook", parents=common, help="answer an agent's hooks with dsh's policy")
    hook_sub = p.add_subparsers(dest="hook_command", metavar="AGENT", required=True)
    p = hook_sub.add_parser("claude", parents=common,
                            help="a Claude Code hook: PreToolUse, PermissionRequest, PostToolUse")  # fmt: skip
    p.add_argument("--max-bytes", type=int, metavar="N", default=HOOK_MAX_BYTES,
                   help="the largest payload read from stdin (default: 4 MiB)")  # fmt: skip
    p.set_defaults(handler=_cmd_hook)


def _plain_hook(argv: Sequence[str]) -> Any:
    """The arguments the parser makes of ``dsh hook claude``, alone or with the config pinned
    (``--config PATH``, as the docs advise), the command lines Claude Code runs for every tool
    call; ``None`` for any other. Made here, so that the hook imports no argparse and builds
    no parser (about 3 ms of its cold start, issue 27).
    ``test_the_plain_hook_command_line_is_parsed_as_the_parser_does`` holds them equal."""
    words = list(argv)
    if words[:2] != ["hook", "claude"]:
        return None
    pinned: dict[str, str] = {}
    rest = words[2:]
    if len(rest) == 2 and rest[0] == "--config" and rest[1] and not rest[1].startswith("-"):
        pinned = {"sub_config": rest[1]}
    elif len(rest) == 1 and rest[0].startswith("--config=") and len(rest[0]) > len("--config="):
        pinned = {"sub_config": rest[0].removeprefix("--config=")}
    elif rest:
        return None
    from types import SimpleNamespace

    return SimpleNamespace(
        config=None, plugin=[], no_entrypoints=False, disable=[], version=None, debug=False,
        command="hook", hook_command="claude", max_bytes=HOOK_MAX_BYTES, handler=_cmd_hook,
        **pinned,
    )  # fmt: skip


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


def _delegate(argv: Sequence[str]) -> int:
    """Run a built-in plugin's own command (``dsh audit ...``, ``dsh sandbox check ...``)."""
    import importlib

    resume_gc()
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
    from .._mcp import run_serve_command

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


def _delegated_at(argv: Sequence[str]) -> int | None:
    """Where *argv* names a built-in plugin's own command (``audit``, ``sandbox``), after any
    global options (``dsh --config X audit``), or ``None``."""
    at = _command_at(argv)
    return at if at is not None and argv[at] in _DELEGATED else None


def _main(argv: list[str]) -> int:
    named = _delegated_at(argv)
    if named is not None:  # its own parser reads the rest: global options given before it too
        return _delegate([*argv[named:], *argv[:named]])
    completing = "_ARGCOMPLETE" in os.environ
    args = None if completing else _plain_hook(argv)
    if args is None:
        parser = make_parser(None if completing else command_of(argv))
        from ._completion import autocomplete

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
