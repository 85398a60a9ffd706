"""The ``sandbox`` plugin: the one sandbox policy the file tools and ``bash`` enforce.

It hooks no pipeline stage. It holds a `SandboxPolicy` (mode, workspace, writable roots, read
roots, network) built from ``[plugin.sandbox]`` and ``[host] workspace``, and offers the methods
the ``tools`` plugin calls from inside its tool bodies:

* `SandboxPlugin.check_read` / `SandboxPlugin.check_write`: the file fence
  (`dsh_plugins_builtin._sandbox._fence`); a denial raises `SandboxDeniedError` (``SANDBOX_DENIED``);
* `SandboxPlugin.write_text`: an atomic write, fenced again right before the replace;
* `SandboxPlugin.run`: ``bash -c`` confined by bubblewrap or Landlock
  (`dsh_plugins_builtin._sandbox._confine`); when nothing can confine the mode it raises
  `SandboxUnavailableError` (``SANDBOX_UNAVAILABLE``) and nothing runs.

`sandbox_check_command` is ``dsh sandbox check``: which backend works on this machine, why the
others do not, and which one the current configuration would use.
"""

import importlib
import json
import sys
from typing import Any

from dsh_host import ConfigError
from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
from dsh_plugins_builtin._sandbox._errors import (
    SandboxDeniedError,
    SandboxError,
    SandboxUnavailableError,
)
from dsh_plugins_builtin._sandbox._plugin import SandboxPlugin

__all__ = [
    "SandboxConfig",
    "SandboxDeniedError",
    "SandboxError",
    "SandboxPlugin",
    "SandboxUnavailableError",
    "build_policy",
    "sandbox_check_command",
]


# -- dsh sandbox check ---------------------------------------------------------------------------

_CHECKING = {  # what `dsh sandbox check` uses, imported on first use (the host's start never does)
    "check_report": "_check",
    "render_report": "_check",
    "probe_backends": "_backends",
    "probe_fork_server": "_backends",
}


def __getattr__(name: str) -> Any:
    """The names of `_CHECKING`, from their modules (which load the sandbox's backends)."""
    if name not in _CHECKING:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(
        importlib.import_module(f"dsh_plugins_builtin._sandbox.{_CHECKING[name]}"), name
    )
    globals()[name] = value
    return value


def sandbox_check_command(argv: list[str] | None = None) -> int:
    """``dsh sandbox check [--json] [--config PATH]``: which sandbox backend works here.

    Probes bubblewrap and Landlock (each really runs ``true``), says why an unusable one is
    unusable, and which one the current configuration would choose.

    Args:
        argv: The arguments after ``check`` (default: ``sys.argv[1:]``).

    Returns:
        0 when commands can run as configured, 1 when ``bash`` would fail closed
        (``SANDBOX_UNAVAILABLE``), 2 for a configuration error.
    """
    import argparse  # this command only: a host's start parses no command line

    parser = argparse.ArgumentParser(
        prog="dsh sandbox check",
        description="Report which sandbox backend works on this machine and which one "
        "the configuration would use.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--config", metavar="PATH", help="config file (default: $DSH_CONFIG, ./dsh.toml, ...)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    this = sys.modules[__name__]  # its `_CHECKING` names (tests replace some)
    status: int
    try:
        report, status = this.check_report(
            args.config, SandboxPlugin, this.probe_backends, this.probe_fork_server
        )
    except ConfigError as exc:
        print(f"dsh sandbox check: config error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(this.render_report(report)))
    return status


if __name__ == "__main__":  # pragma: no cover - ``python -m dsh_plugins_builtin.sandbox``
    raise SystemExit(sandbox_check_command())
