"""Provider wire formats: recorded payloads parse, declarations and results match exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic.types import Message as AnthropicMessage
from google.genai.types import GenerateContentResponse
from google.genai.types import Part as GeminiPart
from google.genai.types import Tool as GeminiTool
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response as OpenAIResponse

from dsh_tools import (
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    UnreadableArguments,
    define_tool,
    hookimpl,
)
from dsh_tools._content import ImageContent
from dsh_tools._json import FrozenDict, thaw
from dsh_tools._models import ToolExecutionInput, ToolExecutionSuccess, ToolSchema, failure_result
from dsh_tools.bridges.wire import (
    CALL_FORMATS,
    DECLARATION_FORMATS,
    WireFormatError,
    declarations,
    execute_calls,
    execute_calls_sync,
    parse_anthropic_tool_use,
    parse_gemini_function_call,
    parse_openai_chat_tool_calls,
    parse_openai_responses_function_call,
    parse_tool_call,
    to_anthropic_tool_result,
    to_anthropic_tools,
    to_gemini_function_response,
    to_gemini_tools,
    to_mcp_call_result,
    to_mcp_tools,
    to_openai_chat_tool_message,
    to_openai_chat_tools,
    to_openai_responses_output,
    to_openai_responses_tools,
)
from dsh_tools.errors import DshToolsError, ErrorCode

FIXTURES = Path(__file__).parent / "fixtures" / "wire"
PNG = "iVBORw0KGgo="


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def schemas() -> list[ToolSchema]:
    return [
        ToolSchema(item["name"], item["description"], FrozenDict(item["parameters"]))
        for item in fixture("schemas.json")
    ]


def assert_plain(value: object) -> None:
    """Only plain dict/list/scalars, nothing frozen, so callers may mutate and dump it."""
    assert type(value) in (dict, list, str, int, float, bool, type(None))
    if isinstance(value, dict):
        for item in value.values():
            assert_plain(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain(item)


# --------------------------------------------------------------------------- declarations


def test_json_schema_providers_get_the_parameters_unchanged() -> None:
    raw = fixture("schemas.json")
    found = schemas()

    assert declarations(found, "raw") == raw
    assert to_openai_chat_tools(found) == [{"type": "function", "function": r} for r in raw]
    assert to_openai_responses_tools(found) == [
        {"type": "function", **r, "strict": False} for r in raw
    ]
    assert to_anthropic_tools(found) == [
        {"name": r["name"], "description": r["description"], "input_schema": r["parameters"]}
        for r in raw
    ]
    assert to_mcp_tools(found) == [
        {"name": r["name"], "description": r["description"], "inputSchema": r["parameters"]}
        for r in raw
    ]


def test_gemini_declarations_use_the_openapi_dialect() -> None:
    assert to_gemini_tools(schemas()) == fixture("gemini_tools_expected.json")


def test_gemini_json_schema_mode_sends_the_schema_untranslated() -> None:
    raw = fixture("schemas.json")

    tools = to_gemini_tools(schemas(), json_schema=True)

    assert tools == [
        {
            "functionDeclarations": [
                {
                    "name": r["name"],
                    "description": r["description"],
                    "parametersJsonSchema": r["parameters"],
                }
                for r in raw
            ]
        }
    ]


def test_gemini_union_with_null_and_several_branches_marks_each_nullable() -> None:
    parameters = FrozenDict(
        {
            "type": "object",
            "properties": {
                "v": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
            },
        }
    )

    [tool] = to_gemini_tools([ToolSchema("t", "d", parameters)])

    assert tool["functionDeclarations"][0]["parameters"]["properties"]["v"] == {
        "anyOf": [{"type": "STRING", "nullable": True}, {"type": "INTEGER", "nullable": True}]
    }


def test_gemini_without_tools_declares_nothing() -> None:
    assert to_gemini_tools([]) == []


@pytest.mark.parametrize("format", DECLARATION_FORMATS)
def test_declarations_are_plain_json(format: str) -> None:
    tools = declarations(schemas(), format)

    assert_plain(tools)
    assert json.loads(json.dumps(tools)) == tools


def test_declarations_dispatch_to_each_provider() -> None:
    found = schemas()

    assert declarations(found, "openai") == to_openai_chat_tools(found)
    assert declarations(found, "openai-responses") == to_openai_responses_tools(found)
    assert declarations(found, "anthropic") == to_anthropic_tools(found)
    assert declarations(found, "gemini") == to_gemini_tools(found)
    assert declarations(found, "mcp") == to_mcp_tools(found)


def test_unknown_declaration_format_lists_the_known_ones() -> None:
    with pytest.raises(WireFormatError) as caught:
        declarations(schemas(), "cohere")

    assert str(caught.value) == (
        'declarations: "format" must be one of raw, openai, openai-responses, anthropic, '
        "gemini, mcp; got 'cohere'"
    )


# --------------------------------------------------------------------------- parsing


def test_openai_chat_completion_tool_calls_parse() -> None:
    message = fixture("openai_chat_completion.json")["choices"][0]["message"]

    calls = parse_openai_chat_tool_calls(message, agent="coder")

    assert calls == [
        ToolExecutionInput(
            call_id="call_8c2QmZ1kRr0y7Vq3Lx5Tn4Ab",
            name="read_file",
            arguments={"path": "src/app.py", "range": {"start": 10, "end": 42}},
            agent="coder",
        ),
        ToolExecutionInput(
            call_id="call_Yd7fP2sWq9LmK4xN1bVc8ZtE",
            name="search",
            arguments={"query": ["café", "naïve"], "limit": None, "level": 2, "ratio": 1e-7},
            agent="coder",
        ),
    ]
    assert parse_openai_chat_tool_calls(message["tool_calls"], agent="coder") == calls
    assert parse_tool_call(message["tool_calls"][1], "openai", agent="coder") == calls[1]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "Hi"},
        {"role": "assistant", "content": "Hi", "tool_calls": None},
        [],
    ],
)
def test_openai_chat_reply_without_tool_calls_parses_to_nothing(message: object) -> None:
    assert parse_openai_chat_tool_calls(message) == []


def test_openai_responses_function_call_parses_with_call_id() -> None:
    [item] = fixture("openai_responses.json")["output"]

    call = parse_openai_responses_function_call(item)

    assert call == ToolExecutionInput(
        call_id="call_Qw3rTy8uIo0pAs2dFg4hJk6L", name="read_file", arguments={"path": "README.md"}
    )
    assert parse_tool_call(item, "openai-responses") == call


def test_anthropic_tool_use_parses_and_keeps_the_input_object() -> None:
    block = fixture("anthropic_message.json")["content"][1]

    call = parse_anthropic_tool_use(block, agent="reviewer")

    assert call == ToolExecutionInput(
        call_id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        name="read_file",
        arguments={"path": "src/app.py", "range": {"start": 1, "end": 5}},
        agent="reviewer",
    )
    assert call.arguments is block["input"]
    assert parse_tool_call(block, "anthropic", agent="reviewer") == call


def test_gemini_function_calls_parse_and_mint_stable_ids() -> None:
    minted, explicit = fixture("gemini_generate_content.json")["candidates"][0]["content"]["parts"]

    first = parse_gemini_function_call(minted)

    assert first.name == "search"
    assert first.arguments == {"query": "weather in Paris", "level": 1}
    assert first.call_id.startswith("gemini-")
    assert len(first.call_id) == len("gemini-") + 24
    reordered = {
        "functionCall": {"name": "search", "args": {"level": 1, "query": "weather in Paris"}}
    }
    assert parse_gemini_function_call(reordered).call_id == first.call_id
    other = {"functionCall": {"name": "search", "args": {"query": "weather in Rome", "level": 1}}}
    assert parse_gemini_function_call(other).call_id != first.call_id
    assert parse_gemini_function_call(explicit) == ToolExecutionInput(
        call_id="fc-7d1e0b42", name="ping", arguments={}
    )
    assert parse_tool_call(minted, "gemini") == first


def test_blank_openai_arguments_mean_no_arguments() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": " "}}

    assert parse_tool_call(call, "openai").arguments == {}


def _chat(arguments: object) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "t", "arguments": arguments}}


@pytest.mark.parametrize(
    ("payload", "format", "message"),
    [
        (
            {"type": "function", "function": {"name": "t", "arguments": "{}"}},
            "openai",
            '"tool_call.id" is missing',
        ),
        ({"id": "c", "type": "function"}, "openai", '"tool_call.function" is missing'),
        (
            {"id": "c", "function": {"name": "", "arguments": "{}"}},
            "openai",
            "must be a non-empty string, got an empty string",
        ),
        (
            {"id": "c", "type": "custom", "custom": {"name": "t", "input": "x"}},
            "openai",
            '"tool_call.type" must be "function"',
        ),
        ("call", "openai", '"tool_call" must be a JSON object, got a string'),
        (
            {"type": "function_call", "name": "t", "arguments": "{}", "id": "fc_1"},
            "openai-responses",
            '"function_call.call_id" is missing',
        ),
        (
            {"type": "message", "role": "assistant", "content": []},
            "openai-responses",
            '"function_call.type" must be "function_call"',
        ),
        (
            {"type": "tool_use", "id": "toolu_1", "input": {}},
            "anthropic",
            '"tool_use.name" is missing',
        ),
        (
            {"type": "tool_use", "id": 5, "name": "t", "input": {}},
            "anthropic",
            '"tool_use.id" must be a non-empty string, got a number',
        ),
        ([], "anthropic", '"tool_use" must be a JSON object, got an array'),
        ({"text": "hi"}, "gemini", '"part.functionCall" is missing'),
        ({"functionCall": {"args": {}}}, "gemini", '"part.functionCall.name" is missing'),
    ],
)
def test_payloads_that_are_no_call_raise_wire_format_errors(
    payload: object, format: str, message: str
) -> None:
    with pytest.raises(WireFormatError) as caught:
        parse_tool_call(payload, format)

    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{format}: ")


@pytest.mark.parametrize(
    ("payload", "format", "message"),
    [
        (_chat('{"a": NaN}'), "openai", '"tool_call.function.arguments" is not valid JSON text'),
        (_chat('{"a": 1'), "openai", '"tool_call.function.arguments" is not valid JSON text'),
        (_chat("[1, 2]"), "openai", "must encode a JSON object, got an array"),
        (_chat("[" * 300 + "]" * 300), "openai", "nests deeper than 200 levels"),
        (_chat(7), "openai", "must be a JSON object or JSON text encoding one, got a number"),
        (_chat(None), "openai", '"tool_call.function.arguments" is missing'),
        (
            {"type": "function_call", "call_id": "call_1", "name": "t", "arguments": '{"a": '},
            "openai-responses",
            '"function_call.arguments" is not valid JSON text',
        ),
        (
            {"type": "tool_use", "id": "call_1", "name": "t", "input": ["a"]},
            "anthropic",
            '"tool_use.input" must be a JSON object or JSON text encoding one, got an array',
        ),
        (
            {"functionCall": {"id": "call_1", "name": "t", "args": "x"}},
            "gemini",
            '"part.functionCall.args" is not valid JSON text',
        ),
    ],
)
def test_unreadable_arguments_give_the_call_its_own_answer(
    payload: object, format: str, message: str
) -> None:
    call = parse_tool_call(payload, format, agent="coder")

    assert isinstance(call.arguments, UnreadableArguments)
    assert (call.call_id, call.name, call.agent) == ("call_1", "t", "coder")
    assert message in call.arguments.problem
    # The pipeline answers it, so observers (an audit log) see the attempt.
    seen: list[tuple[str, ToolExecutionResult]] = []

    class Observer:
        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
            seen.append((execution.call_id, result))

    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="d", parameters={}, execute=lambda a, c: "ran")
    )
    registry.add_plugin(Observer())
    [result] = execute_calls_sync(registry, [call])

    assert result.code == ErrorCode.INVALID_JSON.value  # type: ignore[union-attr]
    assert result.text.startswith('Error: tool "t" was called with unreadable arguments: ')
    assert message in result.text
    assert seen == [("call_1", result)]


def test_gemini_calls_without_an_id_get_a_stable_minted_id_even_when_malformed() -> None:
    part = {"functionCall": {"name": "t", "args": {"x": float("nan")}}}

    first, again = parse_gemini_function_call(part), parse_gemini_function_call(part)

    assert isinstance(first.arguments, UnreadableArguments)
    assert first.call_id == again.call_id
    assert first.call_id.startswith("gemini-")
    assert '"part.functionCall.args.x" is NaN' in first.arguments.problem
    valid = parse_gemini_function_call({"functionCall": {"name": "t", "args": {"x": 1}}})
    assert valid.call_id != first.call_id


def test_bad_chat_message_shapes_are_refused() -> None:
    with pytest.raises(WireFormatError, match=r'"message" must be an assistant message'):
        parse_openai_chat_tool_calls(_chat("{}"))
    with pytest.raises(WireFormatError, match=r'"tool_calls" must be an array, got a string'):
        parse_openai_chat_tool_calls("call")
    with pytest.raises(WireFormatError, match=r'"tool_calls\[1\]" is missing or null'):
        parse_openai_chat_tool_calls({"role": "assistant", "tool_calls": [_chat("{}"), None]})


def test_unknown_call_format_lists_the_known_ones() -> None:
    with pytest.raises(
        WireFormatError,
        match="must be one of openai, openai-responses, anthropic, gemini; got 'mcp'",
    ):
        parse_tool_call({}, "mcp")
    assert CALL_FORMATS == ("openai", "openai-responses", "anthropic", "gemini")


def test_wire_format_error_is_a_coded_value_error() -> None:
    with pytest.raises(WireFormatError) as caught:
        parse_tool_call({"id": "c", "type": "function", "function": None}, "openai")

    error = caught.value
    assert isinstance(error, DshToolsError)
    assert isinstance(error, ValueError)
    assert error.code == ErrorCode.INVALID_JSON.value
    assert (error.provider, error.path) == ("openai", "tool_call.function")


# --------------------------------------------------------------------------- SDK objects


def sdk_payloads() -> dict[str, tuple[object, object]]:
    """Each provider's recorded call as the official SDK's own object and as its JSON."""
    chat = fixture("openai_chat_completion.json")
    responses = fixture("openai_responses.json")
    message = fixture("anthropic_message.json")
    gemini = fixture("gemini_generate_content.json")
    return {
        "openai": (
            ChatCompletion.model_validate(chat).choices[0].message.tool_calls[1],  # type: ignore[index]
            chat["choices"][0]["message"]["tool_calls"][1],
        ),
        "openai-responses": (
            OpenAIResponse.model_validate(responses).output[0],
            responses["output"][0],
        ),
        "anthropic": (AnthropicMessage.model_validate(message).content[1], message["content"][1]),
        "gemini": (
            GenerateContentResponse.model_validate(gemini).candidates[0].content.parts[0],  # type: ignore[index, union-attr]
            gemini["candidates"][0]["content"]["parts"][0],
        ),
    }


@pytest.mark.parametrize("format", CALL_FORMATS)
def test_official_sdk_objects_parse_like_their_json(format: str) -> None:
    sdk_object, payload = sdk_payloads()[format]

    call = parse_tool_call(sdk_object, format, agent="coder")

    assert isinstance(call, ToolExecutionInput)
    assert call == parse_tool_call(payload, format, agent="coder")


def test_sdk_messages_and_blocks_parse_through_the_named_parsers() -> None:
    completion = ChatCompletion.model_validate(fixture("openai_chat_completion.json"))
    message = AnthropicMessage.model_validate(fixture("anthropic_message.json"))
    response = OpenAIResponse.model_validate(fixture("openai_responses.json"))
    gemini = GenerateContentResponse.model_validate(fixture("gemini_generate_content.json"))
    recorded = fixture("openai_chat_completion.json")["choices"][0]["message"]

    chat_message = completion.choices[0].message
    assert parse_openai_chat_tool_calls(chat_message) == parse_openai_chat_tool_calls(recorded)
    assert parse_openai_chat_tool_calls(chat_message.tool_calls) == parse_openai_chat_tool_calls(
        recorded
    )
    use = parse_anthropic_tool_use(message.content[1], agent="reviewer")
    assert isinstance(use, ToolExecutionInput)
    assert use.arguments == {"path": "src/app.py", "range": {"start": 1, "end": 5}}
    assert parse_openai_responses_function_call(response.output[0]).call_id == (
        "call_Qw3rTy8uIo0pAs2dFg4hJk6L"
    )
    parts = gemini.candidates[0].content.parts  # type: ignore[index, union-attr]
    assert parse_gemini_function_call(parts[1]) == ToolExecutionInput("fc-7d1e0b42", "ping", {})
    with pytest.raises(WireFormatError, match=r'"tool_use.type" must be "tool_use", got \'text\''):
        parse_anthropic_tool_use(message.content[0])


def test_an_sdk_object_that_cannot_be_dumped_is_a_wire_error() -> None:
    class Broken:
        def model_dump(self, **options: object) -> dict[str, Any]:
            raise RuntimeError("closed")

    with pytest.raises(WireFormatError) as caught:
        parse_anthropic_tool_use(Broken())

    assert str(caught.value) == (
        'anthropic: "tool_use" could not be read: Broken.model_dump() raised RuntimeError: closed'
    )


# --------------------------------------------------------------------------- one turn


def read_tool() -> Any:
    return define_tool(
        name="read_file",
        description="Read a file.",
        parameters={"path": {"type": "string", "required": True}},
        execute=lambda args, ctx: f"contents of {args['path']}",
        is_concurrency_safe=lambda args: True,
    )


def test_a_truncated_call_never_loses_the_rest_of_the_batch() -> None:
    completion = ChatCompletion.model_validate(fixture("openai_chat_truncated.json"))
    registry = ToolRegistry()
    registry.register(read_tool())

    calls = parse_openai_chat_tool_calls(completion.choices[0].message, agent="coder")
    results = execute_calls_sync(registry, calls)
    replies = [
        to_openai_chat_tool_message(call.call_id, result)
        for call, result in zip(calls, results, strict=True)
    ]

    good, bad = calls
    assert good == ToolExecutionInput(
        "call_Lm4Nq8Rt2Vx6Zb0Cd3Fg5Hj7", "read_file", {"path": "notes.txt"}, agent="coder"
    )
    assert isinstance(bad.arguments, UnreadableArguments)
    assert [reply["tool_call_id"] for reply in replies] == [
        "call_Lm4Nq8Rt2Vx6Zb0Cd3Fg5Hj7",
        "call_Pk9Wj3Es5Ty1Ui7Oa2Sd4Fg6",
    ]
    assert replies[0]["content"] == "contents of notes.txt"
    assert results[1].code == "INVALID_JSON"
    assert replies[1]["content"] == (
        'Error: tool "read_file" was called with unreadable arguments: '
        '"tool_calls[1].function.arguments" is not valid JSON text: '
        "Unterminated string starting at: line 1 column 10 (char 9)"
    )


def test_execute_calls_runs_parallel_neighbours_together_and_exclusive_calls_alone() -> None:
    log: list[str] = []

    async def body(args: Any, ctx: object) -> str:
        log.append(f"start {args['id']}")
        await anyio.sleep(0.01)
        log.append(f"end {args['id']}")
        return str(args["id"])

    registry = ToolRegistry()
    for name, safe in (("look", True), ("write", False)):
        registry.register(
            define_tool(
                name=name,
                description=name,
                parameters={"id": {"type": "string", "required": True}},
                execute=body,
                is_concurrency_safe=lambda args, safe=safe: safe,
            )
        )
    malformed = parse_tool_call(
        {"id": "m", "type": "function", "function": {"name": "look", "arguments": "{"}}, "openai"
    )
    calls = [
        ToolExecutionInput("1", "look", {"id": "a"}),
        ToolExecutionInput("2", "look", {"id": "b"}),
        malformed,
        ToolExecutionInput("3", "write", {"id": "w"}),
        ToolExecutionInput("4", "look", {"id": "c"}),
        ToolExecutionInput("5", "look", {"id": "d"}),
    ]

    results = anyio.run(execute_calls, registry, calls)

    assert [result.text for result in results] == [
        "a",
        "b",
        'Error: tool "look" was called with unreadable arguments: '
        '"tool_call.function.arguments" is not valid JSON text: '
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "w",
        "c",
        "d",
    ]
    assert set(log[:2]) == {"start a", "start b"}  # together, before either ended
    assert log[4:6] == ["start w", "end w"]  # alone, after a and b, before c and d
    assert set(log[6:8]) == {"start c", "start d"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(arguments=st.dictionaries(st.text(), json_values, max_size=5), ascii_only=st.booleans())
def test_openai_json_text_arguments_round_trip(arguments: dict[str, Any], ascii_only: bool) -> None:
    payload = json.loads(json.dumps(_chat(json.dumps(arguments, ensure_ascii=ascii_only))))

    call = parse_tool_call(payload, "openai")

    assert thaw(call.arguments) == arguments


# --------------------------------------------------------------------------- results


def success() -> ToolExecutionSuccess:
    return ToolExecutionSuccess(
        value={"lines": 2},
        content=["two lines", ImageContent(PNG, "image/png")],
    )


def failure() -> Any:
    return failure_result("path escapes the workspace", ErrorCode.DENIED)


def test_openai_chat_tool_messages_carry_text() -> None:
    assert to_openai_chat_tool_message("call_1", success()) == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "two lines\n[image content]",
    }
    assert to_openai_chat_tool_message("call_2", failure()) == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": "Error: path escapes the workspace",
    }


def test_openai_responses_output_is_text_or_parts_with_images() -> None:
    assert to_openai_responses_output("call_1", success()) == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "two lines"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        ],
    }
    assert to_openai_responses_output("call_2", failure()) == {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": "Error: path escapes the workspace",
    }


def test_anthropic_tool_results_map_text_and_images() -> None:
    assert to_anthropic_tool_result("toolu_1", success()) == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [
            {"type": "text", "text": "two lines"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
        "is_error": False,
    }
    assert to_anthropic_tool_result("toolu_2", failure()) == {
        "type": "tool_result",
        "tool_use_id": "toolu_2",
        "content": [{"type": "text", "text": "Error: path escapes the workspace"}],
        "is_error": True,
    }


def test_anthropic_tool_results_drop_empty_text_and_name_other_blocks() -> None:
    result = ToolExecutionSuccess(value=None, content=["", {"type": "resource_link", "uri": "x"}])

    assert to_anthropic_tool_result("toolu_1", result)["content"] == [
        {"type": "text", "text": "[resource_link content]"}
    ]


def test_gemini_function_responses_use_output_and_error_keys() -> None:
    assert to_gemini_function_response("read_file", success()) == {
        "functionResponse": {
            "name": "read_file",
            "response": {"output": "two lines\n[image content]"},
        }
    }
    assert to_gemini_function_response("read_file", failure(), call_id="fc-1") == {
        "functionResponse": {
            "name": "read_file",
            "response": {
                "error": {"code": "DENIED", "message": "Error: path escapes the workspace"}
            },
            "id": "fc-1",
        }
    }
    redacted = ToolExecutionSuccess(value={"secret": "s3cr3t"}, content=["[redacted]"])
    assert to_gemini_function_response("ping", redacted) == {
        "functionResponse": {"name": "ping", "response": {"output": "[redacted]"}}
    }


def test_mcp_call_results_pass_blocks_and_structured_objects() -> None:
    assert to_mcp_call_result(success()) == {
        "content": [
            {"type": "text", "text": "two lines"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
        ],
        "isError": False,
        "structuredContent": {"lines": 2},
    }
    assert to_mcp_call_result(ToolExecutionSuccess(value=[1], content=["[1]"])) == {
        "content": [{"type": "text", "text": "[1]"}],
        "isError": False,
    }
    assert to_mcp_call_result(failure()) == {
        "content": [{"type": "text", "text": "Error: path escapes the workspace"}],
        "isError": True,
    }


def test_gemini_declarations_and_answers_are_valid_sdk_objects() -> None:
    # google-genai's models refuse unknown keys, so this catches any drift in our shapes.
    [tool] = to_gemini_tools(schemas())

    assert GeminiTool.model_validate(tool).function_declarations
    for part in (
        to_gemini_function_response("read_file", success(), call_id="fc-1"),
        to_gemini_function_response("read_file", failure()),
    ):
        assert GeminiPart.model_validate(part).function_response is not None


def test_result_messages_are_plain_json() -> None:
    for result in (success(), failure()):
        for message in (
            to_openai_chat_tool_message("c", result),
            to_openai_responses_output("c", result),
            to_anthropic_tool_result("c", result),
            to_gemini_function_response("t", result),
            to_mcp_call_result(result),
        ):
            assert_plain(message)


def test_execute_calls_max_concurrency_caps_one_turns_parallel_calls() -> None:
    in_flight: list[int] = [0, 0]  # now, most

    async def body(args: Any, ctx: object) -> str:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        for _ in range(5):
            await anyio.sleep(0)
        in_flight[0] -= 1
        return str(args["id"])

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="look",
            description="look",
            parameters={"id": {"type": "string", "required": True}},
            execute=body,
            is_concurrency_safe=lambda args: True,
        )
    )
    calls = [ToolExecutionInput(str(n), "look", {"id": str(n)}) for n in range(6)]

    async def turn() -> list[ToolExecutionResult]:
        return await execute_calls(registry, calls, max_concurrency=2)

    results = anyio.run(turn)

    assert [result.text for result in results] == [str(n) for n in range(6)]
    assert in_flight[1] == 2
    with pytest.raises(ValueError, match="max_concurrency must be an integer >= 1"):
        anyio.run(lambda: execute_calls(registry, calls, max_concurrency=0))
