"""Tool calls in: each provider's tool call payload as a ``ToolExecutionInput``.

:mod:`dsh_tools.bridges.wire` is the public import path.
"""

from __future__ import annotations

import hashlib
import json as _stdlib_json
from collections.abc import Callable, Mapping
from typing import Any

from .._json import loads, snapshot
from .._models import ToolExecutionInput, UnreadableArguments
from ..errors import JsonValueError
from ._wire_shared import WireFormatError, dispatch

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
    return _flat_call("openai-responses", item, "function_call", "call_id", "arguments", agent)


def parse_anthropic_tool_use(block: object, *, agent: str | None = None) -> ToolExecutionInput:
    """An Anthropic ``tool_use`` content block; its ``input`` is already an object."""
    return _flat_call("anthropic", block, "tool_use", "id", "input", agent)


def _flat_call(
    provider: str, item: object, kind: str, id_key: str, arguments_key: str, agent: str | None
) -> ToolExecutionInput:
    """A call whose id, name and arguments are keys of one object of type ``kind``,
    which also names it in error paths."""
    call = _object(provider, item, kind)
    _check_type(provider, call, kind, kind)
    call_id = _string(provider, call, id_key, kind)
    name = _string(provider, call, "name", kind)
    arguments = call.get(arguments_key)
    return _call(provider, call_id, name, arguments, f"{kind}.{arguments_key}", agent)


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
    return dispatch(_PARSERS, "parse_tool_call", format)(payload, agent=agent)
