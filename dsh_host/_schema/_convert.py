"""The one cattrs converter dsh uses, for tool arguments and plugin configuration alike.

Rules:

* attrs classes are structured from mappings; unknown keys are errors (``forbid_extra_keys``), so a
  misspelt config key or argument name never passes silently;
* tuples, lists, sets and frozensets are structured from any JSON array (including frozen tuples);
* `pathlib.Path` is structured from a string;
* unions of JSON/TOML scalars (``int | str``) pass values through as they are;
* values are checked strictly *before* they get here (tool arguments by their JSON Schema,
  config tables by `dsh_host._host._config.check_value`), so cattrs' lenient scalar coercions
  (``5`` to ``"5"``) never decide anything;
* errors are reported with every failing field at once (`cattrs.transform_error`).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # cattrs is imported on first use: `import dsh_host` does without it (issue 27)
    import cattrs

__all__ = [
    "error_messages",
    "is_structure_error",
    "make_converter",
    "shared_converter",
    "structure",
]

T = TypeVar("T")


def configure_converter(converter: cattrs.Converter) -> None:
    """Apply dsh's rules (module docstring) to *converter*."""
    import pathlib  # with the converter, not with dsh_host

    import cattrs.strategies

    converter.register_structure_hook(pathlib.Path, lambda value, _: pathlib.Path(value))
    converter.register_unstructure_hook(pathlib.Path, str)
    cattrs.strategies.configure_union_passthrough(str | int | float | bool, converter)


def make_converter() -> cattrs.Converter:
    """A fresh converter configured by `configure_converter`."""
    import cattrs

    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    configure_converter(converter)
    return converter


@functools.cache
def shared_converter() -> cattrs.Converter:
    """The converter dsh structures tool arguments and config tables with."""
    return make_converter()


def structure(value: Any, cls: type[T]) -> T:
    """Structure *value* into *cls* with the shared converter; raises cattrs' exception groups."""
    return shared_converter().structure(value, cls)


def is_structure_error(exc: BaseException) -> bool:
    """Whether *exc* is cattrs' report of a value that does not fit its class."""
    if "cattrs" not in sys.modules:  # nothing was structured yet, so it cannot be
        return False
    import cattrs

    return isinstance(exc, cattrs.BaseValidationError | cattrs.ForbiddenExtraKeysError)


def error_messages(exc: BaseException, path: str = "$") -> list[str]:
    """Readable ``<path>: <problem>`` lines for a cattrs structuring failure."""
    if is_structure_error(exc):
        import cattrs

        return list(cattrs.transform_error(exc, path=path))
    return [f"{path}: {exc}"]
