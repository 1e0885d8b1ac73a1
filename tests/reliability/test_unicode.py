"""Text that is not valid Unicode never leaves the pipeline.

File names whose bytes are not UTF-8 reach Python as strings with lone surrogates
(``os.fsdecode``), and ``json.loads`` makes them of ``"\\ud800"``. No UTF-8 wire can
carry them: an MCP server that tried died with every call in flight. The rule: such a
string is not JSON (arguments fail ``INVALID_JSON``, a body's value ``INVALID_TOOL_OUTPUT``,
content from a policy fails the call), and a failure's own message shows it with U+FFFD.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest

from dsh_tools import Accept, ToolExecutionInput, ToolRegistry, define_tool, hookimpl
from dsh_tools._models import ToolExecutionResult

NAME = os.fsdecode(b"caf\xe9.txt")  # a latin-1 file name, as the OS hands it over


def run_both(registry: ToolRegistry, call: ToolExecutionInput) -> list[ToolExecutionResult]:
    """The call through execute_sync and through await execute: the rule holds on both."""
    return [registry.execute_sync(call), anyio.run(registry.execute, call)]


def assert_sendable(result: ToolExecutionResult) -> None:
    for block in result.content:
        for value in block.values():
            if isinstance(value, str):
                value.encode("utf-8")
    if result.is_error:
        result.error.message.encode("utf-8")


def returning(value: Any) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="d", parameters={}, execute=lambda a, c: value)
    )
    return registry


@pytest.mark.parametrize("value", [NAME, {"names": [NAME]}, [NAME], {NAME: 1}])
def test_a_body_returning_such_text_fails_with_invalid_tool_output(value: Any) -> None:
    for result in run_both(returning(value), ToolExecutionInput("1", "t", {})):
        assert result.is_error
        assert result.error.info.code == "INVALID_TOOL_OUTPUT"
        assert "lone surrogate U+DCE9" in result.text
        assert_sendable(result)


def test_valid_non_ascii_text_is_returned_as_is() -> None:
    for result in run_both(returning("café 😀"), ToolExecutionInput("1", "t", {})):
        assert not result.is_error
        assert result.text == "café 😀"


@pytest.mark.parametrize("arguments", [{"path": "\ud800"}, {"path": ["ok", NAME]}])
def test_such_arguments_fail_as_invalid_json_before_any_policy(arguments: Any) -> None:
    seen: list[str] = []

    class Watch:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> None:
            seen.append(execution.name)

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="t",
            description="d",
            parameters={"path": {"type": "json"}},
            execute=lambda a, c: "ran",
        )
    )
    registry.add_plugin(Watch())
    for result in run_both(registry, ToolExecutionInput("1", "t", arguments)):
        assert result.is_error
        assert result.error.info.code == "INVALID_JSON"
        assert "not valid Unicode" in result.text
        assert_sendable(result)
    assert seen == []


def test_a_failure_naming_such_a_file_shows_it_with_the_replacement_character() -> None:
    def fail(args: Any, ctx: Any) -> str:
        raise RuntimeError(f"cannot read {NAME}")

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=fail))
    for result in run_both(registry, ToolExecutionInput("1", "t", {})):
        assert result.error.info.code == "TOOL_ERROR"
        assert result.error.message == "cannot read caf\ufffd.txt"
        assert result.text == "Error: cannot read caf\ufffd.txt"


def test_a_policy_replacing_content_with_such_text_fails_closed() -> None:
    class Rewrite:
        @hookimpl
        def dsh_tools_post_execute(self, execution: Any, result: Any) -> Accept:
            return Accept(content=[f"see {NAME}"])

    registry = returning("fine")
    registry.add_plugin(Rewrite())
    for result in run_both(registry, ToolExecutionInput("1", "t", {})):
        assert result.is_error  # the policy's own fault: the fail-closed code is issue 16's
        assert "post-execute" in result.text
        assert "not valid Unicode" in result.text
        assert_sendable(result)


@pytest.mark.anyio
async def test_an_mcp_server_survives_a_tool_that_returns_such_text() -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    registry = returning({"names": [NAME]})
    registry.register(
        define_tool(name="ok", description="d", parameters={}, execute=lambda a, c: "still here")
    )
    with anyio.fail_after(10):
        async with Client(build_mcp_server(registry), mode="legacy") as client:
            broken = await client.call_tool("t", {})
            after = await client.call_tool("ok", {})
    assert broken.is_error
    assert "INVALID_TOOL_OUTPUT" in str(broken.content) or "invalid output" in str(broken.content)
    assert not after.is_error
    assert [block.text for block in after.content] == ["still here"]  # type: ignore[union-attr]
