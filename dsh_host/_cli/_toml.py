"""The effective configuration as TOML, for ``dsh config check`` (a password in a URL masked)."""

from __future__ import annotations

import json
import math
import pathlib
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dump_toml"]


def _toml_key(key: str) -> str:
    bare = key and all(c.isalnum() or c in "-_" for c in key) and key.isascii()
    return key if bare else json.dumps(key)


_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)(?P<secret>[^/@\s]+)@")


def _without_password(text: str) -> str:
    """A URL's password as ``***`` (``postgresql://user:***@host/db``): `dump_toml` prints the
    effective configuration, and a config value is no place to show a credential from."""
    return _URL_PASSWORD.sub(r"\g<head>***@", text) if "://" in text else text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str | pathlib.PurePath):
        return json.dumps(_without_password(str(value)), ensure_ascii=False)
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(_toml_value(v) for v in items) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    return json.dumps(str(value))


def dump_toml(tables: Mapping[tuple[str, ...], Mapping[str, Any]]) -> list[str]:
    """TOML text for ``{table path: {key: plain value}}``; ``None`` values are left out.

    A table path is its dotted name split into parts: ``("plugin", "hello-policy")``.
    """
    lines: list[str] = []
    for path, table in tables.items():
        if lines:
            lines.append("")
        lines.append(f"[{'.'.join(_toml_key(part) for part in path)}]")
        lines.extend(
            f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if v is not None
        )
    return lines
