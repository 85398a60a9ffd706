"""The final check at stage L: a result built by a body or a plugin is verified field by field."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_host import (
    Accept,
    Block,
    HookContext,
    ImageBlock,
    TextBlock,
    ToolExecutionResult,
    ToolFailure,
    define_tool,
    hookimpl,
)


def _raw(**fields: Any) -> ToolExecutionResult:
    """A result with fields set behind the converters' backs, as careless plugin code might."""
    result = ToolExecutionResult(content="ok")
    for name, value in fields.items():
        object.__setattr__(result, name, value)
    return result


BAD_RESULTS = {
    "failure holding an object": lambda: ToolExecutionResult(
        content="x",
        is_error=True,
        error=ToolFailure(object()),  # type: ignore[arg-type]
    ),
    "context source a set": lambda: ToolExecutionResult(
        content="x",
        additional_contexts=(HookContext("c", {"a"}),),  # type: ignore[arg-type]
    ),
    "is_error a string": lambda: ToolExecutionResult(
        content="x",
        is_error="yes",
        error=ToolFailure("m"),  # type: ignore[arg-type]
    ),
    "success carrying an error": lambda: ToolExecutionResult(content="x", error=ToolFailure("m")),
    "error without a failure": lambda: ToolExecutionResult(content="x", is_error=True),
    "meta on an error": lambda: ToolExecutionResult(
        content="x", is_error=True, error=ToolFailure("m"), meta={"a": 1}
    ),
    "meta not JSON": lambda: _raw(meta={1, 2}),
    "content not blocks": lambda: _raw(content=("text",)),
    "text block holding bytes": lambda: _raw(content=(_bytes_block(),)),
    "decided_by from the body": lambda: ToolExecutionResult(content="x", decided_by="nobody"),
    "decision_detail not a str": lambda: _raw(decision_detail=3),
    "image of a type no provider takes": lambda: _raw(content=(_image("application/pdf"),)),
    "image data not base64": lambda: _raw(content=(_image("image/png", "not base64!"),)),
}


def _image(mime_type: str, data: str = "aGk=") -> ImageBlock:
    """An image block whose fields were set around its validators."""
    block = ImageBlock("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", "image/png")
    object.__setattr__(block, "mime_type", mime_type)
    object.__setattr__(block, "data", data)
    return block


def _bytes_block() -> TextBlock:
    block = TextBlock("x")
    object.__setattr__(block, "text", b"x")
    return block


def _tool(make: Any) -> Any:
    async def body(args: Any) -> ToolExecutionResult:
        return make()  # type: ignore[no-any-return]

    return define_tool(name="t", description="", parameters={}, execute=body)


@pytest.mark.parametrize("case", sorted(BAD_RESULTS))
async def test_a_body_result_that_is_not_sound_becomes_invalid_tool_output(make_host, case):
    seen: list[ToolExecutionResult] = []

    class Observer:
        name = "observer"

        @hookimpl
        def dsh_tool_result(self, execution, result):
            seen.append(result)

    result = await make_host(Observer(), tools=[_tool(BAD_RESULTS[case])]).call("t", {})
    assert result.code == "INVALID_TOOL_OUTPUT", case
    assert 'tool "t"' in result.error.message
    assert result.decided_by is None
    assert seen == [result]
    result.to_json()  # JSON-safe throughout


@pytest.mark.parametrize("case", sorted(BAD_RESULTS))
async def test_a_wrapper_result_that_is_not_sound_names_the_plugin(make_host, case):
    class Wrapper:
        name = "wrapper"

        @hookimpl
        async def dsh_tool_execute(self, execution, call_next):
            return BAD_RESULTS[case]()

    async def body(args: Any) -> str:
        return "fine"

    tool = define_tool(name="t", description="", parameters={}, execute=body)
    result = await make_host(Wrapper(), tools=[tool]).call("t", {})
    assert (result.code, result.decided_by) == ("INVALID_TOOL_OUTPUT", "wrapper")
    assert "plugin 'wrapper' (dsh_tool_execute)" in result.error.message


async def test_a_deferred_context_with_a_bad_source_is_caught(make_host):
    async def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(HookContext("note", {"set"}))  # type: ignore[arg-type]
        return "fine"

    tool = define_tool(name="t", description="", parameters={}, execute=body)
    result = await make_host(tools=[tool]).call("t", {})
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert "defer_context" in result.error.message


async def test_a_post_execute_context_with_a_bad_source_names_the_plugin(make_host):
    class Post:
        name = "post"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            return Accept(additional_contexts=[HookContext("c", {"a"})])  # type: ignore[arg-type]

    async def body(args: Any) -> str:
        return "fine"

    tool = define_tool(name="t", description="", parameters={}, execute=body)
    result = await make_host(Post(), tools=[tool]).call("t", {})
    assert (result.code, result.decided_by) == ("INVALID_TOOL_OUTPUT", "post")
    assert "additional_contexts[0].source" in result.error.message


@pytest.mark.parametrize("decision", ["accept", "block"])
async def test_post_execute_content_set_around_its_validators_is_caught(make_host, decision):
    # Only a body's and a wrapper's results were checked: an image a post-execute plugin forged
    # (not base64, a PDF) reached the caller through Accept(content=...) or Block(feedback=...).
    class Post:
        name = "post"

        @hookimpl
        def dsh_tool_post_execute(self, execution, result):
            forged = [_image("application/pdf", "not base64 !!!")]
            return Accept(content=forged) if decision == "accept" else Block(feedback=forged)

    async def body(args: Any) -> str:
        return "fine"

    tool = define_tool(name="t", description="", parameters={}, execute=body)
    result = await make_host(Post(), tools=[tool]).call("t", {})
    assert (result.code, result.decided_by) == ("INVALID_TOOL_OUTPUT", "post")
    assert "mime_type must be one of" in result.error.message


async def test_sound_results_from_bodies_and_wrappers_pass_unchanged(make_host):
    good = ToolExecutionResult(
        content="x", additional_contexts=(HookContext("c", "me"),), meta={"k": [1, "\ud800"]}
    )

    async def body(args: Any) -> ToolExecutionResult:
        return good

    class Sandbox:
        name = "sandbox"

    tool = define_tool(name="t", description="", parameters={}, execute=body)
    assert await make_host(Sandbox(), tools=[tool]).call("t", {}) is good


@pytest.mark.parametrize(
    ("data", "mime_type"),
    [("aGk=", "application/pdf"), ("aGk=", "image/svg+xml"), ("not base64!", "image/png"),
     ("aGk", "image/png"), ("aG\nk=", "image/png"), ("aGk=", "image/png"),
     ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAAAAAAAA", "image/jpeg"), ("AAAAAAAAAAAAAAAA", "image/png"),
     ("iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "image/png")],  # a signature, then zeros
)  # fmt: skip
def test_an_image_no_provider_takes_is_refused_when_made(data: str, mime_type: str) -> None:
    # A tool's image with bad base64 crashed a pydantic-ai run; a PDF went out as an "image";
    # bytes that are not of the type they claim (zeros as a PNG) make a provider refuse it.
    with pytest.raises(ValueError, match="ImageBlock"):
        ImageBlock(data, mime_type)
    assert ImageBlock("UklGRgAAAABXRUJQVlA4IAAAAAAAAAAA", "image/webp").mime_type == "image/webp"
