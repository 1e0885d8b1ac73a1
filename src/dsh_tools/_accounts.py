"""Who a per-agent limit, or the call journal, counts a call against: its agent, except
for anonymous clients.

An MCP client served over HTTP without a bearer token is a new agent scope whenever it
opens a connection, or on every request (``mcp-anon-<hex>``, made by
:mod:`dsh_tools.bridges._mcp_clients`). Remembered answers and tickets stay its own, but
a per-agent limit counted per such scope would never bind: every such client under the
same parent scope is counted as one account, ``mcp-anonymous``; the call journal keys
their calls by it too, so a client's retry on a new connection meets its earlier attempt
(its idempotency key, or the same call whose outcome is unknown). A client known by its
bearer token is its own account.
"""

from __future__ import annotations

__all__ = ["ANONYMOUS", "ANONYMOUS_PREFIX", "account"]

ANONYMOUS_PREFIX = "mcp-anon-"
"""How the MCP bridge begins the scope key of a client no bearer token names."""
ANONYMOUS = "mcp-anonymous"
"""The account of every such client (and of any scope under one)."""


def account(agent: str | None) -> str | None:
    """The account per-agent limits and the call journal count ``agent``'s calls against."""
    if agent is None or ANONYMOUS_PREFIX not in agent:
        return agent
    keys = agent.split("/")
    for depth, key in enumerate(keys):
        if key.startswith(ANONYMOUS_PREFIX):
            return "/".join([*keys[:depth], ANONYMOUS])
    return agent
