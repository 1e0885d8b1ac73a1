"""One call's state, shared by its stages, and the helpers every stage uses.

A :class:`Call` is made when ``execute()`` is called. It holds what the call is (the
input, its frozen arguments, the plan and tool entry it entered with) and what its body
left behind (parsed arguments, deferred contexts, the turn conclusion, whether it
started). The stages read and write nothing else, so a new per-call concept (a span, a
decision record, a remembered approval) is one attribute here, set by the stage that
knows it, plus :meth:`Call.trace` for anything that should be seen step by step. What a
call may ask of the registry that runs it is its :class:`Handle`, never the registry.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .. import _cancel as cancel
from .._content import ContextMessage
from .._json import FrozenDict, snapshot
from .._models import (
    ExecutionToken,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    UnreadableArguments,
    failure_result,
)
from .._tracing import Stage, TraceEvent
from ..errors import ErrorCode, JsonValueError
from ..records import DecisionRecord, Origin
from .loops import on_event_loop, run_on_own_loop, stops_the_caller
from .results import error_result, message, trusted_constructor
from .stream import Stream

if TYPE_CHECKING:
    import anyio

    from ..approvals import ApprovalTicket, JournalEntry, JournalStore
    from ..presentation._cards import ToolCallView
    from .plan import Plan, ToolEntry

logger = logging.getLogger("dsh_tools")

Waiting = tuple["float | None", str, float]
"""How a registry waits for a person: ``(approval_timeout_ms, on_timeout, expiry_s)``."""


@attrs.frozen
class Handle:
    """What a call may ask of the registry that runs it, and nothing more (one per
    registry; a new one when a setting in it changes, so a call keeps the one it entered
    with)."""

    plan: Callable[[tuple[str, ...]], Plan]
    """The current plan of a scope: a body resolves its tool late (:meth:`Call.resolve`)."""
    waiting: Waiting
    """How long a call waits for a person's answer to its approval ticket, and then."""
    present_call: Callable[[ToolExecutionInput], ToolCallView]
    """The pending card of a call, as its agent sees the tool (an approval ticket shows it)."""
    journal_lease_s: float = 30.0
    """How long a journaled call's lease lasts unless its process renews it."""


@attrs.define
class Attempt:
    """The call journal's entry a call owns: what finishes it, and whether it did."""

    store: JournalStore
    entry: JournalEntry
    finished: bool = False


class Interrupted(Exception):
    """The caller's cancellation interrupted an awaited plugin stage."""


class StageFailed(Exception):
    """A policy stage failed; carries the finished failure (final path)."""

    def __init__(self, result: ToolExecutionFailure) -> None:
        super().__init__(result.error.message)
        self.result = result


_execution_record = trusted_constructor(
    ToolExecution, tuple(field.name for field in attrs.fields(ToolExecution))
)
"""A :class:`ToolExecution` from the call's parts, as its own ``__init__`` makes it."""


class Call:
    """The state of one ``execute()``: read once at entry, shared by every stage."""

    __slots__ = (
        "arguments",
        "asker",
        "attempt",
        "concluded",
        "contexts",
        "earlier",
        "entry",
        "events",
        "execution",
        "handle",
        "input",
        "parsed",
        "parsed_by",
        "plan",
        "resumes",
        "shown_earlier",
        "signal",
        "started",
        "stream",
        "synchronous",
        "ticket",
        "tool",
    )

    execution: ToolExecution
    """The call as every stage sees it: set by :meth:`begin`, which the staged runner
    calls first (a direct call's body may never need it: :meth:`record`)."""

    def __init__(
        self,
        plan: Plan,
        handle: Handle,
        call: ToolExecutionInput,
        arguments: FrozenDict | JsonValueError,
        entry: ToolEntry | None,
        admitted: FrozenDict | None = None,
        resumes: str | None = None,
        synchronous: bool = False,
    ) -> None:
        self.plan = plan
        self.handle = handle
        self.input = call
        self.signal = call.signal
        self.arguments = arguments
        self.entry = entry
        """The tool visible when the call entered (``None``: unknown name)."""
        self.tool = None if entry is None else entry.definition
        """What the hooks get as ``tool``: the definition visible when the call entered."""
        # What the body leaves behind:
        self.parsed: Any = admitted
        self.parsed_by = None if admitted is None else entry
        self.contexts: tuple[ContextMessage, ...] = ()
        self.concluded = False
        self.started = False
        self.events: list[tuple[Any, ...]] | None = [] if plan.recording else None
        """The call's steps, kept when its decision record is wanted."""
        self.stream: Stream | None = None
        """Where the body's progress and output go: made by the body's first report
        (:meth:`stream_on_demand`) when anyone listens or the decision record is kept; a
        body that reports nothing costs none."""
        self.resumes = resumes
        """The approval ticket this call resumes (``registry.resume``), or ``None``."""
        self.synchronous = synchronous
        """``execute_sync`` drives the call: its caller's thread waits for it anyway."""
        self.asker: Origin | None = None
        """The pre-execute implementation whose ``Ask`` stage 1 returned."""
        self.ticket: ApprovalTicket | None = None
        """The approval ticket whose answer this call took."""
        self.earlier: dict[str, Any] | None = None
        """What a person asked about this call is shown of an unknown earlier attempt
        of it (:func:`dsh_tools._pipeline.journal.earlier_attempt`)."""
        self.shown_earlier: str | None = None
        """The journal key of an earlier attempt the approval service showed the person
        who answered (:mod:`dsh_tools._pipeline.journal` lets their yes settle it)."""
        self.attempt: Attempt | None = None
        """The call journal's entry this call owns (:mod:`dsh_tools._pipeline.journal`)."""

    def record(self) -> ToolExecution:
        """:attr:`execution`, made on first request (a direct call's body may ask)."""
        try:
            return self.execution
        except AttributeError:
            return self.begin()

    def begin(self, dry_run: bool = False) -> ToolExecution:
        """Make :attr:`execution` (``dry_run`` for ``explain``): what the staged runner
        and ``explain`` do first, without :meth:`record`'s look (a missing attribute
        raises, which costs more than the rest of it)."""
        call, arguments = self.input, self.arguments
        self.execution = _execution_record(
            ExecutionToken(),
            call.call_id,
            call.name,
            arguments if type(arguments) is FrozenDict else None,
            call.agent,
            call.parent,
            call.root_call_id or call.call_id,
            call.signal,
            dry_run,
        )
        return self.execution

    def stream_on_demand(self) -> Stream:
        """The call's stream, made on first request: its body reported (see
        :class:`~dsh_tools.ToolRunContext`)."""
        if self.stream is None:
            self.stream = Stream(self, self.input.on_progress)
        return self.stream

    @property
    def name(self) -> str:
        """The tool name the call asked for."""
        return self.input.name

    @property
    def key(self) -> str:
        """The call's journal key: the host's idempotency key, else its call id."""
        return self.input.idempotency_key or self.input.call_id

    def resolve(self) -> ToolEntry | None:
        """The tool the body runs: the entry's, unless the registry changed since the call
        entered; then whatever the call's agent sees now (possibly nothing)."""
        plan = self.plan
        if plan.stale:
            agent = self.input.agent  # routed: a well-formed agent id, or None
            plan = self.handle.plan(() if agent is None else tuple(agent.split("/")))
        return plan.tools.get(self.name)

    def parse(self, entry: ToolEntry) -> Any:
        """The arguments as ``entry``'s body receives them; raises ``ToolArgsError``."""
        if self.parsed_by is not entry:
            self.parsed = entry.definition.arguments.parse(self.arguments)
            self.parsed_by = entry
        return self.parsed

    # ------------------------------------------------------------------ outcomes

    def cancelled(self) -> bool:
        signal = self.signal
        return signal is not None and signal.cancelled

    def aborted(self, contexts: tuple[ContextMessage, ...] | None = None) -> ToolExecutionFailure:
        """The cancellation failure; it keeps ``contexts`` (default: the body's deferred)."""
        kept = self.contexts if contexts is None else contexts
        if self.started:
            return failure_result("tool call aborted", ErrorCode.ABORTED, contexts=kept)
        return failure_result(
            "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH, contexts=kept
        )

    def unknown(self) -> ToolExecutionFailure:
        return failure_result(f'unknown tool "{self.name}"', ErrorCode.UNKNOWN_TOOL)

    def not_json(self, error: JsonValueError) -> ToolExecutionFailure:
        """The failure of a call whose arguments are not a JSON object (before any
        policy); for :class:`~dsh_tools.UnreadableArguments`, naming the tool and the
        problem."""
        unreadable = self.input.arguments
        if isinstance(unreadable, UnreadableArguments):
            text = f'tool "{self.name}" was called with unreadable arguments: {unreadable.problem}'
        else:
            text = f"tool execution arguments must be losslessly JSON-serializable: {error.message}"
        return failure_result(text, ErrorCode.INVALID_JSON)

    def timed_out(self, budget_ms: float) -> ToolExecutionFailure:
        return failure_result(
            f'tool "{self.name}" timed out after {budget_ms:g} ms',
            ErrorCode.TOOL_TIMEOUT,
            contexts=self.contexts,
        )

    # ------------------------------------------------------------------ helpers

    def trace(
        self,
        stage: Stage,
        source: str | None,
        outcome: str,
        detail: object = None,
        origin: Origin | None = None,
        since: float | None = None,
    ) -> None:
        """Report one step: keep it for the decision record, if one is wanted, and tell
        the registry's tracer; a failing tracer is only logged. ``since`` is when the
        step began (``time.perf_counter()``), for a step whose time is its own work
        rather than the time since the step before (the body's)."""
        plan = self.plan
        if not plan.traced:
            return
        at = time.perf_counter()
        if self.events is not None:
            self.events.append((stage, source, outcome, detail, origin, at, since))  # a TracedStep
        tracer = plan.tracer
        if tracer is None:
            return
        try:
            tracer(TraceEvent(stage, self.execution, source, outcome, detail, origin, at, since))
        except BaseException as error:
            if stops_the_caller(error):
                raise
            logger.warning("tracer failed on %s of %r: %s", stage, self.name, message(error))

    def caught(
        self,
        error: BaseException,
        stage: Stage | None = None,
        source: str | None = None,
        origin: Origin | None = None,
        doing: str = "",
    ) -> None:
        """Take ``error``, caught as ``BaseException`` from a tool's or a plugin's code that
        a stage called: every stage contains what it calls through this (or
        :meth:`contained`), so ``SystemExit`` or a sub-task's ``CancelledError`` is
        contained like any error. What belongs to the caller
        (:func:`~dsh_tools._pipeline.loops.stops_the_caller`: its own task's cancellation,
        ``KeyboardInterrupt``) is never contained: it is raised again here. With ``stage``,
        the failure is traced as that stage's step of ``source`` (default: the name of
        ``origin``), reading ``<doing>raised <message>``."""
        if stops_the_caller(error):
            raise error
        if stage is not None:
            if source is None and origin is not None:
                source = origin.name
            self.trace(stage, source, f"{doing}raised {message(error)}", error, origin)

    def contained(
        self,
        error: BaseException,
        code: ErrorCode,
        prefix: str = "",
        stage: Stage | None = None,
        source: str | None = None,
        origin: Origin | None = None,
        *,
        doing: str = "",
        contexts: tuple[ContextMessage, ...] = (),
    ) -> ToolExecutionFailure:
        """:meth:`caught`, then the failure ``error`` makes: ``prefix`` and what it says,
        with ``code`` (see :func:`~dsh_tools._pipeline.results.error_result`) and ``contexts``."""
        self.caught(error, stage, source, origin, doing)
        return error_result(error, code, prefix, contexts)

    def decision_record(self) -> DecisionRecord:
        """The call's decision record, from the events it kept (see ``Plan.recording``)."""
        return DecisionRecord.of_call(self.execution, self.events or ())

    async def settle(
        self, value: Any, deadline: float = math.inf, *, by_signal: bool = True
    ) -> Any:
        """Await a plugin's awaitable, interrupted :data:`~dsh_tools._cancel.CANCEL_GRACE_S`
        after the caller's signal fires (unless ``by_signal`` is false: result observers
        record the call, they do not work for it) or at ``deadline``: raises
        :class:`Interrupted`.

        With no event loop running (``execute_sync`` drives the call by hand because
        nothing was planned to await), the awaitable gets a loop of its own.
        """
        if not on_event_loop():
            return run_on_own_loop(self.settle(value, deadline, by_signal=by_signal))
        signal = self.signal if by_signal else None
        if signal is None and deadline == math.inf:
            return await value
        import anyio

        with anyio.CancelScope(deadline=deadline) as scope:
            remove = None if signal is None else signal.add_callback(expire(scope))
            try:
                return await value
            finally:
                if remove is not None:
                    remove()
        raise Interrupted


def frozen_arguments(value: object) -> FrozenDict | JsonValueError:
    """A call's arguments snapshotted once, or the error saying why they are not a JSON
    object (the call then fails before any policy runs, :meth:`Call.not_json`)."""
    if isinstance(value, UnreadableArguments):
        return JsonValueError("arguments", value.problem)
    try:
        frozen = snapshot(value, "arguments")
    except JsonValueError as error:
        return error
    if type(frozen) is FrozenDict:
        return frozen
    return JsonValueError("arguments", "must be a JSON object")


def expire(scope: anyio.CancelScope) -> Callable[[], None]:
    """A signal callback that cancels ``scope`` ``CANCEL_GRACE_S`` seconds later."""
    import anyio

    # The event loop's clock, read through the monotonic clock: a callback must not fail
    # whichever thread (wrongly) fires the signal.
    offset = anyio.current_time() - time.monotonic()

    def later() -> None:
        scope.deadline = min(scope.deadline, time.monotonic() + offset + cancel.CANCEL_GRACE_S)

    return later
