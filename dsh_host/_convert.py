"""The one cattrs converter dsh uses, for tool arguments and plugin configuration alike.

Rules:

* attrs classes are structured from mappings; unknown keys are errors (``forbid_extra_keys``), so a
  misspelt config key or argument name never passes silently;
* tuples, lists, sets and frozensets are structured from any JSON array (including frozen tuples);
* `pathlib.Path` is structured from a string;
* errors are reported with every failing field at once (`cattrs.transform_error`).
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any, TypeVar

import cattrs

__all__ = ["error_messages", "make_converter", "structure"]

T = TypeVar("T")


def configure_converter(converter: cattrs.Converter) -> None:
    """Apply dsh's rules (module docstring) to *converter*."""
    converter.register_structure_hook(pathlib.Path, lambda value, _: pathlib.Path(value))
    converter.register_unstructure_hook(pathlib.Path, str)


def make_converter() -> cattrs.Converter:
    """A fresh converter configured by `configure_converter`."""
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    configure_converter(converter)
    return converter


@functools.cache
def _shared() -> cattrs.Converter:
    return make_converter()


def structure(value: Any, cls: type[T]) -> T:
    """Structure *value* into *cls* with the shared converter; raises cattrs' exception groups."""
    return _shared().structure(value, cls)


def error_messages(exc: BaseException, path: str = "$") -> list[str]:
    """Readable ``<path>: <problem>`` lines for a cattrs structuring failure."""
    if isinstance(exc, cattrs.BaseValidationError | cattrs.ForbiddenExtraKeysError):
        return list(cattrs.transform_error(exc, path=path))
    return [f"{path}: {exc}"]
