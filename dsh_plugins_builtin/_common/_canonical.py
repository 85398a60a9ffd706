"""Canonical JSON of a frozen call snapshot, with the JSON encoder built once.

`dsh_host.canonical_json` is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``. ``json.dumps`` with options builds a `json.JSONEncoder` and a C encoder
for every call, which costs more than encoding a small argument object. The plugins that
serialise every call's arguments (guards: size and repeat count; audit: the recorded row) use
`canonical` instead: the standard library's C encoder (``json.encoder.c_make_encoder``, the
one ``json.dumps`` itself uses), made once with the same options. Not a new encoder, so not
hand-written JSON: only the per-call set-up is skipped.

One difference, on purpose: no cycle check. The values encoded here are the pipeline's
deep-frozen snapshots (tuples and frozen mappings built from JSON), which cannot contain
themselves. Where the C encoder is not available (another Python implementation), `canonical`
is `dsh_host.canonical_json`.

The text of the last frozen mapping encoded is remembered (`remembered`): the ``guards`` plugin
encodes every call's arguments at its guard, and ``audit`` records the same text for that call
without encoding the arguments a second time in its writer thread. A `FrozenDict` only: what
the pipeline freezes cannot change, so the same object always has the same text (a plain dict
could be changed between two calls).
"""

from __future__ import annotations

import json.encoder
from collections.abc import Callable
from typing import Any

from dsh_host import FrozenDict, canonical_json

__all__ = ["canonical", "remembered"]


def _unserialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make() -> Callable[[Any], str]:
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    encode_string = getattr(json.encoder, "c_encode_basestring", None)
    if make_encoder is None or encode_string is None:
        return canonical_json
    # (markers, default, encoder, indent, key separator, item separator, sort_keys, skipkeys,
    # allow_nan): what json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # passes, without the markers dict of the cycle check.
    encode = make_encoder(None, _unserialisable, encode_string, None, ":", ",", True, False, True)

    def canonical(value: Any) -> str:
        """Canonical JSON of the frozen *value*: the same text as `dsh_host.canonical_json`."""
        global _last
        if type(value) is FrozenDict:
            last = _last
            if value is last[0]:
                return last[1]
            text = "".join(encode(value, 0))
            _last = (value, text)  # one tuple, read whole: any thread sees a matching pair
            return text
        if type(value) is str:  # what json.dumps does for a bare string
            return str(encode_string(value))
        return "".join(encode(value, 0))

    return canonical


_last: tuple[object, str] = (None, "null")
"""The last `FrozenDict` `canonical` encoded, and its text."""


def remembered(value: object) -> str | None:
    """`canonical` of *value* if it is the frozen mapping encoded last, else ``None``."""
    last = _last
    return last[1] if value is last[0] and value is not None else None


canonical: Callable[[Any], str] = _make()
"""Canonical JSON (sorted keys, compact, non-ASCII kept) of a frozen, acyclic JSON value."""
