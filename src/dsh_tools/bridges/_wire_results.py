"""Results back: a tool call's result in each provider's shape for the next request.

:mod:`dsh_tools.bridges.wire` is the public import path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._content import content_text
from .._json import FrozenList, thaw
from .._models import ToolExecutionFailure, ToolExecutionResult, ToolExecutionSuccess
from ._wire_shared import Json


def _image(block: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(mime type, base64 data)`` of a well-formed image block, else ``None``."""
    data, mime_type = block.get("data"), block.get("mimeType")
    if block.get("type") == "image" and isinstance(data, str) and isinstance(mime_type, str):
        return mime_type, data
    return None


def _blocks(content: FrozenList) -> list[Mapping[str, Any]]:
    return [block for block in content if isinstance(block, Mapping)]


def to_openai_chat_tool_message(call_id: str, result: ToolExecutionResult) -> Json:
    """A Chat Completions ``tool`` message; its content is text only, so images are named.

    Chat Completions has no error flag: a failure's content already reads ``Error: ...``.
    """
    return {"role": "tool", "tool_call_id": call_id, "content": content_text(result.content)}


def to_openai_responses_output(call_id: str, result: ToolExecutionResult) -> Json:
    """A Responses API ``function_call_output`` input item.

    ``output`` is text when the content is all text; with an image in it, it becomes a
    list of ``input_text`` / ``input_image`` parts (images as ``data:`` URLs).
    """
    blocks = _blocks(result.content)
    output: str | list[Json]
    if all(block.get("type") == "text" for block in blocks):
        output = content_text(blocks)
    else:
        output = []
        for block in blocks:
            image = _image(block)
            if image is None:
                output.append({"type": "input_text", "text": content_text([block])})
            else:
                url = f"data:{image[0]};base64,{image[1]}"
                output.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def to_anthropic_tool_result(call_id: str, result: ToolExecutionResult) -> Json:
    """An Anthropic ``tool_result`` block for the next user message.

    Images become base64 ``image`` blocks; any other block becomes its text. Empty text
    blocks are left out, because Anthropic refuses them.
    """
    content: list[Json] = []
    for block in _blocks(result.content):
        image = _image(block)
        if image is not None:
            source = {"type": "base64", "media_type": image[0], "data": image[1]}
            content.append({"type": "image", "source": source})
        elif text := content_text([block]):
            content.append({"type": "text", "text": text})
    return {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": content,
        "is_error": result.is_error,
    }


def to_gemini_function_response(
    name: str, result: ToolExecutionResult, *, call_id: str | None = None
) -> Json:
    """A Gemini ``functionResponse`` part, using the ``output`` / ``error`` keys Gemini reads.

    Both carry the model-facing content text, never the raw ``value``: the content is what
    post-execute policies (redaction, output limits, blocks) let through to the model.
    A failure puts ``{"code", "message"}`` under ``error``. Pass the call's ``call_id`` when
    Gemini sent one, so the response names the call it answers.
    """
    response: Json
    if isinstance(result, ToolExecutionFailure):
        response = {"error": {"code": result.code, "message": content_text(result.content)}}
    else:
        response = {"output": content_text(result.content)}
    body: Json = {"name": name, "response": response}
    if call_id is not None:
        body["id"] = call_id
    return {"functionResponse": body}


def to_mcp_call_result(result: ToolExecutionResult) -> Json:
    """An MCP ``CallToolResult``: our content blocks already use MCP's shapes.

    ``structuredContent`` is added for a success whose value is a JSON object (MCP allows
    nothing else there). A result whose content a post-execute policy or
    ``finalize_content`` replaced has no value (it is withheld), so it has none.
    """
    out: Json = {"content": thaw(result.content), "isError": result.is_error}
    if isinstance(result, ToolExecutionSuccess) and isinstance(result.value, dict):
        out["structuredContent"] = thaw(result.value)
    return out
