"""``deny_read`` is looked up by a path's ancestors (a few dict lookups per file a tool opens),
and answers exactly what testing every entry in order answers; the shortcuts for paths that are
already normal answer what the general normalisation does."""

from __future__ import annotations

import posixpath
import types
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dsh_plugins_builtin._rules._grammar import normalise
from dsh_plugins_builtin._sandbox._judge import _home_text, denied_by
from dsh_plugins_builtin._sandbox._open import _normal
from dsh_plugins_builtin._sandbox._paths import under, within

_PART = st.sampled_from(["a", "b", ".ssh", "x y", "é", "a.b", "..", ".", "", "root", "home"])
_PATH = st.lists(_PART, max_size=5).map(lambda parts: "/" + "/".join(parts))


def _policy(deny: list[str]) -> Any:
    return types.SimpleNamespace(deny_read=tuple(Path(p) for p in deny), deny_patterns=())


def _reference(key: str, deny: list[str]) -> str | None:
    """What the entry-by-entry test answered: the first entry *key* is within."""
    for text in (str(Path(p)) for p in deny):
        if within(key, text):
            return text
    return None


@given(key=_PATH, deny=st.lists(_PATH, max_size=6))
def test_the_ancestor_lookup_answers_as_every_entry_in_order_would(key: str, deny: list[str]):
    expected = _reference(key, deny)
    assert denied_by(key, _policy(deny)) == (None if expected is None else _home_text(expected))


def test_the_first_entry_in_order_is_named_when_nested_entries_both_hold():
    assert denied_by("/srv/a/b/c", _policy(["/srv/a/b", "/srv/a"])) == "/srv/a/b"
    assert denied_by("/srv/a/b/c", _policy(["/srv/a", "/srv/a/b"])) == "/srv/a"


def test_a_root_entry_denies_everything_and_a_sibling_prefix_nothing():
    assert denied_by("/etc/passwd", _policy(["/"])) == "/"
    assert denied_by("/srv/ab", _policy(["/srv/a"])) is None
    assert denied_by("/srv/a", _policy(["/srv/a"])) == "/srv/a"


class _CountedPath(type(Path())):  # type: ignore[misc]
    hashed = 0

    def __hash__(self) -> int:
        _CountedPath.hashed += 1
        return super().__hash__()


def test_the_entries_are_not_hashed_again_for_each_file_opened():
    """The table of a policy's entries is found by the tuple's identity: a tuple of 30 paths
    is not hashed entry by entry (``Path.__hash__``, in Python) on every file a tool opens."""
    policy = types.SimpleNamespace(
        deny_read=tuple(_CountedPath(f"/srv/d{i}") for i in range(30)), deny_patterns=()
    )
    assert denied_by("/srv/d7/x", policy) == "/srv/d7"
    _CountedPath.hashed = 0
    for _ in range(3):
        assert denied_by("/srv/d7/x", policy) == "/srv/d7"
        assert denied_by("/srv/other", policy) is None
    assert _CountedPath.hashed == 0


_SPELLED = st.lists(st.sampled_from(["a", ".", "..", "", ".git", "x.y", "..z", "é"]), max_size=6)


@given(parts=_SPELLED, absolute=st.booleans())
def test_a_path_that_is_already_normal_is_kept_as_the_split_would_make_it(parts, absolute):
    """The read check's lexical key: the shortcut for a path with no empty, ``.`` or ``..``
    component answers exactly what splitting and joining it answers."""
    joined = ("/" if absolute else "") + "/".join(parts)
    kept = [part for part in joined.split("/") if part and part != "."]
    expected = None if ".." in kept else "/" + "/".join(kept)
    assert _normal(joined) == expected


@given(parts=_SPELLED, absolute=st.booleans())
def test_a_rule_path_that_is_already_normal_is_kept_as_normpath_would_make_it(parts, absolute):
    """The rules' `normalise`: its shortcut for an absolute path with no empty, ``.`` or ``..``
    component answers exactly what ``posixpath.normpath`` (leading ``//`` made ``/``) does."""
    path = ("/" if absolute else "") + "/".join(parts)
    expected = posixpath.normpath(path)
    if expected.startswith("//"):
        expected = "/" + expected.lstrip("/")
    assert normalise(path) == expected


_ANY_PATH = st.tuples(st.sampled_from(["/", "//", "", "///"]), st.lists(_PART, max_size=4)).map(
    lambda lead_parts: Path(lead_parts[0] + "/".join(lead_parts[1])),
)


@given(path=_ANY_PATH, root=_ANY_PATH)
def test_under_by_spelling_answers_as_the_parents_of_the_path_do(path: Path, root: Path):
    # `under` compares strings (the bwrap command line asks it dozens of times per call); it
    # answers what the definition by ``path.parents`` answers, "//", "." and ".." included.
    expected = root == Path("/") or path == root or root in path.parents
    assert under(path, root) is expected
