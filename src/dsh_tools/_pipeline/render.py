"""The output contract: what a body's value (or a replacement for it) becomes.

A tool that declares ``output=ToolOutput(schema, render, presentation_meta)`` returns a
JSON value: it is validated, rendered into content and, for top-level calls, into
``meta``. Without a declaration a body returns text, content blocks or a JSON value
(shown as JSON text). One function, :func:`render`, applies it to the body's return, to a
success a wrapper authored and to a post-execute ``Accept(value=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._content import ContextMessage, ImageContent, TextContent, content_blocks, text_blocks
from .._json import NEG_SMALL_INT, SMALL_INT, JsonValue, dumps, is_unicode, snapshot
from .._models import ExecutionToken, ToolExecutionSuccess
from ..errors import ErrorCode, JsonValueError, ToolOutputError
from .call import Call, StageFailed
from .loops import stops_the_caller
from .results import message, success_result

if TYPE_CHECKING:
    from .plan import ToolEntry

_PLAIN_JSON = frozenset({type(None), str, int, float, bool, dict})
"""Types of values a body returns that can never be typed content blocks."""


def render(
    entry: ToolEntry,
    raw: object,
    parsed: Any,
    contexts: tuple[ContextMessage, ...],
    concluded: bool,
    parent: ExecutionToken | None,
) -> ToolExecutionSuccess:
    """Turn a body's (or a replacement) value into a success, by the output contract;
    raises :class:`ToolOutputError` when the value breaks it."""
    definition = entry.definition
    output = definition.output
    if output is None:
        # The usual returns first, exactly as snapshot() and dumps() treat them.
        if type(raw) is str and (raw.isascii() or is_unicode(raw)):
            return success_result(raw, text_blocks(raw), None, contexts, concluded)
        if type(raw) is int and NEG_SMALL_INT < raw < SMALL_INT:
            text = int.__repr__(raw)
            return success_result(raw, text_blocks(text), None, contexts, concluded)
        if type(raw) not in _PLAIN_JSON and _is_typed_content(raw):
            content = content_blocks(raw)  # type: ignore[arg-type]
            return success_result(content, content, None, contexts, concluded)
    name = definition.name
    try:
        value = snapshot(raw)
    except JsonValueError as error:
        raise ToolOutputError(name, [f"value is not lossless JSON: {error.message}"]) from None
    if output is None:
        text = value if type(value) is str else dumps(value)
        return success_result(value, text_blocks(text), None, contexts, concluded)
    assert entry.output_validator is not None
    violations = entry.output_validator(value)
    if violations:
        raise ToolOutputError(name, violations)
    content = _call_output(name, "render", output.render, parsed, value)
    meta: JsonValue = None
    if output.presentation_meta is not None and parent is None:
        meta = _call_output(
            name, "presentation_meta", output.presentation_meta, parsed, value, True
        )
    return success_result(value, content, meta, contexts, concluded)


def rerender(call: Call, value: object) -> ToolExecutionSuccess:
    """A value a wrapper or post-execute supplied, through the output contract of the
    tool as it is now; an unknown tool or a broken contract fails on the final path."""
    entry = call.resolve()
    if entry is None:
        raise StageFailed(call.unknown())
    try:
        parsed = call.parse(entry)
        return render(entry, value, parsed, call.contexts, call.concluded, call.input.parent)
    except BaseException as error:
        raise StageFailed(call.contained(error, ErrorCode.INVALID_TOOL_OUTPUT)) from None


def _is_typed_content(raw: object) -> bool:
    """True for a typed block or a non-empty list of them (content, not a JSON value)."""
    if isinstance(raw, (TextContent, ImageContent)):
        return True
    return (
        isinstance(raw, (list, tuple))
        and bool(raw)
        and all(isinstance(block, (TextContent, ImageContent)) for block in raw)
    )


def _call_output(
    tool: str,
    label: str,
    function: Callable[[Any, JsonValue], Any],
    arguments: Any,
    value: JsonValue,
    as_json: bool = False,
) -> Any:
    try:
        produced = function(arguments, value)
    except BaseException as error:
        if stops_the_caller(error):
            raise
        raise ToolOutputError(tool, [f"output.{label} failed: {message(error)}"]) from None
    try:
        return snapshot(produced) if as_json else content_blocks(produced)
    except JsonValueError as error:
        raise ToolOutputError(
            tool, [f"output.{label} returned non-lossless JSON: {error.message}"]
        ) from None
