"""Never waste a yes over MCP: a client that can elicit is not asked about a call the
tool would refuse whatever it answered, nor about one a guard would deny."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp import types as mcp_types

from dsh_tools import Ask, ToolError, ToolRegistry, define_tool, hookimpl
from dsh_tools.bridges.mcp import build_mcp_server


class AskFirst:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("deploys need a person")


def _frozen(args: Any) -> None:
    if args is not None and args["target"] == "production":
        raise ToolError("production is frozen this week")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_refused_call_elicits_nothing(mode: str) -> None:
    ran: list[str] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="deploy",
            description="Deploy.",
            parameters={"target": {"type": "string", "required": True}},
            execute=lambda args, ctx: ran.append(args["target"]) or "deployed",
            preflight=_frozen,
        )
    )
    registry.add_plugin(AskFirst())
    registry.guard(
        lambda execution: "not the moon" if execution.arguments["target"] == "moon" else None
    )
    asked: list[str] = []

    async def user(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"decision": "allow-once"})

    with anyio.fail_after(10):
        async with Client(
            build_mcp_server(registry), mode=mode, elicitation_callback=user
        ) as client:
            frozen = await client.call_tool("deploy", {"target": "production"})
            moon = await client.call_tool("deploy", {"target": "moon"})
            staging = await client.call_tool("deploy", {"target": "staging"})
    assert frozen.is_error
    assert "production is frozen this week" in frozen.content[0].text  # type: ignore[union-attr]
    assert moon.is_error
    assert "not the moon" in moon.content[0].text  # type: ignore[union-attr]
    assert not staging.is_error
    assert len(asked) == 1  # only the call that could run was put to the person
    assert ran == ["staging"]
