"""A mounted tool's result as dsh content blocks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh_host import ImageBlock, TextBlock

if TYPE_CHECKING:
    import mcp_types as types

__all__ = ["content_blocks"]


def content_blocks(result: types.CallToolResult, server: str) -> list[TextBlock | ImageBlock]:
    import mcp_types as types

    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            blocks.append(TextBlock(item.text))
        elif isinstance(item, types.ImageContent):
            try:
                blocks.append(ImageBlock(data=item.data, mime_type=item.mime_type))
            except ValueError as exc:  # no image a provider takes: said, not sent
                why = str(exc).removeprefix("ImageBlock: ")
                blocks.append(TextBlock(f"[an image from {server} was left out: {why}]"))
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            text = getattr(resource, "text", None)
            blocks.append(TextBlock(text if text is not None else f"[resource {resource.uri}]"))
        elif isinstance(item, types.ResourceLink):
            blocks.append(TextBlock(f"[resource link {item.uri}]"))
        else:
            blocks.append(TextBlock(f"[{getattr(item, 'type', 'unknown')} content from {server}]"))
    return blocks
