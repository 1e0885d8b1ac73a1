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
:func:`dsh_tools._json.loads` (lossless: ``NaN`` and over-deep nesting are rejected);
arguments that arrive as an object are passed through untouched, because the registry
snapshots and validates them anyway.
"""

from ._wire_calls import (
    CALL_FORMATS,
    parse_anthropic_tool_use,
    parse_gemini_function_call,
    parse_openai_chat_tool_calls,
    parse_openai_responses_function_call,
    parse_tool_call,
)
from ._wire_declare import (
    DECLARATION_FORMATS,
    declarations,
    to_anthropic_tools,
    to_gemini_tools,
    to_mcp_tools,
    to_openai_chat_tools,
    to_openai_responses_tools,
)
from ._wire_results import (
    to_anthropic_tool_result,
    to_gemini_function_response,
    to_mcp_call_result,
    to_openai_chat_tool_message,
    to_openai_responses_output,
)
from ._wire_run import execute_calls, execute_calls_sync
from ._wire_shared import WireFormatError

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
