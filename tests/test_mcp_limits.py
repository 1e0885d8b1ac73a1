"""Per-agent limits over MCP: clients without a bearer token cannot escape a budget or a
cap by being anonymous (every one of them is a new agent scope), while a client known by
its token has limits of its own; with the official SDK client over real HTTP."""

from __future__ import annotations

import functools

import anyio
import pytest

pytest.importorskip("mcp")

from dsh_tools import ToolRegistry, define_tool
from dsh_tools._accounts import ANONYMOUS_PREFIX as COUNTED
from dsh_tools._accounts import account
from dsh_tools.bridges._mcp_clients import ANONYMOUS_PREFIX as MADE
from dsh_tools.bridges.mcp import serve_http
from dsh_tools_plugins.limits import CallBudget, ConcurrencyLimit
from test_mcp_clients import ALICE, BOB, client


def test_the_limits_know_the_scopes_the_bridge_makes_for_anonymous_clients() -> None:
    assert MADE == COUNTED
    assert account(f"{MADE}00ff") == "mcp-anonymous"
    assert account(f"team/{MADE}00ff/sub") == "team/mcp-anonymous"
    assert account("team/mcp-" + "0f" * 16) == "team/mcp-" + "0f" * 16  # a token's scope
    assert account(None) is None


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_clients_without_a_token_share_one_budget_and_one_cap(
    anyio_backend: str, mode: str
) -> None:
    """``auto``: the per-request protocol, each request a client of its own; ``legacy``:
    each connection a client of its own. Either way the six calls of three clients
    without a token run twice; each client with a token has a budget of its own."""
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")
    runs: list[str] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="Fetch.",
            parameters={"who": {"type": "string", "required": True}},
            execute=lambda args, ctx: runs.append(args["who"]) or "fetched",
        )
    )
    budget = CallBudget(2, "fetch")
    limit = ConcurrencyLimit(per_agent=1)
    registry.add_plugin(budget)
    registry.add_plugin(limit)
    denied: list[str] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            url = await group.start(functools.partial(serve_http, registry, port=0))
            for who, token in [("a", None), ("b", None), ("c", None), ("alice", ALICE)]:
                async with client(url, token, mode=mode) as connected:
                    for _ in range(2):
                        result = await connected.call_tool("fetch", {"who": who})
                        if result.is_error:
                            denied.append(who)
            async with client(url, BOB, mode=mode) as connected:
                assert not (await connected.call_tool("fetch", {"who": "bob"})).is_error
            group.cancel_scope.cancel()
    assert runs == ["a", "a", "alice", "alice", "bob"]
    assert denied == ["b", "b", "c", "c"]
    # Their cap is one pool too, whatever scope the next anonymous client gets.
    anonymous = limit.pools("fetch", f"{MADE}{'1' * 32}")
    assert anonymous == limit.pools("fetch", f"{MADE}{'2' * 32}")
