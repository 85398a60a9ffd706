"""Claude Code settings files (``.claude/settings.json``): the ``permissions`` lists they hold,
for the permissions plugin's ``import`` key."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any

from dsh_host import ConfigError

from ._grammar import Effect

__all__ = ["project_of", "read_settings"]

_EFFECTS: tuple[Effect, ...] = ("allow", "ask", "deny")
_MAX_SETTINGS = 4 * 1024 * 1024


def project_of(settings: pathlib.Path) -> str:
    folder = settings.parent
    return str(folder.parent if folder.name == ".claude" else folder)


def read_settings(path: pathlib.Path) -> dict[Effect, list[tuple[str, str]]]:
    """The ``permissions`` lists of one Claude Code settings file: effect -> (key, rule)."""

    def bad(message: str, key: str | None = None) -> ConfigError:
        return ConfigError(message, path=str(path), key=key)

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise bad(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
        return dict(pairs)

    if not path.is_file():  # a FIFO or a device would hang or flood the read
        raise bad("is not a regular file; point import at a Claude Code settings.json")
    try:
        if path.stat().st_size > _MAX_SETTINGS:
            raise bad(f"the settings file is larger than {_MAX_SETTINGS} bytes")
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise bad(f"cannot be read as a Claude Code settings file (JSON): {exc}") from None
    if not isinstance(data, Mapping):
        raise bad("must hold a JSON object")
    permissions = data.get("permissions", {})
    if not isinstance(permissions, Mapping):
        raise bad("must be an object with allow, ask and deny lists", "permissions")
    out: dict[Effect, list[tuple[str, str]]] = {}
    for effect in _EFFECTS:
        rules = permissions.get(effect, [])
        if not isinstance(rules, list):
            raise bad("must be a list of rule strings", f"permissions.{effect}")
        for i, rule in enumerate(rules):
            if not isinstance(rule, str):
                raise bad(f"must be a rule string, not {rule!r}", f"permissions.{effect}[{i}]")
            out.setdefault(effect, []).append((f"permissions.{effect}[{i}]", rule))
    return out
