"""``dsh config trust``: say which config file dsh may read when it finds one.

A ``dsh.toml`` (or ``[tool.dsh]``) found in the working directory is read only while what it
holds is what the user trusted (`dsh_host.TrustedConfigs`), and so are the files its plugins
name (a permissions ``import``, ``hook_commands`` settings); this command records them, forgets
them (``--revoke``) or lists the records and whether each still holds what was trusted. It loads
the plugins (``--plugin``, ``--no-entrypoints`` and ``--disable`` as for any command) to ask
which files they name, and starts none.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .. import ConfigError, TrustedConfigs, find_config, printable
from ._common import UsageError, out, plugin_options

__all__ = ["add_trust_parser"]


def add_trust_parser(config_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The parser of ``dsh config trust``."""
    p = config_sub.add_parser(
        "trust",
        help="trust a config file as it is now (dsh reads a dsh.toml it finds only once trusted)",
        description="Trust what a config file holds now: dsh reads a dsh.toml (or [tool.dsh] "
        "in pyproject.toml) it finds in the working directory only while it holds what you "
        "trusted. Read the file first: it may run commands and widen what the model may do.",
    )
    p.add_argument("path", metavar="PATH", nargs="?",
                   help="the file (default: the one found here: $DSH_CONFIG, ./dsh.toml or "
                   "[tool.dsh] in ./pyproject.toml)")  # fmt: skip
    which = p.add_mutually_exclusive_group()
    which.add_argument("--revoke", action="store_true",
                       help="forget the file: dsh no longer reads it when it finds it")  # fmt: skip
    which.add_argument("--list", action="store_true",
                       help="list the trusted files, and whether each changed since")  # fmt: skip
    p.set_defaults(handler=_cmd_trust)


def _cmd_trust(args: argparse.Namespace) -> int:
    trust = TrustedConfigs()
    options = plugin_options(args)
    if args.list:
        if args.path:
            raise UsageError("dsh config trust --list takes no PATH")
        for recorded in trust.items():
            out(f"{_state(trust, recorded, options):<9} {printable(recorded)}")
            changed = trust.changed_files(recorded)
            for named in trust.files(recorded):
                mark = " (changed)" if named in changed else ""
                out(f"{'':<9}   names {printable(named)}{mark}")
        return 0
    path = args.path or find_config()
    if path is None:
        raise UsageError(
            "no config file here to trust (looked for $DSH_CONFIG, ./dsh.toml and [tool.dsh] "
            "in ./pyproject.toml); name one: dsh config trust PATH"
        )
    shown = printable(os.path.realpath(path))
    if args.revoke:
        forgot = trust.revoke(path)
        out(f"revoked {shown}" if forgot else f"{shown} was not trusted; nothing to revoke")
        return 0
    here = None if args.path else os.getcwd()  # found here: its files as a start here reads
    files = trust.trust(path, **options, cwd=here)
    out(f"trusted {shown} as it is now; trust it again after it changes")
    for file, held in files.items():
        absent = " (absent: trusted not to exist)" if held is None else ""
        out(f"  with {printable(file)}{absent}, which it names")
    return 0


def _state(trust: TrustedConfigs, path: str, options: dict[str, Any]) -> str:
    if not os.path.exists(path):
        return "missing"
    try:
        return trust.state(path, **options)
    except ConfigError:  # unreadable or no longer TOML: not what was trusted
        return "changed"
