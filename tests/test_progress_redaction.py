"""A secret a redaction policy removes from the final content reaches no wire while the
call runs either: not an MCP progress message, an ACP update, the command line's live
view, its ``--events`` lines, a span, or the audit log."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools import ToolExecutionInput, ToolRegistry, ToolRunContext, define_tool
from streaming import SECRET, Redact

pytestmark = pytest.mark.anyio


async def _leaky(args: Any, ctx: ToolRunContext) -> str:
    ctx.emit_output(f"token: {SECRET[:3]}")
    ctx.emit_output(f"{SECRET[3:]}\n")  # split across writes
    ctx.report_progress(1, 2, f"using {SECRET}")
    await anyio.sleep(0.15)
    ctx.emit_output(f"again {SECRET}\n")
    ctx.report_progress(2, 2, f"done with {SECRET}")
    return f"token: {SECRET}"


def _registry(*plugins: object) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(name="leaky", description="L.", parameters={}, execute=_leaky))
    for plugin in (Redact(), *plugins):
        registry.add_plugin(plugin)
    return registry


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_not_over_mcp() -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    messages: list[str | None] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with Client(build_mcp_server(_registry()), mode="legacy") as client:
        result = await client.call_tool("leaky", {}, progress_callback=progress)
    assert SECRET not in str(result.content)
    assert messages
    assert not any(SECRET in (message or "") for message in messages)


@pytest.mark.parametrize("terminal", [True, False])
async def test_not_over_acp(terminal: bool) -> None:
    from dsh_tools.bridges.acp import execute_with_acp

    class Client:
        def __init__(self) -> None:
            self.updates: list[Any] = []

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            self.updates.append(update)

    client = Client()
    await execute_with_acp(
        _registry(), ToolExecutionInput("a1", "leaky"), client, "s", terminal_output=terminal
    )
    assert any(update.get("status") == "in_progress" for update in client.updates)
    assert SECRET not in json.dumps(client.updates)


async def test_not_on_the_command_line() -> None:
    from dsh_tools.cli._progress import progress_view, run_showing_progress

    for json_output, events in ((False, False), (True, True)):
        out, err = io.StringIO(), io.StringIO()
        view = progress_view("leaky", json_output, events, out, err)
        await run_showing_progress(_registry(), ToolExecutionInput("c1", "leaky"), view)
        shown = out.getvalue() + err.getvalue()
        assert "token: ***" in shown
        assert SECRET not in shown


def test_not_in_a_span_or_the_audit_log(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dsh_tools_plugins.audit import AuditLog
    from dsh_tools_plugins.otel import OpenTelemetryPlugin

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = OpenTelemetryPlugin(tracer_provider=provider, progress_events=True, record_results=True)
    log = tmp_path / "audit.jsonl"
    registry = _registry(spans, AuditLog(str(log)))
    assert registry.execute_sync(ToolExecutionInput("s1", "leaky")).text == "token: ***"
    provider.shutdown()
    [span] = exporter.get_finished_spans()
    progress = [event for event in span.events if event.name == "dsh_tools.progress"]
    assert progress
    assert SECRET not in str([dict(event.attributes or {}) for event in progress])
    assert SECRET not in log.read_text()
