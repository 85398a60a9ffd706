"""`_canonical.canonical`: the text of `dsh_host.canonical_json`, with the encoder built once."""

from __future__ import annotations

import random
import sys

import pytest

from dsh_host import canonical_json, parse_json
from dsh_host._model._json import freeze
from dsh_plugins_builtin._common import _canonical
from dsh_plugins_builtin._common._canonical import canonical
from tests.conftest import soak_size

VALUES = [
    None, True, False, 0, -1, 2**63, -(10**4000), 0.0, -0.0, 1.5, 1e16, 1e-7, 5e-324,
    "", "x", 'quote " backslash \\ slash /', "é日本\U0001f600", "\udcff lone", "\ud800",
    "\x00\x1f\x7f\x9b\u2028\u2029\u202e\ufeff",
    [], {}, {"": ""}, {"b": 1, "a": [1, {"z": (1, 2.5)}], "é": None, "A": "Z"},
    [[[[[]]]]], {"k" * 1000: "v" * 100_000},
]  # fmt: skip


def test_the_c_encoder_is_used_here():
    assert canonical is not canonical_json  # CPython: the encoder built once


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_same_text_as_canonical_json(value):
    frozen = freeze(value, "v")
    assert canonical(frozen) == canonical_json(frozen)


def test_deep_nesting_within_the_input_bound():
    deep = parse_json("[" * 500 + "]" * 500)
    frozen = freeze(deep, "v")
    assert canonical(frozen) == canonical_json(frozen)


def test_what_is_not_json_raises_as_json_dumps_does():
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical({"a": object()})
    with pytest.raises(ValueError, match="digits"):
        canonical({"n": 10 ** (sys.get_int_max_str_digits() + 1)})


def test_the_fallback_is_canonical_json(monkeypatch):
    monkeypatch.setattr(_canonical.json.encoder, "c_make_encoder", None)
    assert _canonical._make() is canonical_json


@pytest.mark.soak
def test_random_values_agree():
    rng = random.Random(11)
    alphabet = ["a", "é", "\udcff", "\x00", '"', "\\", "\U0001f600", "\u2028", "Z"]

    def value(depth: int) -> object:
        kind = rng.randrange(8 if depth < 6 else 5)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.randrange(-(10**20), 10**20)
        if kind == 2:
            return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-300, 300)
        if kind in (3, 4):
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
        if kind == 5:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        key = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 4)))
        return {key + str(i): value(depth + 1) for i in range(rng.randrange(4))}

    for _ in range(soak_size(2_000, 50_000)):
        frozen = freeze(value(0), "v")
        assert canonical(frozen) == canonical_json(frozen)


def test_the_last_frozen_mapping_is_remembered_and_nothing_that_can_change():
    frozen = freeze({"b": 1, "a": "x"}, "v")
    text = canonical(frozen)
    assert text == canonical_json(frozen)
    assert _canonical.remembered(frozen) == text
    assert canonical(frozen) is text  # from memory
    plain = {"a": 1}
    assert canonical(plain) == '{"a":1}'
    assert _canonical.remembered(plain) is None  # a plain dict may change: never remembered
    assert _canonical.remembered(frozen) == text  # still the last frozen one
    other = freeze({"a": 2}, "v")
    canonical(other)
    assert _canonical.remembered(frozen) is None
    assert _canonical.remembered(None) is None
