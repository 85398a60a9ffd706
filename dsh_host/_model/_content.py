"""What a call gives back: content blocks, contexts for the model, failures and results."""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from ._json import freeze, thaw

__all__ = [
    "IMAGE_TYPES",
    "ContentBlock",
    "HookContext",
    "ImageBlock",
    "TextBlock",
    "ToolExecutionResult",
    "ToolFailure",
    "content_text",
    "image_problem",
    "to_content",
]

# -- content -------------------------------------------------------------------------------------


@final
@attrs.frozen
class TextBlock:
    """Plain text for the model."""

    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    type: Literal["text"] = attrs.field(default="text", init=False)

    @classmethod
    def _of(cls, text: str) -> TextBlock:
        """A block of *text*, known to be a ``str``: no validator (the hot path)."""
        self = _new(cls)
        _set_text(self, text)
        _set_type(self, "text")
        return self

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


_new = object.__new__
_set_text = TextBlock.__dict__["text"].__set__
_set_type = TextBlock.__dict__["type"].__set__


IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types model providers take as image blocks (anything else they refuse, or read
as a document: a PDF sent as an "image")."""


def image_problem(data: object, mime_type: object) -> str | None:
    """What makes *data* and *mime_type* no image a provider takes, or ``None``."""
    if not isinstance(mime_type, str) or mime_type not in IMAGE_TYPES:
        return f"mime_type must be one of {', '.join(sorted(IMAGE_TYPES))}, not {mime_type!r}"
    if not isinstance(data, str):
        return f"data must be a str of base64, not {type(data).__name__}"
    try:
        head = binascii.a2b_base64(data[:64], strict_mode=True)  # the first 48 bytes
        binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        return f"data is not strict base64 ({exc})"
    if _HEADERS[mime_type].match(head) is None:
        return f"data is not a {mime_type.removeprefix('image/')} image (its header says not)"
    return None


_HEADERS: Final = {
    "image/png": re.compile(rb"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR.{13}", re.DOTALL),
    "image/jpeg": re.compile(rb"\xff\xd8\xff[\xc0-\xfe]..", re.DOTALL),
    "image/gif": re.compile(rb"GIF8[79]a.{7}", re.DOTALL),
    "image/webp": re.compile(rb"RIFF.{4}WEBPVP8[ LX].{8}", re.DOTALL),
}
"""How each type's files begin: PNG's signature and its IHDR chunk, JPEG's start of image
and a first marker, GIF's signature and screen descriptor, WebP's RIFF header and first
chunk (a body of zeros behind a signature alone is no image)."""


def _image(instance: ImageBlock, attribute: attrs.Attribute[Any], value: str) -> None:
    problem = image_problem(instance.data, value)
    if problem is not None:
        raise ValueError(f"ImageBlock: {problem}")


@final
@attrs.frozen
class ImageBlock:
    """An image for the model: strict base64 ``data`` of a ``mime_type`` providers take
    (`IMAGE_TYPES`: ``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp``).

    Raises:
        ValueError: Another type, or data that is not strict base64 (a provider refuses it,
            and a refused block would stay in the conversation).
    """

    data: str = attrs.field(validator=attrs.validators.instance_of(str))
    mime_type: str = attrs.field(validator=[attrs.validators.instance_of(str), _image])
    type: Literal["image"] = attrs.field(default="image", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "image", "data": self.data, "mime_type": self.mime_type}


ContentBlock: TypeAlias = TextBlock | ImageBlock


def to_content(value: Any) -> tuple[ContentBlock, ...]:
    """Normalise ``str``, a block, or an iterable of those into a tuple of blocks."""
    if type(value) is str:  # the common case: no validator to run
        return (TextBlock._of(value),)
    if isinstance(value, str):
        return (TextBlock(value),)
    if isinstance(value, TextBlock | ImageBlock):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, bytes | dict):
        out: list[ContentBlock] = []
        for item in value:
            if isinstance(item, str):
                out.append(TextBlock(item))
            elif isinstance(item, TextBlock | ImageBlock):
                out.append(item)
            else:
                raise TypeError(
                    f"content items must be str, TextBlock or ImageBlock, not {type(item).__name__}"
                )
        return tuple(out)
    raise TypeError(f"content must be str, a content block or a list of them, not {type(value)!r}")


def content_text(content: Iterable[ContentBlock]) -> str:
    """Text blocks joined by newlines; other blocks as ``[<type> content]``."""
    return "\n".join(b.text if isinstance(b, TextBlock) else f"[{b.type} content]" for b in content)


@final
@attrs.frozen
class HookContext:
    """Context for the model's next turn, kept apart from the tool result; ``source`` is a plugin name."""

    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    source: str = ""

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines: ``HookContext("x").text == "x"``."""
        return content_text(self.content)

    def to_json(self) -> dict[str, Any]:
        return {"content": [b.to_json() for b in self.content], "source": self.source}


def _to_contexts(value: Iterable[HookContext | str]) -> tuple[HookContext, ...]:
    if type(value) is tuple and not value:  # the default: nothing to convert
        return ()
    return tuple(c if isinstance(c, HookContext) else HookContext(c) for c in value)


# -- results -------------------------------------------------------------------------------------


@final
@attrs.frozen
class ToolFailure:
    """Why a call failed: ``message`` (no ``Error:`` prefix), ``code`` and error class ``name``."""

    message: str
    code: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code, "name": self.name}


def _freeze_meta(value: Any) -> Any:
    return None if value is None else freeze(value, "meta")


@final
@attrs.frozen(kw_only=True, slots=False)  # a dict class: built on every call, 2x faster to make
class ToolExecutionResult:
    """The outcome of one call, as the model and every observer see it.

    ``content`` is what the model reads; an error's text is ``Error: <message>``. ``decided_by``
    is exactly the registered name of the plugin that denied, asked, blocked or replaced the
    result, or ``None``; ``decision_detail`` says which rule or why (``rule bash(rm:*) in
    dsh.toml``), or is ``None``.
    """

    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    is_error: bool = False
    error: ToolFailure | None = None
    additional_contexts: tuple[HookContext, ...] = attrs.field(default=(), converter=_to_contexts)
    meta: Any = attrs.field(default=None, converter=_freeze_meta)
    decided_by: str | None = None
    decision_detail: str | None = None

    @classmethod
    def _success(cls, content: tuple[ContentBlock, ...]) -> ToolExecutionResult:
        """A success from already-normalised content, skipping the converters (the hot path)."""
        self = _new(cls)
        fields = self.__dict__
        fields["content"] = content
        fields["is_error"] = False
        fields["error"] = None
        fields["additional_contexts"] = ()
        fields["meta"] = None
        fields["decided_by"] = None
        fields["decision_detail"] = None
        return self

    @classmethod
    def _text(cls, text: str) -> ToolExecutionResult:
        """``_success((TextBlock._of(text),))`` in one call: a body's ``str`` (the hot path)."""
        block = _new(TextBlock)
        _set_text(block, text)
        _set_type(block, "text")
        self = _new(cls)
        fields = self.__dict__
        fields["content"] = (block,)
        fields["is_error"] = False
        fields["error"] = None
        fields["additional_contexts"] = ()
        fields["meta"] = None
        fields["decided_by"] = None
        fields["decision_detail"] = None
        return self

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines."""
        return content_text(self.content)

    @property
    def code(self) -> str | None:
        """``error.code``, or ``None`` for a success."""
        return self.error.code if self.error is not None else None

    def to_json(self) -> dict[str, Any]:
        """A plain JSON object (dicts and lists) for logs, wire formats and ``--json`` output."""
        return {
            "content": [b.to_json() for b in self.content],
            "is_error": self.is_error,
            "error": self.error.to_json() if self.error is not None else None,
            "additional_contexts": [c.to_json() for c in self.additional_contexts],
            "meta": thaw(self.meta),
            "decided_by": self.decided_by,
            "decision_detail": self.decision_detail,
        }
