"""Shell completion for ``dsh`` (bash, zsh, fish), through argcomplete.

``dsh completion SHELL`` prints the script to source; the shell then calls ``dsh`` back with
``_ARGCOMPLETE`` set, and `autocomplete` answers from the parser: commands, options, and, for
``dsh call NAME``, the names of the installed tools, and for ``--disable NAME`` the installed
plugins.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ._common import build_host

if TYPE_CHECKING:  # annotations only: argparse loads with a parser
    import argparse

__all__ = ["SHELLS", "add_completion_parser", "autocomplete", "plugin_names", "tool_names"]

SHELLS = ("bash", "zsh", "fish")


def tool_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Completer: the tools a host built like the command's would offer (``dsh call NAME``)."""
    host = _host(parsed_args)
    if host is None:
        return []
    return sorted(t.name for t in host.registry.tools() if t.name.startswith(prefix))


def plugin_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Completer: installed plugin names, enabled or not (``--disable NAME``)."""
    host = _host(parsed_args)
    if host is None:
        return []
    return sorted(r.name for r in host.plugins() if r.name.startswith(prefix))


def _host(parsed_args: argparse.Namespace) -> Any:
    try:
        return build_host(parsed_args, quiet=True)
    except Exception:  # a completer must never print a traceback into the user's shell
        return None


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit, when the shell made one (``_ARGCOMPLETE`` set)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


def add_completion_parser(sub: Any) -> None:
    """Add ``dsh completion bash|zsh|fish`` to the ``dsh`` parser."""
    p = sub.add_parser(
        "completion",
        help="print the shell completion script for bash, zsh or fish",
        description=(
            "Print a script that makes SHELL complete dsh commands, options and tool names. "
            'Load it with: eval "$(dsh completion bash)" (zsh: the same with zsh; '
            "fish: dsh completion fish | source). Put that line in your shell's start-up file."
        ),
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(handler=_cmd_completion)


def _cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["dsh"], shell=args.shell))
    return 0
