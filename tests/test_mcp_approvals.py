"""Approvals over MCP, with the official SDK client: an ask becomes an elicitation when
the client can elicit; each client is its own agent."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp import types as mcp_types

from dsh_tools import ToolRegistry, define_tool
from dsh_tools.bridges.mcp import build_mcp_server
from dsh_tools.hookspecs import hookimpl
from dsh_tools.models import Ask, ToolExecution


def asking_registry(runs: list[str]) -> ToolRegistry:
    """A registry whose ``write`` tool always asks, and counts its runs."""
    registry = ToolRegistry()

    def write(arguments: Any, context: Any) -> str:
        runs.append(arguments["path"])
        return f"wrote {arguments['path']}"

    registry.register(
        define_tool(
            name="write",
            description="write a file",
            parameters={"path": {"type": "string", "required": True}},
            execute=write,
        )
    )

    class AskFirst:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("writes files\x1b[2J")

    registry.add_plugin(AskFirst())
    return registry


class User:
    """An MCP client's user, answering each elicitation with ``answers`` in turn."""

    def __init__(self, *answers: mcp_types.ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[mcp_types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        self.asked.append(params)
        return self.answers.pop(0)


def accept(decision: str, feedback: str | None = None) -> mcp_types.ElicitResult:
    content: dict[str, Any] = {"decision": decision}
    if feedback is not None:
        content["feedback"] = feedback
    return mcp_types.ElicitResult(action="accept", content=content)


def texts(result: mcp_types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_ask_elicits_with_the_calls_card_and_an_accepted_answer_runs_it_once(
    mode: str,
) -> None:
    runs: list[str] = []
    user = User(accept("allow-once"))
    server = build_mcp_server(asking_registry(runs))
    with anyio.fail_after(10):
        async with Client(server, mode=mode, elicitation_callback=user) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert not result.is_error
    assert texts(result) == "wrote notes.txt"
    assert runs == ["notes.txt"]
    [asked] = user.asked
    assert '"write"' in asked.message
    assert "notes.txt" in asked.message
    assert "writes files\\x1b[2J" in asked.message  # the reason, made safe to show
    assert "\x1b" not in asked.message
    assert asked.requested_schema["properties"]["decision"]["enum"] == [
        "allow-once",
        "allow-always",
        "reject",
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(
    "answer",
    [
        mcp_types.ElicitResult(action="decline"),
        accept("reject", "use docs/ instead"),
        mcp_types.ElicitResult(action="cancel"),
        accept("run it anyway"),
    ],
)
async def test_anything_but_an_allowing_answer_leaves_the_body_unrun(
    answer: mcp_types.ElicitResult, mode: str
) -> None:
    runs: list[str] = []
    server = build_mcp_server(asking_registry(runs))
    with anyio.fail_after(10):
        async with Client(server, mode=mode, elicitation_callback=User(answer)) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert result.is_error
    assert runs == []


@pytest.mark.anyio
async def test_an_always_answer_holds_for_its_client_connection_only() -> None:
    runs: list[str] = []
    server = build_mcp_server(asking_registry(runs))
    first = User(accept("allow-always"))
    second = User(accept("reject"))
    with anyio.fail_after(10):
        async with Client(server, mode="legacy", elicitation_callback=first) as client:
            await client.call_tool("write", {"path": "a.txt"})
            again = await client.call_tool("write", {"path": "a.txt"})
        async with Client(server, mode="legacy", elicitation_callback=second) as other:
            refused = await other.call_tool("write", {"path": "a.txt"})
    assert not again.is_error
    assert len(first.asked) == 1  # remembered for the first client
    assert refused.is_error
    assert len(second.asked) == 1  # asked again: another client is another agent
    assert runs == ["a.txt", "a.txt"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_cannot_elicit_is_refused_under_approvals_deny(mode: str) -> None:
    runs: list[str] = []
    server = build_mcp_server(asking_registry(runs), approvals="deny")
    with anyio.fail_after(10):
        async with Client(server, mode=mode) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert result.is_error
    assert "no approval channel is available" in texts(result)
    assert runs == []
