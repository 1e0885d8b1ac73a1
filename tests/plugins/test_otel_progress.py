"""``OpenTelemetryPlugin(progress_events=True)``: a streaming call's progress as span
events, coalesced to one a second and bounded per call; off by default."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh_tools import ToolExecutionInput, ToolRegistry, ToolRunContext, define_tool
from dsh_tools_plugins.otel import OpenTelemetryPlugin


def _chatty(args: Any, ctx: ToolRunContext) -> str:
    for n in range(1, 10_001):
        ctx.report_progress(n, 10_000, "secret-ish message")
        ctx.emit_output("x\n")
    return "ok"


@pytest.mark.parametrize("record_results", [False, True])
def test_progress_span_events_are_opt_in_coalesced_and_bounded(record_results: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans: dict[bool, Any] = {}
    for enabled in (False, True):
        registry = ToolRegistry()
        registry.register(
            define_tool(name="chatty", description="Talk.", parameters={}, execute=_chatty)
        )
        plugin = OpenTelemetryPlugin(
            tracer_provider=provider, progress_events=enabled, record_results=record_results
        )
        registry.add_plugin(plugin)
        assert registry.execute_sync(ToolExecutionInput(f"c{enabled}", "chatty")).text == "ok"
        [spans[enabled]] = [
            s
            for s in exporter.get_finished_spans()
            if s.attributes and s.attributes.get("gen_ai.tool.call.id") == f"c{enabled}"
        ]
        assert plugin.open_spans == 0
    provider.shutdown()
    assert not [e for e in spans[False].events if e.name == "dsh_tools.progress"]
    progress = [e for e in spans[True].events if e.name == "dsh_tools.progress"]
    assert 1 <= len(progress) <= 5  # the call takes well under a few seconds
    first = dict(progress[0].attributes or {})
    assert first["dsh_tools.progress.total"] == 10_000
    assert ("dsh_tools.progress.message" in first) is record_results
