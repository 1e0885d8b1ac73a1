"""Case 14: an MCP server, against the official one (the MCP SDK's ``MCPServer``).

* Round trip: the official client (``mcp.Client``, in-process, on the per-request
  protocol and, for information, on the handshake one) calls ``add(a, b)`` on each
  server, interleaved in one run: an ``async def`` tool (target <= 0.8x the official
  server) and a plain ``def`` tool (<= 1.0x; both servers run it in a worker thread).
  Each kind is a comparison of its own, so the two servers' batches take turns: in one
  comparison of all four, whichever batch followed the other kind's thread hops was
  the slower for it (our ``async`` tool's always did, and read about 0.03x worse).
* Memory: each server over streamable HTTP, in this process, answers requests of the
  official client from another process, each request a client of its own (no bearer
  token, the per-request protocol); tracemalloc says what the server keeps per request
  over ``REQUESTS`` requests (target < 100 bytes).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from _harness import Row, Settings, Timing, compare_on_loop, ratio_row, us

PARAMETERS = {
    "a": {"type": "integer", "required": True},
    "b": {"type": "integer", "required": True},
}
REQUESTS = 1000
MODES = {"per-request": "2026-07-28", "handshake": "legacy"}
TOOLS = {"async": "add_async", "def": "add_sync"}
TARGETS = {"async": 0.8, "def": 1.0}


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def add_sync(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _async_body(args: Any, ctx: Any) -> int:
    return int(args["a"] + args["b"])


def _sync_body(args: Any, ctx: Any) -> int:
    return int(args["a"] + args["b"])


def _registry() -> Any:
    from dsh_tools import ToolRegistry, define_tool

    registry = ToolRegistry()
    for name, body in (("add_async", _async_body), ("add_sync", _sync_body)):
        registry.register(
            define_tool(name=name, description="Add.", parameters=PARAMETERS, execute=body)
        )
    return registry


def _official() -> Any:
    """The official server with the same two tools."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]
    server = Server("peer")
    server.tool()(add_async)
    server.tool()(add_sync)
    return server


async def _round_trips(mode: str, number: int, repeat: int) -> dict[str, Timing]:
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    servers = {"dsh-tools": build_mcp_server(_registry()), "official": _official()}
    async with (
        Client(servers["dsh-tools"], mode=mode) as ours,
        Client(servers["official"], mode=mode) as theirs,
    ):
        timings: dict[str, Timing] = {}
        for kind, tool in TOOLS.items():  # one comparison per kind (see the docstring)
            candidates: dict[str, Callable[[], Awaitable[object]]] = {
                f"{name} {kind}": _caller(client, tool)
                for name, client in (("dsh-tools", ours), ("official", theirs))
            }
            timings.update(await compare_on_loop(candidates, number, repeat))
        return timings


def _caller(client: Any, tool: str) -> Callable[[], Awaitable[object]]:
    async def call() -> object:
        result = await client.call_tool(tool, {"a": 1, "b": 2})
        assert not result.is_error, result
        return result

    return call


def _round_trip_rows(settings: Settings) -> list[Row]:
    import anyio

    number = max(20, int(200 * settings.scale))
    rows: list[Row] = []
    for label, mode in MODES.items():
        timings = anyio.run(_round_trips, mode, number, settings.repeat)
        judged = label == "per-request"
        for kind in TOOLS:
            official = timings[f"official {kind}"]
            rows.append(Row("14", f"official MCPServer, {kind} tool, {label}", *us(official)))
            rows.append(
                ratio_row(
                    "14",
                    f"dsh-tools serve, {kind} tool, {label}",
                    timings[f"dsh-tools {kind}"],
                    "official MCPServer, same run",
                    official,
                    TARGETS[kind] if judged else None,
                )
            )
    return rows


# ---------------------------------------------------------------------- memory

CLIENT = """
import sys, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url):
    async with httpx2.AsyncClient(timeout=60) as http:
        for line in sys.stdin:
            for _ in range(int(line)):
                transport = streamable_http_client(url, http_client=http)
                async with Client(transport, mode="2026-07-28") as client:
                    result = await client.call_tool("add_async", {"a": 1, "b": 2})
                    assert not result.is_error, result
            print("done", flush=True)

anyio.run(main, sys.argv[1])
"""


async def _serve(name: str, task_status: Any) -> None:
    """Serve ``name``'s server on a free loopback port until cancelled."""
    import uvicorn

    from dsh_tools.bridges._mcp_http import _bound_socket, _run_until_cancelled, _url
    from dsh_tools.bridges.mcp import serve_http

    if name == "dsh-tools":
        await serve_http(_registry(), port=0, task_status=task_status)
        return
    sock = _bound_socket("127.0.0.1", 0)
    url = _url("127.0.0.1", sock.getsockname()[1], "/mcp")
    app = _official().streamable_http_app()
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await _run_until_cancelled(web, sock, url, task_status)


async def _kept(name: str, requests: int) -> float:
    """Bytes ``name``'s server keeps per request: what a batch of ``requests`` left,
    after earlier batches (caches warm, connections settled)."""
    import anyio

    async with anyio.create_task_group() as group:
        url = await group.start(_serve, name)
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        stdin, stdout = client.stdin, client.stdout
        assert stdin is not None
        assert stdout is not None

        async def batch(count: int) -> None:
            stdin.write(f"{count}\n".encode())
            stdin.flush()
            line = await anyio.to_thread.run_sync(stdout.readline)
            assert line.strip() == b"done", line
            await anyio.sleep(1)  # the last connections' teardown
            gc.collect()

        try:
            await batch(50)
            tracemalloc.start()
            await batch(requests // 10)
            before = tracemalloc.take_snapshot()
            await batch(requests)
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
            stdin.close()
            client.wait(30)
            group.cancel_scope.cancel()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / requests


def _memory_rows(settings: Settings) -> list[Row]:
    import anyio

    requests = REQUESTS if not settings.quick else REQUESTS // 4
    rows = []
    for name in ("official", "dsh-tools"):
        per_request = anyio.run(_kept, name, requests, backend="asyncio")
        mine = name == "dsh-tools"
        rows.append(
            Row(
                "14",
                f"{name} server over HTTP, kept per request",
                per_request,
                unit="B",
                target="< 100 B" if mine else None,
                met=per_request < 100 if mine else None,
                note=f"{requests} requests, each a client of its own",
            )
        )
    return rows


def run(settings: Settings) -> list[Row]:
    try:
        import mcp  # noqa: F401
    except ImportError:
        return [Row("14", "MCP server", unit="", note="skipped: needs the mcp extra")]
    return _round_trip_rows(settings) + _memory_rows(settings)
