"""Helpers for testing tools and plugins; the pytest fixtures in ``pytest_plugin`` use them.

Everything here works without pytest too: a scripted approval service, a recorder of the
stages each call went through, and assertions on results with readable failure messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import attrs

from ._models import (
    ApprovalOutcome,
    ApprovalRequest,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    result_to_json,
)
from ._tracing import TraceEvent
from .approvals import ApprovalAnswer
from .errors import ErrorCode
from .hookspecs import hookimpl
from .progress import Output, Progress
from .records import DecisionRecord

__all__ = [
    "CallRecorder",
    "ProgressRecorder",
    "RecordedCall",
    "ScriptedApproval",
    "assert_failure",
    "assert_success",
]


class ScriptedApproval:
    """An approval service that answers from a script and records every request.

    Queue answers with :meth:`answer` (used in order, for any tool) or :meth:`answer_for`
    (used for one tool first). With nothing queued it answers ``unavailable``, which the
    pipeline turns into a denial: an unscripted ``Ask`` never runs a tool.
    """

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []
        self._queue: deque[ApprovalOutcome | ApprovalAnswer] = deque()
        self._per_tool: dict[str, deque[ApprovalOutcome | ApprovalAnswer]] = {}

    def answer(self, *outcomes: ApprovalOutcome | str | ApprovalAnswer) -> None:
        """Queue answers for the next requests, whatever tool they are for."""
        self._queue.extend(map(_scripted, outcomes))

    def answer_for(self, tool: str, *outcomes: ApprovalOutcome | str | ApprovalAnswer) -> None:
        """Queue answers for the next requests about ``tool``."""
        queue = self._per_tool.setdefault(tool, deque())
        queue.extend(map(_scripted, outcomes))

    def request(self, request: ApprovalRequest) -> ApprovalOutcome | ApprovalAnswer:
        self.requests.append(request)
        per_tool = self._per_tool.get(request.tool_name)
        if per_tool:
            return per_tool.popleft()
        if self._queue:
            return self._queue.popleft()
        return ApprovalOutcome.UNAVAILABLE

    @property
    def pending(self) -> int:
        """How many scripted answers are still unused."""
        return len(self._queue) + sum(len(queue) for queue in self._per_tool.values())


def _scripted(answer: ApprovalOutcome | str | ApprovalAnswer) -> ApprovalOutcome | ApprovalAnswer:
    return answer if isinstance(answer, ApprovalAnswer) else ApprovalOutcome(answer)


@attrs.define
class RecordedCall:
    """Everything the recorder saw of one call, in order."""

    call_id: str
    name: str
    events: list[TraceEvent] = attrs.field(factory=list)
    streamed: list[Progress | Output] = attrs.field(factory=list)
    """The progress and output events the call delivered to :meth:`CallRecorder.on_progress`."""

    @property
    def output(self) -> str:
        """The text the call streamed, in order."""
        return "".join(event.text for event in self.streamed if isinstance(event, Output))

    @property
    def stages(self) -> list[str]:
        """The stages the call went through, in order, one entry per event."""
        return [event.stage for event in self.events]

    @property
    def result(self) -> ToolExecutionResult | None:
        """The final result, once the result stage was reached."""
        for event in reversed(self.events):
            if event.stage == "result":
                detail = event.detail
                assert isinstance(detail, (ToolExecutionSuccess, ToolExecutionFailure))
                return detail
        return None

    def outcomes(self, stage: str) -> list[str]:
        """The outcome strings of every event of ``stage`` (for example each guard's)."""
        return [event.outcome for event in self.events if event.stage == stage]

    @property
    def record(self) -> DecisionRecord:
        """The call's decision record, as a ``record`` observer and the audit log get it:
        ``call_recorder.last.record.decided_by.source``."""
        return DecisionRecord.from_events(self.events)


class CallRecorder:
    """A tracer that keeps every event, grouped by call; pass it as ``tracer=``. Pass its
    :meth:`on_progress` as a call's ``on_progress`` to keep what the call streamed too."""

    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []
        self._by_token: dict[int, RecordedCall] = {}

    def __call__(self, event: TraceEvent) -> None:
        call = self._recorded(event.execution, new=event.stage == "call")
        call.events.append(event)

    def on_progress(self, execution: ToolExecution, event: Progress | Output) -> None:
        """A call's own progress listener (``ToolExecutionInput(on_progress=recorder.on_progress)``;
        the ``call_tool`` fixture passes it): keeps each event on the call's record."""
        self._recorded(execution).streamed.append(event)

    def _recorded(self, execution: ToolExecution, new: bool = False) -> RecordedCall:
        key = id(execution.token)
        call = self._by_token.get(key)
        if call is None or new:
            call = RecordedCall(execution.call_id, execution.name)
            self._by_token[key] = call
            self.calls.append(call)
        return call

    @property
    def last(self) -> RecordedCall:
        """The most recent call; fails clearly when nothing was recorded."""
        if not self.calls:
            raise AssertionError("no tool call was recorded")
        return self.calls[-1]

    def call(self, call_id: str) -> RecordedCall:
        """The recorded call with this id."""
        for recorded in reversed(self.calls):
            if recorded.call_id == call_id:
                return recorded
        known = ", ".join(repr(c.call_id) for c in self.calls) or "none"
        raise AssertionError(f"no call {call_id!r} was recorded (recorded: {known})")

    def clear(self) -> None:
        self.calls.clear()
        self._by_token.clear()


class ProgressRecorder:
    """A plugin that keeps every progress and output event each call delivered, in order:
    ``registry.add_plugin(recorder)``, then ``recorder.events(call_id)``. Thread-safe
    enough for tests: appending to a list is atomic."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Progress | Output]] = {}

    @hookimpl
    def dsh_tools_progress(self, execution: ToolExecution, event: Progress | Output) -> None:
        self.calls.setdefault(execution.call_id, []).append(event)

    def events(self, call_id: str) -> list[Progress | Output]:
        """The events call ``call_id`` delivered (empty when it delivered none)."""
        return list(self.calls.get(call_id, ()))

    def output(self, call_id: str, stream: str | None = None) -> str:
        """The text call ``call_id`` streamed (on ``stream`` only, when given)."""
        return "".join(
            event.text
            for event in self.events(call_id)
            if isinstance(event, Output) and stream in (None, event.stream)
        )

    def progress(self, call_id: str) -> list[Progress]:
        """The progress events call ``call_id`` delivered."""
        return [event for event in self.events(call_id) if isinstance(event, Progress)]


def assert_success(
    result: ToolExecutionResult, *, value: Any = attrs.NOTHING, text: str | None = None
) -> ToolExecutionSuccess:
    """Assert ``result`` succeeded (and has this value / text); returns it, narrowed."""
    if not isinstance(result, ToolExecutionSuccess):
        raise AssertionError(f"expected a success, got {result_to_json(result)}")
    if value is not attrs.NOTHING and result.value != value:
        raise AssertionError(f"expected value {value!r}, got {result.value!r}")
    if text is not None and result.text != text:
        raise AssertionError(f"expected text {text!r}, got {result.text!r}")
    return result


def assert_failure(
    result: ToolExecutionResult,
    code: ErrorCode | str | None = None,
    *,
    message: str | None = None,
    contains: str | Iterable[str] = (),
) -> ToolExecutionFailure:
    """Assert ``result`` failed (with this code / message / text fragments); returns it."""
    if not isinstance(result, ToolExecutionFailure):
        raise AssertionError(f"expected a failure, got {result_to_json(result)}")
    expected = code.value if isinstance(code, ErrorCode) else code
    if expected is not None and result.code != expected:
        raise AssertionError(f"expected code {expected}, got {result.code}: {result.error.message}")
    if message is not None and result.error.message != message:
        raise AssertionError(f"expected message {message!r}, got {result.error.message!r}")
    for fragment in [contains] if isinstance(contains, str) else contains:
        if fragment not in result.error.message:
            raise AssertionError(f"{fragment!r} not in {result.error.message!r}")
    return result
