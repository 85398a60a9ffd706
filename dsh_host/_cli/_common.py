"""What every ``dsh`` command shares: the host its flags ask for, and how it talks (``out``,
``warn``, ``dump``, `UsageError`, strict JSON from the command line)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .. import Host, JsonInputError, PluginLoadError, PluginStatus, printable
from .. import parse_json as strict_json
from .._gc import resume as resume_gc

if TYPE_CHECKING:  # rendering: imported by the commands that print cards and tables
    import argparse  # (and argparse, with a parser: `dsh hook claude` builds none)

    from ._render import Style

__all__ = [
    "CALL_EXAMPLE",
    "HOOK_MAX_BYTES",
    "UsageError",
    "build_host",
    "debugging",
    "dump",
    "json_object",
    "load_module",
    "out",
    "parse_json",
    "stdout_style",
    "unknown_tool",
    "warn",
]

HOOK_MAX_BYTES = 4 * 1024 * 1024
"""The largest ``dsh hook claude`` payload read (``--max-bytes``' default); a larger one fails
closed (`dsh_host._cli._hook`)."""


class UsageError(Exception):
    """Bad usage: the message says what was wrong and what to do; ``dsh`` exits 2."""


def _write(stream: Any, line: str) -> None:
    try:
        stream.write(f"{line}\n")
    except UnicodeEncodeError:  # a lone surrogate, or a terminal that cannot show a character
        encoding = getattr(stream, "encoding", None) or "utf-8"
        text = f"{line}\n".encode(encoding, "backslashreplace").decode(encoding)
        stream.write(text)


def out(line: str = "") -> None:
    _write(sys.stdout, line)


def warn(line: str) -> None:
    with contextlib.suppress(Exception):  # what stdout has so far comes first, as on a terminal
        sys.stdout.flush()
    _write(sys.stderr, line)


def dump(value: Any, indent: int | None = 2) -> None:
    """Print *value* as JSON; a lone surrogate is written as its ``\\udcxx`` escape."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, indent=indent, ensure_ascii=True)
    out(text)


def stdout_style() -> Style:
    from ._render import style_for

    return style_for(sys.stdout, os.environ)


_OFF = (PluginStatus.DISABLED, PluginStatus.BLOCKED)


def plugin_options(args: argparse.Namespace) -> dict[str, Any]:
    """What ``--plugin``, ``--no-entrypoints`` and ``--disable`` ask of the plugins, as the
    keyword arguments of `Host.from_config` (and of `TrustedConfigs`)."""
    objects = []
    specs = [*args.plugin, *getattr(args, "sub_plugin", [])]
    if specs and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(
            os.getcwd()
        )  # `--plugin myplugin` finds ./myplugin.py; appended: no shadowing
    for spec in specs:
        try:
            objects.append(load_module(spec))
        except PluginLoadError as exc:
            raise UsageError(f"--plugin {exc.message.removeprefix('plugin ')}") from None
    objects.extend(getattr(args, "plugin_objects", ()))  # a command's own, last (`dsh hook`)
    entrypoints = not (args.no_entrypoints or getattr(args, "sub_no_entrypoints", False))
    disable = [*args.disable, *getattr(args, "sub_disable", [])]
    return {"plugins": objects, "load_entrypoints": entrypoints, "disable": disable}


def build_host(args: argparse.Namespace, *, config: str | None = None, quiet: bool = False) -> Host:
    """The host ``--config``, ``--plugin`` and ``--no-entrypoints`` ask for."""
    options = plugin_options(args)
    path = config or getattr(args, "sub_config", None) or args.config
    host = Host.from_config(
        path or None,
        **options,
        require_trust=getattr(args, "require_trust", False) and not path,
    )
    resume_gc()  # the start is over: collect what the command itself leaves
    for line in host.warnings if not quiet else ():
        warn(f"dsh: warning: {printable(line)}")
    rows = host.plugins()
    for row in rows if not quiet else ():
        if row.name == "permissions" and row.status in _OFF:
            warn(
                f"dsh: warning: the permissions plugin is off ({printable(row.error or '')}), so "
                "no rule is asked before a call: unless another plugin decides, every call is "
                "allowed"
            )
    failed = [row for row in rows if row.status is PluginStatus.FAILED]
    if failed and not quiet:
        from ._render import plugin_origin

        names = ", ".join(f"{row.name}{plugin_origin(row)}" for row in failed)
        warn(f"dsh: warning: not running {len(failed)} plugin(s) that failed to load: {names}")
        warn("dsh: see `dsh plugins` for the errors")
        for row in failed if debugging() else ():
            warn(f"dsh: traceback of {row.name}:")
            for line in (row.traceback or "").split("\n"):
                warn(f"    {printable(line)}")
    return host


def debugging() -> bool:
    """``DSH_DEBUG=1``: show full tracebacks of plugin failures (and of internal errors)."""
    return os.environ.get("DSH_DEBUG", "") not in ("", "0")


_ARGUMENTS_EXAMPLE = '{"path": "README.md"}'
CALL_EXAMPLE = '{"id": "1", "name": "read_file", "arguments": {"path": "README.md"}}'


def json_object(value: Any, what: str, example: str = _ARGUMENTS_EXAMPLE) -> dict[str, Any]:
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", type(None): "null"}.get(type(value))
        raise UsageError(
            f"{what} must be a JSON object such as {example}, not {kind or json.dumps(value)}"
        )
    return value


def parse_json(text: str, what: str, hint: str = "") -> Any:
    """Parse *text* strictly (`dsh_host.parse_json`: no duplicate keys, bounded depth and integer
    size); a `UsageError` beginning with *what* (``the line is``) if it is refused."""
    try:
        return strict_json(text)
    except JsonInputError as exc:
        reason = printable(str(exc))
        if reason.startswith("not valid JSON: "):
            problem = f"{what} not valid JSON ({reason.removeprefix('not valid JSON: ')})"
        else:
            problem = f"{what} refused: {reason}"
        raise UsageError(problem + (f"; {hint}" if hint else "")) from None


def unknown_tool(host: Host, name: str) -> str:
    import difflib  # did-you-mean hints only: not at every start

    known = [tool.name for tool in host.registry.tools()]
    hint = difflib.get_close_matches(name, known, n=1)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    listed = ", ".join(known) or "none; install a tool plugin"
    return (
        f"no tool named {printable(repr(name))}{did_you_mean}; available: {listed}. "
        "See `dsh tools`."
    )


def load_module(spec: str) -> object:
    """Import ``module`` or ``module:attribute`` for ``--plugin``; a class is instantiated, as
    for an entry point that names a class.

    Raises:
        PluginLoadError: the module cannot be imported (its own exception is chained), has no
            such attribute, or the class cannot be instantiated.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise PluginLoadError(spec, "expected MODULE or MODULE:ATTRIBUTE")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginLoadError(
            spec, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in filter(None, attribute.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginLoadError(spec, f"{module_name!r} has no attribute {attribute!r}") from None
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise PluginLoadError(spec, f"{attribute}(): {type(exc).__name__}: {exc}") from exc
    return obj
