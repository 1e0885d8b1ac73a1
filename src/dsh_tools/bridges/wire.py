"""Provider wire formats as plain JSON: tool declarations out, tool calls in, results back.

A host talks to OpenAI (Chat Completions or Responses), Anthropic, Gemini or an MCP client
with its own HTTP client or SDK. This module only converts between those JSON shapes and
the registry's records, so it imports no provider SDK: it reads the SDKs' response
objects through the ``model_dump`` that every pydantic model has, and everything it
returns is a plain, mutable ``dict``/``list`` tree that ``json.dumps`` (and the SDKs'
request methods) accept. :func:`execute_calls` runs one model turn's calls in between.

A payload that is not a tool call of the expected shape raises :class:`WireFormatError`
naming the provider, the field path and what is wrong, never ``KeyError`` or
``TypeError``. A call whose id is readable but whose arguments are not (JSON text cut
off at the token limit, say) is the model's mistake, not the host's: it becomes a call
whose arguments are :class:`~dsh_tools.UnreadableArguments`, which the pipeline answers
``INVALID_JSON`` (observers and audit logs see it), so one bad call never costs the
others their turn. Arguments that arrive as JSON text are parsed with
:func:`dsh_tools.json.loads` (lossless: ``NaN`` and over-deep nesting are rejected);
arguments that arrive as an object are passed through untouched, because the registry
snapshots and validates them anyway.
"""

from __future__ import annotations

import hashlib
import json as _stdlib_json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..content import content_text
from ..errors import DshToolsError, ErrorCode, JsonValueError
from ..json import FrozenList, dumps, loads, snapshot, thaw
from ..models import (
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolSchema,
    UnreadableArguments,
)

if TYPE_CHECKING:
    from ..registry import ToolRegistry, ToolScope

__all__ = [
    "CALL_FORMATS",
    "DECLARATION_FORMATS",
    "WireFormatError",
    "declarations",
    "execute_calls",
    "execute_calls_sync",
    "parse_anthropic_tool_use",
    "parse_gemini_function_call",
    "parse_openai_chat_tool_calls",
    "parse_openai_responses_function_call",
    "parse_tool_call",
    "to_anthropic_tool_result",
    "to_anthropic_tools",
    "to_gemini_function_response",
    "to_gemini_tools",
    "to_mcp_call_result",
    "to_mcp_tools",
    "to_openai_chat_tool_message",
    "to_openai_chat_tools",
    "to_openai_responses_output",
    "to_openai_responses_tools",
]

F = TypeVar("F", bound=Callable[..., Any])

Json = dict[str, Any]
"""A plain, mutable JSON object as this module returns it."""


class WireFormatError(DshToolsError, ValueError):
    """A provider payload (or format name) this module cannot use.

    ``provider`` says whose shape was expected, ``path`` where in the payload the problem
    is (``tool_calls[0].function.arguments``) and ``problem`` what is wrong with it.
    """

    default_code = ErrorCode.INVALID_JSON.value

    def __init__(self, provider: str, path: str, problem: str) -> None:
        super().__init__(f'{provider}: "{path}" {problem}')
        self.provider = provider
        self.path = path
        self.problem = problem


# --------------------------------------------------------------------------- declarations


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
    return _dispatch(_DECLARATIONS, "declarations", format)(schemas)


def _dispatch(table: Mapping[str, F], caller: str, format: str) -> F:
    try:
        return table[format]
    except (KeyError, TypeError):
        known = ", ".join(table)
        raise WireFormatError(caller, "format", f"must be one of {known}; got {format!r}") from None


# --------------------------------------------------------------------------- tool calls


_JSON_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    ((list, tuple), "an array"),
    (Mapping, "an object"),
)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    for kinds, name in _JSON_KINDS:
        if isinstance(value, kinds):
            return name
    return f"a {type(value).__qualname__}"


def _plain(provider: str, value: object, path: str) -> object:
    """An SDK response object (a pydantic model) as the JSON-shaped dict it was read from.

    ``by_alias`` gives the wire names (Gemini's ``functionCall``, not ``function_call``).
    Python mode leaves argument values as they are, so a ``NaN`` is still refused later
    instead of quietly becoming ``null``.
    """
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if not callable(dump):
        return value
    try:
        return dump(by_alias=True)
    except Exception as error:
        raise WireFormatError(
            provider,
            path,
            f"could not be read: {type(value).__name__}.model_dump() raised "
            f"{type(error).__name__}: {error}",
        ) from None


def _object(provider: str, value: object, path: str) -> Mapping[str, Any]:
    value = _plain(provider, value, path)
    if value is None:
        raise WireFormatError(provider, path, "is missing or null")
    if not isinstance(value, Mapping):
        raise WireFormatError(provider, path, f"must be a JSON object, got {_kind(value)}")
    return value


def _string(provider: str, payload: Mapping[str, Any], key: str, path: str) -> str:
    value = payload.get(key)
    if value is None:
        raise WireFormatError(provider, f"{path}.{key}", "is missing")
    if not isinstance(value, str) or not value:
        got = "an empty string" if value == "" else _kind(value)
        raise WireFormatError(provider, f"{path}.{key}", f"must be a non-empty string, got {got}")
    return value


def _check_type(provider: str, payload: Mapping[str, Any], expected: str, path: str) -> None:
    """Refuse another item kind (a ``message``, a ``custom`` tool call) sent by mistake."""
    kind = payload.get("type", expected)
    if kind != expected:
        raise WireFormatError(provider, f"{path}.type", f'must be "{expected}", got {kind!r}')


def _arguments(provider: str, value: object, path: str) -> object:
    """Arguments from JSON text (parsed losslessly) or an object (passed through as is).

    Blank text counts as no arguments: some OpenAI-compatible servers send ``""`` for a
    tool without parameters.
    """
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            parsed = loads(value, path)
        except JsonValueError as error:
            raise WireFormatError(provider, path, error.problem) from None
        if not isinstance(parsed, dict):
            raise WireFormatError(provider, path, f"must encode a JSON object, got {_kind(parsed)}")
        return parsed
    if isinstance(value, dict):
        return value
    if value is None:
        raise WireFormatError(provider, path, "is missing")
    raise WireFormatError(
        provider, path, f"must be a JSON object or JSON text encoding one, got {_kind(value)}"
    )


def _unreadable(
    call_id: str, name: str, arguments: object, error: WireFormatError, agent: str | None
) -> ToolExecutionInput:
    """The call whose arguments could not be read, for the pipeline to answer."""
    text = arguments if isinstance(arguments, str) else ""
    unreadable = UnreadableArguments(text, f'"{error.path}" {error.problem}')
    return ToolExecutionInput(call_id=call_id, name=name, arguments=unreadable, agent=agent)


def _call(
    provider: str, call_id: str, name: str, arguments: object, path: str, agent: str | None
) -> ToolExecutionInput:
    """The call to run, or, when its arguments cannot be read, the answer to send."""
    try:
        parsed = _arguments(provider, arguments, path)
    except WireFormatError as error:
        return _unreadable(call_id, name, arguments, error, agent)
    return ToolExecutionInput(call_id=call_id, name=name, arguments=parsed, agent=agent)


def _openai_chat_call(payload: object, path: str, agent: str | None) -> ToolExecutionInput:
    provider = "openai"
    call = _object(provider, payload, path)
    _check_type(provider, call, "function", path)
    call_id = _string(provider, call, "id", path)
    function = _object(provider, call.get("function"), f"{path}.function")
    name = _string(provider, function, "name", f"{path}.function")
    arguments = function.get("arguments")
    return _call(provider, call_id, name, arguments, f"{path}.function.arguments", agent)


def parse_openai_chat_tool_calls(
    message_or_tool_calls: object, *, agent: str | None = None
) -> list[ToolExecutionInput]:
    """Every call in a Chat Completions assistant message (or its ``tool_calls`` list).

    Takes the SDK's ``completion.choices[0].message`` or its JSON. A message without
    ``tool_calls`` (a plain text reply) gives an empty list. A call whose arguments cannot
    be read carries :class:`~dsh_tools.UnreadableArguments`, so the other calls still
    run. For one tool call on its own use ``parse_tool_call(call, "openai")``.
    """
    tool_calls = _plain("openai", message_or_tool_calls, "message")
    if isinstance(tool_calls, Mapping):
        if "tool_calls" not in tool_calls and "role" not in tool_calls:
            raise WireFormatError(
                "openai",
                "message",
                'must be an assistant message (with "role") or a list of tool calls',
            )
        tool_calls = tool_calls.get("tool_calls") or []
    if not isinstance(tool_calls, (list, tuple)):
        raise WireFormatError("openai", "tool_calls", f"must be an array, got {_kind(tool_calls)}")
    return [
        _openai_chat_call(item, f"tool_calls[{index}]", agent)
        for index, item in enumerate(tool_calls)
    ]


def parse_openai_responses_function_call(
    item: object, *, agent: str | None = None
) -> ToolExecutionInput:
    """A Responses API ``function_call`` output item; its ``call_id`` (not ``id``) is the id."""
    provider, path = "openai-responses", "function_call"
    call = _object(provider, item, path)
    _check_type(provider, call, "function_call", path)
    call_id = _string(provider, call, "call_id", path)
    name = _string(provider, call, "name", path)
    return _call(provider, call_id, name, call.get("arguments"), f"{path}.arguments", agent)


def parse_anthropic_tool_use(block: object, *, agent: str | None = None) -> ToolExecutionInput:
    """An Anthropic ``tool_use`` content block; its ``input`` is already an object."""
    provider, path = "anthropic", "tool_use"
    call = _object(provider, block, path)
    _check_type(provider, call, "tool_use", path)
    call_id = _string(provider, call, "id", path)
    name = _string(provider, call, "name", path)
    return _call(provider, call_id, name, call.get("input"), f"{path}.input", agent)


def parse_gemini_function_call(part: object, *, agent: str | None = None) -> ToolExecutionInput:
    """A Gemini content part ``{"functionCall": {"name", "args", "id"?}}``.

    Missing ``args`` means no arguments. When the model sent no ``id`` (the Gemini API
    often omits it), the call id is minted from the name and arguments: ``gemini-``
    followed by 24 hex digits of a SHA-256 over the canonical JSON of both. The same call
    always gets the same id, so identical calls in one turn share it, which is harmless:
    Gemini matches ``functionResponse`` parts by name and order.
    """
    provider, path = "gemini", "part.functionCall"
    call = _object(provider, _object(provider, part, "part").get("functionCall"), path)
    name = _string(provider, call, "name", path)
    sent_id = _string(provider, call, "id", path) if call.get("id") is not None else None
    args = call.get("args")
    try:
        arguments = {} if args is None else _arguments(provider, args, f"{path}.args")
        call_id = sent_id or _gemini_id(name, _frozen_gemini_args(arguments, f"{path}.args"))
    except WireFormatError as error:
        # Minted from the problem instead: still stable, and never an id of a valid call.
        return _unreadable(sent_id or _gemini_id(name, str(error)), name, args, error, agent)
    return ToolExecutionInput(call_id=call_id, name=name, arguments=arguments, agent=agent)


def _frozen_gemini_args(arguments: object, path: str) -> object:
    try:
        return snapshot(arguments, path)
    except JsonValueError as error:
        raise WireFormatError("gemini", error.path, error.problem) from None


def _gemini_id(name: str, identity: object) -> str:
    canonical = _stdlib_json.dumps([name, identity], sort_keys=True, separators=(",", ":"))
    return "gemini-" + hashlib.sha256(canonical.encode("ascii")).hexdigest()[:24]


CALL_FORMATS = ("openai", "openai-responses", "anthropic", "gemini")
"""The ``format`` names :func:`parse_tool_call` accepts."""

_PARSERS: dict[str, Callable[..., ToolExecutionInput]] = {
    "openai": lambda payload, *, agent: _openai_chat_call(payload, "tool_call", agent),
    "openai-responses": parse_openai_responses_function_call,
    "anthropic": parse_anthropic_tool_use,
    "gemini": parse_gemini_function_call,
}


def parse_tool_call(
    payload: object, format: str, *, agent: str | None = None
) -> ToolExecutionInput:
    """One tool call in ``format`` (one of :data:`CALL_FORMATS`).

    ``openai`` takes one element of a Chat Completions ``tool_calls`` list,
    ``openai-responses`` a ``function_call`` item, ``anthropic`` a ``tool_use`` block and
    ``gemini`` a part holding a ``functionCall``; each as the SDK's object or its JSON.
    """
    return _dispatch(_PARSERS, "parse_tool_call", format)(payload, agent=agent)


# --------------------------------------------------------------------------- running


async def execute_calls(
    registry: ToolRegistry | ToolScope, calls: Sequence[ToolExecutionInput]
) -> list[ToolExecutionResult]:
    """Run one model turn's calls; one result per call, in the calls' order.

    Calls whose ``registry.execution_mode(call)`` is ``"parallel"`` run concurrently with
    their parallel neighbours; an ``"exclusive"`` call runs alone, after every call before
    it and before every call after it, so the model's order holds wherever it matters. A
    call with :class:`~dsh_tools.UnreadableArguments` passes the pipeline like any other
    and ends ``INVALID_JSON``.
    """
    results: dict[int, ToolExecutionResult] = {}
    batch: list[tuple[int, ToolExecutionInput]] = []

    async def run(index: int, call: ToolExecutionInput) -> None:
        results[index] = await registry.execute(call)

    async def run_batch() -> None:
        if len(batch) > 1:
            async with anyio.create_task_group() as group:
                for index, call in batch:
                    group.start_soon(run, index, call)
        elif batch:
            await run(*batch[0])
        batch.clear()

    for index, call in enumerate(calls):
        if registry.execution_mode(call) == "parallel":
            batch.append((index, call))
        else:
            await run_batch()
            await run(index, call)
    await run_batch()
    return [results[index] for index in range(len(calls))]


def execute_calls_sync(
    registry: ToolRegistry | ToolScope, calls: Sequence[ToolExecutionInput]
) -> list[ToolExecutionResult]:
    """:func:`execute_calls` for synchronous hosts: the calls run one after another."""
    return [registry.execute_sync(call) for call in calls]


# --------------------------------------------------------------------------- results


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
