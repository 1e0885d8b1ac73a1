"""Case 9: what the OpenTelemetry plugin costs a call when nothing records its spans.

Per the issue notes, a no-op span alone costs about as much as a whole bare call, so the
target compares the plugin with a no-op tracer and meter provider against the same call
with one no-op plugin (a result observer: the call takes the staged path either way),
in the same run: <= 1.5x. For information: the plugin under the API's default global
providers (what a host gets before it installs an SDK), the decisions plugin (its calls
collect decision records) with no-op providers, and the plugin with the SDK recording
every span to a processor that drops it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import peers
from _harness import Row, Settings, compare_async, ratio_row, us
from case_execute import ResultObserver, _check, dsh_call, registry

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools_plugins.otel import OpenTelemetryDecisionsPlugin, OpenTelemetryPlugin


def _with(plugin: object) -> ToolRegistry:
    """Case 1's ``add`` tool with ``plugin`` as its only plugin."""
    reg = registry(plugins=False)
    reg.add_plugin(plugin)
    return reg


def _sdk_plugin() -> tuple[str, OpenTelemetryPlugin] | None:
    """The plugin with the SDK recording every span (dropped by an empty processor)."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    except ImportError:
        return None
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SpanProcessor())
    plugin = OpenTelemetryPlugin(tracer_provider=tracer_provider, meter_provider=MeterProvider())
    return "OpenTelemetry plugin, SDK recording (spans dropped)", plugin


def run(settings: Settings) -> list[Row]:
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return [Row("9", "OpenTelemetry plugin", unit="", note="skipped: needs the otel extra")]
    baseline = "execute + 1 no-op plugin"
    noop = "OpenTelemetry plugin, no-op providers"
    no_ops = {
        "tracer_provider": trace.NoOpTracerProvider(),
        "meter_provider": metrics.NoOpMeterProvider(),
    }
    regs = {
        baseline: _with(ResultObserver()),
        noop: _with(OpenTelemetryPlugin(**no_ops)),
        "OpenTelemetry plugin, default global providers": _with(OpenTelemetryPlugin()),
        "OpenTelemetryDecisionsPlugin, no-op providers": _with(
            OpenTelemetryDecisionsPlugin(**no_ops)
        ),
    }
    sdk = _sdk_plugin()
    if sdk is not None:
        regs[sdk[0]] = _with(sdk[1])
    candidates: dict[str, Callable[[], Awaitable[object]]] = {}
    for name, reg in regs.items():
        _check(asyncio.run(reg.execute(ToolExecutionInput("c1", "add", json.loads(peers.ARGS)))))
        candidates[name] = dsh_call(reg)
    number = max(50, int(2000 * settings.scale))
    timings = compare_async(candidates, number, settings.repeat)
    base = timings[baseline]
    rows = [Row("9", baseline, *us(base), note="baseline (case-2 style)")]
    rows.append(ratio_row("9", noop, timings[noop], baseline, base, limit=1.5))
    for name in list(regs)[2:]:
        rows.append(ratio_row("9", name, timings[name], baseline, base, note="for information"))
    return rows
