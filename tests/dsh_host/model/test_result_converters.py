"""`ToolExecutionResult`'s converters take the common values (a ``str`` content, no contexts,
no meta) the short way, with the same outcome as the long one."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from dsh_host import FrozenDict, HookContext, TextBlock, ToolExecutionResult


def _calls(make: Any) -> int:
    seen = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen[0] += 1

    make()
    sys.setprofile(profile)
    try:
        make()
    finally:
        sys.setprofile(None)
    return seen[0]


def test_a_text_result_is_built_with_few_python_calls():
    # __init__, to_content, TextBlock._of, _to_contexts, _freeze_meta (and setprofile's own
    # return): was 10, through TextBlock's validator, a generator and freeze(None)
    assert _calls(lambda: ToolExecutionResult(content="hello")) <= 6


class _Str(str):
    pass


@pytest.mark.parametrize(
    ("content", "contexts", "meta"),
    [
        ("hello", (), None),
        (_Str("sub"), ["note"], {"a": [1]}),
        ([TextBlock("a"), "b"], (HookContext("c"),), {}),
        ("", [], 0),
    ],
)
def test_the_converters_give_what_they_gave(content, contexts, meta):
    made = ToolExecutionResult(content=content, additional_contexts=contexts, meta=meta)
    assert all(type(block) is TextBlock for block in made.content)
    assert type(made.additional_contexts) is tuple
    assert all(type(c) is HookContext for c in made.additional_contexts)
    if meta is None:
        assert made.meta is None
    elif isinstance(meta, dict):
        assert type(made.meta) is FrozenDict
        assert made.meta == {k: tuple(v) if isinstance(v, list) else v for k, v in meta.items()}
    else:
        assert made.meta == meta
    texts = [block.text for block in made.content]
    assert texts == ([content] if isinstance(content, str) else ["a", "b"])
    assert type(texts[0]) is type(content if isinstance(content, str) else "a")


def test_bad_content_and_meta_are_still_refused():
    with pytest.raises(TypeError):
        ToolExecutionResult(content=3)
    with pytest.raises(ValueError, match="meta"):
        ToolExecutionResult(content="x", meta={"n": float("nan")})
