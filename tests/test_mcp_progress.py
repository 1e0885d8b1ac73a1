"""``serve-mcp`` sends a running tool's progress and output as ``notifications/progress``
to the official client's ``progress_callback``, while the tool runs, filtered by the
scope's policies, bounded, and never after the result."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from dsh_tools import ToolDefinition, ToolRegistry, ToolRunContext, define_tool
from dsh_tools.bridges.mcp import build_mcp_server, serve_http
from dsh_tools.progress import Progress
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.workspace import Workspace
from streaming import TICKING, Redact

pytestmark = pytest.mark.anyio


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_running_command_sends_progress_while_it_runs(tmp_path: Path, mode: str) -> None:
    registry = ToolRegistry()
    registry.register(run_command_tool(Workspace(tmp_path), sandbox="off"))
    received: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        received.append((value, total, message))
        if message and "line 0" in message:
            (tmp_path / "go").touch()

    with anyio.fail_after(20):
        async with Client(build_mcp_server(registry), mode=mode) as client:
            watched = await client.call_tool(
                "run_command", {"command": TICKING}, progress_callback=progress
            )
            count = len(received)
            (tmp_path / "go").touch()
            unwatched = await client.call_tool("run_command", {"command": TICKING})
    lines = "\n".join(message or "" for _, _, message in received)
    assert "no go" not in lines
    assert [f"line {n}" for n in range(30)] == [
        line for line in lines.splitlines() if line.startswith("line")
    ]
    assert 5 <= count < 200  # while it ran, a few a second, not one per line at the end
    values = [value for value, _, _ in received]
    assert all(a < b for a, b in itertools.pairwise(values))  # progress grows, as MCP requires
    assert (watched.structured_content, watched.content) == (
        unwatched.structured_content,
        unwatched.content,
    )


async def test_a_million_reports_give_few_notifications_none_after_the_result_no_secret() -> None:
    def chatty(args: Any, ctx: ToolRunContext) -> str:
        for n in range(1_000_000):
            ctx.report_progress(n + 1, 1_000_000, "reading hunter2")
            if n % 100_000 == 0:
                ctx.emit_output(f"password = hunter2 ({n})\n")
        return "password = hunter2"

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="chatty", description="Talk.", parameters={}, execute=chatty, blocking=True
        )
    )
    registry.add_plugin(Redact())
    received: list[tuple[float, float | None, str | None]] = []
    returned = False
    late: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        received.append((value, total, message))
        if returned:
            late.append(value)

    with anyio.fail_after(60):
        async with Client(build_mcp_server(registry)) as client:
            result = await client.call_tool("chatty", {}, progress_callback=progress)
            returned = True
            await anyio.sleep(0.3)
    assert result.content[0].text == "password = ***"  # type: ignore[union-attr]
    assert late == []
    assert 1 <= len(received) < 2000
    assert received[-1][:2] == (1_000_000, 1_000_000)
    values = [value for value, _, _ in received]
    assert all(a < b for a, b in itertools.pairwise(values))
    assert not any("hunter2" in (message or "") for _, _, message in received)
    assert any("password = ***" in (message or "") for _, _, message in received)


async def test_a_proxied_tool_streams_its_remote_progress_to_local_listeners() -> None:
    from dsh_tools._models import ToolExecutionInput
    from dsh_tools.bridges.mcp import load_mcp_tools
    from dsh_tools.testing import ProgressRecorder

    async def steps(args: Any, ctx: ToolRunContext) -> str:
        for n in range(1, 4):
            ctx.report_progress(n, 3, f"step {n}")
            await anyio.sleep(0.15)
        return "done"

    remote = ToolRegistry()
    remote.register(define_tool(name="steps", description="Step.", parameters={}, execute=steps))
    local = ToolRegistry()
    recorder = ProgressRecorder()
    local.add_plugin(recorder)
    with anyio.fail_after(10):
        async with Client(build_mcp_server(remote)) as client:
            for tool in await load_mcp_tools(client):
                local.register(tool.definition)
            result = await local.execute(ToolExecutionInput("p1", "steps"))
    assert result.text == "done"
    progress = recorder.progress("p1")
    assert progress[-1] == Progress(3, 3, "step 3")
    assert len(progress) >= 2  # as the remote tool went, not one at the end


@contextlib.asynccontextmanager
async def _connected(registry: ToolRegistry, transport: str) -> AsyncIterator[Client]:
    """The official client on ``registry``'s server: in-process on either protocol, or
    over streamable HTTP on the per-request one."""
    if transport != "http":
        async with Client(build_mcp_server(registry), mode=transport) as client:
            yield client
        return
    async with anyio.create_task_group() as group:
        url = await group.start(functools.partial(serve_http, registry, port=0))
        async with httpx2.AsyncClient(timeout=30) as http:
            stream = streamable_http_client(url, http_client=http)
            async with Client(stream, mode="2026-07-28") as client:
                yield client
        group.cancel_scope.cancel()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("transport", ["legacy", "2026-07-28", "http"])
async def test_a_request_that_asks_for_no_progress_gives_the_call_no_stream(
    transport: str,
) -> None:
    """A client that asks for no progress gets no stream, so a body's report is not even
    checked: a request of the handshake protocol, or one over HTTP, has no progress token;
    one of the per-request protocol in-process (where the SDK hands the callback over
    without a token) has no callback."""

    def careless(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress("not a number")  # type: ignore[arg-type]  # checked only when heard
        return "ran"

    registry = ToolRegistry()
    registry.register(
        define_tool(name="careless", description="C.", parameters={}, execute=careless)
    )

    async def progress(value: float, total: float | None, message: str | None) -> None:
        return None

    with anyio.fail_after(30):
        async with _connected(registry, transport) as client:
            unheard = await client.call_tool("careless", {})
            heard = await client.call_tool("careless", {}, progress_callback=progress)
    assert (unheard.is_error, unheard.content[0].text) == (False, "ran")  # type: ignore[union-attr]
    assert heard.is_error
    assert "report_progress() done must be a finite number" in heard.content[0].text  # type: ignore[union-attr]


def _heard_tool(heard: threading.Event) -> ToolDefinition[Any]:
    """A plain ``def`` tool that reports, then waits for its report to be heard: it can
    return "heard" only if its progress reached the client while it ran."""

    def waits(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "half way")
        return "heard" if heard.wait(5) else "nobody heard while it ran"

    return define_tool(name="waits", description="Wait.", parameters={}, execute=waits)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_def_body_s_progress_reaches_the_client_while_it_runs(mode: str) -> None:
    heard = threading.Event()
    registry = ToolRegistry()
    registry.register(_heard_tool(heard))
    received: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        received.append((value, total, message))
        heard.set()

    with anyio.fail_after(20):
        async with Client(build_mcp_server(registry), mode=mode) as client:
            result = await client.call_tool("waits", {}, progress_callback=progress)
    assert result.content[0].text == "heard"  # type: ignore[union-attr]
    assert received[0] == (1, 2, "half way")


async def test_concurrent_calls_of_a_def_tool_run_at_once() -> None:
    spans: list[tuple[float, float]] = []

    def nap(args: Any, ctx: ToolRunContext) -> str:
        started = time.monotonic()
        time.sleep(0.5)
        spans.append((started, time.monotonic()))
        return "rested"

    registry = ToolRegistry()
    registry.register(define_tool(name="nap", description="Nap.", parameters={}, execute=nap))
    texts: list[str] = []
    with anyio.fail_after(20):
        async with Client(build_mcp_server(registry)) as client:

            async def one() -> None:
                result = await client.call_tool("nap", {})
                texts.append(result.content[0].text)  # type: ignore[union-attr]

            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(one)
    assert texts == ["rested"] * 4
    # Every nap began before any ended: the four bodies ran at the same time, none of
    # them on the server's event loop.
    assert max(start for start, _ in spans) < min(end for _, end in spans)
