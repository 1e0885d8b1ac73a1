"""Decision records: what decided one call's fate, stage by stage, as frozen JSON-safe data.

A :class:`DecisionRecord` is made from the very trace events a tracer receives (one per
step of the call, :class:`~dsh_tools._tracing.TraceEvent`), so there is one trace and two
ways to read it:

* a result observer that names a ``record`` parameter gets the record of each call it
  observes (``def dsh_tools_result(execution, result, record)``); the plan sees that
  parameter once, and only then do its calls keep their steps;
* a tracer that keeps the events (``testing.CallRecorder``) builds the same record with
  :meth:`DecisionRecord.from_events` (``call_recorder.last.record``).

Nothing here runs per call unless one of them asked. ``to_json`` is what the audit log
stores and ``dsh-tools call --explain`` prints; :meth:`DecisionRecord.from_json` reads it
back (``dsh-tools replay --explain``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from ._content import content_text
from ._decisions import detail_object
from ._json import FrozenDict, thaw
from ._models import (
    Accept,
    Allow,
    ApprovalOutcome,
    Ask,
    Block,
    Deny,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionSuccess,
)
from ._pipeline.results import message
from ._tracing import Origin, TraceEvent
from .progress import StreamSummary

__all__ = ["DecisionRecord", "DecisionStep", "Explanation", "Origin", "detail_object"]


@attrs.frozen
class DecisionStep:
    """One step of a call: which stage, who acted, what it decided and when.

    ``decision`` is one word: ``abstained``, ``allow``, ``deny``, ``ask``, ``accept``,
    ``block``, ``raised``, ``interrupted``, an approval answer (``allowed-once``,
    ``rejected``, ...), a result code (``ok``, ``DENIED``, ...) for the body and the
    result, or what the pipeline noted (``entered``). ``reason`` is a denial's, ask's or
    block's text, or a raised error's message; ``detail`` the decision's structured detail
    (the permission rule that decided, for example). ``at_ms`` is the time since the call
    entered, ``ms`` the step's own duration: the time since the step before, except for
    a body step, whose time is the body run's alone (a wrapper's wait for a permit or a
    retry's backoff before it is not the body's).
    """

    stage: str
    source: str | None
    decision: str
    reason: str | None = None
    detail: FrozenDict | None = None
    distribution: str | None = None
    at_ms: float = 0.0
    ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.stage, "source": self.source}
        if self.distribution is not None:
            data["distribution"] = self.distribution
        data["decision"] = self.decision
        if self.reason is not None:
            data["reason"] = self.reason
        if self.detail is not None:
            data["detail"] = thaw(self.detail)
        data["at_ms"] = self.at_ms
        data["ms"] = self.ms
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DecisionStep:
        return cls(
            str(data["stage"]),
            None if data.get("source") is None else str(data["source"]),
            str(data["decision"]),
            None if data.get("reason") is None else str(data["reason"]),
            detail_object(data.get("detail")),
            None if data.get("distribution") is None else str(data["distribution"]),
            float(data.get("at_ms", 0.0)),
            float(data.get("ms", 0.0)),
        )

    @property
    def stopped(self) -> bool:
        """Whether this step stopped the call: a denial, a block, a refused approval, a
        policy that raised or was interrupted."""
        return self.decision in _STOPPING


_STOPPING = frozenset(
    {
        "deny",
        "block",
        "raised",
        "interrupted",
        "invalid",
        "rejected",
        "rejected-always",
        "cancelled",
        "unavailable",
        "expired",
        "already-resumed",
        "refused",
    }
)

_STAGE_NAMES = ("pre_execute", "approval", "guard", "journal", "execute", "body", "post_execute")


class DecisionRecord:
    """What decided one call's fate, step by step. Read-only; JSON-safe through
    :meth:`to_json`.

    ``outcome`` is ``ok`` or the result's error code; ``dispatches`` is how many times the
    body was dispatched (0: it never ran; more than 1: a wrapper retried);
    ``elapsed_ms`` the time from the call's entry to its last step; ``started_unix_ns``
    the wall-clock time the call entered (for spans). A record made from a call's events
    reads them into steps on first use, so an observer that only sometimes looks at its
    records pays for the ones it reads.
    """

    __slots__ = ("_agent", "_call_id", "_events", "_read", "_tool")

    def __init__(
        self,
        call_id: str,
        tool: str,
        agent: str | None,
        outcome: str,
        steps: tuple[DecisionStep, ...],
        dispatches: int = 0,
        elapsed_ms: float = 0.0,
        started_unix_ns: int = 0,
    ) -> None:
        self._call_id, self._tool, self._agent = call_id, tool, agent
        self._events: Sequence[tuple[Any, ...]] = ()
        self._read: _Read | None = _Read(
            outcome, tuple(steps), dispatches, elapsed_ms, started_unix_ns
        )

    @classmethod
    def from_events(cls, events: Iterable[TraceEvent]) -> DecisionRecord:
        """The record of one call from its trace events, in the order they came."""
        kept = tuple(events)
        if not kept:
            raise ValueError("a decision record needs the trace events of a call")
        steps = [(e.stage, e.source, e.outcome, e.detail, e.origin, e.at, e.since) for e in kept]
        return cls.of_call(kept[0].execution, steps)

    @classmethod
    def of_call(cls, execution: ToolExecution, steps: Sequence[tuple[Any, ...]]) -> DecisionRecord:
        """The record of the call ``execution`` from its steps, each the fields of a
        :class:`TracedStep` as a plain tuple (the cheapest thing a call can keep); they
        are read on first use."""
        record = object.__new__(cls)
        record._call_id, record._tool = execution.call_id, execution.name
        record._agent, record._events, record._read = execution.agent, steps, None
        return record

    def _data(self) -> _Read:
        read = self._read
        if read is None:
            read = self._read = _read(self._events)
        return read

    @property
    def call_id(self) -> str:
        return self._call_id

    @property
    def tool(self) -> str:
        """The tool name the call asked for."""
        return self._tool

    @property
    def agent(self) -> str | None:
        return self._agent

    @property
    def outcome(self) -> str:
        return self._data().outcome

    @property
    def steps(self) -> tuple[DecisionStep, ...]:
        return self._data().steps

    @property
    def dispatches(self) -> int:
        return self._data().dispatches

    @property
    def elapsed_ms(self) -> float:
        return self._data().elapsed_ms

    @property
    def started_unix_ns(self) -> int:
        return self._data().started_unix_ns

    def _key(self) -> tuple[Any, ...]:
        data = self._data()
        return (self.call_id, self.tool, self.agent, *data[:4])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DecisionRecord):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"DecisionRecord(call_id={self.call_id!r}, tool={self.tool!r}, "
            f"outcome={self.outcome!r}, steps={len(self.steps)})"
        )

    @property
    def stage_ms(self) -> dict[str, float]:
        """How long each stage took: the sum of its steps' durations, in stage order."""
        totals: dict[str, float] = {}
        for step in self.steps:
            if step.stage in _STAGE_NAMES:
                totals[step.stage] = round(totals.get(step.stage, 0.0) + step.ms, 3)
        return totals

    @property
    def decided_by(self) -> DecisionStep | None:
        """The first step that stopped the call; else, for a call that failed after an
        ``Ask`` (no approval service to answer it), that ask; else ``None``."""
        for step in self.steps:
            if step.stopped:
                return step
        if self.outcome != "ok":
            for step in self.steps:
                if step.decision == "ask":
                    return step
        return None

    def of(self, stage: str) -> tuple[DecisionStep, ...]:
        """The steps of one stage, in order."""
        return tuple(step for step in self.steps if step.stage == stage)

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "agent": self.agent,
            "outcome": self.outcome,
            "dispatches": self.dispatches,
            "elapsed_ms": self.elapsed_ms,
            "started_unix_ns": self.started_unix_ns,
            "stages": [{"stage": stage, "ms": ms} for stage, ms in self.stage_ms.items()],
            "steps": [step.to_json() for step in self.steps],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DecisionRecord:
        """The record :meth:`to_json` wrote (``stages`` is derived, so it is not read)."""
        return cls(
            str(data["call_id"]),
            str(data["tool"]),
            None if data.get("agent") is None else str(data["agent"]),
            str(data["outcome"]),
            tuple(DecisionStep.from_json(step) for step in data.get("steps", ())),
            int(data.get("dispatches", 0)),
            float(data.get("elapsed_ms", 0.0)),
            int(data.get("started_unix_ns", 0)),
        )

    def lines(self) -> list[str]:
        """The record as text, one line per step (what ``--explain`` prints)."""
        head = f"decision record of {self.tool} ({self.call_id}): {self.outcome}"
        lines = [head, f"  dispatches: {self.dispatches}, {self.elapsed_ms:g} ms in all"]
        for step in self.steps:
            who = step.source or "pipeline"
            if step.distribution:
                who += f" [{step.distribution}]"
            text = f"  {step.stage:<12} {who}: {step.decision}"
            if step.reason:
                text += f": {step.reason}"
            lines.append(f"{text} ({step.ms:g} ms)")
            lines.extend(_rule_lines(step, "               "))
        return lines


@attrs.frozen
class Explanation:
    """What ``registry.explain(call)`` says would happen to a call, without running it.

    ``outcome`` is ``run``; ``deny`` (a policy, a guard or a failing policy would refuse
    it: ``code`` is ``DENIED`` or ``POLICY_ERROR``); ``ask`` (a person would be asked:
    ``if_approved`` says what their approval would lead to, guards included); or
    ``invalid`` (the arguments are not JSON, the tool is unknown, or its arguments fail
    validation: ``code`` says which); or ``refused`` (the tool's own checks refuse it
    whatever a person would answer, such as a program that is not installed: nobody
    would be asked; ``code`` is the tool's). ``decided_by`` is the step that decided (its
    ``detail`` holds the permission rule, for the rules' decisions); ``steps`` every step
    the dry run took.
    """

    outcome: str
    reason: str | None = None
    code: str | None = None
    decided_by: DecisionStep | None = None
    if_approved: Explanation | None = None
    steps: tuple[DecisionStep, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"outcome": self.outcome, "reason": self.reason, "code": self.code}
        data["decided_by"] = None if self.decided_by is None else self.decided_by.to_json()
        if self.if_approved is not None:
            data["if_approved"] = self.if_approved.to_json()
        if self.steps:
            data["steps"] = [step.to_json() for step in self.steps]
        return data

    def lines(self) -> list[str]:
        """The explanation as text (what ``dsh-tools explain`` prints)."""
        text = _HEADS.get(self.outcome, f"would {self.outcome}")
        if self.code and self.outcome != "ask":
            text += f" ({self.code})"
        lines = [text + (f": {self.reason}" if self.reason else "")]
        step = self.decided_by
        if step is not None:
            who = step.source or "pipeline"
            if step.distribution:
                who += f" [{step.distribution}]"
            lines.append(f"  decided by {step.stage} {who}")
            lines.extend(_rule_lines(step, "  "))
        if self.if_approved is not None:
            lines.extend(
                ("if approved: " + line if index == 0 else line)
                for index, line in enumerate(self.if_approved.lines())
            )
        return lines


_HEADS = {"invalid": "invalid", "refused": "would be refused"}
"""How an explanation's first line starts, for the outcomes that are not ``would <it>``."""


class TracedStep(NamedTuple):
    """One step as a call keeps it for its record (as a plain tuple of these fields): a
    trace event without the execution, which the record holds once."""

    stage: str
    source: str | None
    outcome: str
    detail: object
    origin: Origin | None
    at: float
    since: float | None
    """When the step began, for a step that knows (the body step); else ``None``: it
    began when the step before it ended."""


class _Read(NamedTuple):
    """What a record holds beyond the call's identity (wall-clock start last: it is not
    compared)."""

    outcome: str
    steps: tuple[DecisionStep, ...]
    dispatches: int
    elapsed_ms: float
    started_unix_ns: int


def _read(rows: Sequence[tuple[Any, ...]]) -> _Read:
    """A call's steps read into decision steps."""
    events = [TracedStep._make(row) for row in rows]
    entered = previous = events[0].at
    steps = []
    outcome = "pending"
    dispatches = 0
    for event in events:
        steps.append(_step(event, entered, previous))
        previous = event.at
        if event.stage == "body":
            dispatches += 1
        elif event.stage == "result":
            outcome = event.outcome
    started = time.time_ns() - int((time.perf_counter() - entered) * 1e9)
    return _Read(outcome, tuple(steps), dispatches, _ms(previous - entered), started)


def _rule_lines(step: DecisionStep, indent: str) -> list[str]:
    """The permission rule a step's detail names: its place, then its text, indented."""
    rule = step.detail.get("rule") if step.detail is not None else None
    if not isinstance(rule, Mapping):
        return []
    place = str(rule.get("file") or "<rules>")
    if rule.get("line") is not None:
        place += f":{rule['line']}"
    text = str(rule.get("text") or "")
    return [f"{indent}rule at {place}", *(f"{indent}  {line}" for line in text.splitlines())]


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _step(event: TracedStep, entered: float, previous: float) -> DecisionStep:
    decision, reason, detail = _decision(event)
    origin = event.origin
    return DecisionStep(
        event.stage,
        origin.name if origin is not None else event.source,
        decision,
        reason,
        detail,
        origin.distribution if origin is not None else None,
        _ms(event.at - entered),
        _ms(event.at - (previous if event.since is None else event.since)),
    )


def _approval_step(event: TracedStep) -> tuple[str, str | None, FrozenDict | None] | None:
    """The approval steps whose outcome text says more than their detail: an answer the
    store remembered, a store that failed to recall (the service is asked instead), an
    answer that is no outcome; and the steps whose detail is a mapping: an answer with
    who gave it through what and what they said (from any channel), and a ticket's
    steps (pending, waiting, expired, already resumed, refused)."""
    outcome, value = event.outcome, event.detail
    if isinstance(value, Mapping):
        return outcome, _answered(value), detail_object(value)
    if outcome.startswith("remembered "):
        return outcome.removeprefix("remembered "), "a remembered answer", None
    if outcome.startswith("recall raised "):
        return "failed", outcome.removeprefix("recall raised "), None
    if outcome.startswith("returned "):
        return "invalid", f"the approval service {outcome}", None
    return None


def _answered(detail: Mapping[str, Any]) -> str | None:
    """An answer step's reason: who answered through what, and what they said."""
    by, channel, feedback = detail.get("by"), detail.get("channel"), detail.get("feedback")
    if by is None and channel is None and feedback is None:
        return None
    said = "answered" + (f" by {by}" if by is not None else "")
    said += f" via {channel}" if channel is not None else ""
    return said if feedback is None else f"{said}: {feedback}"


def _decision(event: TracedStep) -> tuple[str, str | None, FrozenDict | None]:
    """A trace event's decision as (word, reason, detail)."""
    value, outcome = event.detail, event.outcome
    if outcome == "interrupted":
        return "interrupted", None, None
    if event.stage == "approval":
        remembered = _approval_step(event)
        if remembered is not None:
            return remembered
    if isinstance(value, BaseException):
        return "raised", message(value), None
    if value is None and event.stage in ("pre_execute", "guard", "post_execute"):
        return "abstained", None, None
    if isinstance(value, (Deny, Ask)):
        return ("deny" if isinstance(value, Deny) else "ask"), value.reason, value.detail
    if isinstance(value, Allow):
        return "allow", None, value.detail
    if isinstance(value, Accept):
        return "accept", None, None
    if isinstance(value, Block):
        return "block", content_text(value.feedback) or None, None
    if isinstance(value, str) and event.stage == "guard":
        return "deny", str.__str__(value), None
    if isinstance(value, ApprovalOutcome):
        return value.value, None, None
    if isinstance(value, ToolExecutionFailure):
        return value.error.info.code, value.error.message, None
    if isinstance(value, ToolExecutionSuccess):
        return "ok", None, None
    if isinstance(value, StreamSummary):
        return "streamed", None, detail_object(value.to_json())
    return outcome, None, None
