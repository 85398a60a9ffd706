"""Provider messages in, provider results out: `run_tool_calls`.

In: Anthropic ``tool_use`` content blocks (or the assistant message holding them); OpenAI Chat
Completions ``tool_calls`` (or the assistant message), whose ``function.arguments`` is a JSON
string; OpenAI Responses ``function_call`` items (or the whole ``output`` list). Other blocks and
items (text, reasoning) are skipped. Out, one per call and in the same order: ``tool_result``
blocks with ``is_error``; ``{"role": "tool", ...}`` messages; ``function_call_output`` items:
plain dicts, ready to send back.

Arguments that are not JSON are handed to the pipeline as the string they are, so policy and
audit see what the model sent, and the call ends ``INVALID_ARGS`` with a message the model can
act on: never an exception. A call shaped so that no answer can be addressed to it (no id) is
the caller's mistake: `ValueError`, naming the item and the key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

from .._model._json import JsonInputError, parse_json
from .._model._signal import AbortSignal
from .._model._values import ImageBlock, TextBlock, ToolExecutionInput, ToolExecutionResult

__all__ = ["Format", "ProviderCall", "arguments_of", "parse_calls", "render", "run_tool_calls"]

Format = Literal["anthropic", "openai"]
Shape = Literal["anthropic", "chat", "responses"]


class ExecuteBatch(Protocol):
    """`ToolRegistry.execute_batch`, as far as a step of provider calls needs it."""

    def __call__(
        self, inputs: Sequence[ToolExecutionInput], *, signal: AbortSignal | None = ...
    ) -> Awaitable[list[ToolExecutionResult]]: ...


@attrs.frozen
class ProviderCall:
    """One tool call as a provider sent it: where to answer it, and what to run."""

    shape: Shape
    call_id: str
    name: str
    arguments: Any


def arguments_of(value: Any) -> Any:
    """A model's arguments: a JSON string parsed (strictly); anything else, or a string that is
    not JSON, unchanged (validation then says exactly what is wrong with it)."""
    if isinstance(value, str | bytes):
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        try:
            parsed = parse_json(text)
        except JsonInputError:
            return text
        return text if isinstance(parsed, str) else parsed  # '"x"' would read as JSON text again
    return value


def _plain(item: Any) -> Any:
    dump = getattr(item, "model_dump", None)  # a provider SDK's pydantic object
    return dump(mode="json", exclude_none=True) if callable(dump) else item


def _items(calls: Any, format: Format) -> list[Any]:
    calls = _plain(calls)
    if isinstance(calls, Mapping):  # a whole assistant message
        key = "content" if format == "anthropic" else "tool_calls"
        calls = calls.get(key) or []
    if isinstance(calls, str | bytes) or not isinstance(calls, Iterable):
        raise TypeError(f"calls must be a list of {format} tool calls, not {type(calls).__name__}")
    return [_plain(item) for item in calls]


def parse_calls(calls: Any, format: Format) -> list[ProviderCall]:
    """The tool calls among *calls* (see the module docstring), in order."""
    if format not in ("anthropic", "openai"):
        raise ValueError(f'format must be "anthropic" or "openai", not {format!r}')
    out = []
    for index, item in enumerate(_items(calls, format)):
        if not isinstance(item, Mapping):
            raise TypeError(f"tool call {index} must be an object, not {type(item).__name__}")
        kind = item.get("type")
        if format == "anthropic" and kind == "tool_use":
            out.append(_call(index, "anthropic", item, "id", item.get("name"), item.get("input")))
        elif format == "openai" and kind == "function_call":
            name, args = item.get("name"), item.get("arguments")
            out.append(_call(index, "responses", item, "call_id", name, args))
        elif format == "openai" and "function" in item and kind in (None, "function"):
            function = item["function"]
            if not isinstance(function, Mapping):
                raise TypeError(f'tool call {index}: "function" must be an object')
            name, args = function.get("name"), function.get("arguments")
            out.append(_call(index, "chat", item, "id", name, args))
    return out


def _call(index: int, shape: Shape, item: Mapping[str, Any], key: str, name: Any, args: Any) -> ProviderCall:  # fmt: skip
    call_id = item.get(key)
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(
            f'tool call {index} ({shape}) has no "{key}": its result could not be sent back'
        )
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool call {index} ({call_id}) has no tool name")
    return ProviderCall(shape, call_id, name, arguments_of(args))


def render(call: ProviderCall, result: ToolExecutionResult) -> dict[str, Any]:
    """*result* in the shape *call* came in."""
    blocks = [*result.content, *(b for ctx in result.additional_contexts for b in ctx.content)]
    if call.shape == "anthropic":
        content = [_anthropic_block(b) for b in blocks if not _empty(b)]
        out = {"type": "tool_result", "tool_use_id": call.call_id, "is_error": result.is_error}
        return {**out, "content": content} if content else out
    text = "\n\n".join(_text(b) for b in blocks if not _empty(b))
    if call.shape == "chat":
        return {"role": "tool", "tool_call_id": call.call_id, "content": text}
    return {"type": "function_call_output", "call_id": call.call_id, "output": text}


def _empty(block: TextBlock | ImageBlock) -> bool:
    return isinstance(block, TextBlock) and not block.text


def _anthropic_block(block: TextBlock | ImageBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
    return {"type": "image", "source": source}


def _text(block: TextBlock | ImageBlock) -> str:
    if isinstance(block, TextBlock):
        return block.text
    return f"[an image ({block.mime_type}) the tool returned is not shown: this format has no images in tool results]"


async def run_tool_calls(
    execute_batch: ExecuteBatch, calls: Any, *, format: Format, signal: AbortSignal | None = None
) -> list[dict[str, Any]]:
    """Run *calls* as one model step (*execute_batch*: `ToolRegistry.execute_batch`); their
    results, in order."""
    parsed = parse_calls(calls, format)
    inputs = [
        ToolExecutionInput(call_id=c.call_id, name=c.name, arguments=c.arguments) for c in parsed
    ]
    results = await execute_batch(inputs, signal=signal)
    return [render(call, result) for call, result in zip(parsed, results, strict=True)]
