"""Tool declarations out: a registry's schemas in each provider's ``tools`` shape.

:mod:`dsh_tools.bridges.wire` is the public import path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._json import dumps, thaw
from .._models import ToolSchema
from ._wire_shared import Json, dispatch


def _declaration(schema: ToolSchema, parameters_key: str) -> Json:
    return {
        "name": schema.name,
        "description": schema.description,
        parameters_key: thaw(schema.parameters),
    }


def _raw_tools(schemas: Sequence[ToolSchema]) -> list[Json]:
    return [_declaration(schema, "parameters") for schema in schemas]


def to_openai_chat_tools(schemas: Sequence[ToolSchema]) -> list[Json]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}`` per tool."""
    return [{"type": "function", "function": _declaration(s, "parameters")} for s in schemas]


def to_openai_responses_tools(schemas: Sequence[ToolSchema]) -> list[Json]:
    """Responses API ``tools``: flat function tools, with ``strict`` turned off.

    The Responses API defaults ``strict`` to true, which demands that every property be
    required and every object closed, and allows no ``oneOf``; our schemas may use all
    three, so a strict declaration would be refused. The registry validates arguments.
    """
    return [
        {"type": "function", **_declaration(schema, "parameters"), "strict": False}
        for schema in schemas
    ]


def to_anthropic_tools(schemas: Sequence[ToolSchema]) -> list[Json]:
    """Anthropic Messages ``tools``: ``{"name", "description", "input_schema"}``."""
    return [_declaration(schema, "input_schema") for schema in schemas]


def to_mcp_tools(schemas: Sequence[ToolSchema]) -> list[Json]:
    """MCP ``tools/list`` entries: ``{"name", "description", "inputSchema"}``."""
    return [_declaration(schema, "inputSchema") for schema in schemas]


def to_gemini_tools(schemas: Sequence[ToolSchema], *, json_schema: bool = False) -> list[Json]:
    """Gemini ``tools``: one ``{"functionDeclarations": [...]}`` entry (none for no tools).

    By default each schema is translated into Gemini's OpenAPI-subset ``parameters``
    dialect (rules in ``docs/wire.md``); a tool without properties gets no ``parameters``
    at all, because Gemini refuses an ``OBJECT`` with empty ``properties``. With
    ``json_schema=True`` the schema is sent untranslated as ``parametersJsonSchema``,
    which newer Gemini models accept as full JSON Schema.
    """
    if not schemas:
        return []
    found: list[Json] = []
    for schema in schemas:
        declaration: Json = {"name": schema.name, "description": schema.description}
        if json_schema:
            declaration["parametersJsonSchema"] = thaw(schema.parameters)
        elif schema.parameters.get("properties"):
            declaration["parameters"] = _gemini_schema(schema.parameters)
        found.append(declaration)
    return [{"functionDeclarations": found}]


_GEMINI_ANNOTATIONS = ("title", "description", "default")


def _gemini_schema(node: Mapping[str, Any]) -> Json:
    """One node of our schema subset in Gemini's dialect.

    Gemini's ``Schema`` is an OpenAPI 3.0 subset that refuses unknown keywords, so:
    ``type`` is upper-cased (``STRING``); ``oneOf`` becomes ``anyOf`` (the registry still
    enforces exactly-one when the call runs) and a ``null`` branch becomes ``nullable`` on
    the others; ``const`` and all-string ``enum`` become a string ``enum``, while
    non-string literals, which Gemini cannot declare, are spelled out in the description;
    ``additionalProperties`` and ``examples`` are dropped.
    """
    if "oneOf" in node:
        out = _gemini_union(node["oneOf"])
    else:
        out = {}
        if "type" in node:
            out["type"] = str(node["type"]).upper()
        if "properties" in node:
            out["properties"] = {
                key: _gemini_schema(child) for key, child in node["properties"].items()
            }
        if "required" in node:
            out["required"] = list(node["required"])
        if "items" in node:
            out["items"] = _gemini_schema(node["items"])
    out.update({key: thaw(node[key]) for key in _GEMINI_ANNOTATIONS if key in node})
    allowed = [node["const"]] if "const" in node else node.get("enum")
    if allowed is not None:
        if all(isinstance(value, str) for value in allowed):
            out["format"] = "enum"
            out["enum"] = list(allowed)
        else:
            note = f"Allowed values: {dumps(allowed)}."
            out["description"] = f"{out['description']} {note}" if "description" in out else note
    return out


def _gemini_union(branches: Sequence[Mapping[str, Any]]) -> Json:
    kept = [_gemini_schema(branch) for branch in branches if branch.get("type") != "null"]
    out = kept[0] if len(kept) == 1 else {"anyOf": kept}
    if len(kept) < len(branches):
        for branch in kept:
            branch["nullable"] = True
    return out


DECLARATION_FORMATS = ("raw", "openai", "openai-responses", "anthropic", "gemini", "mcp")
"""The ``format`` names :func:`declarations` accepts."""

_DECLARATIONS: dict[str, Callable[[Sequence[ToolSchema]], list[Json]]] = {
    "raw": _raw_tools,
    "openai": to_openai_chat_tools,
    "openai-responses": to_openai_responses_tools,
    "anthropic": to_anthropic_tools,
    "gemini": to_gemini_tools,
    "mcp": to_mcp_tools,
}


def declarations(schemas: Sequence[ToolSchema], format: str) -> list[Json]:
    """Tool declarations for ``format`` (one of :data:`DECLARATION_FORMATS`).

    ``raw`` is the registry's own ``{"name", "description", "parameters"}`` shape.
    """
    return dispatch(_DECLARATIONS, "declarations", format)(schemas)
