"""The OpenTelemetry plugin, read back the way a backend sees it: the SDK's in-memory span
exporter and metric reader. One ``execute_tool`` span per call, whatever ended the call
(success, tool error, denial, unknown tool, invalid arguments, cancellation, timeout),
a child of the caller's span, and none left open."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from dsh_tools import (
    Block,
    Deny,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    define_tool,
    hookimpl,
)
from dsh_tools._cancel import CancelSource
from dsh_tools._plugins.loading import load_plugins
from dsh_tools.errors import ErrorCode, PluginConfigError, ToolError
from dsh_tools_plugins.otel import (
    DURATION_METRIC,
    ENV_VAR,
    OpenTelemetryDecisionsPlugin,
    OpenTelemetryPlugin,
)


@attrs.define
class Backend:
    """What an exporter and a metric reader received."""

    tracer_provider: TracerProvider
    spans_out: InMemorySpanExporter
    meter_provider: MeterProvider
    metrics_out: InMemoryMetricReader

    def spans(self, name_prefix: str = "execute_tool") -> list[ReadableSpan]:
        return [s for s in self.spans_out.get_finished_spans() if s.name.startswith(name_prefix)]

    def durations(self) -> list[HistogramDataPoint]:
        data = self.metrics_out.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == DURATION_METRIC
            for point in metric.data.data_points  # type: ignore[attr-defined]
        ]

    def plugin(self, **flags: bool) -> OpenTelemetryPlugin:
        return OpenTelemetryPlugin(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **flags
        )


@pytest.fixture
def backend() -> Iterator[Backend]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Backend(tracer_provider, spans, meter_provider, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


async def _add(args: Any, ctx: ToolRunContext) -> int:
    return args["a"] + args["b"]  # type: ignore[no-any-return]


def _add_tool() -> Any:
    return define_tool(
        name="add",
        description="Add two integers.",
        parameters={"a": {"type": "integer"}, "b": {"type": "integer"}},
        execute=_add,
    )


def _call(name: str = "add", call_id: str = "c1", **arguments: Any) -> ToolExecutionInput:
    return ToolExecutionInput(call_id, name, arguments or {"a": 1, "b": 2})


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --------------------------------------------------------------------------- attributes


@pytest.mark.anyio
async def test_a_call_is_one_execute_tool_span_under_the_callers_span(backend: Backend) -> None:
    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.add_plugin(backend.plugin())
    tracer = backend.tracer_provider.get_tracer("host")
    with tracer.start_as_current_span("agent turn") as turn:
        result = await registry.execute(_call(call_id="call-7"))
        assert trace.get_current_span() is turn  # the caller's context is restored
    assert not result.is_error
    (span,) = backend.spans()
    assert span.name == "execute_tool add"
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id
    assert _attributes(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call-7",
        "gen_ai.tool.description": "Add two integers.",
        "gen_ai.tool.type": "function",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()
    (point,) = backend.durations()
    assert point.count == 1
    assert dict(point.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
    }
    assert 0 < point.sum < 5


def test_execute_sync_gets_the_same_span(backend: Backend) -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(name="echo", description="Echo.", parameters={}, execute=lambda args, ctx: "hi")
    )
    registry.add_plugin(backend.plugin())
    with backend.tracer_provider.get_tracer("host").start_as_current_span("turn") as turn:
        assert registry.execute_sync(ToolExecutionInput("s1", "echo")).is_error is False
        assert trace.get_current_span() is turn
    (span,) = backend.spans()
    assert span.name == "execute_tool echo"
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id
    assert _attributes(span)["gen_ai.tool.call.id"] == "s1"


@pytest.mark.anyio
async def test_what_the_call_does_nests_under_its_span(backend: Backend) -> None:
    """The span is current while the call runs: the body's own spans, and a tool call
    made from inside a body, are its children."""
    tracer = backend.tracer_provider.get_tracer("tool code")
    registry = ToolRegistry()
    registry.register(_add_tool())

    async def outer(args: Any, ctx: ToolRunContext) -> int:
        with tracer.start_as_current_span("query database"):
            pass
        inner = await registry.execute(_call(call_id="inner"))
        return inner.value  # type: ignore[union-attr,return-value]

    registry.register(
        define_tool(name="outer", description="Calls add.", parameters={}, execute=outer)
    )
    registry.add_plugin(backend.plugin())
    assert (await registry.execute(ToolExecutionInput("o1", "outer"))).is_error is False
    spans = {span.name: span for span in backend.spans_out.get_finished_spans()}
    outer_id = spans["execute_tool outer"].context.span_id  # type: ignore[union-attr]
    assert spans["query database"].parent.span_id == outer_id  # type: ignore[union-attr]
    assert spans["execute_tool add"].parent.span_id == outer_id  # type: ignore[union-attr]
    assert spans["execute_tool outer"].parent is None  # no caller span: a root


def test_a_plugin_on_a_scope_traces_that_agents_calls_only(backend: Backend) -> None:
    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.scope("team").scope("bot").add_plugin(backend.plugin())
    registry.execute_sync(ToolExecutionInput("host", "add", {"a": 1, "b": 2}))
    registry.execute_sync(ToolExecutionInput("bot", "add", {"a": 1, "b": 2}, agent="team/bot"))
    (span,) = backend.spans()
    assert _attributes(span)["gen_ai.tool.call.id"] == "bot"
    assert _attributes(span)["dsh_tools.agent"] == "team/bot"


# --------------------------------------------------------------------------- failures


@pytest.mark.anyio
async def test_failures_set_error_type_to_the_code_and_status_error(backend: Backend) -> None:
    def broken(args: Any, ctx: ToolRunContext) -> str:
        raise RuntimeError("disk on fire")

    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.register(
        define_tool(name="broken", description="Fails.", parameters={}, execute=broken)
    )
    registry.add_plugin(backend.plugin())
    codes = {}
    for call in (
        _call("broken", "e1"),
        _call("missing", "e2"),
        _call("add", "e3", a="one", b=2),
        ToolExecutionInput("e4", "add", {"a": object()}),
    ):
        codes[call.call_id] = (await registry.execute(call)).code  # type: ignore[union-attr]
    assert codes == {
        "e1": "TOOL_ERROR",
        "e2": "UNKNOWN_TOOL",
        "e3": "INVALID_ARGS",
        "e4": "INVALID_JSON",
    }
    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in backend.spans()}
    assert sorted(spans) == ["e1", "e2", "e3", "e4"]
    for call_id, code in codes.items():
        span = spans[call_id]
        assert _attributes(span)["error.type"] == code
        assert span.status.status_code is StatusCode.ERROR
        # Without record_results the failure's message (it may quote the tool's output
        # or arguments) stays out of the span.
        assert span.status.description is None
    assert spans["e2"].name == "execute_tool missing"
    assert "gen_ai.tool.description" not in _attributes(spans["e2"])
    points = {dict(p.attributes or {}).get("error.type"): p.count for p in backend.durations()}
    assert points == {"TOOL_ERROR": 1, "UNKNOWN_TOOL": 1, "INVALID_ARGS": 1, "INVALID_JSON": 1}


@pytest.mark.anyio
async def test_policy_decisions_are_span_events(backend: Backend) -> None:
    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Deny | None:
            return Deny("no adding on Sundays") if execution.call_id == "pre" else None

        @hookimpl
        def dsh_tools_post_execute(self, execution: Any, result: Any) -> Block | None:
            return Block("the sum is secret") if execution.call_id == "post" else None

    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.guard(lambda execution: "guarded" if execution.call_id == "guard" else None)
    registry.add_plugin(Policy())
    registry.add_plugin(backend.plugin())
    for call_id in ("pre", "guard", "post", "ok"):
        await registry.execute(_call(call_id=call_id))
    events = {
        _attributes(s)["gen_ai.tool.call.id"]: [
            (e.name, dict(e.attributes or {})) for e in s.events
        ]
        for s in backend.spans()
    }
    assert events == {
        "pre": [
            (
                "dsh_tools.decision",
                {
                    "dsh_tools.stage": "policy",
                    "dsh_tools.decision": "deny",
                    "dsh_tools.reason": "no adding on Sundays",
                },
            )
        ],
        "guard": [
            (
                "dsh_tools.decision",
                {
                    "dsh_tools.stage": "policy",
                    "dsh_tools.decision": "deny",
                    "dsh_tools.reason": "guarded",
                },
            )
        ],
        "post": [
            (
                "dsh_tools.decision",
                {
                    "dsh_tools.stage": "post_execute",
                    "dsh_tools.decision": "block",
                    "dsh_tools.reason": "the sum is secret",
                },
            )
        ],
        "ok": [],
    }
    errors = {
        _attributes(s)["gen_ai.tool.call.id"]: _attributes(s).get("error.type")
        for s in backend.spans()
    }
    assert errors == {"pre": "DENIED", "guard": "DENIED", "post": "BLOCKED", "ok": None}


@pytest.mark.anyio
async def test_a_call_decided_before_the_plugin_still_gets_its_span(backend: Backend) -> None:
    """A ``tryfirst`` pre-execute registered later runs before the plugin's and may decide
    alone; the span then comes from the result stage, still under the caller's span."""

    class Early:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: Any) -> Deny:
            return Deny("decided early")

    registry = ToolRegistry()
    registry.register(_add_tool())
    plugin = backend.plugin()
    registry.add_plugin(plugin)
    registry.add_plugin(Early())
    with backend.tracer_provider.get_tracer("host").start_as_current_span("turn") as turn:
        assert (await registry.execute(_call())).code == "DENIED"  # type: ignore[union-attr]
    (span,) = backend.spans()
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id
    assert _attributes(span)["error.type"] == "DENIED"
    assert plugin.open_spans == 0


# --------------------------------------------------------------------------- cancellation


@pytest.mark.anyio
async def test_cancelled_and_timed_out_calls_end_their_span(backend: Backend) -> None:
    started = anyio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        await anyio.sleep(30)
        return "late"

    registry = ToolRegistry()
    registry.register(define_tool(name="slow", description="Slow.", parameters={}, execute=slow))
    registry.register(
        define_tool(name="bounded", description="Slow.", parameters={}, execute=slow, timeout_ms=20)
    )
    plugin = backend.plugin()
    registry.add_plugin(plugin)

    before = CancelSource()
    before.cancel()
    during = CancelSource()
    with anyio.fail_after(10):
        pre = await registry.execute(ToolExecutionInput("before", "slow", signal=before.signal))
        async with anyio.create_task_group() as group:
            results = {}

            async def run() -> None:
                call = ToolExecutionInput("during", "slow", signal=during.signal)
                results["during"] = await registry.execute(call)

            group.start_soon(run)
            await started.wait()
            during.cancel()
        timed_out = await registry.execute(ToolExecutionInput("timeout", "bounded"))
    codes = {"before": pre.code, "during": results["during"].code, "timeout": timed_out.code}  # type: ignore[union-attr]
    assert codes == {
        "before": "ABORTED_BEFORE_DISPATCH",
        "during": "ABORTED",
        "timeout": "TOOL_TIMEOUT",
    }
    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in backend.spans()}
    assert {k: _attributes(s)["error.type"] for k, s in spans.items()} == codes
    assert plugin.open_spans == 0


@pytest.mark.anyio
async def test_a_host_cancelled_call_ends_its_span_and_restores_the_context(
    backend: Backend,
) -> None:
    started = anyio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        await anyio.sleep(30)
        return "late"

    registry = ToolRegistry()
    registry.register(define_tool(name="slow", description="Slow.", parameters={}, execute=slow))
    plugin = backend.plugin()
    registry.add_plugin(plugin)
    tracer = backend.tracer_provider.get_tracer("host")
    with anyio.fail_after(10), tracer.start_as_current_span("turn") as turn:
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await registry.execute(ToolExecutionInput("h1", "slow"))

            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
        assert trace.get_current_span() is turn
    (span,) = backend.spans()
    assert _attributes(span)["error.type"] == "ABORTED"
    assert span.end_time is not None
    assert plugin.open_spans == 0


@pytest.mark.anyio
async def test_no_span_leaks_under_a_thousand_concurrent_calls(backend: Backend) -> None:
    async def napping(args: Any, ctx: ToolRunContext) -> int:
        await anyio.sleep(0.01)
        return args["n"]  # type: ignore[no-any-return]

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="nap", description="Naps.", parameters={"n": {"type": "integer"}}, execute=napping
        )
    )
    registry.guard(lambda execution: "odd" if execution.arguments["n"] % 7 == 0 else None)
    plugin = backend.plugin()
    registry.add_plugin(plugin)
    tracer = backend.tracer_provider.get_tracer("host")
    with anyio.fail_after(60), tracer.start_as_current_span("turn") as turn:
        async with anyio.create_task_group() as group:
            for n in range(1000):
                call = ToolExecutionInput(f"n{n}", "nap", {"n": n})
                group.start_soon(registry.execute, call)
        assert trace.get_current_span() is turn
    spans = backend.spans()
    assert len(spans) == 1000
    assert {_attributes(s)["gen_ai.tool.call.id"] for s in spans} == {f"n{n}" for n in range(1000)}
    assert len({s.context.span_id for s in spans}) == 1000  # type: ignore[union-attr]
    turn_id = turn.get_span_context().span_id
    assert all(s.parent is not None and s.parent.span_id == turn_id for s in spans)
    denied = [s for s in spans if _attributes(s).get("error.type") == "DENIED"]
    assert len(denied) == len(range(0, 1000, 7))
    assert plugin.open_spans == 0
    assert sum(point.count for point in backend.durations()) == 1000


# --------------------------------------------------------------------------- recording


@pytest.mark.anyio
async def test_arguments_and_results_are_recorded_only_when_asked(backend: Backend) -> None:
    def broken(args: Any, ctx: ToolRunContext) -> str:
        raise RuntimeError("token abc123 rejected")

    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.register(
        define_tool(name="broken", description="Fails.", parameters={}, execute=broken)
    )
    quiet = registry.add_plugin(backend.plugin())
    await registry.execute(_call(call_id="quiet", a=40, b=2))
    quiet()
    registry.add_plugin(backend.plugin(record_arguments=True, record_results=True))
    await registry.execute(_call(call_id="loud", a=40, b=2))
    await registry.execute(_call("broken", "loud-failure"))
    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in backend.spans()}
    assert "gen_ai.tool.call.arguments" not in _attributes(spans["quiet"])
    assert "gen_ai.tool.call.result" not in _attributes(spans["quiet"])
    assert _attributes(spans["loud"])["gen_ai.tool.call.arguments"] == '{"a":40,"b":2}'
    assert _attributes(spans["loud"])["gen_ai.tool.call.result"] == "42"
    failure = spans["loud-failure"]
    assert _attributes(failure)["gen_ai.tool.call.result"] == "Error: token abc123 rejected"
    assert failure.status.description == "token abc123 rejected"


SECRET = "sk-live-4242"


def _texts(span: ReadableSpan) -> str:
    """Every text a backend receives of a span: attributes, events, status."""
    parts = [str(value) for value in _attributes(span).values()]
    for event in span.events:
        parts.extend(str(value) for value in (event.attributes or {}).values())
    parts.append(span.status.description or "")
    return "\n".join(parts)


def _leaky_registry() -> ToolRegistry:
    """Calls whose error text holds ``SECRET``: a tool's error, a tool's own ``DENIED``,
    a policy that raised, and a policy's denial (whose reason is the policy's to give)."""

    def broken(args: Any, ctx: ToolRunContext) -> str:
        raise RuntimeError(f"cannot read /home/ada/.netrc: token {SECRET}")

    def refused(args: Any, ctx: ToolRunContext) -> str:
        raise ToolError(f'path "/srv/{SECRET}" is outside the workspace', code=ErrorCode.DENIED)

    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Deny | None:
            if execution.call_id.startswith("raised"):
                raise RuntimeError(f"rules database password={SECRET}")
            denied = execution.call_id.startswith("denied")
            return Deny("no adding on Sundays") if denied else None

    registry = ToolRegistry()
    registry.register(_add_tool())
    for name, body in (("broken", broken), ("refused", refused)):
        registry.register(define_tool(name=name, description="Fails.", parameters={}, execute=body))
    registry.add_plugin(Policy(), name="policy")
    return registry


_LEAKY_CALLS = (("broken", "broken"), ("refused", "refused"), ("add", "raised"), ("add", "denied"))


@pytest.mark.anyio
@pytest.mark.parametrize("plugin", [OpenTelemetryPlugin, OpenTelemetryDecisionsPlugin])
async def test_error_text_is_recorded_only_with_record_results(
    backend: Backend, plugin: type[OpenTelemetryPlugin]
) -> None:
    """Issue 23: the decisions plugin exported tool error messages (paths, tokens) with its
    defaults; the plain one, a tool's own DENIED message."""
    for record_results in (False, True):
        registry = _leaky_registry()
        registry.add_plugin(
            plugin(
                tracer_provider=backend.tracer_provider,
                meter_provider=backend.meter_provider,
                record_results=record_results,
            )
        )
        for name, call_id in _LEAKY_CALLS:
            await registry.execute(_call(name, f"{call_id}-{record_results}"))
    spans = {_attributes(s)["gen_ai.tool.call.id"]: _texts(s) for s in backend.spans()}
    for _, call_id in _LEAKY_CALLS[:3]:
        assert SECRET not in spans[f"{call_id}-False"], call_id
        assert SECRET in spans[f"{call_id}-True"], call_id
    assert "no adding on Sundays" in spans["denied-False"]  # a policy's reason is kept


@pytest.mark.anyio
async def test_nothing_is_done_when_no_span_would_be_recorded() -> None:
    spans = InMemorySpanExporter()
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    sampled_out.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    registry = ToolRegistry()
    registry.register(_add_tool())
    plugin = OpenTelemetryPlugin(
        tracer_provider=sampled_out, meter_provider=MeterProvider(metric_readers=[reader])
    )
    registry.add_plugin(plugin)
    assert (await registry.execute(_call())).is_error is False
    assert (await registry.execute(_call("missing"))).is_error is True
    assert spans.get_finished_spans() == ()
    assert plugin.open_spans == 0
    data = reader.get_metrics_data()
    assert data is None or not data.resource_metrics


@pytest.mark.anyio
async def test_a_failing_tracer_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    """Telemetry is not policy: a tracer that raises is logged, and the call still runs."""

    class BrokenTracer(trace.NoOpTracer):
        def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
            raise RuntimeError("exporter misconfigured")

    class BrokenProvider(trace.NoOpTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
            return BrokenTracer()

    registry = ToolRegistry()
    registry.register(_add_tool())
    plugin = OpenTelemetryPlugin(tracer_provider=BrokenProvider())
    registry.add_plugin(plugin)
    result = await registry.execute(_call())
    assert result.value == 3  # type: ignore[union-attr]
    assert "OpenTelemetry span for 'add' not started" in caplog.text
    assert "exporter misconfigured" in caplog.text
    assert plugin.open_spans == 0


# --------------------------------------------------------------------------- loading


@pytest.mark.parametrize("plugin", [OpenTelemetryPlugin, OpenTelemetryDecisionsPlugin])
def test_a_dry_run_opens_no_span_and_leaves_the_callers_context(
    backend: Backend, plugin: type[OpenTelemetryPlugin]
) -> None:
    """Issue 23: each ``explain`` left a span open and current, and later calls were
    parented under a call that never ran."""
    registry = ToolRegistry()
    registry.register(_add_tool())
    telemetry = plugin(
        tracer_provider=backend.tracer_provider, meter_provider=backend.meter_provider
    )
    registry.add_plugin(telemetry)
    assert registry.explain(_call(call_id="dry-1")).outcome == "run"
    assert trace.get_current_span() is trace.INVALID_SPAN
    tracer = backend.tracer_provider.get_tracer("host")
    with tracer.start_as_current_span("agent turn") as turn:
        assert registry.explain(_call(call_id="dry-2")).outcome == "run"
        assert trace.get_current_span() is turn
        registry.execute_sync(_call(call_id="real"))
    assert telemetry.open_spans == 0
    (span,) = backend.spans()
    assert _attributes(span)["gen_ai.tool.call.id"] == "real"
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id


def test_the_entry_point_is_off_until_the_environment_turns_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def loaded_hooks() -> tuple[str, ...]:
        registry = ToolRegistry()
        report = load_plugins(registry, only=["opentelemetry"])
        (record,) = report.loaded
        return record.hooks

    monkeypatch.delenv(ENV_VAR, raising=False)
    assert loaded_hooks() == ()
    monkeypatch.setenv(ENV_VAR, "off")
    assert loaded_hooks() == ()
    monkeypatch.setenv(ENV_VAR, "on,arguments")
    assert loaded_hooks() == ("dsh_tools_pre_execute", "dsh_tools_result")
    monkeypatch.setenv(ENV_VAR, "ON, decisions")
    registry = ToolRegistry()
    load_plugins(registry, only=["opentelemetry"])
    assert isinstance(
        registry.plugin_manager.get_plugin("opentelemetry"), OpenTelemetryDecisionsPlugin
    )
    monkeypatch.setenv(ENV_VAR, "on,secrets")
    with pytest.raises(PluginConfigError, match=r"DSH_TOOLS_OTEL='on,secrets'.*secrets"):
        load_plugins(ToolRegistry(), only=["opentelemetry"])


def test_importing_dsh_tools_and_its_plugins_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, dsh_tools, dsh_tools_plugins, dsh_tools_plugins.otel\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, ENV_VAR: "on"},
    )
    assert out.stdout.strip() == "[]"


def test_without_opentelemetry_the_plugin_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from dsh_tools_plugins.otel import OpenTelemetryPlugin\n"
        "try:\n"
        "    OpenTelemetryPlugin()\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "otel extra" in out.stdout


def test_execute_sync_in_asyncio_run_keeps_one_span(backend: Backend) -> None:
    """``execute_sync`` of an ``async def`` tool runs on a loop of its own; the span still
    opens and closes in that one run."""
    registry = ToolRegistry()
    registry.register(_add_tool())
    plugin = backend.plugin()
    registry.add_plugin(plugin)
    assert registry.execute_sync(_call()).is_error is False
    assert asyncio.run(registry.execute(_call(call_id="c2"))).is_error is False  # type: ignore[arg-type]
    assert len(backend.spans()) == 2
    assert plugin.open_spans == 0


# --------------------------------------------------------------------------- MCP


@pytest.fixture(scope="module")
def global_backend() -> Iterator[InMemorySpanExporter]:
    """The global tracer provider, which the MCP SDK's own spans use: set once per
    process (OpenTelemetry refuses to replace it), so this module's exporter joins it."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans
    spans.shutdown()


@pytest.mark.anyio
async def test_an_in_process_mcp_call_is_one_trace(global_backend: InMemorySpanExporter) -> None:
    """Served in process, the SDK's ``tools/call`` server span sits between the two dsh
    spans: the served registry's span is a child of the SDK's, not a second root."""
    from dsh_tools.bridges.mcp import McpToolSource, build_mcp_server

    global_backend.clear()
    remote = ToolRegistry()
    remote.register(_add_tool())
    remote.add_plugin(OpenTelemetryPlugin())
    local = ToolRegistry()
    local.add_plugin(OpenTelemetryPlugin())
    with anyio.fail_after(10):
        async with McpToolSource(build_mcp_server(remote), prefix="r_") as source:
            source.register(local)
            with trace.get_tracer("host").start_as_current_span("agent turn") as turn:
                result = await local.execute(_call("r_add", "m1", a=2, b=3))
    assert result.text == "5"
    spans = [s for s in global_backend.get_finished_spans() if s.name.endswith("add")]
    assert [s.name for s in spans] == ["execute_tool add", "tools/call add", "execute_tool r_add"]
    chain = [turn.get_span_context(), *(s.context for s in reversed(spans))]
    for parent, span in zip(chain, reversed(spans), strict=False):
        assert span.parent is not None
        assert (span.context.trace_id, span.parent.span_id) == (  # type: ignore[union-attr]
            parent.trace_id,  # type: ignore[union-attr]
            parent.span_id,  # type: ignore[union-attr]
        )
    assert spans[1].kind is SpanKind.SERVER
    served = _attributes(spans[0])
    assert served["gen_ai.tool.call.id"].startswith("mcp-")
    assert served["gen_ai.tool.description"] == "Add two integers."


SERVE_MCP = Path(__file__).parents[1] / "fixtures" / "mcp_servers" / "otel_serve_mcp.py"


@pytest.mark.anyio
async def test_serve_mcp_continues_the_trace_its_client_sends(
    global_backend: InMemorySpanExporter, tmp_path: Path
) -> None:
    """Over stdio the trace crosses processes: the bridge's request carries
    ``traceparent`` (the SDK injects the current span, which is the dsh span), and
    ``serve-mcp`` (with ``DSH_TOOLS_OTEL=on``) continues it under the SDK's server span."""
    from mcp import StdioServerParameters

    from dsh_tools.bridges.mcp import McpToolSource

    (tmp_path / "notes.txt").write_text("hello")
    exported = tmp_path / "server-spans.jsonl"
    server = StdioServerParameters(
        command=sys.executable,
        args=[str(SERVE_MCP), str(exported), "--workspace", str(tmp_path), "serve-mcp"],
        env={**os.environ, ENV_VAR: "on"},
    )
    global_backend.clear()
    local = ToolRegistry()
    local.add_plugin(OpenTelemetryPlugin())
    with anyio.fail_after(30):
        async with McpToolSource(server, prefix="r_") as source:
            source.register(local)
            with trace.get_tracer("host").start_as_current_span("agent turn"):
                call = ToolExecutionInput("m2", "r_read_file", {"path": "notes.txt"})
                result = await local.execute(call)
    assert result.text.endswith("hello")
    ours = {s.name: s for s in global_backend.get_finished_spans()}
    host_tool = ours["execute_tool r_read_file"]
    request = ours["MCP send tools/call read_file"]
    assert request.parent.span_id == host_tool.context.span_id  # type: ignore[union-attr]
    served = [json.loads(line) for line in exported.read_text().splitlines()]
    theirs = {span["name"]: span for span in served if span["name"].endswith("read_file")}
    assert sorted(theirs) == ["execute_tool read_file", "tools/call read_file"]
    server_span, tool_span = theirs["tools/call read_file"], theirs["execute_tool read_file"]
    trace_id = host_tool.context.trace_id  # type: ignore[union-attr]
    assert server_span["trace_id"] == tool_span["trace_id"] == trace_id
    assert server_span["parent_id"] == request.context.span_id  # type: ignore[union-attr]
    assert tool_span["parent_id"] == server_span["span_id"]
    assert tool_span["kind"] == "INTERNAL"
    assert tool_span["attributes"]["gen_ai.tool.name"] == "read_file"


# --------------------------------------------------------------------------- decision records


@pytest.mark.anyio
async def test_the_decisions_plugin_adds_one_event_per_step_of_the_record(
    backend: Backend,
) -> None:
    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Deny | None:
            if execution.call_id == "denied":
                return Deny("no adding on Sundays", detail={"rule": {"file": "r.toml", "line": 4}})
            return None

    registry = ToolRegistry()
    registry.register(_add_tool())

    def no_secrets(execution: Any) -> None:
        return None

    registry.guard(no_secrets)
    registry.add_plugin(Policy(), name="sunday-policy")
    registry.add_plugin(
        OpenTelemetryDecisionsPlugin(
            tracer_provider=backend.tracer_provider, meter_provider=backend.meter_provider
        ),
        name="otel",
    )
    await registry.execute(_call(call_id="ok"))
    await registry.execute(_call(call_id="denied"))
    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in backend.spans()}

    def steps(call_id: str) -> list[tuple[Any, ...]]:
        return [
            (
                e.name,
                e.attributes["dsh_tools.stage"],  # type: ignore[index]
                (e.attributes or {}).get("dsh_tools.source"),
                e.attributes["dsh_tools.decision"],  # type: ignore[index]
            )
            for e in spans[call_id].events
        ]

    assert steps("ok") == [
        ("dsh_tools.decision", "pre_execute", "otel", "abstained"),
        ("dsh_tools.decision", "pre_execute", "sunday-policy", "abstained"),
        ("dsh_tools.decision", "guard", no_secrets.__qualname__, "abstained"),
        ("dsh_tools.decision", "body", None, "ok"),
        ("dsh_tools.decision", "execute", None, "ok"),
        ("dsh_tools.decision", "result", None, "ok"),
    ]
    assert steps("denied") == [
        ("dsh_tools.decision", "pre_execute", "otel", "abstained"),
        ("dsh_tools.decision", "pre_execute", "sunday-policy", "deny"),
        ("dsh_tools.decision", "result", None, "DENIED"),
    ]
    denial = dict(spans["denied"].events[1].attributes or {})
    assert denial["dsh_tools.reason"] == "no adding on Sundays"
    assert json.loads(denial["dsh_tools.detail"]) == {"rule": {"file": "r.toml", "line": 4}}
    for span in spans.values():
        times = [event.timestamp for event in span.events]
        assert times == sorted(times)
        assert span.start_time <= times[0]  # type: ignore[operator]
        assert times[-1] <= span.end_time  # type: ignore[operator]


@pytest.mark.anyio
async def test_a_span_made_at_the_end_starts_when_the_call_entered(backend: Backend) -> None:
    """With a record, a call that never reached the plugin's pre-execute (decided by an
    earlier ``tryfirst`` policy) still gets a span covering the whole call."""
    started = anyio.Event()

    class Early:
        @hookimpl(tryfirst=True)
        async def dsh_tools_pre_execute(self, execution: Any) -> Deny:
            started.set()
            await anyio.sleep(0.05)
            return Deny("decided early, slowly")

    registry = ToolRegistry()
    registry.register(_add_tool())
    registry.add_plugin(
        OpenTelemetryDecisionsPlugin(
            tracer_provider=backend.tracer_provider, meter_provider=backend.meter_provider
        )
    )
    registry.add_plugin(Early())
    await registry.execute(_call())
    (span,) = backend.spans()
    assert span.end_time - span.start_time >= 50_000_000  # type: ignore[operator]
    assert [dict(e.attributes or {})["dsh_tools.decision"] for e in span.events] == [
        "deny",
        "DENIED",
    ]
    (point,) = backend.durations()
    assert point.sum >= 0.05


@pytest.mark.anyio
async def test_a_pending_approval_and_its_answer_are_decision_events(backend: Backend) -> None:
    from dsh_tools import Ask, MemoryApprovalStore, TicketAnswer

    class AskFirst:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Ask:
            return Ask("adding needs a person")

    store = MemoryApprovalStore()
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    registry.register(_add_tool())
    registry.add_plugin(AskFirst())
    registry.add_plugin(
        OpenTelemetryDecisionsPlugin(
            tracer_provider=backend.tracer_provider, meter_provider=backend.meter_provider
        )
    )
    call = ToolExecutionInput("c1", "add", {"a": 1, "b": 2}, agent="coder")
    pending = await registry.execute(call)
    ticket = pending.meta["approval"]["ticket"]  # type: ignore[index]
    store.answer_ticket(ticket, TicketAnswer("allowed-once", "ana", "inbox"))
    assert not (await registry.resume(ticket)).is_error
    asked, resumed = (
        [dict(e.attributes or {}) for e in span.events if e.attributes] for span in backend.spans()
    )
    opened = [a for a in asked if a.get("dsh_tools.source") == "approval tickets"]
    assert [a["dsh_tools.decision"] for a in opened] == ["pending"]
    assert json.loads(opened[0]["dsh_tools.detail"])["ticket"] == ticket
    (answered,) = [a for a in resumed if a.get("dsh_tools.source") == "approval tickets"]
    assert answered["dsh_tools.decision"] == "allowed-once"
    detail = json.loads(answered["dsh_tools.detail"])
    assert (detail["by"], detail["channel"]) == ("ana", "inbox")


def test_the_docs_say_which_names_are_the_conventions_and_which_are_ours() -> None:
    import re

    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
    from opentelemetry.semconv.attributes import error_attributes

    import dsh_tools_plugins.otel as otel

    defined = {
        value
        for module in (gen_ai_attributes, gen_ai_metrics, error_attributes)
        for value in vars(module).values()
        if isinstance(value, str)
    }
    defined |= {member.value for member in gen_ai_attributes.GenAiOperationNameValues}
    page = (Path(__file__).parents[2] / "docs" / "telemetry.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.]+)`[^|]*\| [^|]+ \| (the conventions'|ours)", page, re.M)
    whose = dict(rows)
    assert whose, "docs/telemetry.md has no table of whose names these are"
    for name, owner in whose.items():
        assert (name in defined) == (owner == "the conventions'"), name
    source = Path(otel.__file__).read_text(encoding="utf-8")
    used = set(re.findall(r'"((?:gen_ai|dsh_tools|error)\.[a-z_.]+)"', source))
    assert used <= set(whose), used - set(whose)
