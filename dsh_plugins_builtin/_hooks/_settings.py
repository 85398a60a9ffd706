"""Reading the command hooks of Claude Code ``settings.json`` files.

`load_settings` reads the ``PreToolUse`` and ``PostToolUse`` command hooks of one settings file
into `HookCommand` values (matcher compiled, timeout checked) and raises `SettingsError`, saying
where and what, for a file that is missing or not shaped like settings. `NAME` is the plugin's
name, which its errors and contexts carry.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from dsh_host import ConfigError, JsonInputError, parse_json

if TYPE_CHECKING:  # `_launch` and the fence it needs: only once a settings file has hooks
    from ._launch import Launch

__all__ = ["EVENTS", "NAME", "Event", "HookCommand", "SettingsError", "load_settings"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")

NAME = "hook_commands"
Event: TypeAlias = Literal["PreToolUse", "PostToolUse"]
EVENTS: tuple[Event, ...] = ("PreToolUse", "PostToolUse")


@attrs.frozen
class HookCommand:
    """One ``{"type": "command"}`` hook of one matcher group of one settings file."""

    event: Event
    matcher: str
    command: str
    timeout: float | None  # seconds; None: the plugin's timeout_ms
    source: str  # the settings file, as configured
    pattern: re.Pattern[str] | None = attrs.field(default=None, eq=False)  # None: every tool
    where: str = ""  # hooks.PreToolUse[0].hooks[1]
    launch: Launch | None = attrs.field(default=None, eq=False)  # set when the host starts

    def matches(self, *names: str) -> bool:
        """Whether this hook runs for a tool called any of *names* (dsh's, Claude Code's):
        its matcher regex matches one whole name."""
        return self.pattern is None or any(self.pattern.fullmatch(n) for n in names)

    def describe(self) -> str:
        command = self.command if len(self.command) <= 200 else self.command[:199] + "…"
        return f"{self.event} hook {command!r} (from {self.source})"


class SettingsError(Exception):
    """A settings file is missing or malformed; the message says where and what."""


def load_settings(
    path: Path, source: str, read: Callable[[Path], bytes] = Path.read_bytes
) -> list[HookCommand]:
    """Read the ``PreToolUse`` and ``PostToolUse`` command hooks of one settings file, its
    bytes given by *read* (the plugin passes ``host.read_config_file``: what was trusted).

    A file without a ``hooks`` key may be a bare event map (``{"PreToolUse": [...]}``). Other
    events are ignored; hooks of another ``type`` than ``command`` are skipped with a warning.

    Raises:
        SettingsError: the file is missing, unreadable, not JSON, or not shaped like settings.
    """
    try:
        data = parse_json(read(path))  # strict: no duplicate key, no nesting past its bound
    except JsonInputError as exc:
        problem = str(exc)
        raise SettingsError(
            f"is {problem}"
            if problem.startswith("not valid JSON")
            else f"is not valid JSON: {problem}"
        ) from None
    except FileNotFoundError:
        raise SettingsError(f"no such file ({path})") from None
    except ConfigError as exc:
        raise SettingsError(exc.message) from None
    except OSError as exc:
        raise SettingsError(f"cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"must hold a JSON object, not {_kind(data)}")
    events = data.get("hooks") if "hooks" in data else {e: data[e] for e in EVENTS if e in data}
    if not isinstance(events, dict):
        raise SettingsError(f"'hooks' must be an object, not {_kind(events)}")
    hooks: list[HookCommand] = []
    for event in EVENTS:
        groups = events.get(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"hooks.{event} must be a list, not {_kind(groups)}")
        for i, group in enumerate(groups):
            hooks.extend(_parse_group(group, event, f"hooks.{event}[{i}]", source))
    return hooks


def _parse_group(group: Any, event: Event, where: str, source: str) -> list[HookCommand]:
    if not isinstance(group, dict):
        raise SettingsError(f"{where} must be an object, not {_kind(group)}")
    matcher = group.get("matcher", "")
    if matcher is None:
        matcher = ""
    if not isinstance(matcher, str):
        raise SettingsError(f"{where}.matcher must be a string, not {_kind(matcher)}")
    pattern = None
    if matcher not in ("", "*"):
        try:
            pattern = re.compile(matcher)
        except re.error as exc:
            raise SettingsError(
                f"{where}.matcher {matcher!r} is not a valid regex: {exc}"
            ) from None
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise SettingsError(f"{where}.hooks must be a list, not {_kind(entries)}")
    out: list[HookCommand] = []
    for j, entry in enumerate(entries):
        at = f"{where}.hooks[{j}]"
        if not isinstance(entry, dict):
            raise SettingsError(f"{at} must be an object, not {_kind(entry)}")
        kind = entry.get("type", "command")
        if kind != "command":
            log.warning(
                "%s: %s has type %r; only command hooks run here, skipped", source, at, kind
            )
            continue
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise SettingsError(f"{at}.command must be a non-empty string")
        if "\0" in command:
            raise SettingsError(f"{at}.command must not contain a NUL character")
        timeout = entry.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise SettingsError(
                f"{at}.timeout must be a positive number of seconds, not {timeout!r}"
            )
        out.append(HookCommand(event, matcher, command, timeout, source, pattern, at))
    return out


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), repr(value))
