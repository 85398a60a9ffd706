"""Claude Code settings files (``.claude/settings.json``): the ``permissions`` lists they hold,
for the permissions plugin's ``import`` key."""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Mapping
from typing import Any

from dsh_host import ConfigError, Host

from ._grammar import Effect
from ._rules import Anchors, Rule, RuleError, parse_rule

__all__ = ["imported_rules", "project_of", "read_settings"]

log = logging.getLogger("dsh_plugins_builtin.permissions")

_EFFECTS: tuple[Effect, ...] = ("allow", "ask", "deny")
_MAX_SETTINGS = 4 * 1024 * 1024


def project_of(settings: pathlib.Path) -> str:
    folder = settings.parent
    return str(folder.parent if folder.name == ".claude" else folder)


def read_settings(path: pathlib.Path, text: bytes) -> dict[Effect, list[tuple[str, str]]]:
    """The ``permissions`` lists of one Claude Code settings file *path*, which holds *text*:
    effect -> (key, rule)."""

    def bad(message: str, key: str | None = None) -> ConfigError:
        return ConfigError(message, path=str(path), key=key)

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise bad(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
        return dict(pairs)

    if len(text) > _MAX_SETTINGS:
        raise bad(f"the settings file is larger than {_MAX_SETTINGS} bytes")
    try:
        data = json.loads(text.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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


def imported_rules(
    path: pathlib.Path, workspace: str, home: str, where: str, host: Host
) -> dict[Effect, list[Rule]]:
    """The rules of the settings file *path* (an ``import`` entry of the config *where*),
    parsed, read through ``host.read_config_file`` (what the trust check compared); none, with
    a warning, when the file does not exist.

    Raises:
        ConfigError: the file or one of its rules is malformed, naming the file and the key.
    """
    try:  # what the trust check read, whatever the path holds now (a FIFO would hang)
        held = host.read_config_file(path)
    except FileNotFoundError:
        log.warning(
            "permissions: the settings file %s (import in %s) does not exist; "
            "no rules were read from it", path, where,
        )  # fmt: skip
        return {}
    except ConfigError as exc:  # not a regular file, or too large
        raise ConfigError(
            f"{exc.message}; point import at a Claude Code settings.json", path=str(path)
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot be read as a Claude Code settings file (JSON): {exc}", path=str(path)
        ) from None
    anchors = Anchors(workspace=workspace, project=project_of(path), home=home)
    out: dict[Effect, list[Rule]] = {}
    for effect, rules in read_settings(path, held).items():
        for key, text in rules:
            try:
                out.setdefault(effect, []).append(parse_rule(text, effect, anchors, str(path)))
            except RuleError as exc:
                raise ConfigError(f"rule {text!r} {exc}", path=str(path), key=key) from None
    return out
