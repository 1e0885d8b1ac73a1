"""Content blocks a model sees, and the context messages a tool may defer to the next turn.

Results carry content as frozen JSON blocks (``{"type": "text", "text": ...}``), the
shape MCP uses, so any block type a provider invents passes through unchanged. The typed
records here are how authors write the common ones; :func:`content_blocks` turns what a
body or policy returned into the frozen wire form.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

import attrs

from ._json import (
    FrozenDict,
    FrozenList,
    JsonValue,
    snapshot,
    trusted_frozen_dict,
    trusted_frozen_list,
)
from ._tuples import tuple_of
from .errors import JsonValueError

__all__ = [
    "ContentLike",
    "ContextMessage",
    "ImageContent",
    "TextContent",
    "content_blocks",
    "content_text",
]


@attrs.frozen
class TextContent:
    """A block of text; wire form ``{"type": "text", "text": ...}``."""

    text: str = attrs.field(validator=attrs.validators.instance_of(str))

    def to_json(self) -> FrozenDict:
        return _text_block(self.text)


def _check_base64(instance: ImageContent, attribute: attrs.Attribute[str], value: str) -> None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"ImageContent.data must be base64 text, got {value[:20]!r}") from None


@attrs.frozen
class ImageContent:
    """An image as base64 text plus its MIME type; wire form uses MCP's ``mimeType``."""

    data: str = attrs.field(validator=[attrs.validators.instance_of(str), _check_base64])
    mime_type: str = attrs.field(validator=attrs.validators.instance_of(str))

    def to_json(self) -> FrozenDict:
        return _block({"type": "image", "data": self.data, "mimeType": self.mime_type})


ContentLike = TextContent | ImageContent | str | dict[str, Any] | FrozenDict
"""What authors may put where content is expected: typed blocks, raw block dicts, or text."""


def _text_block(text: str, label: str = "content") -> FrozenDict:
    return trusted_frozen_dict({"type": "text", "text": _text(text, label)})


def text_blocks(text: str) -> FrozenList:
    """The content of one text block, built without checks: most results carry just
    this, so it is built in place, as :func:`~dsh_tools._json.trusted_frozen_dict` and
    ``trusted_frozen_list`` would (a test holds the two to the same result). ``text``
    must be a plain, valid-Unicode ``str`` (not a subclass)."""
    block = _new_dict(FrozenDict)
    _fill_dict(block, type="text", text=text)
    return _new_tuple(FrozenList, (block,))


_new_dict, _fill_dict, _new_tuple = dict.__new__, dict.update, tuple.__new__


def _is_frozen_blocks(content: object) -> bool:
    if type(content) is not FrozenList:
        return False
    for block in content:
        if type(block) is not FrozenDict or type(dict.get(block, "type")) is not str:
            return False
    return True


def _text(text: str, label: str) -> str:
    """``text`` as a plain ``str``; JsonValueError if it is not valid Unicode."""
    checked = snapshot(str.__str__(text), label)
    assert type(checked) is str
    return checked


def _block(data: dict[str, Any]) -> FrozenDict:
    frozen = snapshot(data, "content")
    assert isinstance(frozen, FrozenDict)
    return frozen


def content_blocks(
    content: str | Iterable[ContentLike] | FrozenList, label: str = "content"
) -> FrozenList:
    """Frozen wire blocks from text, typed blocks or block dicts.

    A bare string is one text block. Dicts must be JSON objects with a string ``type``;
    their other keys are not checked, so provider-specific blocks pass through.
    """
    if type(content) is str and content.isascii():
        return text_blocks(content)
    if isinstance(content, str):
        return text_blocks(_text(content, label))
    if _is_frozen_blocks(content):
        return content  # type: ignore[return-value]
    if isinstance(content, (dict, bytes)) or not isinstance(content, Iterable):
        raise JsonValueError(label, "must be a string or a list of content blocks")
    blocks: list[JsonValue] = []
    for index, item in enumerate(content):
        if isinstance(item, (TextContent, ImageContent)):
            blocks.append(item.to_json())
        elif isinstance(item, str):
            blocks.append(_text_block(item, f"{label}[{index}]"))
        elif isinstance(item, dict):
            frozen = snapshot(item, f"{label}[{index}]")
            assert isinstance(frozen, FrozenDict)
            if not isinstance(frozen.get("type"), str):
                raise JsonValueError(f"{label}[{index}]", 'must have a string "type"')
            blocks.append(frozen)
        else:
            raise JsonValueError(
                f"{label}[{index}]",
                f"is of type {type(item).__qualname__}; expected a content block or text",
            )
    return trusted_frozen_list(blocks)


def content_text(blocks: Iterable[Any]) -> str:
    """The text of text blocks joined by newlines; other blocks as ``[<type> content]``."""
    parts = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type')} content]")
    return "\n".join(parts)


@attrs.frozen
class ContextMessage:
    """A user-role message a tool defers into the next model turn (``defer_context``).

    ``source`` says who added it (a tool or plugin name), so hosts can label or filter it.
    """

    id: str = attrs.field(validator=attrs.validators.instance_of(str))
    content: FrozenList = attrs.field(converter=content_blocks)
    source: str | None = None
    role: str = attrs.field(default="user", init=False)

    def to_json(self) -> FrozenDict:
        data: dict[str, Any] = {"id": self.id, "role": self.role, "content": self.content}
        if self.source is not None:
            data["source"] = self.source
        return _block(data)


def context_messages(value: Iterable[ContextMessage]) -> tuple[ContextMessage, ...]:
    """The ``additional_contexts`` of a result or decision as a tuple; anything that is
    not a :class:`ContextMessage` raises ``TypeError`` naming its index."""
    if type(value) is tuple and not value:  # the common case: no deferred context
        return ()
    return tuple_of(ContextMessage, value, "additional_contexts", TypeError)
