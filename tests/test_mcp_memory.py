"""A long-running MCP server keeps nothing per request: over HTTP, without a bearer
token, each request of the per-request protocol is a client (an agent scope) of its
own, and the server must not keep a plan, a scope or a table for each (issue 31)."""

from __future__ import annotations

import functools
import gc
import sys
import tracemalloc

import anyio
import pytest

pytest.importorskip("mcp")

from dsh_tools import ToolRegistry, define_tool
from dsh_tools.bridges.mcp import serve_http

REQUESTS = 100
MOST_BYTES = 100
"""Kept per request, at most (the official MCP server keeps a few)."""

CLIENT = """
import sys, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url, n, mode):
    async with httpx2.AsyncClient(timeout=60) as http:
        for _ in range(n):
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                result = await client.call_tool("add", {"a": 1, "b": 2})
                assert not result.is_error, result

anyio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
"""


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    parameters = {"a": {"type": "integer", "required": True}, "b": {"type": "integer"}}
    registry.register(
        define_tool(
            name="add",
            description="Add.",
            parameters=parameters,
            execute=lambda args, ctx: args["a"] + args.get("b", 0),
        )
    )
    return registry


async def _requests(url: str, count: int, mode: str) -> None:
    """``count`` requests, each a client of its own, from another process."""
    done = await anyio.run_process([sys.executable, "-c", CLIENT, url, str(count), mode])
    assert done.returncode == 0


def _kept(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_server_keeps_nothing_per_request() -> None:
    mode = "2026-07-28"  # each request a client of its own (a handshake's session is too)
    registry = _registry()
    snapshots = []
    with anyio.fail_after(240):
        async with anyio.create_task_group() as group:
            url = await group.start(functools.partial(serve_http, registry, port=0))
            await _requests(url, 30, mode)  # caches warm, pools full
            tracemalloc.start()
            try:
                for count in (0, REQUESTS, REQUESTS):
                    await _requests(url, count, mode)
                    await anyio.sleep(1)  # the last connections' teardown
                    gc.collect()
                    snapshots.append(tracemalloc.take_snapshot())
            finally:
                tracemalloc.stop()
            group.cancel_scope.cancel()
    # What the first batch leaves once (connections still closing, a cache filling) is
    # not kept per request; what each batch adds is.
    first, second = _kept(snapshots[0], snapshots[1]), _kept(snapshots[1], snapshots[2])
    per_request = min(first, second) / REQUESTS
    assert per_request < MOST_BYTES, f"{first / REQUESTS:.0f}, {second / REQUESTS:.0f} bytes"
