"""Content blocks: typed authoring records, the frozen wire form, and context messages."""

from __future__ import annotations

import base64

import pytest

from dsh_tools import ContextMessage, ImageContent, TextContent
from dsh_tools._content import content_blocks, content_text
from dsh_tools._json import FrozenList
from dsh_tools.errors import JsonValueError

PNG = base64.b64encode(b"\x89PNG fake").decode()


def test_typed_blocks_use_the_mcp_wire_form() -> None:
    assert TextContent("hi").to_json() == {"type": "text", "text": "hi"}
    assert ImageContent(PNG, "image/png").to_json() == {
        "type": "image",
        "data": PNG,
        "mimeType": "image/png",
    }


def test_image_data_must_be_base64() -> None:
    with pytest.raises(ValueError, match="base64"):
        ImageContent("not base64!", "image/png")


def test_content_blocks_accepts_text_typed_blocks_and_block_dicts() -> None:
    blocks = content_blocks(["a", TextContent("b"), {"type": "reasoning", "text": "r"}])
    assert isinstance(blocks, FrozenList)
    assert blocks == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
        {"type": "reasoning", "text": "r"},
    ]
    assert content_blocks("plain") == [{"type": "text", "text": "plain"}]
    assert content_blocks(blocks) is blocks


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"type": "text"}, "must be a string or a list of content blocks"),
        (42, "must be a string or a list of content blocks"),
        ([{"text": "no type"}], 'content[0]" must have a string "type"'),
        ([{"type": "x", "bad": {1, 2}}], "content[0].bad"),
        ([3.5], 'content[0]" is of type float'),
    ],
)
def test_malformed_content_names_the_block(content: object, message: str) -> None:
    with pytest.raises(JsonValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        content_blocks(content)  # type: ignore[arg-type]


def test_content_text_joins_text_and_marks_other_blocks() -> None:
    blocks = content_blocks(["one", {"type": "image", "data": PNG, "mimeType": "x"}, "two"])
    assert content_text(blocks) == "one\n[image content]\ntwo"


def test_context_messages_are_user_role_blocks_with_their_source() -> None:
    message = ContextMessage("ctx-1", "remember this", source="read_file")
    assert message.role == "user"
    assert message.to_json() == {
        "id": "ctx-1",
        "role": "user",
        "content": [{"type": "text", "text": "remember this"}],
        "source": "read_file",
    }
    assert "source" not in ContextMessage("ctx-2", "x").to_json()
