"""OpenTelemetry spans and a duration histogram for tool calls (GenAI semantic conventions).

:class:`OpenTelemetryPlugin` gives every call through a registry an ``execute_tool {tool}``
span (kind ``INTERNAL``) with the ``gen_ai.*`` attributes of the GenAI conventions for tool
execution, ``error.type`` set to the failure's :class:`~dsh_tools.ErrorCode` and status
``ERROR`` on failures, the policy outcomes as span events, and records
``gen_ai.execute_tool.duration`` (seconds); :class:`OpenTelemetryDecisionsPlugin` also
adds one event per step of each call's decision record. Only ``opentelemetry-api`` is
used: what is exported, and where, is the host's SDK setup; with none (the API's no-op
provider) a call pays for one non-recording span and nothing else. Arguments and results
are not recorded unless the host asks (``record_arguments``, ``record_results``): they
may hold secrets. Nor is error text: by default a decision event carries a reason only
when a policy gave it (a ``Deny``'s or an ``Ask``'s reason, a guard's refusal, a
``Block``'s feedback); a tool's error message, or the message of an exception a plugin
raised (either may quote paths, arguments or tokens), is recorded with ``record_results``
only.

A dry run (:meth:`~dsh_tools.ToolRegistry.explain`) is not a tool execution: it gets no
span, and leaves the caller's current span as it was.

Where the span lives in a call: the pre-execute hook (``tryfirst``) opens it as a child
of the caller's current span and makes it current, so whatever the call does (other
plugins, the body, the MCP client bridge's request) nests under it; the result hook
(``trylast``), which every call reaches exactly once, closes it and restores the caller's
context. A call that never reached this plugin's pre-execute (arguments that are not JSON,
a call cancelled before it started, or one an earlier pre-execute decided) gets its span
from the result hook instead (starting when the call entered, when its record says so),
so no call goes untraced and none is left open.

Importing this module does not import OpenTelemetry; making the plugin does (the ``otel``
extra). Hosts enable it explicitly: ``registry.add_plugin(OpenTelemetryPlugin())``, or
through the ``opentelemetry`` entry point, which stays inert unless :data:`ENV_VAR` says
``on`` (see :func:`entry_point`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any, Final

from dsh_tools import __version__
from dsh_tools._json import dumps
from dsh_tools._models import ToolDefinition, ToolExecution, ToolExecutionResult
from dsh_tools.errors import PluginConfigError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.progress import Output, Progress

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from dsh_tools.records import DecisionRecord, DecisionStep

__all__ = ["ENV_VAR", "OpenTelemetryDecisionsPlugin", "OpenTelemetryPlugin", "entry_point"]

logger = logging.getLogger("dsh_tools")

ENV_VAR: Final = "DSH_TOOLS_OTEL"
"""Enables the ``opentelemetry`` entry point: ``on``, plus ``decisions`` for an event per
decision step, ``progress`` for progress span events, and ``arguments`` and/or ``results``
to record those (comma-separated, e.g. ``on,arguments``); unset, empty or ``off``: inert."""

INSTRUMENTATION: Final = "dsh_tools"
"""The instrumentation scope name of the tracer and meter."""

DURATION_METRIC: Final = "gen_ai.execute_tool.duration"
"""The GenAI conventions' tool-execution duration histogram, in seconds."""

MAX_PROGRESS_EVENTS: Final = 100
"""The most ``dsh_tools.progress`` span events one call gets (``progress_events=True``)."""

PROGRESS_EVENT_INTERVAL_S: Final = 1.0
"""The shortest time between two ``dsh_tools.progress`` events of one call."""

_UNSEEN: Final = ()
"""What the result stage finds for a call whose pre-execute this plugin never saw."""

_DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Bucket advice for the histogram: tool calls run from milliseconds to about a minute."""


class _ToolSpans:
    """What both plugins share: the span's life from pre-execute to the result stage."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        record_arguments: bool = False,
        record_results: bool = False,
        progress_events: bool = False,
    ) -> None:
        try:
            from opentelemetry import context, metrics, trace
        except ImportError as error:
            raise ImportError(
                f"{type(self).__name__} needs opentelemetry-api: install dsh-tools with its "
                "otel extra (in a clone: pip install '.[otel]')"
            ) from error
        self._context = context
        self._trace = trace
        self._tracer = trace.get_tracer(
            INSTRUMENTATION, __version__, tracer_provider=tracer_provider
        )
        meter = metrics.get_meter(INSTRUMENTATION, __version__, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            DURATION_METRIC,
            unit="s",
            description="Duration of tool execution.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.record_arguments = record_arguments
        self.record_results = record_results
        self._open: dict[object, tuple[Span, Token[Context], float] | None] = {}
        """The calls in flight: execution token -> (span, context token, start), or
        ``None`` when nothing records the call's span."""
        self._progressed: dict[object, list[float]] = {}
        """Calls that streamed: execution token -> [span events added, when the last was]."""
        self.progress_events = progress_events
        if progress_events:
            # An attribute of this plugin only when asked for: a scope whose plugins do
            # not listen gives its calls no progress stream at all.
            self.dsh_tools_progress = self._progress_event

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(record_arguments={self.record_arguments}, "
            f"record_results={self.record_results})"
        )

    @property
    def open_spans(self) -> int:
        """How many calls are in flight with this plugin (0 once every call has ended)."""
        return len(self._open)

    @hookimpl(tryfirst=True)
    def dsh_tools_pre_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> None:
        """Open the call's span under the caller's current span and make it current.

        Never decides, and never fails the call: telemetry is not policy, so a tracer that
        raises is logged and the call runs untraced. A dry run gets no span: its result
        stage never runs, so the span would never end and would stay current."""
        if execution.dry_run:
            return
        try:
            span = self._start(execution, tool)
        except Exception as error:
            logger.warning("OpenTelemetry span for %r not started: %r", execution.name, error)
            span = None
        if span is None:
            # Remembered, so the result stage does not ask the tracer a second time.
            self._open[execution.token] = None
            return
        token = self._context.attach(self._trace.set_span_in_context(span))
        self._open[execution.token] = (span, token, time.perf_counter())

    def _close(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        tool: ToolDefinition[Any] | None,
        record: DecisionRecord | None,
    ) -> None:
        self._progressed.pop(execution.token, None)
        opened = self._open.pop(execution.token, _UNSEEN)
        if opened is None:
            return
        if not opened:  # _UNSEEN: opened here, at the end (at the call's start, if known)
            span = self._start(execution, tool, None if record is None else record.started_unix_ns)
            if span is None:
                return
            token = None
            started = time.perf_counter() - (0.0 if record is None else record.elapsed_ms / 1e3)
        else:
            span, token, started = opened
        try:
            self._finish(span, result, record)
        finally:
            span.end()
            if token is not None:
                self._context.detach(token)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": execution.name}
        if result.is_error:
            attributes["error.type"] = result.code
        self._duration.record(time.perf_counter() - started, attributes)

    def _progress_event(self, execution: ToolExecution, event: Progress | Output) -> None:
        """A ``dsh_tools.progress`` span event for a call's progress: at most one a second
        and :data:`MAX_PROGRESS_EVENTS` a call (the latest progress of the second), with
        the message only under ``record_results``; output adds no event of its own."""
        opened = self._open.get(execution.token)
        if not opened or not isinstance(event, Progress):
            return
        seen = self._progressed.setdefault(execution.token, [0, -math.inf])
        now = time.monotonic()
        if seen[0] >= MAX_PROGRESS_EVENTS or now - seen[1] < PROGRESS_EVENT_INTERVAL_S:
            return
        seen[0], seen[1] = seen[0] + 1, now
        attributes: dict[str, str | float] = {"dsh_tools.progress.done": event.done}
        if event.total is not None:
            attributes["dsh_tools.progress.total"] = event.total
        if event.message is not None and self.record_results:
            attributes["dsh_tools.progress.message"] = event.message
        opened[0].add_event("dsh_tools.progress", attributes)

    def _start(
        self,
        execution: ToolExecution,
        tool: ToolDefinition[Any] | None,
        started_ns: int | None = None,
    ) -> Span | None:
        """The call's span, a child of the current context's span, starting now or at
        ``started_ns``; ``None`` when nothing would record it (then the call costs
        nothing more)."""
        span = self._tracer.start_span(
            f"execute_tool {execution.name}",
            kind=self._trace.SpanKind.INTERNAL,
            start_time=started_ns or None,
        )
        if not span.is_recording():
            return None
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": execution.name,
                "gen_ai.tool.call.id": execution.call_id,
                "gen_ai.tool.type": "function",
            }
        )
        if tool is not None:
            span.set_attribute("gen_ai.tool.description", tool.description)
        if execution.agent is not None:
            span.set_attribute("dsh_tools.agent", execution.agent)
        if self.record_arguments and execution.arguments is not None:
            span.set_attribute("gen_ai.tool.call.arguments", dumps(execution.arguments))
        return span

    def _finish(
        self, span: Span, result: ToolExecutionResult, record: DecisionRecord | None
    ) -> None:
        """The outcome on the span: attributes, status, and the decisions as events (each
        step of the record, or the policy outcome the result shows)."""
        if self.record_results:
            shown = result.text if result.is_error else dumps(result.value)
            span.set_attribute("gen_ai.tool.call.result", shown)
        if result.is_error:
            span.set_attribute("error.type", result.code)
            described = result.error.message if self.record_results else None
            span.set_status(self._trace.StatusCode.ERROR, described)
        if record is not None:
            for step in record.steps:
                if step.decision == "entered":
                    continue  # bookkeeping, not a decision (and before the span started)
                at = record.started_unix_ns + int(step.at_ms * 1e6)
                attributes = _step_attributes(step, self.record_results)
                span.add_event("dsh_tools.decision", attributes, at)
        elif result.is_error and result.code in _OUTCOMES:
            stage, decision = _OUTCOMES[result.code]
            attributes = {"dsh_tools.stage": stage, "dsh_tools.decision": decision}
            if self.record_results or result.error.info.name in _POLICY_FAILURES:
                attributes["dsh_tools.reason"] = result.error.message
            span.add_event("dsh_tools.decision", attributes)


class OpenTelemetryPlugin(_ToolSpans):
    """One ``execute_tool`` span per call, and the tool-execution duration histogram.

    Span events show the policy outcomes the result reveals (a denial, a blocked result,
    a failing policy); :class:`OpenTelemetryDecisionsPlugin` shows every step instead.

    :param tracer_provider: where spans go (default: the global provider).
    :param meter_provider: where the histogram goes (default: the global provider).
    :param record_arguments: add the call's arguments (JSON text) as
        ``gen_ai.tool.call.arguments``.
    :param record_results: add the result (a success's value as JSON text, a failure's
        model-facing text) as ``gen_ai.tool.call.result``, a failure's message as the
        span's status description, and error text (a tool's error message, a plugin's
        exception) as the reason of decision events.
    :param progress_events: add a ``dsh_tools.progress`` span event (``done``, ``total``,
        and the message under ``record_results``) as a streaming tool reports progress, at
        most one a second and 100 a call. Off by default: on, the scope's calls carry a
        progress stream.

    Raises :class:`ImportError` naming the ``otel`` extra when ``opentelemetry-api`` is
    not installed.
    """

    @hookimpl(trylast=True)
    def dsh_tools_result(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        tool: ToolDefinition[Any] | None,
    ) -> None:
        """Close the call's span with its outcome (opening it first when the call never
        reached pre-execute), and record the call's duration."""
        self._close(execution, result, tool, None)


class OpenTelemetryDecisionsPlugin(_ToolSpans):
    """:class:`OpenTelemetryPlugin` with one span event per step of each call's decision
    record (:class:`~dsh_tools.records.DecisionRecord`): every plugin that abstained,
    allowed, denied or asked, the approval answer, each guard, each dispatch of the body,
    post-execute and the result, at the time it happened. It takes the same parameters.

    Asking for records makes every call of the scope collect them, whether or not its
    span is recorded: that costs a call more than the span does, so it is a separate
    plugin rather than the default.
    """

    @hookimpl(trylast=True)
    def dsh_tools_result(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        tool: ToolDefinition[Any] | None,
        record: DecisionRecord | None,
    ) -> None:
        """Close the call's span with its outcome and one event per decision step."""
        self._close(execution, result, tool, record)


_OUTCOMES: Final = {
    "DENIED": ("policy", "deny"),
    "BLOCKED": ("post_execute", "block"),
    "POLICY_ERROR": ("policy", "raised"),
}
"""The policy outcomes a result shows, as (stage, decision) of a ``dsh_tools.decision``
event."""

_POLICY_FAILURES: Final = frozenset({"PolicyDenied", "PolicyBlocked"})
"""The failures the pipeline makes of a policy's own reason (a ``Deny``, a guard's
refusal, a ``Block``'s feedback), by their error name. Any other failure's message (a
tool's ``DENIED`` error, a plugin's exception) is error text."""

_REASONED: Final = frozenset({"deny", "ask", "block"})
"""The decisions whose reason a policy gave; any other step's reason is error text (a
tool's error message, an exception's)."""


def _step_attributes(step: DecisionStep, with_errors: bool) -> dict[str, str]:
    """One step of a decision record as a span event's attributes; its reason when a
    policy gave it, or when ``with_errors`` (``record_results``)."""
    attributes = {"dsh_tools.stage": step.stage, "dsh_tools.decision": step.decision}
    if step.source is not None:
        attributes["dsh_tools.source"] = step.source
    if step.distribution is not None:
        attributes["dsh_tools.distribution"] = step.distribution
    if step.reason is not None and (with_errors or step.decision in _REASONED):
        attributes["dsh_tools.reason"] = step.reason
    if step.detail is not None:
        attributes["dsh_tools.detail"] = dumps(step.detail)
        feedback = step.detail.get("feedback") if step.stage == "approval" else None
        if isinstance(feedback, str):
            attributes["dsh_tools.feedback"] = feedback
    return attributes


_WORDS: Final = frozenset({"on", "decisions", "arguments", "results", "progress"})


def entry_point() -> OpenTelemetryPlugin | OpenTelemetryDecisionsPlugin | None:
    """The ``opentelemetry`` entry point: the plugin when :data:`ENV_VAR` enables it (with
    the global providers; :class:`OpenTelemetryDecisionsPlugin` with ``decisions``), else
    ``None``: the loader then registers nothing, and calls keep their fastest path.

    Raises :class:`~dsh_tools.errors.PluginConfigError` for a value it does not know, or
    when it is on and ``opentelemetry-api`` is missing: telemetry someone asked for is not
    silently dropped.
    """
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "off"):
        return None
    words = {word.strip() for word in value.split(",")}
    unknown = sorted(words - _WORDS)
    if unknown:
        raise PluginConfigError(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r}: unknown word(s) {', '.join(unknown)}; "
            "expected 'off', or 'on' with optional 'decisions', 'progress', 'arguments' and "
            "'results' "
            "(comma-separated)"
        )
    plugin = OpenTelemetryDecisionsPlugin if "decisions" in words else OpenTelemetryPlugin
    try:
        return plugin(
            record_arguments="arguments" in words,
            record_results="results" in words,
            progress_events="progress" in words,
        )
    except ImportError as error:
        raise PluginConfigError(f"{ENV_VAR} is on, but {error}") from None
